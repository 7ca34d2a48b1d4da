"""SlaveSynchronize: a slave's periodic copy of its master's metadata, and a restarted master's reverse pull.

Slave direction (RocketMQ SlaveSynchronize.syncAll; spec remoting.md §2.5), every ``slaveSynchronizeInterval``
(10 s, first after 3 s), over remoting to the master's address from the registration reply (``masterAddr``, made
group-internal by ``group_internal_addr``), in RocketMQ's order, no request header:
1. GET_ALL_TOPIC_CONFIG (21): the table is replaced when the DataVersion differs;
2. GET_ALL_CONSUMER_OFFSET (43): merged MONOTONICALLY per queue (the larger wins unless the master's entry carries
   a newer reset version, pyrmq's ``resetVersion`` field) so a master that came back stale never rolls consumers
   back (RocketMQ #1094);
3. GET_ALL_DELAY_OFFSET (45): replaced (RocketMQ's rule; pushes between rounds only move a level forward, below);
4. GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): replaced when the DataVersion differs;
5. with ACL 2.0 on here (pyrmq; RocketMQ copies no users): AUTH_LIST_USER (3005, ``withPassword=true``, which the
   master serves only to the inner credentials) and AUTH_LIST_ACL (3010): the slave's users and ACLs become the
   master's when they differ, persisted at once, so a slave that missed an ``mqctl createUser -c`` catches up within
   one interval and checks requests as its master does.
Bodies are parsed with ``remoting.fastjson`` (a Java master's bare numeric keys read too; ``stateVersion`` is
ignored: DataVersion equality is timestamp and counter, as in RocketMQ 4). Each step catches and logs its own
error; the round is skipped while no master address is known or it is our own. Changed managers are persisted at
once. Our slave asks the master's ``listenPort``, not RocketMQ's VIP port (``listenPort - 2``), which a pyrmq
master may run without.

Master direction (DESIGN §4): ``pull_offsets_from_slaves`` is called once by a master at start, before it
registers, with its slaves' addresses (``fetch_slave_addrs``: GET_BROKER_CLUSTER_INFO (106) from the
nameservers): it sends GET_ALL_CONSUMER_OFFSET to each slave (both signed with the inner credentials) and merges
with ``merge_from_slave``, so commits the slave accepted while the master was down survive the master's return.

Pushes (``broker/slave_notify.py``): the topic pull carries ``notifyMetadataChange=true``, so a pyrmq master keeps
the connection and sends NOTIFY_METADATA_CHANGED on it when a table changes: the consumer offsets it carries are
merged at once, and so are its delay offsets (``delayOffsetTable``), each level only forward; the topic or group
table it names is pulled at once (one pull at a time, sharing the lock with the periodic round), so the slave holds
a change within milliseconds instead of up to ``slaveSynchronizeInterval``. A push from any connection but the one
to the current master is ignored. A new master address starts a round at once (no 3 s initial delay: in controller
mode this is a switch), and a closed subscribed connection one a second later. A RocketMQ master never pushes: the
10 s round alone then, as in RocketMQ.

Why pushed delay offsets are monotonic and the round's are not: a push is a delta sent after the fact, and a level
that moved back on a push would make a promoted slave re-deliver what the master delivered; the master itself moves a
level back only when its schedule queue lost the offset (``OFFSET_OVERFLOW_BADLY``: a truncated or replaced store),
and then the master's table, not the slave's higher one, is right for the queue the two share. The round brings the
master's whole table, as RocketMQ's does, and heals that case within one interval; it also shares the connection
with the pushes, so its answer is never older than a push the slave took before it.

Task-safety: event loop only. One ``RemotingClient`` per SlaveSynchronize (one connection to the master), closed
at stop; a connection to an address no longer in use is dropped.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from broker.auth.model import Acl, AuthError, User
from broker.auth.processors import WITH_PASSWORD
from broker.metadata.subscription_groups import SubscriptionGroupConfig
from broker.slave_notify import AUTH, DELAY_TABLE, GROUPS, SUBSCRIBE_FIELD, TOPICS
from common.log import RateLimitedLog
from common.service import Service
from remoting import fastjson
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode, describe
from remoting.connection import Connection
from remoting.data_version import DataVersion
from remoting.frame_codec import RemotingCommand
from remoting.headers import parse_int
from remoting.topic_config import TopicConfig

log = logging.getLogger(__name__)
quiet = RateLimitedLog(log)

RPC_TIMEOUT_S = 3.0
INITIAL_DELAY_S = 3.0
RESUBSCRIBE_DELAY_S = 1.0  # after the subscribed connection closed (a master restarting: no reconnect storm)


class SyncError(Exception):
    """One sync request that failed: transport, a non-success code, or a body of the wrong shape."""


async def fetch(client: RemotingClient, addr: str, code: RequestCode, timeout_s: float,
                ext: dict[str, str] | None = None, shape: type = dict) -> Any:
    """Send ``code`` (no header; ``ext`` adds fields a RocketMQ master ignores) to ``addr``; the body as a JSON object
    (or ``shape``)."""
    resp = await client.invoke(addr, RemotingCommand(int(code), ext=dict(ext) if ext else None), timeout_s)
    if resp.code != ResponseCode.SUCCESS:
        raise SyncError(f"{code.name} from {addr} answered {describe(resp.code)}: {resp.remark or '(no remark)'}")
    body = resp.body_bytes()
    try:
        obj = fastjson.loads(body) if body else shape()
    except (fastjson.JsonBodyError, UnicodeDecodeError) as exc:
        raise SyncError(f"{code.name} from {addr}: the body is not JSON ({exc})") from None
    if not isinstance(obj, shape):
        raise SyncError(f"{code.name} from {addr}: the body is a JSON {type(obj).__name__}, not a {shape.__name__}")
    return obj


def _table(obj: Mapping[str, Any], key: str, what: str) -> dict:
    value = obj.get(key) or {}
    if not isinstance(value, dict):
        raise SyncError(f"{what}: {key} is a {type(value).__name__}, not an object")
    return value


def parse_topic_configs(obj: Mapping[str, Any]) -> tuple[list[TopicConfig], DataVersion]:
    """A TopicConfigSerializeWrapper (21)."""
    table = _table(obj, "topicConfigTable", "GET_ALL_TOPIC_CONFIG")
    configs = [TopicConfig.from_json({"topicName": name, **(cfg or {})}) for name, cfg in table.items()]
    return configs, DataVersion.from_json(obj.get("dataVersion"))


def parse_subscription_groups(obj: Mapping[str, Any]) -> tuple[list[SubscriptionGroupConfig], DataVersion]:
    """A SubscriptionGroupWrapper (201); RocketMQ 5's extra fields are ignored."""
    table = _table(obj, "subscriptionGroupTable", "GET_ALL_SUBSCRIPTIONGROUP_CONFIG")
    groups = [SubscriptionGroupConfig.from_json(cfg or {}, name) for name, cfg in table.items()]
    return groups, DataVersion.from_json(obj.get("dataVersion"))


