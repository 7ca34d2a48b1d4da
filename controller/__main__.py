"""``mqcontroller`` / ``python -m controller -c controller.conf [--print-config]``.

On ready it prints ``The Controller boot success. listen=<host>:<port> id=<instanceId> etcd=<endpoints>``
(the harness greps for it). Exit codes as the nameserver's: 0 after a clean stop, 2 for a configuration error,
1 otherwise.
"""

from __future__ import annotations

import sys

from common import conf, process
from controller.config import ControllerConfig, load_controller_config


def _boot_line(server) -> str:
    return (f"The Controller boot success. listen={server.listen_addr} id={server.instance_id} "
            f"etcd={server.store.describe()}")


def _render(config: ControllerConfig) -> list[tuple[str, str]]:
    """Every effective key for --print-config, the TLS keys too (tls.server.keyPath reads ``<set>``)."""
    return conf.render(config) + (conf.render(config.tls) if config.tls is not None else [])


def _make_server(config: ControllerConfig):
    from controller.service import ControllerService

    return ControllerService(config)


def main(argv: list[str] | None = None) -> int:
    return process.server_main(
        argv,
        prog="mqcontroller",
        description="Run a pyrmq controller (RocketMQ 5 controller mode, state in etcd).",
        load=load_controller_config,
        render=_render,
        make_server=_make_server,
        boot_line=_boot_line,
    )


if __name__ == "__main__":
    sys.exit(main())
