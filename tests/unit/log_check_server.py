"""A stand-in server for the tests of harness.pytest_log_check: prints a nameserver's boot line, logs the error its
conf names (``raise=AttributeError``, ``raise=ConnectionResetError``, ``raise=none``) with a traceback the way the
remoting layer logs a failed request, then serves nothing until SIGTERM."""

from __future__ import annotations

import builtins
import logging
import signal
import sys

from common.log import setup_logging

log = logging.getLogger("remoting.connection")


def fail(name: str) -> None:
    raise getattr(builtins, name)("raised by the stand-in server")


def main() -> None:
    setup_logging()
    conf = dict(line.split("=", 1) for line in open(sys.argv[2]).read().split())
    log.info("The Name Server boot success. listen=127.0.0.1:0 (stand-in)")
    if conf["raise"] != "none":
        try:
            fail(conf["raise"])
        except Exception:
            log.exception("stand-in: request code 9101 from 127.0.0.1:1 failed")
    signal.sigwait({signal.SIGTERM})


if __name__ == "__main__":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    main()