def parse_consumer_offsets(obj: Mapping[str, Any]) -> tuple[dict[str, dict[int, int]], dict[str, int]]:
    """GET_ALL_CONSUMER_OFFSET (43): ``offsetTable`` plus pyrmq's ``resetVersion`` (absent from a Java broker)."""
    table = {
        str(key): {parse_int(q): parse_int(o) for q, o in (queues or {}).items()}
        for key, queues in _table(obj, "offsetTable", "GET_ALL_CONSUMER_OFFSET").items()
    }
    versions = {str(k): parse_int(v) for k, v in _table(obj, "resetVersion", "GET_ALL_CONSUMER_OFFSET").items() if v}
    return table, versions


def parse_delay_offsets(obj: Mapping[str, Any], key: str = "offsetTable", what: str = "GET_ALL_DELAY_OFFSET"
                        ) -> dict[int, int]:
    """GET_ALL_DELAY_OFFSET (45): ``{level: offset}``; a push carries the same table under ``delayOffsetTable``."""
    return {parse_int(k): parse_int(v) for k, v in _table(obj, key, what).items()}


class SlaveSynchronize(Service):
    def __init__(self, *, topics, groups, offsets, delay_offsets, own_addr: str = "", interval_ms: int = 10_000,
                 initial_delay_s: float = INITIAL_DELAY_S, rpc_timeout_s: float = RPC_TIMEOUT_S,
                 client: RemotingClient | None = None) -> None:
        super().__init__("slave-sync")
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.delay_offsets = delay_offsets
        self.own_addr = own_addr
        self.interval_s = interval_ms / 1000.0
        self.initial_delay_s = initial_delay_s
        self.rpc_timeout_s = rpc_timeout_s
        self.client = client or RemotingClient(connect_timeout_s=rpc_timeout_s, name="slave-sync")
        self.master_addr = ""
        self.rounds = 0
        self.failures = 0
        self.last_sync_ms = 0
        self.metrics = None  # broker.metrics.BrokerMetrics, set by the server
        self.auth_store = None  # broker.auth.store.AuthStore when ACL 2.0 is on here: users and ACLs are copied too
        self.pushes = 0  # NOTIFY_METADATA_CHANGED taken from the master
        self._wanted: set[str] = set()  # what pushes asked for: "topics", "groups", "all" (a whole round)
        self._wake = asyncio.Event()
        self._steps = asyncio.Lock()  # one pull at a time: the periodic round and the pushed ones never overlap
        self._watched: Connection | None = None
        self.client.register(RequestCode.NOTIFY_METADATA_CHANGED, self._on_notify)

    def update_master_addr(self, addr: str) -> None:
        """The registration reply's ``masterAddr`` (empty when the nameserver knows no master: sync pauses)."""
        if addr != self.master_addr:
            log.info("slave sync: master address %s -> %s", self.master_addr or "(none)", addr or "(none)")
            if self.master_addr:
                self.client.drop(self.master_addr, "the master address changed")
            self.master_addr = addr
            if addr:
                self._want("all")  # sync (and subscribe) now, not at the next round: this may be a new master

    async def on_start(self) -> None:
        self.run_every("sync", self.interval_s, self.sync_all, initial_delay_s=self.initial_delay_s)
        self.spawn("pushed", self._pushed_rounds())

    # pushes from the master (broker/slave_notify.py) ------------------------------------------------------------
    def _want(self, what: str) -> None:
        self._wanted.add(what)
        self._wake.set()

    def _on_notify(self, conn: Connection, request: RemotingCommand) -> None:
        """NOTIFY_METADATA_CHANGED: merge the offsets it carries now; pull the tables it names next."""
        if not self.master_addr or conn.attrs.get("addr") != self.master_addr:
            quiet.warning("metadata change notification from %s ignored: not the master %s", conn.peer,
                          self.master_addr or "(none)")
            return None
        self.pushes += 1
        ext = request.ext or {}
        if ext.get(TOPICS) == "true":
            self._want("topics")
        if ext.get(GROUPS) == "true":
            self._want("groups")
        if ext.get(AUTH) == "true":
            self._want("auth")
        body = request.body_bytes()
        if body:
            try:
                obj = fastjson.loads(body)
                if not isinstance(obj, dict):
                    raise SyncError(f"the body is a JSON {type(obj).__name__}, not an object")
                table, versions = parse_consumer_offsets(obj)
                delay = parse_delay_offsets(obj, DELAY_TABLE, "NOTIFY_METADATA_CHANGED")
            except (fastjson.JsonBodyError, UnicodeDecodeError, SyncError, ValueError) as exc:
                quiet.warning("metadata change notification from %s: offsets unreadable (%s); pulling them all",
                              conn.peer, exc)
                self._want("all")
                return None
            self.offsets.merge_from_master(table, versions)  # marks the file dirty: written within its interval
            self.delay_offsets.merge_from_master(delay)
        return None

    async def _pushed_rounds(self) -> None:
        while not self.stopping:
            await self._wake.wait()
            self._wake.clear()
            wanted, self._wanted = self._wanted, set()
            if self.stopping:
                return
            if "all" in wanted:
                await self.sync_all()
                continue
            addr = self.master_addr
            if not addr or addr == self.own_addr:
                continue
            for what, name, step in (("topics", "topic config", self.sync_topic_config),
                                     ("groups", "subscription groups", self.sync_subscription_group_config),
                                     ("auth", "users and ACLs", self.sync_auth)):
                if what in wanted:
                    await self._step(addr, name, step)

    def _watch(self, addr: str) -> None:
        """Once subscribed on a connection: when it closes, sync (and so subscribe) again within a second."""
        conn = self.client.cached(addr)
        if conn is None or conn is self._watched or conn.closed is None:
            return
        self._watched = conn
        loop = asyncio.get_running_loop()
        conn.closed.add_done_callback(lambda _f: None if self.stopping else loop.call_later(
            RESUBSCRIBE_DELAY_S, self._want, "all"))

    async def on_stop(self) -> None:
        self._wake.set()  # the pushed rounds' loop sees ``stopping``
        await self.client.close()

    async def sync_all(self) -> bool:
        """One round; False when skipped (no master) or when any step failed."""
        addr = self.master_addr
        if not addr or addr == self.own_addr:
            return False
        ok = True
        for name, step in (("topic config", self.sync_topic_config), ("consumer offsets", self.sync_consumer_offset),
                           ("delay offsets", self.sync_delay_offset),
                           ("subscription groups", self.sync_subscription_group_config),
                           ("users and ACLs", self.sync_auth)):
            ok = await self._step(addr, name, step) and ok
        self.rounds += 1
        if self.metrics is not None:
            self.metrics.on_slave_sync("all", ok)
        if ok:
            self.last_sync_ms = int(time.time() * 1000)
        return ok

    async def _step(self, addr: str, name: str, step) -> bool:
        async with self._steps:
            try:
                await step(addr)
                if self.metrics is not None:
                    self.metrics.on_slave_sync(name.replace(" ", "_"), True)
                return True
            except Exception as exc:  # noqa: BLE001 - each step logs its own failure; the others still run
                if self.metrics is not None:
                    self.metrics.on_slave_sync(name.replace(" ", "_"), False)
                self.failures += 1
                log.warning("slave sync of %s from master %s failed: %s; retrying in %.0f s", name, addr,
                            _describe(exc), self.interval_s)
                return False

    async def _fetch(self, addr: str, code: RequestCode, ext: dict[str, str] | None = None) -> dict[str, Any]:
        return await fetch(self.client, addr, code, self.rpc_timeout_s, ext)

    async def sync_topic_config(self, addr: str) -> None:
        body = await self._fetch(addr, RequestCode.GET_ALL_TOPIC_CONFIG, {SUBSCRIBE_FIELD: "true"})
        self._watch(addr)
        configs, version = parse_topic_configs(body)
        replaced = self.topics.replace_all(configs, version)
        await self._report_held(addr, TOPICS, self.topics.data_version.counter)
        if replaced:
            log.info("slave sync: took %d topic configs from master %s", len(configs), addr)
            await self.topics.persist()

    async def sync_consumer_offset(self, addr: str) -> None:
        table, versions = parse_consumer_offsets(await self._fetch(addr, RequestCode.GET_ALL_CONSUMER_OFFSET))
        changed = self.offsets.merge_from_master(table, versions)
        if changed:
            log.info("slave sync: consumer offsets of %d topic@group keys advanced from master %s", len(changed), addr)
            await self.offsets.persist()

    async def sync_delay_offset(self, addr: str) -> None:
        table = parse_delay_offsets(await self._fetch(addr, RequestCode.GET_ALL_DELAY_OFFSET))
        if self.delay_offsets.replace_all(table):
            await self.delay_offsets.persist()

    async def sync_subscription_group_config(self, addr: str) -> None:
        # on a subscribed connection the ext field is not needed; a new connection subscribes on its topic pull
        body = await self._fetch(addr, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG, {SUBSCRIBE_FIELD: "true"})
        groups, version = parse_subscription_groups(body)
        replaced = self.groups.replace_all(groups, version)
        await self._report_held(addr, GROUPS, self.groups.data_version.counter)
        if replaced:
            log.info("slave sync: took %d subscription groups from master %s", len(groups), addr)
            await self.groups.persist()

    async def _report_held(self, addr: str, kind: str, counter: int) -> None:
        """Tell the master which version we hold now (ONEWAY on the sync connection; a RocketMQ master drops it)."""
        if self.client.cached(addr) is not None:
            await self.client.invoke_oneway(
                addr, RemotingCommand(int(RequestCode.NOTIFY_METADATA_CHANGED), ext={kind: str(counter)}))


    async def sync_auth(self, addr: str) -> None:
        """The master's users (with passwords: asked with the inner credentials) and ACLs replace ours when they
        differ. Skipped while ACL 2.0 is off here; a master with it off serves no AUTH_* code: nothing to copy."""
        if self.auth_store is None:
            return
        try:
            raw_users = await fetch(self.client, addr, RequestCode.AUTH_LIST_USER, self.rpc_timeout_s,
                                    {WITH_PASSWORD: "true"}, list)
        except SyncError as exc:
            if describe(ResponseCode.REQUEST_CODE_NOT_SUPPORTED) in str(exc):
                return
            raise
        raw_acls = await fetch(self.client, addr, RequestCode.AUTH_LIST_ACL, self.rpc_timeout_s, shape=list)
        try:
            users = [User.from_json(u) for u in raw_users]
            acls = [Acl.from_json(a) for a in raw_acls]
        except AuthError as exc:
            raise SyncError(f"a user or ACL of master {addr} cannot be read: {exc}") from None
        if await self.auth_store.replace_all(users, acls):
            log.info("slave sync: took %d users and %d ACLs from master %s", len(users), len(acls), addr)


