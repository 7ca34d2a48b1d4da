"""Broker processes as the tiers' fixtures run them: one broker in a directory of its own, or a master with its
slave. Each stops when the fixture or ``with`` block that started it ends, so no test needs a try/finally. And the
conf keys that turn ACL 2.0 on, for a broker, a nameserver or a controller alike (``acl_conf``)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.procs import Broker, Namesrv


def broker_fixture(tmp_path_factory: pytest.TempPathFactory, namesrv: Namesrv, name: str,
                   **conf: object) -> Iterator[Broker]:
    """The body of a module- or session-scoped fixture (``yield from``): broker ``name`` registered with
    ``namesrv``, started in a new directory named after it; ``conf`` sets broker keys."""
    with Broker(tmp_path_factory.mktemp(name), name=name, namesrv_addr=namesrv.addr, **conf) as broker:
        yield broker


@contextlib.contextmanager
def master_and_slave(root: Path, namesrv_addr: str, name: str, role: str = "ASYNC_MASTER",
                     **conf: object) -> Iterator[tuple[Broker, Broker]]:
    """A started master of brokerName ``name`` (in root/m) and its slave (brokerId 1, in root/s, pointed at the
    master's HA port), both with ``conf``; on the way out the slave stops first, then the master."""
    with Broker(root / "m", name=name, namesrv_addr=namesrv_addr, role=role, **conf) as master:
        with Broker(root / "s", name=name, namesrv_addr=namesrv_addr, role="SLAVE", broker_id=1,
                    haMasterAddress=master.ha_addr, **conf) as slave:
            yield master, slave


def acl_conf(root: str, password: str, *, inner: tuple[str, str] | None = None) -> dict[str, str]:
    """Authentication and authorization on, ``root`` the init Super user (RocketMQ's ``initAuthenticationUser``);
    ``inner`` (access key, secret key) is what the server signs its own calls to others with."""
    conf = {"authenticationEnabled": "true", "authorizationEnabled": "true",
            "initAuthenticationUser": json.dumps({"username": root, "password": password})}
    if inner is not None:
        conf["innerClientAuthenticationCredentials"] = json.dumps({"accessKey": inner[0], "secretKey": inner[1]})
    return conf
