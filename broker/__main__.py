"""``mqbroker`` / ``python -m broker -c broker.conf [--print-config]``.

On ready it prints RocketMQ's readiness line, which operators and the test harness grep for:
``The broker[<brokerName>, <brokerIP1>:<listenPort>] boot success. role=<ROLE> ha=<haServerAddr> metrics=<port>``.
Exit codes: 0 after a clean stop (SIGTERM/SIGINT), 2 for a configuration error (one line: file, key, problem
and fix), 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys

from broker.config import BrokerSettings, load_broker_settings
from common import conf, process
from common.errors import ConfigError
from common.log import setup_logging


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mqbroker", description="Run a pyrmq broker (master or slave).")
    parser.add_argument("-c", "--config", metavar="FILE", help="broker.conf (key=value); default: built-in defaults")
    parser.add_argument(
        "-p", "--print-config", action="store_true", help="print the effective key=value settings and exit"
    )
    return parser


def boot_line(server) -> str:
    settings: BrokerSettings = server.settings
    broker = settings.broker
    metrics = broker.metrics_prom_exporter_port if broker.metrics_exporter_type != "DISABLE" else "disabled"
    return (
        f"The broker[{broker.broker_name}, {broker.broker_addr}] boot success. "
        f"role={settings.role.name} ha={settings.ha_server_addr} metrics={metrics}"
    )


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        settings = load_broker_settings(args.config)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    if args.print_config:
        for key, value in conf.render(settings.broker) + conf.render(settings.store):
            print(f"{key}={value}")
        return 0

    setup_logging()

    async def make():
        from broker.server import BrokerServer

        return BrokerServer(settings)

    try:
        return process.run(make, on_ready=lambda server: print(boot_line(server), flush=True))
    except OSError as exc:  # the listen port is taken, or the store directory is unusable
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
