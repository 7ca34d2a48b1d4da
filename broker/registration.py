"""Broker -> nameserver registration over remoting (RocketMQ BrokerController.registerBrokerAll + BrokerOuterAPI,
spec rocketmq-replication.md §2.3, remoting.md §2.1 and §5.5).

- REGISTER_BROKER (103) at start, then every ``registerNameServerPeriod`` clamped to [10 s, 60 s] (RocketMQ's
  bounds), and at once when a topic is created or changed (``register_now``). Header: clusterName, brokerName,
  brokerAddr, haServerAddr, brokerId, ``compressed=false``, bodyCrc32 (RocketMQ's masked CRC-32 of the body). Body:
  RegisterBrokerBody JSON, the full topic table with its DataVersion; when the broker is not read-write, every
  topic's perm is replaced by the broker's, as RocketMQ does. The DataVersion's ``stateVersion`` is the broker's
  masterEpoch in controller mode (0 otherwise), as RocketMQ 5 sets it: a nameserver keeps brokerId 0 for the
  registration with the higher one, so an old master that still registers cannot take the route back.
- ``register_now`` answers a future that resolves, with the ``RoundOutcome``, when the first round that *starts*
  after the call ends: that round's body was built after the change, so once a nameserver accepted it, a route read
  there shows the change. UPDATE_AND_CREATE_TOPIC waits (bounded) for it before answering, as RocketMQ's broker
  registers synchronously on topic creation (AdminBrokerProcessor.updateAndCreateTopic ->
  registerIncrementBrokerData); a route read right after ``updateTopic`` finds the topic.
- Each round goes to every nameserver in parallel and waits at most ``registerBrokerTimeoutMills``. The first
  successful reply in the configured nameserver order gives a slave its master's HA address and broker address
  (reply header ``haServerAddr``/``masterAddr``); they go to ``on_result(ha_server_addr, master_addr)`` after the
  round. Whether the HA address is used is the HA service's decision: a configured ``haMasterAddress`` wins.
- The connection to each nameserver stays open (``RemotingClient`` caches it; registering every 30 s keeps it under
  the nameserver's 120 s idle close). That open connection is the liveness signal: when this process dies, the
  kernel resets it and the nameserver drops the broker at once (RocketMQ's channel-close path). When the connection
  closes while we run (the nameserver restarted, or expired us while we were frozen), the next round starts at
  once instead of after the period, so a restarted nameserver learns the broker again within a second or two.
- While a round fails anywhere, or a slave's reply names no master yet, the next round comes sooner (1 s,
  doubling up to the period). RocketMQ waits the full 30 s.
- A clean stop sends UNREGISTER_BROKER (104) to every nameserver; ``close`` then closes the connections.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass

from broker.config import BrokerSettings
from broker.metadata.topics import TopicConfigManager
from common.perm import PERM_RW
from common.service import Service
from remoting import fastjson
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode, describe
from remoting.connection import Connection
from remoting.errors import RemotingError
from remoting.frame_codec import RemotingCommand

log = logging.getLogger(__name__)

PERIOD_MIN_MS = 10_000
PERIOD_MAX_MS = 60_000
UNSETTLED_RETRY_S = 1.0  # first early re-registration while unsettled (doubles up to the period)
UNREGISTER_TIMEOUT_S = 3.0


@dataclass(frozen=True, slots=True)
class RoundOutcome:
    """Which nameservers accepted a registration round and which did not (refused, failed or timed out)."""

    accepted: tuple[str, ...]
    missed: tuple[str, ...]


def register_period_ms(configured_ms: int) -> int:
    return max(PERIOD_MIN_MS, min(configured_ms, PERIOD_MAX_MS))


def register_body(topics: TopicConfigManager, broker_permission: int, state_version: int = 0) -> bytes:
    """RegisterBrokerBody JSON (spec §5.5) of the whole topic table."""
    configs, version = topics.snapshot()
    table = {}
    for cfg in configs:
        entry = cfg.to_json()
        if broker_permission != PERM_RW:
            entry["perm"] = broker_permission
        table[cfg.topic_name] = entry
    data_version = {**version.to_json(), "stateVersion": state_version}
    return fastjson.dumps({
        "filterServerList": [],
        "topicConfigSerializeWrapper": {"dataVersion": data_version, "topicConfigTable": table},
    })


def body_crc32(body: bytes) -> int:
    """RocketMQ's ``UtilAll.crc32``: CRC-32 with the top bit cleared."""
    return zlib.crc32(body) & 0x7FFFFFFF


