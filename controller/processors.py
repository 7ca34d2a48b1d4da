"""The controller's remoting processors: RocketMQ 5's controller request codes, header fields as its Java headers.

Requests (header fields as RocketMQ's Java headers; the response header, then the body):

- 904 BROKER_HEARTBEAT: clusterName, brokerAddr, brokerName, brokerId, epoch, maxOffset, confirmOffset,
  heartbeatTimeoutMills, electionPriority (and pyrmq's allAckInSyncStateSet: see controller.manager).
- 1012 GET_NEXT_BROKER_ID: clusterName, brokerName -> clusterName, brokerName, nextBrokerId.
- 1013 APPLY_BROKER_ID: clusterName, brokerName, appliedBrokerId, registerCheckCode -> clusterName, brokerName.
- 1003 REGISTER_BROKER: clusterName, brokerName, brokerId, brokerAddress -> clusterName, brokerName,
  masterBrokerId, masterAddress, masterEpoch, syncStateSetEpoch; SyncStateSet.
- 1002 ELECT_MASTER: clusterName, brokerName, brokerId, designateElect -> masterBrokerId, masterAddress,
  masterEpoch, syncStateSetEpoch; ``{"brokerMemberGroup": {...}, "syncStateSet": [...]}``.
- 1001 ALTER_SYNC_STATE_SET: brokerName, masterBrokerId, masterEpoch and a SyncStateSet body ->
  newSyncStateSetEpoch; SyncStateSet.
- 1004 GET_REPLICA_INFO: brokerName -> masterBrokerId, masterAddress, masterEpoch (and pyrmq's masterConfirmOffset:
  the master's last heartbeat's confirmOffset, when that heartbeat was of the current masterEpoch, and
  electUncleanMaster, this controller's enableElectUncleanMaster, which the master's fence needs); SyncStateSet.
- 1005 GET_METADATA_INFO -> group, controllerLeaderId, controllerLeaderAddress, isLeader, peers.
- 1006 GET_SYNC_STATE_DATA: a JSON list of brokerNames -> BrokerReplicasInfo JSON.

SyncStateSet is ``{"syncStateSet": [ids], "syncStateSetEpoch": n}``. Every request but GET_METADATA_INFO needs the
active instance: the others answer 2007 CONTROLLER_NOT_LEADER with the active one's address in the remark and in
``controllerLeaderAddress``, or, when no instance can be active because etcd does not answer, a remark that says
so. An etcd call that fails while serving answers 2015 (the store failed) with etcd's error; nothing is half
written (every write is one transaction). A broker that heartbeats with a brokerId it does not hold, or from an
address that is not that member's, is refused (2010 / 2005) and never counts as alive.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable

import orjson

from common.log import RateLimitedLog
from controller import election
from controller.manager import NotActive, ReplicasManager, sync_state_set_body
from controller.state import GroupState, LiveInfo, name_problem
from controller.store import StoreUnavailable
from remoting.codes import RequestCode, ResponseCode
from remoting.connection import Connection
from remoting.frame_codec import RemotingCommand, response_to
from remoting.headers import INT_MAX, Fields, HeaderError, NumberError, parse_host_port, parse_int
from remoting.server import RemotingServer

log = logging.getLogger(__name__)
refused_log = RateLimitedLog(log)
RC = ResponseCode
Handler = Callable[[Connection, RemotingCommand], Awaitable[RemotingCommand]]


def _addr(fields: Fields, name: str) -> str:
    value = fields.req_str(name)
    try:
        parse_host_port(value, f"header field {name}")
    except NumberError as exc:
        raise HeaderError(f"{fields.what}: {exc}") from None
    return value


def _name(fields: Fields, name: str) -> str:
    value = fields.req_str(name)
    problem = name_problem(value, f"header field {name}")
    if problem:
        raise HeaderError(f"{fields.what}: {problem}")
    return value


def _broker_id(fields: Fields, name: str = "brokerId") -> int:
    broker_id = fields.req_long(name)
    if broker_id < 1:
        raise HeaderError(f"{fields.what}: {name} {broker_id} is below 1: controller-mode brokerIds start at 1 "
                          "(ask GET_NEXT_BROKER_ID)")
    return broker_id


def _state_header(state: GroupState | None) -> dict[str, str]:
    if state is None:
        return {}
    return {
        "masterBrokerId": "" if state.master_broker_id is None else str(state.master_broker_id),
        "masterAddress": state.master_address,
        "masterEpoch": str(state.master_epoch),
        "syncStateSetEpoch": str(state.sync_state_set_epoch),
    }


class ControllerProcessors:
    def __init__(self, manager: ReplicasManager, *, describe_not_active: Callable[[], tuple[str, dict[str, str]]],
                 metadata: Callable[[], dict[str, str]]) -> None:
        self.manager = manager
        self._describe_not_active = describe_not_active
        self._metadata = metadata

    def register(self, server: RemotingServer) -> None:
        for code, handler in (
            (RequestCode.BROKER_HEARTBEAT, self.heartbeat),
            (RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, self.get_next_broker_id),
            (RequestCode.CONTROLLER_APPLY_BROKER_ID, self.apply_broker_id),
            (RequestCode.CONTROLLER_REGISTER_BROKER, self.register_broker),
            (RequestCode.CONTROLLER_ELECT_MASTER, self.elect_master),
            (RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET, self.alter_sync_state_set),
            (RequestCode.CONTROLLER_GET_REPLICA_INFO, self.get_replica_info),
            (RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, self.get_sync_state_data),
        ):
            server.register(code, self._guarded(handler))
        server.register(RequestCode.CONTROLLER_GET_METADATA_INFO, self.get_metadata_info)

    def _guarded(self, handler: Handler) -> Callable[[Connection, RemotingCommand], Awaitable[RemotingCommand]]:
        @functools.wraps(handler)
        async def run(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            try:
                self.manager.require_active()
                return await handler(conn, request)
            except NotActive:
                remark, ext = self._describe_not_active()
                return response_to(request, RC.CONTROLLER_NOT_LEADER, remark, ext=ext)
            except StoreUnavailable as exc:
                refused_log.warning("request %d from %s: %s", request.code, conn.peer, exc)
                return response_to(request, RC.CONTROLLER_JRAFT_INTERNAL_ERROR, f"{exc}; nothing was changed, retry")

        return run

    # identity -----------------------------------------------------------------------------------------------
    async def get_next_broker_id(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        fields = Fields(request.ext, "GET_NEXT_BROKER_ID")
        cluster, name = _name(fields, "clusterName"), _name(fields, "brokerName")
        state, _ = await self.manager.read(name)
        next_id = state.next_broker_id() if state is not None else 1
        return response_to(request, RC.SUCCESS, None,
                           ext={"clusterName": cluster, "brokerName": name, "nextBrokerId": str(next_id)})

    async def apply_broker_id(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        fields = Fields(request.ext, "APPLY_BROKER_ID")
        cluster, name = _name(fields, "clusterName"), _name(fields, "brokerName")
        broker_id = _broker_id(fields, "appliedBrokerId")
        code = fields.req_str("registerCheckCode")
        outcome, _ = await self.manager.decide(
            name, lambda state: election.apply_broker_id(state, cluster, name, broker_id, code))
        return response_to(request, outcome.code, outcome.remark, ext={"clusterName": cluster, "brokerName": name})

    async def register_broker(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        fields = Fields(request.ext, "CONTROLLER_REGISTER_BROKER")
        cluster, name = _name(fields, "clusterName"), _name(fields, "brokerName")
        broker_id = _broker_id(fields)
        address = _addr(fields, "brokerAddress")
        outcome, state = await self.manager.decide(name, lambda s: election.register_broker(s, broker_id, address))
        if outcome.ok:  # a registration is a sign of life over this connection
            self._beat(conn, name, broker_id, LiveInfo(address, self.manager.now_ms(),
                                                       self.manager.config.controller_heart_beat_timeout_mills))
        ext = {"clusterName": cluster, "brokerName": name, **_state_header(state)}
        body = sync_state_set_body(state) if state is not None else b""
        return response_to(request, outcome.code, outcome.remark, ext=ext, body=body)

    # liveness -----------------------------------------------------------------------------------------------
    def _beat(self, conn: Connection, name: str, broker_id: int, info: LiveInfo) -> None:
        self.manager.live.beat(name, broker_id, info, conn)

    async def heartbeat(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        fields = Fields(request.ext, "BROKER_HEARTBEAT")
        _name(fields, "clusterName")
        name = _name(fields, "brokerName")
        address = _addr(fields, "brokerAddr")
        state = await self.manager.cached(name)
        broker_id = fields.long("brokerId")
        if broker_id is None and state is not None:
            broker_id = state.id_of(address)
        if state is None or broker_id is None or broker_id not in state.members:
            refused_log.warning("heartbeat from %s (%s, brokerId %s) refused: not a member", conn.peer, address,
                                broker_id)
            return response_to(request, RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                               f"brokerId {broker_id} at {address} is not a member of {name}: ask for the next "
                               "brokerId, apply for it and register before heartbeating")
        member = state.members[broker_id]
        if member.address != address:
            return response_to(request, RC.CONTROLLER_INVALID_REQUEST,
                               f"brokerId {broker_id} of {name} is registered at {member.address}, not {address}: "
                               "register the new address first (CONTROLLER_REGISTER_BROKER)")
        timeout = fields.long("heartbeatTimeoutMills") or self.manager.config.controller_heart_beat_timeout_mills
        priority = fields.int("electionPriority")
        info = LiveInfo(
            address=address,
            last_seen_ms=self.manager.now_ms(),
            timeout_ms=max(1, timeout),
            epoch=fields.int("epoch", 0) or 0,
            max_offset=fields.long("maxOffset", 0) or 0,
            confirm_offset=fields.long("confirmOffset", 0) or 0,
            priority=INT_MAX if priority is None else priority,
            all_ack=fields.bool("allAckInSyncStateSet", False) or False,
        )
        self._beat(conn, name, broker_id, info)
        return response_to(request, RC.SUCCESS, None)

    # replicas -----------------------------------------------------------------------------------------------
    async def elect_master(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        fields = Fields(request.ext, "CONTROLLER_ELECT_MASTER")
        name = _name(fields, "brokerName")
        designate = fields.bool("designateElect", False)
        broker_id = fields.long("brokerId")
        if broker_id is not None and broker_id < 1:
            broker_id = None  # RocketMQ's "no preference" is -1
        if designate and broker_id is None:
            raise HeaderError("CONTROLLER_ELECT_MASTER: designateElect=true needs brokerId (the broker to elect)")
        outcome, state = await self.manager.elect(
            name,
            designated=broker_id if designate else None,
            first_by=None if designate else broker_id,
            why=f"requested by {conn.peer}" + (f" for brokerId {broker_id}" if designate else ""),
        )
        body = b""
        if state is not None:
            body = orjson.dumps({
                "brokerMemberGroup": {
                    "cluster": state.cluster_name,
                    "brokerName": state.broker_name,
                    "brokerAddrs": {str(i): m.address for i, m in sorted(state.members.items())},
                },
                "syncStateSet": sorted(state.sync_state_set),
            })
        return response_to(request, outcome.code, outcome.remark, ext=_state_header(state), body=body)

    async def alter_sync_state_set(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        fields = Fields(request.ext, "CONTROLLER_ALTER_SYNC_STATE_SET")
        name = _name(fields, "brokerName")
        master_id = _broker_id(fields, "masterBrokerId")
        master_epoch = fields.req_int("masterEpoch")
        try:
            body = orjson.loads(request.body_bytes() or b"null")
            new_set = [parse_int(i, 1, what="syncStateSet member") for i in body["syncStateSet"]]
            sss_epoch = parse_int(body["syncStateSetEpoch"], 0, INT_MAX, what="syncStateSetEpoch")
        except (orjson.JSONDecodeError, NumberError, KeyError, TypeError) as exc:
            raise HeaderError(f"CONTROLLER_ALTER_SYNC_STATE_SET: the body must be "
                              f'{{"syncStateSet": [brokerIds], "syncStateSetEpoch": n}} ({exc})') from None

        def rule(state: GroupState | None) -> election.Outcome:
            if state is None:
                return election.Outcome(RC.CONTROLLER_BROKER_METADATA_NOT_EXIST, f"no broker group {name}")
            return election.alter_sync_state_set(state, master_id=master_id, master_epoch=master_epoch,
                                                 new_set=new_set, sync_state_set_epoch=sss_epoch,
                                                 alive=self.manager.live.alive(name))

        outcome, state = await self.manager.decide(name, rule)
        ext = {"newSyncStateSetEpoch": str(state.sync_state_set_epoch)} if state is not None else {}
        body_out = sync_state_set_body(state) if state is not None else b""
        return response_to(request, outcome.code, outcome.remark, ext=ext, body=body_out)

    async def get_replica_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        fields = Fields(request.ext, "CONTROLLER_GET_REPLICA_INFO")
        name = _name(fields, "brokerName")
        state, _ = await self.manager.read(name)
        if state is None:
            return response_to(request, RC.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                               f"the controller knows no broker group {name}")
        ext = _state_header(state)
        ext.pop("syncStateSetEpoch")
        # pyrmq: the master's confirm offset from its last heartbeat of this masterEpoch, so slaves serve consumers
        # only what the SyncStateSet holds (the 4.x HA framing pyrmq keeps has no field for it)
        master = self.manager.live.last(name, state.master_broker_id) if state.master_broker_id is not None else None
        if master is not None and master.epoch == state.master_epoch:
            ext["masterConfirmOffset"] = str(master.confirm_offset)
        ext["electUncleanMaster"] = "true" if self.manager.config.enable_elect_unclean_master else "false"
        return response_to(request, RC.SUCCESS, None, ext=ext, body=sync_state_set_body(state))

    async def get_sync_state_data(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        try:
            names = orjson.loads(request.body_bytes() or b"[]")
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise TypeError("not a list of strings")
        except (orjson.JSONDecodeError, TypeError) as exc:
            raise HeaderError(f"CONTROLLER_GET_SYNC_STATE_DATA: the body must be a JSON list of brokerNames ({exc})"
                              ) from None
        table = {}
        for name in names[:1000]:
            state, _ = await self.manager.read(name)
            if state is None:
                continue
            alive = self.manager.live.alive(name)

            def replica(i: int, s: GroupState = state, a=alive) -> dict:
                return {"brokerName": s.broker_name, "brokerId": i, "brokerAddress": s.members[i].address,
                        "alive": i in a}

            table[name] = {
                "masterBrokerId": state.master_broker_id,
                "masterAddress": state.master_address,
                "masterEpoch": state.master_epoch,
                "syncStateSetEpoch": state.sync_state_set_epoch,
                "inSyncReplicas": [replica(i) for i in sorted(state.sync_state_set)],
                "notInSyncReplicas": [replica(i) for i in sorted(state.members.keys() - state.sync_state_set)],
            }
        return response_to(request, RC.SUCCESS, None, body=orjson.dumps({"replicasInfoTable": table}))

    def get_metadata_info(self, conn: Connection, request: RemotingCommand) -> RemotingCommand:
        return response_to(request, RC.SUCCESS, None, ext=self._metadata())
