"""ReplicasManager: the active controller's work on broker groups (RocketMQ 5's ControllerManager + heartbeat manager).

- Liveness (``LiveTable``): the last heartbeat of every broker, with the connection it came over; a broker is
  alive while its last heartbeat is younger than its ``heartbeatTimeoutMills`` and that connection is open. A
  closed connection of a slave counts at once. One of the master counts at once, and its group's election runs
  now rather than at the next scan (RocketMQ's onBrokerChannelClose), only when that master declared
  ``allAckInSyncStateSet`` in its heartbeats and this controller elects cleanly: then any member it can elect has
  stopped acking the old master, which therefore can no longer answer SEND_OK (broker/controller_mode/fence.py).
  Otherwise the master stays alive until its heartbeat timeout, which its role lease covers: a reset that reaches
  the controller but not the broker must not let two masters answer SEND_OK.
- Decisions (``decide``): read the group state, let ``controller.election`` decide, write the result by
  compare-and-swap fenced by this instance's hold on the active key. A stale read is retried (at most
  ``electMasterMaxRetryCount`` times); a fenced write means this instance is no longer active (``NotActive``).
  Decisions on one group run one at a time.
- The scan (``scan``): every ``scanNotActiveBrokerInterval``, each group whose master is not alive (or that has
  none) gets an election; a newly active instance skips it until one heartbeat timeout has passed since it became
  active, so brokers that were heartbeating its predecessor are not taken for dead. In that grace an election may
  still promote a live member (a closed master connection, an operator), but never clears a master for want of
  live candidates.
- After an election, the group's alive brokers are told (NOTIFY_BROKER_ROLE_CHANGED, oneway, over the connection
  their heartbeats use) when ``notifyBrokerRoleChanged``; brokers also learn it by polling GET_REPLICA_INFO.

Liveness is in memory only (see controller.state). Task safety: the event loop only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import orjson

from common.errors import PyrmqError
from controller import election
from controller.config import ControllerConfig
from controller.election import Outcome
from controller.metrics import ControllerMetrics
from controller.state import GroupState, LiveInfo
from controller.store import Campaign, CasRefused, EtcdStore
from remoting.codes import RequestCode, ResponseCode
from remoting.connection import Connection
from remoting.errors import RemotingError
from remoting.frame_codec import RemotingCommand

log = logging.getLogger(__name__)


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class NotActive(PyrmqError):
    """This instance is not (or no longer) the active controller."""


@dataclass
class LiveEntry:
    info: LiveInfo
    conn: Connection | None


class LiveTable:
    def __init__(self, clock_ms: Callable[[], int] = monotonic_ms) -> None:
        self._clock_ms = clock_ms
        self._entries: dict[tuple[str, int], LiveEntry] = {}  # (brokerName, brokerId)

    def beat(self, broker_name: str, broker_id: int, info: LiveInfo, conn: Connection | None) -> None:
        self._entries[(broker_name, broker_id)] = LiveEntry(info, conn)

    def alive(self, broker_name: str) -> dict[int, LiveInfo]:
        now = self._clock_ms()
        return {
            broker_id: e.info
            for (name, broker_id), e in self._entries.items()
            if name == broker_name and e.info.alive(now) and (e.conn is None or e.conn.is_open)
        }

    def last(self, broker_name: str, broker_id: int) -> LiveInfo | None:
        """The broker's last heartbeat, alive or not (None once its connection closed)."""
        entry = self._entries.get((broker_name, broker_id))
        return entry.info if entry is not None else None

    def is_alive(self, broker_name: str, broker_id: int) -> bool:
        return broker_id in self.alive(broker_name)

    def connections(self, broker_name: str) -> list[Connection]:
        return [e.conn for (name, _), e in self._entries.items() if name == broker_name and e.conn is not None
                and e.conn.is_open]

    def on_close(self, conn: Connection, keep: Callable[[str, int, LiveInfo], bool] = lambda *_: False
                 ) -> list[tuple[str, int]]:
        """Forget the brokers that heartbeated over ``conn`` (returned), except those ``keep`` names: they stay
        alive until their heartbeat timeout."""
        gone = []
        for key, e in list(self._entries.items()):
            if e.conn is not conn:
                continue
            if keep(key[0], key[1], e.info):
                e.conn = None
            else:
                del self._entries[key]
                gone.append(key)
        return gone

    def clear(self) -> None:
        self._entries.clear()


