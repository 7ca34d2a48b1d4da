"""ControllerClient: the calling end of the controller's requests, for brokers and tools (RocketMQ's BrokerOuterAPI
controller calls). It knows every controller address and remembers the active one: a CONTROLLER_NOT_LEADER answer
that names the active instance (``controllerLeaderAddress``) is followed at once, one that names nobody (a lease
just ended, or etcd lost its majority) is returned to the caller as it is, and an address that does not answer is
skipped for the next. Typed helpers raise ``ControllerError`` (code + remark) on any other refusal; ``call`` returns
the raw response whatever its code. Not thread-safe: one event loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

from common.errors import PyrmqError
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode, describe
from remoting.errors import RemotingError
from remoting.frame_codec import RemotingCommand
from remoting.headers import INT_MAX, LONG_MAX, NumberError, parse_int

RC = ResponseCode


class ControllerError(PyrmqError):
    """The controller refused a request: ``code`` is its response code, ``remark`` its explanation."""

    def __init__(self, request: str, code: int, remark: str | None) -> None:
        super().__init__(f"{request}: {describe(code)}: {remark or ''}".rstrip(": "))
        self.code = code
        self.remark = remark or ""
        self.retriable = code in (RC.CONTROLLER_NOT_LEADER, RC.SYSTEM_BUSY, RC.CONTROLLER_JRAFT_INTERNAL_ERROR)


@dataclass(frozen=True)
class ReplicaInfo:
    master_broker_id: int | None
    master_address: str
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int
    master_confirm_offset: int | None = None  # pyrmq: the master's confirm offset, None when the controller has none
    # pyrmq: the controller's enableElectUncleanMaster (None when the answer did not say): a property of the
    # controller, not of the group's state, so it takes no part in comparisons
    elect_unclean: bool | None = field(default=None, compare=False)


def _replica_info(resp: RemotingCommand) -> ReplicaInfo:
    ext = resp.ext or {}
    try:
        body = orjson.loads(resp.body_bytes() or b"{}")
        master = ext.get("masterBrokerId") or ""
        return ReplicaInfo(
            master_broker_id=parse_int(master, 1, LONG_MAX, what="masterBrokerId") if master else None,
            master_address=ext.get("masterAddress", ""),
            master_epoch=parse_int(ext.get("masterEpoch", "0"), 0, INT_MAX, what="masterEpoch"),
            sync_state_set=frozenset(parse_int(i, 1, LONG_MAX, what="syncStateSet") for i in
                                     body.get("syncStateSet", ())),
            sync_state_set_epoch=parse_int(body.get("syncStateSetEpoch", 0), 0, INT_MAX,
                                           what="syncStateSetEpoch"),
            master_confirm_offset=parse_int(ext["masterConfirmOffset"], 0, LONG_MAX, what="masterConfirmOffset")
            if ext.get("masterConfirmOffset") else None,
            elect_unclean={"true": True, "false": False}.get(ext.get("electUncleanMaster", "")),
        )
    except (orjson.JSONDecodeError, NumberError, AttributeError, TypeError) as exc:
        raise ControllerError("controller answer", RC.SYSTEM_ERROR, f"does not parse: {exc}") from None


class ControllerClient:
    def __init__(self, addrs: list[str], *, client: RemotingClient | None = None, timeout_s: float = 3.0,
                 owns_client: bool = False) -> None:
        """``client``: a RemotingClient to share (closed by ``close`` only with ``owns_client``); None: its own."""
        if not addrs:
            raise ValueError("no controller address given (controllerAddr)")
        self.addrs = list(addrs)
        self.timeout_s = timeout_s
        self._own_client = client is None or owns_client
        self.client = client or RemotingClient(name="controller-client")
        self.active: str | None = None  # the active controller as last learnt

    async def close(self) -> None:
        if self._own_client:
            await self.client.close()

    async def call(self, code: int, ext: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
        """Send to the active controller (following redirects); the response whatever its code."""
        order = ([self.active] if self.active else []) + [a for a in self.addrs if a != self.active]
        last: RemotingCommand | None = None
        errors: list[str] = []
        tried: set[str] = set()
        while order:
            addr = order.pop(0)
            if addr in tried:
                continue
            tried.add(addr)
            try:
                resp = await self.client.invoke(addr, RemotingCommand(code, ext=dict(ext or {}), body=body),
                                                self.timeout_s)
            except RemotingError as exc:
                errors.append(str(exc))
                if self.active == addr:
                    self.active = None
                continue
            if resp.code != RC.CONTROLLER_NOT_LEADER:
                self.active = addr
                return resp
            last = resp
            leader = (resp.ext or {}).get("controllerLeaderAddress")
            if leader and leader not in tried:
                order.insert(0, leader)
        if last is not None:
            return last
        raise RemotingError(";".join(self.addrs), f"no controller answered request {code}: {'; '.join(errors)}",
                            hint="check controllerAddr and that a controller runs")

    async def _ok(self, what: str, code: int, ext: dict[str, str], body: bytes = b"") -> RemotingCommand:
        resp = await self.call(code, ext, body)
        if resp.code != RC.SUCCESS:
            raise ControllerError(what, resp.code, resp.remark)
        return resp

    # the broker's registration ------------------------------------------------------------------------------
    async def next_broker_id(self, cluster: str, broker_name: str) -> int:
        resp = await self._ok("GET_NEXT_BROKER_ID", RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                              {"clusterName": cluster, "brokerName": broker_name})
        return parse_int((resp.ext or {}).get("nextBrokerId", ""), 1, LONG_MAX, what="nextBrokerId")

    async def apply_broker_id(self, cluster: str, broker_name: str, broker_id: int, check_code: str) -> None:
        await self._ok("APPLY_BROKER_ID", RequestCode.CONTROLLER_APPLY_BROKER_ID,
                       {"clusterName": cluster, "brokerName": broker_name, "appliedBrokerId": str(broker_id),
                        "registerCheckCode": check_code})

    async def register(self, cluster: str, broker_name: str, broker_id: int, address: str) -> ReplicaInfo:
        resp = await self._ok("CONTROLLER_REGISTER_BROKER", RequestCode.CONTROLLER_REGISTER_BROKER,
                              {"clusterName": cluster, "brokerName": broker_name, "brokerId": str(broker_id),
                               "brokerAddress": address})
        return _replica_info(resp)

    async def heartbeat(self, cluster: str, broker_name: str, address: str, broker_id: int, *, epoch: int = 0,
                        max_offset: int = 0, confirm_offset: int = 0, timeout_ms: int = 10_000,
                        priority: int | None = None, all_ack: bool | None = None) -> None:
        ext = {"clusterName": cluster, "brokerName": broker_name, "brokerAddr": address, "brokerId": str(broker_id),
               "epoch": str(epoch), "maxOffset": str(max_offset), "confirmOffset": str(confirm_offset),
               "heartbeatTimeoutMills": str(timeout_ms)}
        if priority is not None:
            ext["electionPriority"] = str(priority)
        if all_ack is not None:  # pyrmq's: lets the controller elect at once when this master's connection closes
            ext["allAckInSyncStateSet"] = "true" if all_ack else "false"
        await self._ok("BROKER_HEARTBEAT", RequestCode.BROKER_HEARTBEAT, ext)

    # replicas -----------------------------------------------------------------------------------------------
    async def replica_info(self, broker_name: str) -> ReplicaInfo:
        resp = await self._ok("CONTROLLER_GET_REPLICA_INFO", RequestCode.CONTROLLER_GET_REPLICA_INFO,
                              {"brokerName": broker_name})
        return _replica_info(resp)

    async def elect(self, cluster: str, broker_name: str, broker_id: int | None = None, *,
                    designate: bool = False) -> tuple[int, str, ReplicaInfo | None]:
        """(code, remark, the group's state after) of an election: SUCCESS, CONTROLLER_MASTER_STILL_EXIST and
        CONTROLLER_MASTER_NOT_AVAILABLE are answers, not errors, so they are returned."""
        resp = await self.call(RequestCode.CONTROLLER_ELECT_MASTER, {
            "clusterName": cluster, "brokerName": broker_name, "brokerId": str(broker_id or -1),
            "designateElect": "true" if designate else "false"})
        ext = resp.ext or {}
        if "masterEpoch" not in ext:
            return resp.code, resp.remark or "", None
        try:
            members = orjson.loads(resp.body_bytes() or b"{}").get("syncStateSet", [])
        except (orjson.JSONDecodeError, AttributeError):
            members = []
        body = orjson.dumps({"syncStateSet": members, "syncStateSetEpoch": ext.get("syncStateSetEpoch") or "0"})
        return resp.code, resp.remark or "", _replica_info(RemotingCommand(resp.code, ext=ext, body=body))

    async def alter_sync_state_set(self, broker_name: str, master_id: int, master_epoch: int, members: set[int],
                                   sync_state_set_epoch: int) -> tuple[frozenset[int], int]:
        """The SyncStateSet and its epoch as the controller now holds them."""
        body = orjson.dumps({"syncStateSet": sorted(members), "syncStateSetEpoch": sync_state_set_epoch})
        resp = await self._ok("CONTROLLER_ALTER_SYNC_STATE_SET", RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                              {"brokerName": broker_name, "masterBrokerId": str(master_id),
                               "masterEpoch": str(master_epoch)}, body)
        info = _replica_info(RemotingCommand(resp.code, body=resp.body_bytes()))
        return info.sync_state_set, info.sync_state_set_epoch

    async def metadata(self, addr: str) -> dict[str, str]:
        """GET_METADATA_INFO of one instance (any instance answers it)."""
        resp = await self.client.invoke(addr, RemotingCommand(RequestCode.CONTROLLER_GET_METADATA_INFO),
                                        self.timeout_s)
        return dict(resp.ext or {})
