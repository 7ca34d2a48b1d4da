"""SlaveSynchronize: a slave's periodic copy of its master's metadata, and a restarted master's reverse pull.

Slave direction (RocketMQ SlaveSynchronize.syncAll; spec §4), every ``slaveSynchronizeInterval`` (10 s, first
after 3 s), from the master's BrokerAdmin service at the registration reply's ``master_addr``:
1. topics: ``GetAllTopicConfig``; replaced when the DataVersion differs;
2. consumer offsets: ``GetAllConsumerOffset``; merged MONOTONICALLY per queue (larger wins unless the master's
   entry carries a newer reset version) so a master that came back stale never rolls consumers back (#1094);
3. delay offsets: ``GetAllDelayOffset``; replaced;
4. subscription groups: ``GetAllSubscriptionGroupConfig``; replaced when the DataVersion differs.
Each step catches and logs its own error; the round is skipped while no master address is known or it is our
own address. Changed managers are persisted at once.

Master direction (DESIGN §4): ``pull_offsets_from_slaves`` is called once by a master at start, before it
registers, with its slaves' broker addresses (``slave_addrs_from_cluster_info`` over the nameserver's cluster
info): it merges each slave's offsets with ``merge_from_slave``, so commits the slave accepted while the master
was down survive the master's return.

Task-safety: event loop only. One gRPC channel per master address, closed when the address changes or on stop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import grpc

from broker.grpc import convert
from common.service import Service
from remoting.channel import aio_channel
from remoting.codes import ResponseCode
from remoting.pb import admin_pb2, admin_pb2_grpc

log = logging.getLogger(__name__)

RPC_TIMEOUT_S = 3.0
INITIAL_DELAY_S = 3.0


def _check(resp, what: str, addr: str) -> None:
    if resp.code != ResponseCode.SUCCESS:
        raise RuntimeError(f"{what} from {addr} answered code {resp.code}: {resp.remark}")


def offsets_from_pb(resp: admin_pb2.AllConsumerOffset) -> tuple[dict[str, dict[int, int]], dict[str, int]]:
    table = {key: {int(q): int(o) for q, o in qo.offsets.items()} for key, qo in resp.offset_table.items()}
    versions = {key: int(qo.reset_version) for key, qo in resp.offset_table.items() if qo.reset_version}
    return table, versions


class SlaveSynchronize(Service):
    def __init__(self, *, topics, groups, offsets, delay_offsets, own_addr: str = "", interval_ms: int = 10_000,
                 initial_delay_s: float = INITIAL_DELAY_S, rpc_timeout_s: float = RPC_TIMEOUT_S,
                 channel_factory: Callable[[str], grpc.aio.Channel] = aio_channel) -> None:
        super().__init__("slave-sync")
        self.topics = topics
        self.groups = groups
        self.offsets = offsets
        self.delay_offsets = delay_offsets
        self.own_addr = own_addr
        self.interval_s = interval_ms / 1000.0
        self.initial_delay_s = initial_delay_s
        self.rpc_timeout_s = rpc_timeout_s
        self._channel_factory = channel_factory
        self.master_addr = ""
        self._channel: grpc.aio.Channel | None = None
        self._channel_addr = ""
        self.rounds = 0
        self.failures = 0
        self.last_sync_ms = 0
        self.metrics = None  # broker.metrics.BrokerMetrics, set by the server

    def update_master_addr(self, addr: str) -> None:
        """The registration reply's ``master_addr`` (empty when the nameserver knows no master: sync pauses)."""
        if addr != self.master_addr:
            log.info("slave sync: master address %s -> %s", self.master_addr or "(none)", addr or "(none)")
            self.master_addr = addr

    async def on_start(self) -> None:
        self.run_every("sync", self.interval_s, self.sync_all, initial_delay_s=self.initial_delay_s)

    async def on_stop(self) -> None:
        await self._close_channel()

    async def _close_channel(self) -> None:
        if self._channel is not None:
            ch, self._channel = self._channel, None
            await ch.close()

    async def _stub(self, addr: str) -> admin_pb2_grpc.BrokerAdminStub:
        if self._channel is None or self._channel_addr != addr:
            await self._close_channel()
            self._channel = self._channel_factory(addr)
            self._channel_addr = addr
        return admin_pb2_grpc.BrokerAdminStub(self._channel)

    async def sync_all(self) -> bool:
        """One round; False when skipped (no master) or when any step failed."""
        addr = self.master_addr
        if not addr or addr == self.own_addr:
            return False
        stub = await self._stub(addr)
        ok = True
        for name, step in (("topic config", self.sync_topic_config), ("consumer offsets", self.sync_consumer_offset),
                           ("delay offsets", self.sync_delay_offset),
                           ("subscription groups", self.sync_subscription_group_config)):
            try:
                await step(stub, addr)
                if self.metrics is not None:
                    self.metrics.on_slave_sync(name.replace(" ", "_"), True)
            except Exception as exc:  # each step logs its own failure; the others still run
                if self.metrics is not None:
                    self.metrics.on_slave_sync(name.replace(" ", "_"), False)
                ok = False
                self.failures += 1
                log.warning("slave sync of %s from master %s failed: %s; retrying in %.0f s", name, addr,
                            _describe(exc), self.interval_s)
        self.rounds += 1
        if self.metrics is not None:
            self.metrics.on_slave_sync("all", ok)
        if ok:
            import time

            self.last_sync_ms = int(time.time() * 1000)
        return ok

    async def sync_topic_config(self, stub, addr: str) -> None:
        resp = await stub.GetAllTopicConfig(admin_pb2.Empty(), timeout=self.rpc_timeout_s)
        _check(resp, "GetAllTopicConfig", addr)
        configs = [convert.topic_config_from_pb(pb) for pb in resp.topic_configs]
        if self.topics.replace_all(configs, convert.data_version_from_pb(resp.data_version)):
            log.info("slave sync: took %d topic configs from master %s", len(configs), addr)
            await self.topics.persist()

    async def sync_consumer_offset(self, stub, addr: str) -> None:
        resp = await stub.GetAllConsumerOffset(admin_pb2.Empty(), timeout=self.rpc_timeout_s)
        _check(resp, "GetAllConsumerOffset", addr)
        table, versions = offsets_from_pb(resp)
        changed = self.offsets.merge_from_master(table, versions)
        if changed:
            log.info("slave sync: consumer offsets of %d topic@group keys advanced from master %s", len(changed), addr)
            await self.offsets.persist()

    async def sync_delay_offset(self, stub, addr: str) -> None:
        resp = await stub.GetAllDelayOffset(admin_pb2.Empty(), timeout=self.rpc_timeout_s)
        _check(resp, "GetAllDelayOffset", addr)
        if self.delay_offsets.replace_all({int(k): int(v) for k, v in resp.offset_table.items()}):
            await self.delay_offsets.persist()

    async def sync_subscription_group_config(self, stub, addr: str) -> None:
        resp = await stub.GetAllSubscriptionGroupConfig(admin_pb2.Empty(), timeout=self.rpc_timeout_s)
        _check(resp, "GetAllSubscriptionGroupConfig", addr)
        groups = [convert.group_config_from_pb(pb) for pb in resp.groups]
        if self.groups.replace_all(groups, convert.data_version_from_pb(resp.data_version)):
            log.info("slave sync: took %d subscription groups from master %s", len(groups), addr)
            await self.groups.persist()


