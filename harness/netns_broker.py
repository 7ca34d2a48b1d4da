"""``python -m harness.netns_broker -c broker.conf``: the broker, run inside a network namespace.

The process harness (harness/procs.py) starts ``python -m <module> -c <conf>`` and has no command prefix
for ``ip netns exec``; so this module stands in for ``broker`` (set ``Broker.module``): same arguments, same log,
same readiness line, and the PID is the broker's own (SIGSTOP, SIGKILL and SIGTERM reach it directly). It reads
the namespace's name from ``<broker.conf>.netns`` (``write_netns_file``) and joins it with setns(2) before the
broker opens any socket.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

CLONE_NEWNET = 0x40000000


def write_netns_file(conf_path: Path, netns: str) -> None:
    Path(f"{conf_path}.netns").write_text(netns + "\n")


def enter(netns: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{netns}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into network namespace {netns}: {os.strerror(err)}")
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    try:
        conf = argv[argv.index("-c") + 1]
    except (ValueError, IndexError):
        print("usage: python -m harness.netns_broker -c broker.conf (with broker.conf.netns next to it)")
        return 2
    enter(Path(f"{conf}.netns").read_text().strip())
    from broker.__main__ import main as broker_main

    return broker_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