def _describe(exc: BaseException) -> str:
    return str(exc) or repr(exc)


def group_internal_addr(broker_addr: str, ha_server_addr: str) -> str:
    """How one broker of a group reaches another's remoting port: the HA host (brokerIP2), the listen port.

    ``brokerIP1`` is what clients outside the network are told (in the compose cluster 127.0.0.1, which inside
    a container is the container itself; RocketMQ issue #4140 is the same trap with a public address). Traffic
    inside a broker group therefore uses the host of the HA address, which is brokerIP2 and defaults to
    brokerIP1 outside containers, so nothing changes there.
    """
    ha_host = ha_server_addr.rpartition(":")[0]
    port = broker_addr.rpartition(":")[2]
    if not broker_addr or not ha_host or not port:
        return broker_addr
    return f"{ha_host}:{port}"


def slave_addrs_from_cluster_info(info: Mapping[str, Any], broker_name: str) -> list[str]:
    """Group-internal addresses of ``broker_name``'s slaves (ids >= 1) from a ClusterInfo body (106).

    The HA host comes from pyrmq's ``brokerLiveTable`` (``{brokerAddr: {"haServerAddr": ...}}``); a slave without
    a live entry there (or a RocketMQ nameserver, which sends none) keeps its registered address.
    """
    data = (info.get("brokerAddrTable") or {}).get(broker_name)
    if not isinstance(data, dict):
        return []
    live = info.get("brokerLiveTable") or {}
    ha_by_addr = {addr: entry.get("haServerAddr", "") for addr, entry in live.items() if isinstance(entry, dict)}
    addrs = {parse_int(bid): str(addr) for bid, addr in (data.get("brokerAddrs") or {}).items()}
    return [
        group_internal_addr(addr, ha_by_addr.get(addr, "")) for bid, addr in sorted(addrs.items()) if bid > 0 and addr
    ]


