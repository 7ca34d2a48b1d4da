"""Controller processes and a wire-level broker driver for controller tests.

``Controller(workdir, etcd_endpoint, **conf)`` is one ``python -m controller`` process (ready on its boot line),
restartable on the same port. ``BrokerDriver`` plays a controller-mode broker on the wire, with a real remoting
client over real sockets: it asks for an id, applies, registers, heartbeats (by hand or in a loop), asks for an
election and proposes SyncStateSets, following CONTROLLER_NOT_LEADER to the active controller as a broker does. It
is a test driver of the protocol, not a broker: no store, no HA.
"""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import orjson

from controller.client import ControllerClient
from harness.procs import ListeningProcess, free_port
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.errors import RemotingError
from remoting.frame_codec import RemotingCommand

# fast timings for tests: scans every 200 ms, a broker silent for 1.5 s is dead, a dead active is replaced in ~2 s
FAST = {"scanNotActiveBrokerInterval": 200, "controllerHeartBeatTimeoutMills": 1500, "controllerLeaseTtlSeconds": 2,
        "etcdRequestTimeoutMillis": 1000}
CONTROLLER_READY = re.compile(r"The Controller boot success\. listen=(\S+) id=(\S+)")


class Controller(ListeningProcess):
    def __init__(self, workdir: Path, etcd_endpoints: str, name: str = "controller", **conf: object) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.instance_id = str(conf.pop("controllerInstanceId", name))
        values = {"listenPort": int(conf.pop("listenPort", 0) or free_port()), "listenHost": "127.0.0.1",
                  "controllerInstanceId": self.instance_id, "controllerStoreEtcdEndpoints": etcd_endpoints,
                  "metricsExporterType": "PROM", "metricsPromExporterPort": free_port(), **conf}
        super().__init__("controller", workdir / f"{name}.conf", workdir / f"{name}.log", CONTROLLER_READY, values)


class BrokerDriver:
    """One broker of group ``broker_name`` as the controller sees it (``address`` need not listen)."""

    def __init__(self, controllers: list[str], cluster: str, broker_name: str, address: str,
                 *, heartbeat_timeout_ms: int = 1500) -> None:
        self.controllers = controllers
        self.cluster = cluster
        self.broker_name = broker_name
        self.address = address
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.reopen()
        self.broker_id: int | None = None
        self.epoch = 0
        self.max_offset = 0
        self.priority: int | None = None
        self.all_ack: bool | None = None  # declared in heartbeats when set (allAckInSyncStateSet)
        self._beating: asyncio.Task | None = None
        self.last_heartbeat: RemotingCommand | None = None
        self.notified: list[dict[str, str]] = []  # NOTIFY_BROKER_ROLE_CHANGED headers the controller pushed

    def reopen(self) -> None:
        """New connections (after ``close``: the same broker, back)."""
        self.client = RemotingClient(name=f"driver-{self.address}")
        self.controller = ControllerClient(self.controllers, client=self.client, timeout_s=5.0)
        self.client.register(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, self._on_notify)

    async def call(self, code: int, ext: dict[str, str] | None = None, body: bytes = b"", *,
                   addr: str | None = None, timeout_s: float = 5.0) -> RemotingCommand:
        """Send to ``addr`` or to the active controller (following CONTROLLER_NOT_LEADER, as a broker does)."""
        if addr:
            return await self.client.invoke(addr, RemotingCommand(code, ext=dict(ext or {}), body=body), timeout_s)
        return await self.controller.call(code, ext, body)

    def _on_notify(self, conn, request: RemotingCommand) -> None:
        self.notified.append(dict(request.ext or {}))

    async def join(self) -> RemotingCommand:
        """GET_NEXT_BROKER_ID, APPLY_BROKER_ID, REGISTER_BROKER (retrying a lost race for an id); the register reply."""
        for _ in range(10):
            resp = await self.call(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                                   {"clusterName": self.cluster, "brokerName": self.broker_name})
            assert resp.code == ResponseCode.SUCCESS, resp.remark
            broker_id = int(resp.ext["nextBrokerId"])
            resp = await self.call(RequestCode.CONTROLLER_APPLY_BROKER_ID, {
                "clusterName": self.cluster, "brokerName": self.broker_name, "appliedBrokerId": str(broker_id),
                "registerCheckCode": f"{self.address};{time.time_ns()}"})
            if resp.code == ResponseCode.SUCCESS:
                self.broker_id = broker_id
                break
        assert self.broker_id is not None, "could not apply for a brokerId"
        resp = await self.register()
        assert resp.code == ResponseCode.SUCCESS, resp.remark
        return resp

    async def register(self) -> RemotingCommand:
        return await self.call(RequestCode.CONTROLLER_REGISTER_BROKER, {
            "clusterName": self.cluster, "brokerName": self.broker_name, "brokerId": str(self.broker_id),
            "brokerAddress": self.address})

    async def heartbeat(self) -> RemotingCommand:
        ext = {"clusterName": self.cluster, "brokerName": self.broker_name, "brokerAddr": self.address,
               "brokerId": str(self.broker_id), "epoch": str(self.epoch), "maxOffset": str(self.max_offset),
               "confirmOffset": "0", "heartbeatTimeoutMills": str(self.heartbeat_timeout_ms)}
        if self.priority is not None:
            ext["electionPriority"] = str(self.priority)
        if self.all_ack is not None:
            ext["allAckInSyncStateSet"] = "true" if self.all_ack else "false"
        self.last_heartbeat = await self.call(RequestCode.BROKER_HEARTBEAT, ext)
        return self.last_heartbeat

    def start_heartbeats(self, every_s: float = 0.2) -> None:
        async def loop() -> None:
            while True:
                try:
                    await self.heartbeat()
                except RemotingError:
                    pass
                await asyncio.sleep(every_s)

        self._beating = asyncio.ensure_future(loop())

    async def stop_heartbeats(self) -> None:
        if self._beating is not None:
            self._beating.cancel()
            await asyncio.gather(self._beating, return_exceptions=True)
            self._beating = None

    async def elect(self, broker_id: int | None = None, designate: bool = False) -> RemotingCommand:
        return await self.call(RequestCode.CONTROLLER_ELECT_MASTER, {
            "clusterName": self.cluster, "brokerName": self.broker_name,
            "brokerId": str(self.broker_id if broker_id is None else broker_id),
            "designateElect": "true" if designate else "false"})

    async def replica_info(self) -> tuple[RemotingCommand, dict]:
        resp = await self.call(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": self.broker_name})
        return resp, (orjson.loads(resp.body_bytes()) if resp.code == ResponseCode.SUCCESS else {})

    async def alter(self, members: set[int], *, master_epoch: int, sss_epoch: int,
                    master_id: int | None = None) -> RemotingCommand:
        body = orjson.dumps({"syncStateSet": sorted(members), "syncStateSetEpoch": sss_epoch})
        return await self.call(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, {
            "brokerName": self.broker_name, "masterBrokerId": str(master_id or self.broker_id),
            "masterEpoch": str(master_epoch)}, body)

    async def close(self) -> None:
        """The broker dies: heartbeats stop and its connections close (the controller sees the channel close)."""
        await self.stop_heartbeats()
        await self.client.close()
