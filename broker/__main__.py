"""``mqbroker`` / ``python -m broker -c broker.conf [--print-config]``.

On ready it prints RocketMQ's readiness line, which operators and the test harness grep for:
``The broker[<brokerName>, <brokerIP1>:<listenPort>] boot success. role=<ROLE> ha=<haServerAddr> metrics=<port>``.
Exit codes: 0 after a clean stop (SIGTERM/SIGINT), 2 for a configuration error (one line: file, key, problem
and fix), 1 otherwise.
"""

from __future__ import annotations

import sys

from broker.config import BrokerSettings, load_broker_settings
from common import conf, process
from remoting.tls import set_inner_client_context


def boot_line(server) -> str:
    settings: BrokerSettings = server.settings
    broker = settings.broker
    metrics = broker.metrics_prom_exporter_port if broker.metrics_exporter_type != "DISABLE" else "disabled"
    return (
        f"The broker[{broker.broker_name}, {broker.broker_addr}] boot success. "
        f"role={settings.role.name} ha={settings.ha_server_addr} metrics={metrics}"
    )


def _make_server(settings: BrokerSettings):
    # tls.enable: every client this process opens (registration, metadata sync, HA, v2 route lookups) speaks TLS
    set_inner_client_context(settings.tls.client_context())
    if settings.controller.enable_controller_mode:
        from broker.controller_mode.replicas_manager import ReplicasManager

        return ReplicasManager(settings)
    from broker.server import BrokerServer  # heavy imports only when actually serving

    return BrokerServer(settings)


def render(settings: BrokerSettings) -> list[tuple[str, str]]:
    """Every effective key for --print-config; secrets (haAuthSecret, haAuthSecretFile) read ``<set>``
    (``common.conf.render``)."""
    return (conf.render(settings.broker) + conf.render(settings.store) + conf.render(settings.controller)
            + conf.render(settings.auth) + conf.render(settings.tls))


def main(argv: list[str] | None = None) -> int:
    return process.server_main(
        argv,
        prog="mqbroker",
        description="Run a pyrmq broker (master or slave).",
        load=load_broker_settings,
        render=render,
        make_server=_make_server,
        boot_line=boot_line,
    )


if __name__ == "__main__":
    sys.exit(main())
