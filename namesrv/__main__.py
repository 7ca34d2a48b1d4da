"""``mqnamesrv`` / ``python -m namesrv -c namesrv.conf [--print-config]``.

On ready it prints RocketMQ's readiness line, which operators and the test harness grep for:
``The Name Server boot success. listen=<host>:<port> metrics=<port>``. Exit codes: 0 after a clean stop
(SIGTERM/SIGINT), 2 for a configuration error (one line: file, key, problem and fix), 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys

from common import conf, process
from common.errors import ConfigError
from common.log import setup_logging
from namesrv.config import NamesrvConfig, load_namesrv_config


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mqnamesrv", description="Run a pyrmq nameserver.")
    parser.add_argument("-c", "--config", metavar="FILE", help="namesrv.conf (key=value); default: built-in defaults")
    parser.add_argument(
        "-p", "--print-config", action="store_true", help="print the effective key=value settings and exit"
    )
    return parser


def _boot_line(server) -> str:
    metrics = server.config.metrics_prom_exporter_port if server.config.metrics_enabled else "disabled"
    return f"The Name Server boot success. listen={server.listen_addr} metrics={metrics}"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        config: NamesrvConfig = load_namesrv_config(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    if args.print_config:
        for key, value in conf.render(config):
            print(f"{key}={value}")
        return 0

    setup_logging()

    async def make():
        from namesrv.server import NamesrvServer

        return NamesrvServer(config)

    try:
        return process.run(make, on_ready=lambda server: print(_boot_line(server), flush=True))
    except OSError as exc:  # the listen address is taken or not ours
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
