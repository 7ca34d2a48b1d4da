"""``mqnamesrv`` / ``python -m namesrv -c namesrv.conf [--print-config]``.

On ready it prints RocketMQ's readiness line, which operators and the test harness grep for:
``The Name Server boot success. listen=<host>:<port> metrics=<port>``. Exit codes: 0 after a clean stop
(SIGTERM/SIGINT), 2 for a configuration error (one line: file, key, problem and fix), 1 otherwise.
"""

from __future__ import annotations

import sys

from common import conf, process
from namesrv.config import NamesrvConfig, load_namesrv_config


def _boot_line(server) -> str:
    metrics = server.config.metrics_prom_exporter_port if server.config.metrics_enabled else "disabled"
    return f"The Name Server boot success. listen={server.listen_addr} metrics={metrics}"


def _make_server(config: NamesrvConfig):
    from namesrv.server import NamesrvServer  # heavy imports only when actually serving

    return NamesrvServer(config)


def _render(config: NamesrvConfig) -> list[tuple[str, str]]:
    """Every effective key for --print-config, the TLS keys too (tls.server.keyPath reads ``<set>``)."""
    return conf.render(config) + conf.render(config.tls)


def main(argv: list[str] | None = None) -> int:
    return process.server_main(
        argv,
        prog="mqnamesrv",
        description="Run a pyrmq nameserver.",
        load=load_namesrv_config,
        render=_render,
        make_server=_make_server,
        boot_line=_boot_line,
    )


if __name__ == "__main__":
    sys.exit(main())