async def pull_offsets_from_slaves(offsets, slave_addrs: Iterable[str], *, timeout_s: float = RPC_TIMEOUT_S,
                                   client: RemotingClient | None = None, signer=None) -> dict[str, int]:
    """A restarting master takes the offsets its slaves accepted while it was down (``merge_from_slave``).

    Returns ``{slave_addr: keys changed}``, -1 for a slave that could not be asked (logged; the master starts
    anyway: the slave's newer offsets then reach the master through consumers' regular commits).
    """
    own = client is None
    client = client or RemotingClient(connect_timeout_s=timeout_s, name="offset-pull")
    if own:
        client.signer = signer  # innerClientAuthenticationCredentials: a slave with ACL on checks this pull too
    result: dict[str, int] = {}
    try:
        for addr in slave_addrs:
            try:
                table, versions = parse_consumer_offsets(
                    await fetch(client, addr, RequestCode.GET_ALL_CONSUMER_OFFSET, timeout_s)
                )
                changed = offsets.merge_from_slave(table, versions)
                result[addr] = len(changed)
                log.info("master start: merged consumer offsets from slave %s (%d topic@group keys advanced)", addr,
                         len(changed))
            except Exception as exc:  # noqa: BLE001 - one unreachable or odd slave must not stop the master's start
                result[addr] = -1
                log.warning("master start: cannot pull consumer offsets from slave %s: %s; consumers may re-read "
                            "messages they committed on the slave while this master was down", addr, _describe(exc))
    finally:
        if own:
            await client.close()
    if any(v > 0 for v in result.values()):
        await offsets.persist()
    return result


async def fetch_slave_addrs(namesrv_addrs: Iterable[str], broker_name: str, *, timeout_s: float = RPC_TIMEOUT_S,
                            client: RemotingClient | None = None, signer=None) -> list[str]:
    """Ask the nameservers (first that answers) for the slave addresses of ``broker_name`` (GET_BROKER_CLUSTER_INFO)."""
    own = client is None
    client = client or RemotingClient(connect_timeout_s=timeout_s, name="cluster-info")
    if own:
        client.signer = signer
    try:
        for ns in namesrv_addrs:
            try:
                info = await fetch(client, ns, RequestCode.GET_BROKER_CLUSTER_INFO, timeout_s)
                return slave_addrs_from_cluster_info(info, broker_name)
            except Exception as exc:  # noqa: BLE001 - try the next nameserver
                log.warning("cannot read cluster info from nameserver %s: %s", ns, _describe(exc))
    finally:
        if own:
            await client.close()
    return []