def _describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return f"{exc.code().name}: {exc.details()}"
    return str(exc) or repr(exc)


def group_internal_addr(broker_addr: str, ha_server_addr: str) -> str:
    """How one broker of a group reaches another's admin service: the HA host (brokerIP2), the listen port.

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


def slave_addrs_from_cluster_info(resp, broker_name: str) -> list[str]:
    """Group-internal admin addresses of ``broker_name``'s slaves (ids >= 1) from GetBrokerClusterInfo."""
    data = resp.broker_addr_table.get(broker_name)
    if data is None:
        return []
    ha_by_addr = {live.broker_addr: live.ha_server_addr for live in resp.live_brokers}
    return [
        group_internal_addr(addr, ha_by_addr.get(addr, ""))
        for bid, addr in sorted(data.broker_addrs.items())
        if bid > 0 and addr
    ]


async def pull_offsets_from_slaves(offsets, slave_addrs: Iterable[str], *, timeout_s: float = RPC_TIMEOUT_S,
                                   channel_factory: Callable[[str], grpc.aio.Channel] = aio_channel) -> dict[str, int]:
    """A restarting master takes the offsets its slaves accepted while it was down (``merge_from_slave``).

    Returns ``{slave_addr: keys changed}``, -1 for a slave that could not be asked (logged; the master starts
    anyway: the slave's newer offsets then reach the master through consumers' regular commits).
    """
    result: dict[str, int] = {}
    for addr in slave_addrs:
        channel = channel_factory(addr)
        try:
            stub = admin_pb2_grpc.BrokerAdminStub(channel)
            resp = await stub.GetAllConsumerOffset(admin_pb2.Empty(), timeout=timeout_s)
            _check(resp, "GetAllConsumerOffset", addr)
            table, versions = offsets_from_pb(resp)
            changed = offsets.merge_from_slave(table, versions)
            result[addr] = len(changed)
            log.info("master start: merged consumer offsets from slave %s (%d topic@group keys advanced)", addr,
                     len(changed))
        except Exception as exc:
            result[addr] = -1
            log.warning("master start: cannot pull consumer offsets from slave %s: %s; consumers may re-read "
                        "messages they committed on the slave while this master was down", addr, _describe(exc))
        finally:
            await channel.close()
    if any(v > 0 for v in result.values()):
        await offsets.persist()
    return result


async def fetch_slave_addrs(namesrv_addrs: Iterable[str], broker_name: str, *, timeout_s: float = RPC_TIMEOUT_S,
                            channel_factory: Callable[[str], grpc.aio.Channel] = aio_channel) -> list[str]:
    """Ask the nameservers (first that answers) for the slave addresses of ``broker_name``."""
    from remoting.pb import namesrv_pb2, namesrv_pb2_grpc

    for ns in namesrv_addrs:
        channel = channel_factory(ns)
        try:
            stub = namesrv_pb2_grpc.NameServerStub(channel)
            resp = await stub.GetBrokerClusterInfo(namesrv_pb2.GetBrokerClusterInfoRequest(), timeout=timeout_s)
            return slave_addrs_from_cluster_info(resp, broker_name)
        except Exception as exc:
            log.warning("cannot read cluster info from nameserver %s: %s", ns, _describe(exc))
        finally:
            await channel.close()
    return []