class RegistrationService(Service):
    def __init__(
        self,
        settings: BrokerSettings,
        topics: TopicConfigManager,
        on_result: Callable[[str, str], None],
        *,
        client: RemotingClient | None = None,
        state_version: int = 0,
    ) -> None:
        super().__init__("registration")
        self.settings = settings
        self.state_version = state_version
        self.topics = topics
        self.on_result = on_result
        self.namesrv_addrs = settings.broker.namesrv_list
        self._client = client
        self._own_client = client is None
        self._kick = asyncio.Event()
        self._watched: dict[str, Connection] = {}  # namesrv addr -> the connection whose close we watch
        self.rounds = 0
        self._rounds_started = 0
        # (first round number that counts, future) of register_now callers; resolved after each round, and
        # dropped once cancelled (a caller that stopped waiting), so the list stays as small as the callers waiting
        self._waiters: list[tuple[int, asyncio.Future[RoundOutcome]]] = []
        self.last_success_ms = 0
        self.settled = False  # the last round succeeded everywhere and, on a slave, named a master

    @property
    def client(self) -> RemotingClient:
        if self._client is None:
            self._client = RemotingClient(connect_timeout_s=3.0, name="registration")
        return self._client

    # lifecycle ----------------------------------------------------------------------------------------------
    async def on_start(self) -> None:
        if not self.namesrv_addrs:
            log.warning("namesrvAddr is empty: this broker registers nowhere and no client can route to it")
            return
        await self.register_all()
        self.spawn("periodic", self._periodic())

    async def on_stop(self) -> None:
        self._kick.set()
        self._resolve_waiters(None, RoundOutcome((), tuple(self.namesrv_addrs)))
        if self.namesrv_addrs and self._client is not None:
            await self.unregister_all()

    async def close(self) -> None:
        if self._client is not None and self._own_client:
            await self._client.close()
        self._watched.clear()

    def register_now(self) -> asyncio.Future[RoundOutcome] | None:
        """Ask for an immediate registration round (topic created or changed). The future resolves with the outcome
        of the first round that starts after this call (None: no nameserver is configured, or we are stopping)."""
        self._kick.set()
        if not self.namesrv_addrs or self.stopping:
            return None
        self._waiters = [(n, f) for n, f in self._waiters if not f.done()]
        future: asyncio.Future[RoundOutcome] = asyncio.get_running_loop().create_future()
        self._waiters.append((self._rounds_started + 1, future))
        return future

    def _resolve_waiters(self, round_number: int | None, outcome: RoundOutcome) -> None:
        """Resolve the waiters that round ``round_number`` (None: every one) answers; keep the later ones."""
        later = []
        for first, future in self._waiters:
            if round_number is not None and first > round_number:
                later.append((first, future))
            elif not future.done():
                future.set_result(outcome)
        self._waiters = later

    # registration -------------------------------------------------------------------------------------------
    def _header(self) -> dict[str, str]:
        broker = self.settings.broker
        return {
            "clusterName": broker.broker_cluster_name,
            "brokerName": broker.broker_name,
            "brokerAddr": broker.broker_addr,
            "brokerId": str(broker.broker_id),
        }

    def _request(self) -> RemotingCommand:
        body = register_body(self.topics, self.settings.broker.broker_permission, self.state_version)
        ext = {
            **self._header(),
            "haServerAddr": self.settings.ha_server_addr,
            "compressed": "false",
            "bodyCrc32": str(body_crc32(body)),
        }
        return RemotingCommand(RequestCode.REGISTER_BROKER, ext=ext, body=body)

    async def _register_one(self, addr: str, timeout_s: float) -> RemotingCommand | None:
        """One nameserver's reply when it accepted the registration, else None (logged)."""
        try:
            reply = await self.client.invoke(addr, self._request(), timeout_s)
        except RemotingError as exc:
            log.warning("registration with nameserver %s failed: %s", addr, exc)
            return None
        self._watch(addr)
        if reply.code != ResponseCode.SUCCESS:
            log.warning("nameserver %s refused the registration: %s: %s", addr, describe(reply.code), reply.remark)
            return None
        return reply

    async def register_all(self) -> bool:
        """One round to every nameserver; True when at least one accepted it."""
        self._rounds_started += 1
        number = self._rounds_started
        accepted: list[str] = []
        try:
            return await self._round(accepted)
        finally:
            missed = tuple(a for a in self.namesrv_addrs if a not in accepted)
            self._resolve_waiters(number, RoundOutcome(tuple(accepted), missed))

    async def _round(self, accepted: list[str]) -> bool:
        timeout_s = self.settings.broker.register_broker_timeout_mills / 1000
        calls = {addr: asyncio.ensure_future(self._register_one(addr, timeout_s)) for addr in self.namesrv_addrs}
        done, pending = await asyncio.wait(calls.values(), timeout=timeout_s + 0.5)
        for task in pending:
            task.cancel()
        replies = {addr: task.result() for addr, task in calls.items() if task in done}
        for addr in calls:
            if addr not in replies:
                log.warning("registration with nameserver %s timed out after %.1fs", addr, timeout_s)
        self.rounds += 1
        accepted.extend(a for a in self.namesrv_addrs if replies.get(a) is not None)
        # "first successful reply": the earliest in the configured nameserver order among those that accepted.
        first = next((replies[a] for a in self.namesrv_addrs if replies.get(a) is not None), None)
        if first is None:
            self.settled = False
            return False
        self.last_success_ms = int(asyncio.get_running_loop().time() * 1000)
        ext = first.ext or {}
        ha_server_addr, master_addr = ext.get("haServerAddr", ""), ext.get("masterAddr", "")
        everywhere = all(replies.get(a) is not None for a in self.namesrv_addrs)
        # A slave that has no master yet, or a nameserver that missed the round, gets the next one sooner.
        self.settled = everywhere and (self.settings.role.is_master or bool(master_addr))
        self.on_result(ha_server_addr, master_addr)
        return True

    def _watch(self, addr: str) -> None:
        """Follow the connection a registration went over: its close starts the next round at once."""
        conn = self.client.cached(addr)
        if conn is None or self._watched.get(addr) is conn or conn.closed is None:
            return
        self._watched[addr] = conn
        conn.closed.add_done_callback(lambda _f, a=addr, c=conn: self._on_closed(a, c))

    def _on_closed(self, addr: str, conn: Connection) -> None:
        if self._watched.get(addr) is not conn:
            return
        del self._watched[addr]
        if self.stopping:
            return
        log.warning("connection to nameserver %s closed; registering again now", addr)
        self.settled = False
        self._kick.set()

    async def _periodic(self) -> None:
        """Register every period; sooner (1 s, doubling up to the period) while unsettled."""
        period_s = register_period_ms(self.settings.broker.register_name_server_period) / 1000
        retry_s = UNSETTLED_RETRY_S
        while not self.stopping:
            wait_s = period_s if self.settled else min(retry_s, period_s)
            kicked = False
            try:
                await asyncio.wait_for(self._kick.wait(), timeout=wait_s)
                kicked = True
            except TimeoutError:
                pass
            if self.stopping:
                return
            self._kick.clear()
            try:
                await self.register_all()
            except Exception:
                self.settled = False
                log.exception("registration round failed; next round in %.0fs", min(retry_s, period_s))
            if self.settled or kicked:
                retry_s = UNSETTLED_RETRY_S
            else:
                retry_s = min(retry_s * 2, period_s)

    async def unregister_all(self) -> None:
        async def one(addr: str) -> None:
            cmd = RemotingCommand(RequestCode.UNREGISTER_BROKER, ext=self._header())
            try:
                reply = await self.client.invoke(addr, cmd, UNREGISTER_TIMEOUT_S)
            except RemotingError as exc:
                log.warning("unregister from nameserver %s failed: %s", addr, exc)
                return
            if reply.code != ResponseCode.SUCCESS:
                log.warning("nameserver %s refused the unregistration: %s: %s", addr, describe(reply.code),
                            reply.remark)

        await asyncio.gather(*(one(a) for a in self.namesrv_addrs))
