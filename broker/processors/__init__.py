"""The broker's remoting processors, one module per concern (DESIGN §2): validate -> domain call -> response.

Each module in ``MODULES`` exposes ``register(server: RemotingServer, ctx: BrokerContext) -> None`` and registers
its request codes there. Modules are named, not imported, here so that importing a helper of this package
(``broker.processors.validate``) does not pull in every processor, and so that a module failing to import names
itself in the error at boot.
"""

from __future__ import annotations

import importlib

MODULES: list[str] = [
    "broker.processors.send",
    "broker.processors.pull",
    "broker.processors.client_manage",
    "broker.processors.consumer_manage",
    "broker.processors.send_back",
    "broker.processors.lock",
    "broker.processors.transaction",
    "broker.processors.admin_topics",
    "broker.processors.admin_groups",
    "broker.processors.admin_info",
    "broker.processors.query_message",
    "broker.processors.slave_sync_serve",
]


def register_all(server, ctx) -> None:
    """Register every processor module's request codes on ``server`` (a ``remoting.server.RemotingServer``)."""
    for name in MODULES:
        importlib.import_module(name).register(server, ctx)