class ReplicasManager:
    def __init__(self, config: ControllerConfig, store: EtcdStore, campaign: Campaign, metrics: ControllerMetrics,
                 clock_ms: Callable[[], int] = monotonic_ms) -> None:
        self.config = config
        self.store = store
        self.campaign = campaign
        self.metrics = metrics
        self._clock_ms = clock_ms
        self.live = LiveTable(clock_ms)
        self.cache: dict[str, tuple[GroupState, int]] = {}  # brokerName -> (state, mod_revision) last read/written
        self._locks: dict[str, list] = {}  # brokerName -> [lock, tasks using it]
        self.scan_after_ms = 0
        self._tasks: set[asyncio.Task] = set()
        self.masterless_since: dict[str, int] = {}  # brokerName -> when its master was last known alive (ms)

    def now_ms(self) -> int:
        return self._clock_ms()

    def became_active(self) -> None:
        self.live.clear()
        self.cache.clear()
        self.masterless_since.clear()
        self.scan_after_ms = self._clock_ms() + self.config.controller_heart_beat_timeout_mills

    def seconds_without_master(self, broker_name: str) -> float:
        """For the metric: seconds since the group's master was last known alive; 0 while it has a live one."""
        since = self.masterless_since.get(broker_name)
        return 0.0 if since is None else max(0, self._clock_ms() - since) / 1000

    def _master_lost(self, broker_name: str, at_ms: int) -> None:
        self.masterless_since.setdefault(broker_name, at_ms)

    def in_grace(self) -> bool:
        """True until one heartbeat timeout after this instance became active."""
        return self._clock_ms() < self.scan_after_ms

    def require_active(self) -> None:
        if not self.campaign.is_active:
            raise NotActive("this controller is not the active one")

    # reads --------------------------------------------------------------------------------------------------
    async def read(self, broker_name: str) -> tuple[GroupState | None, int]:
        state, rev = await self.store.get_group(broker_name)
        if state is not None:
            self.cache[broker_name] = (state, rev)
        return state, rev

    async def cached(self, broker_name: str) -> GroupState | None:
        hit = self.cache.get(broker_name)
        if hit is not None:
            return hit[0]
        return (await self.read(broker_name))[0]

    # decisions ----------------------------------------------------------------------------------------------
    async def decide(
        self, broker_name: str, rule: Callable[[GroupState | None], Outcome]
    ) -> tuple[Outcome, GroupState | None]:
        """Apply ``rule`` to the group's current state and write its result by CAS; (outcome, state after)."""
        entry = self._locks.setdefault(broker_name, [asyncio.Lock(), 0])
        entry[1] += 1
        try:
            async with entry[0]:
                return await self._decide(broker_name, rule)
        finally:
            entry[1] -= 1
            if entry[1] == 0:  # bounded: a lock per group being decided on now, not per name ever seen
                del self._locks[broker_name]

    async def _decide(
        self, broker_name: str, rule: Callable[[GroupState | None], Outcome]
    ) -> tuple[Outcome, GroupState | None]:
        attempts = self.config.elect_master_max_retry_count
        for attempt in range(attempts):
            self.require_active()
            state, rev = await self.read(broker_name)
            outcome = rule(state)
            if outcome.state is None:
                return outcome, state
            fence = self.campaign.fence
            if fence is None:
                raise NotActive("this controller stepped down")
            try:
                new_rev = await self.store.cas_group(outcome.state, rev, fence)
            except CasRefused as exc:
                if exc.reason == "fenced":
                    self.campaign.step_down(str(exc))
                    raise NotActive(str(exc)) from None
                log.info("%s (attempt %d of %d)", exc, attempt + 1, attempts)
                continue
            self.cache[broker_name] = (outcome.state, new_rev)
            return outcome, outcome.state
        return Outcome(ResponseCode.SYSTEM_BUSY,
                       f"{broker_name} changed under {attempts} attempts in a row; retry the request"), None

    async def elect(self, broker_name: str, *, designated: int | None = None, first_by: int | None = None,
                    why: str) -> tuple[Outcome, GroupState | None]:
        def rule(state: GroupState | None) -> Outcome:
            if state is None:
                return Outcome(ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST,
                               f"the controller knows no broker group {broker_name}: its brokers must apply for ids "
                               "and register first")
            outcome = election.elect(state, self.live.alive(broker_name), designated=designated,
                                     first_by=first_by, unclean=self.config.enable_elect_unclean_master)
            if outcome.state is not None and not outcome.state.has_master and self.in_grace():
                # just became active: brokers that heartbeated the predecessor may not have reached us yet, so
                # "nobody alive" is not known yet; leave the master in place until the grace ends
                return Outcome(outcome.code, outcome.remark + "; not applied: this controller became active less "
                               "than one heartbeat timeout ago", None)
            return outcome

        before = self.cache.get(broker_name)
        outcome, state = await self.decide(broker_name, rule)
        if outcome.code == ResponseCode.CONTROLLER_ELECT_MASTER_FAILED:
            self.metrics.on_election(broker_name, "refused")
        if outcome.state is not None:
            old_master = before[0].master_broker_id if before else None
            result = "elected" if outcome.state.has_master else "no_candidate"
            self.metrics.on_election(broker_name, result)
            if outcome.state.has_master:
                self.masterless_since.pop(broker_name, None)
            else:
                self._master_lost(broker_name, self._clock_ms())
            log.warning("election in %s (%s): %s (old master %s)", broker_name, why, outcome.remark, old_master)
            if outcome.state.has_master:
                self.notify_role_changed(outcome.state)
        return outcome, state

    # liveness events ----------------------------------------------------------------------------------------
    def _alive_until_timeout(self, broker_name: str, broker_id: int, info: LiveInfo) -> bool:
        """A closed connection leaves a broker alive until its timeout when it may be (or is) the group's master
        and an election now could make two masters answer SEND_OK (see the module's docstring)."""
        cached = self.cache.get(broker_name)
        if cached is not None and cached[0].master_broker_id != broker_id:
            return False
        return not (info.all_ack and not self.config.enable_elect_unclean_master)

    def on_connection_closed(self, conn: Connection) -> None:
        gone = self.live.on_close(conn, self._alive_until_timeout)
        if not gone or not self.campaign.is_active:
            return
        for broker_name, broker_id in gone:
            cached = self.cache.get(broker_name)
            if cached is not None and cached[0].master_broker_id == broker_id:
                self._master_lost(broker_name, self._clock_ms())
                log.warning("the connection of %s's master (brokerId %d) closed: electing now", broker_name,
                            broker_id)
                self._spawn(self._elect_quietly(broker_name, "the master's connection closed"))

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _elect_quietly(self, broker_name: str, why: str) -> None:
        try:
            await self.elect(broker_name, why=why)
        except NotActive:
            pass
        except PyrmqError as exc:
            log.warning("election in %s (%s) could not run: %s", broker_name, why, exc)

    async def scan(self) -> None:
        """One pass: elect in every group whose master is not alive (only on the active instance)."""
        if not self.campaign.is_active or self.in_grace():
            return
        for state, rev in await self.store.list_groups():
            self.cache[state.broker_name] = (state, rev)
            alive = self.live.alive(state.broker_name)
            if state.has_master and state.master_broker_id in alive:
                self.masterless_since.pop(state.broker_name, None)
                continue
            self._master_lost(state.broker_name, self._last_seen_ms(state))
            if not state.has_master and not (alive.keys() & state.sync_state_set):
                continue
            why = "no master" if not state.has_master else f"master {state.master_broker_id} is not alive"
            await self._elect_quietly(state.broker_name, why)

    def _last_seen_ms(self, state: GroupState) -> int:
        """When the group's master last heartbeated (now when it never did or is unknown)."""
        if state.master_broker_id is not None:
            entry = self.live.last(state.broker_name, state.master_broker_id)
            if entry is not None:
                return entry.last_seen_ms
        return self._clock_ms()

    def notify_role_changed(self, state: GroupState) -> None:
        if not self.config.notify_broker_role_changed:
            return
        for conn in self.live.connections(state.broker_name):
            cmd = RemotingCommand(
                code=RequestCode.NOTIFY_BROKER_ROLE_CHANGED,
                ext={
                    "masterAddress": state.master_address,
                    "masterEpoch": str(state.master_epoch),
                    "syncStateSetEpoch": str(state.sync_state_set_epoch),
                    "masterBrokerId": str(state.master_broker_id),
                },
                body=sync_state_set_body(state),
            )
            try:
                conn.invoke_oneway(cmd)
            except RemotingError as exc:
                log.info("could not notify %s of the role change: %s", conn.peer, exc)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


def sync_state_set_body(state: GroupState) -> bytes:
    """RocketMQ's SyncStateSet body: ``{"syncStateSet": [ids], "syncStateSetEpoch": n}``."""
    return orjson.dumps({"syncStateSet": sorted(state.sync_state_set), "syncStateSetEpoch": state.sync_state_set_epoch})
