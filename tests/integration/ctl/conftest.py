"""A real cluster for the mqctl tests: one nameserver and the compose cluster's two broker groups as processes.

broker-a is a SYNC_MASTER with slave broker-a-s, broker-b an ASYNC_MASTER with slave broker-b-s, all in
DefaultCluster on 127.0.0.1. The cluster is shared by the package's tests (booting five processes takes
seconds); tests use their own topic and group names so they do not depend on one another.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.ctl.cli import CLUSTER, ok_json
from harness.procs import Broker, Namesrv
from harness.waiting import wait_until

BOOT_TIMEOUT_S = 30.0


@dataclass
class LocalCluster:
    namesrv: Namesrv
    brokers: dict[str, Broker]  # "broker-a", "broker-a-s", ...

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.addr

    def addr(self, name: str) -> str:
        return self.brokers[name].addr


@pytest.fixture(scope="package")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    root: Path = tmp_path_factory.mktemp("ctl-cluster")
    namesrv = Namesrv(root / "namesrv", orderMessageEnable=True)  # routes carry updateTopic -o's orderTopicConf
    started: list = []
    try:
        namesrv.start(BOOT_TIMEOUT_S)
        started.append(namesrv)
        brokers: dict[str, Broker] = {}
        for name, role, broker_id in (
            ("broker-a", "SYNC_MASTER", 0),
            ("broker-a-s", "SLAVE", 1),
            ("broker-b", "ASYNC_MASTER", 0),
            ("broker-b-s", "SLAVE", 1),
        ):
            broker = Broker(
                root / name,
                name=name.removesuffix("-s"),
                namesrv_addr=namesrv.addr,
                role=role,
                broker_id=broker_id,
                cluster=CLUSTER,
                slaveSynchronizeInterval=1000,
            )
            broker.start(BOOT_TIMEOUT_S)
            started.append(broker)
            brokers[name] = broker
        local = LocalCluster(namesrv, brokers)

        def all_registered() -> bool:
            rows = ok_json("clusterList", "-n", namesrv.addr)
            return len(rows) == 4

        wait_until(all_registered, BOOT_TIMEOUT_S, "the four brokers did not all register with the nameserver")
        yield local
    finally:
        for proc in reversed(started):
            proc.stop()
