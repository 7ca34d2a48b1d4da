"""ReplicasManager: a controller-mode broker process (RocketMQ 5's ReplicasManager), the owner of its BrokerServer.

The controller decides the role; this service carries it out:

- **Identity**: the brokerId comes from the controller (``identity.obtain``: next id, apply, persist in
  ``<storePathRootDir>/brokerIdentity``); ``brokerRole``/``brokerId`` of the conf are ignored.
- **Heartbeat and role reads**: every ``brokerHeartbeatInterval`` a BROKER_HEARTBEAT (epoch, max offset, confirm
  offset, priority, ``controllerHeartBeatTimeoutMills``, and pyrmq's ``allAckInSyncStateSet``, which lets the
  controller elect at once when the master's connection closes) and then a GET_REPLICA_INFO; a
  NOTIFY_BROKER_ROLE_CHANGED push runs the same round at once. The pair also renews the master's role lease, and the
  read tells whether the controller elects cleanly (``fence``: when a master may answer SEND_OK).
- **Role switch** (``_apply``, one at a time): the running ``BrokerServer`` is stopped and a new one started in the
  new role, on the same ports and store. A switch therefore closes the clients' connections (they reconnect and
  retry), and costs a clean store stop and start; the store recovered cleanly has nothing to redo, so the switch is
  quick, and it reuses every path the broker already has (HA client and server, registration, metadata).

  *To master* (``newEpoch`` >= the store's last epoch): the slave's HA client stops with its server; the store's
  recovery cut any incomplete tail; before anything is served the epoch entry ``(newEpoch, max offset)`` is appended
  (a ``store_started_hooks`` hook), the store has dispatched everything (its start re-dispatches), the SyncStateSet
  waiter replaces the classic one (``ha_started_hooks``), the server registers as brokerId 0 with the nameservers
  at once (its start), and a heartbeat round makes the lease valid.

  *To slave*: the master's history comes from GET_BROKER_EPOCH_CACHE (``epoch_cache``, with its HA address); the
  store is opened alone and fitted to the master's history (``store_fit``: a longer local log is cut back to the
  consistent point, the master's later epoch entries are copied); then the server starts as SLAVE with
  ``haMasterAddress`` set to the master's HA address (authenticated hello as always) and registers with its own id.

- **SyncStateSet** (on the master, every ``checkSyncStateSetPeriod``): shrink members that are not connected or not
  caught up for ``haMaxTimeSlaveNotCatchup``; grow with connected slaves that caught up within this epoch and hold
  everything answered SEND_OK; each change goes to the controller (ALTER_SYNC_STATE_SET) and acks count against
  both sets until the controller's answer (or a read showing a newer ``syncStateSetEpoch``) settles it: a change
  whose answer was lost is retried as it was, so the local set stays a superset of etcd's (``fence`` relies on it).

- **Confirm offset** (on the master): consumer reads (pull, long-polling wakeups, v2 receive) stop at the
  SyncStateSet's confirm offset (``store.visibility``); it starts at the store's end when the broker took over.

  A slave's consumer reads stop at the master's confirm offset too: the master reports it in its heartbeat, the
  controller passes it on in GET_REPLICA_INFO (``masterConfirmOffset``, only of the current masterEpoch) and the
  slave's rounds apply it, so a slave lags the master's visibility by up to two heartbeat intervals. The 4.x HA
  framing pyrmq keeps (RocketMQ 5 sends it in every transfer header) has no field for it; the controller path
  changes no wire a 4.x peer reads.

"""

from __future__ import annotations

import asyncio
import logging
import time

from broker.auth.setup import inner_signer
from broker.config import BrokerSettings
from broker.controller_mode import epoch_cache, identity, metrics
from broker.controller_mode.ack_waiter import SyncStateSetWaiter
from broker.controller_mode.fence import RoleLease, SendFence
from broker.controller_mode.roles import Kind, Role, RoleSwitchError, decide, role_settings, same_role
from broker.controller_mode.store_fit import fit_to_master
from broker.controller_mode.sync_state_set import SyncStateSetView
from broker.server import BrokerServer
from broker.store.message_store import MessageStore
from common.errors import PyrmqError
from common.log import RateLimitedLog
from common.metrics import ScrapeCollector
from common.service import Service
from controller.client import ControllerClient, ControllerError, ReplicaInfo
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.connection import Connection
from remoting.errors import RemotingError
from remoting.frame_codec import RemotingCommand

log = logging.getLogger(__name__)
quiet = RateLimitedLog(log)

# ALTER_SYNC_STATE_SET refusals decided on etcd's current state with nothing written, and after any earlier attempt
# of ours (the controller decides on one group at a time): the change is settled as refused. Others (no active
# controller, etcd failing, busy, a stale syncStateSetEpoch that an earlier attempt may have caused) leave it
# unsettled until a read shows the set (sync_state_set).
SETTLED_REFUSALS = frozenset({ResponseCode.CONTROLLER_INVALID_REPLICAS, ResponseCode.CONTROLLER_FENCED_MASTER_EPOCH,
                              ResponseCode.CONTROLLER_INVALID_MASTER, ResponseCode.CONTROLLER_BROKER_METADATA_NOT_EXIST})
MASTER_ANSWER_WAIT_S = 30.0  # how long a new slave asks the master for its epochs before the next round retries


class ReplicasManager(Service):
    def __init__(self, settings: BrokerSettings) -> None:
        super().__init__("replicas-manager")
        if not settings.broker.listen_port:
            raise PyrmqError("enableControllerMode needs a fixed listenPort: the controller knows brokers by address")
        self.base = settings
        self.cfg = settings.controller
        self.server: BrokerServer | None = None
        self.role: Role | None = None
        self.broker_id = 0
        self.lease = RoleLease(self.cfg.controller_heart_beat_timeout_mills, self.cfg.controller_fence_margin_mills)
        self.fence = SendFence(self.lease)
        self._asking = False  # an ALTER_SYNC_STATE_SET is in flight
        self._streamed_until = float("-inf")  # when this broker last stopped streaming from a master (fence.py)
        self.client = RemotingClient(name="broker-controller")  # TLS as the broker's tls.enable says
        self.client.signer = inner_signer(settings.auth)  # a controller with ACL 2.0 on answers only signed requests
        self.client.register(RequestCode.NOTIFY_BROKER_ROLE_CHANGED, self._on_notify)
        self.controller = ControllerClient(self.cfg.controller_addrs, client=self.client)
        self.peers = RemotingClient(name="broker-peers")
        self.peers.signer = inner_signer(settings.auth)  # a peer broker with ACL 2.0 on checks the epoch fetch
        self.view: SyncStateSetView | None = None
        self.waiter: SyncStateSetWaiter | None = None
        self.info: ReplicaInfo | None = None
        self._kick = asyncio.Event()
        self._switch = asyncio.Lock()
        self._watched: Connection | None = None
        self._facts = (0, 0, 0)  # the last (epoch, max offset, confirm offset) a running store gave
        self._master_confirm = 0  # as a slave: the master's confirm offset of its current epoch, from the controller
        self.switches = 0
        self.switches_to: dict[str, int] = {}  # role taken -> switches, for the metrics
        self.fenced_before = 0  # fenced sends of the waiters of earlier terms as master

    # identity as the boot line and tools see it ---------------------------------------------------------------
    @property
    def settings(self) -> BrokerSettings:
        return self.server.settings if self.server is not None else self.base

    @property
    def address(self) -> str:
        return self.base.broker.broker_addr

    @property
    def cluster(self) -> str:
        return self.base.broker.broker_cluster_name

    @property
    def broker_name(self) -> str:
        return self.base.broker.broker_name

    # lifecycle ----------------------------------------------------------------------------------------------
    async def on_start(self) -> None:
        self.broker_id = await identity.obtain(self.controller, self.base.store.root_dir, self.cluster,
                                               self.broker_name, self.address)
        await self.controller.register(self.cluster, self.broker_name, self.broker_id, self.address)
        log.info("controller mode: %s/%s is brokerId %d at %s", self.cluster, self.broker_name, self.broker_id,
                 self.address)
        deadline = time.monotonic() + 60.0
        while self.role is None or self.role.kind is Kind.NONE:
            try:
                await self._round()
            except (PyrmqError, RemotingError) as exc:
                if time.monotonic() > deadline:
                    raise PyrmqError(f"controller mode: no role within 60 s: {exc}") from None
                quiet.warning("controller mode: no role yet: %s", exc)
            if self.role is None or self.role.kind is Kind.NONE:
                await asyncio.sleep(self.cfg.broker_heartbeat_interval / 1000)
        self.spawn("rounds", self._rounds())
        self.run_every("sync-state-set", self.cfg.check_sync_state_set_period / 1000, self._check_sync_state_set)

    async def on_stop(self) -> None:
        self._kick.set()
        async with self._switch:
            if self.server is not None:
                await self._stop_server()
        await self.peers.close()
        await self.controller.close()

    def facts(self) -> metrics.ControllerModeFacts:
        """What the metrics show, read at scrape time."""
        role, info, view = self.role, self.info, self.view
        epoch = role.master_epoch if role is not None else (info.master_epoch if info is not None else 0)
        if view is not None and role is not None and role.kind is Kind.MASTER:
            size = len(view.members)
        else:
            size = len(info.sync_state_set) if info is not None else 0
        fenced = self.fenced_before + (self.waiter.fenced if self.waiter is not None else 0)
        return metrics.ControllerModeFacts(epoch, size, fenced, dict(self.switches_to))

    # rounds -------------------------------------------------------------------------------------------------
    def _on_notify(self, conn: Connection, request: RemotingCommand) -> None:
        log.info("controller pushed a role change: %s", dict(request.ext or {}))
        self._kick.set()

    async def _rounds(self) -> None:
        interval = self.cfg.broker_heartbeat_interval / 1000
        while not self.stopping:
            try:
                await asyncio.wait_for(self._kick.wait(), interval)
            except TimeoutError:
                pass
            self._kick.clear()
            if self.stopping:
                return
            try:
                await self._round()
            except (PyrmqError, RemotingError, OSError) as exc:
                quiet.warning("controller mode round failed: %s", exc)

    def _store_facts(self) -> tuple[int, int, int]:
        """(last epoch, max offset, confirm offset) for the heartbeat; during a switch, the last known ones (a broker
        between two servers must not look empty to the election's ranking)."""
        server = self.server
        if server is None or server.store is None:
            return self._facts
        store = server.store
        confirm = store.max_phy_offset
        gate = store.confirm_gate
        if self.waiter is not None and self.role is not None and self.role.kind is Kind.MASTER:
            confirm = gate.refresh() if gate is not None else max(self.waiter.covered(), 0)
        self._facts = (store.epochs.last_epoch, store.max_phy_offset, confirm)
        return self._facts

    def _watch(self) -> None:
        """Revoke the lease when our end of the controller connection closes (see ``fence``)."""
        addr = self.controller.active
        conn = self.client.cached(addr) if addr else None
        if conn is None or conn is self._watched or conn.closed is None:
            return
        self._watched = conn
        conn.closed.add_done_callback(lambda _f: self.lease.revoke("the connection to the controller closed"))

    async def _round(self) -> None:
        epoch, max_offset, confirm = self._store_facts()
        sent = time.monotonic()
        beat_ok = False
        try:
            await self.controller.heartbeat(self.cluster, self.broker_name, self.address, self.broker_id,
                                            epoch=epoch, max_offset=max_offset, confirm_offset=confirm,
                                            timeout_ms=self.cfg.controller_heart_beat_timeout_mills,
                                            priority=self.cfg.broker_election_priority,
                                            all_ack=self.cfg.all_ack_in_sync_state_set)
            beat_ok = True
            self._watch()
        except (ControllerError, RemotingError) as exc:
            self.lease.revoke(f"the last heartbeat to the controller failed ({exc})")
            quiet.warning("heartbeat to the controller failed: %s", exc)
        info = await self.controller.replica_info(self.broker_name)
        self.info = info
        self.fence.clean_election = None if info.elect_unclean is None else not info.elect_unclean
        role = self.role
        if role is not None and role.kind is Kind.MASTER:
            if info.master_broker_id == self.broker_id and info.master_epoch == role.master_epoch:
                if beat_ok:
                    self.lease.renew(sent)
                view = self.view
                if view is not None and view.adopt(info.sync_state_set, info.sync_state_set_epoch):
                    if not self._asking:
                        view.settle()  # the change in flight (ours: only the master alters the set) was applied
                    self._set_changed()
            elif info.master_epoch >= role.master_epoch:
                self.fence.depose(f"the controller names brokerId {info.master_broker_id} master at masterEpoch "
                                  f"{info.master_epoch}")
        elif (role is not None and role.kind is Kind.SLAVE and info.master_epoch == role.master_epoch
              and info.master_broker_id == role.master_id and info.master_confirm_offset is not None):
            self._master_confirm = info.master_confirm_offset
            gate = self.server.store.confirm_gate if self.server is not None and self.server.store else None
            if gate is not None:
                gate.refresh()
        await self._settle(info)

    async def _settle(self, info: ReplicaInfo) -> None:
        wanted = decide(self.broker_id, info.master_broker_id, info.master_address, info.master_epoch)
        if wanted.kind is Kind.NONE:
            code, remark, state = await self.controller.elect(self.cluster, self.broker_name, self.broker_id)
            log.info("the group has no master; asked for an election: %s %s", code, remark)
            if state is None:
                return
            wanted = decide(self.broker_id, state.master_broker_id, state.master_address, state.master_epoch)
            self.info = state
            if wanted.kind is Kind.NONE:
                return
        if same_role(self.role, wanted):
            return
        async with self._switch:
            if self.stopping or same_role(self.role, wanted):
                return
            if wanted.kind is Kind.MASTER:
                await self._become_master(wanted)
            else:
                await self._become_slave(wanted)
            self.switches += 1
            taken = "MASTER" if wanted.kind is Kind.MASTER else "SLAVE"
            self.switches_to[taken] = self.switches_to.get(taken, 0) + 1
        if wanted.kind is Kind.MASTER:
            await self._round()  # the lease: a heartbeat and a read that names us master

    # switches -----------------------------------------------------------------------------------------------
    async def _stop_server(self) -> None:
        server, self.server = self.server, None
        if self.waiter is not None:
            self.fenced_before += self.waiter.fenced
            self.waiter.close()
        self.waiter = None
        if server is not None:
            ha_slave = server.ha.slave if server.ha is not None else None
            await server.stop()
            if ha_slave is not None and ha_slave.last_read_ms:
                # when it last read from the master (a put it acked was made before it read it): see fence.py
                ago_s = max(0.0, time.time() - ha_slave.last_read_ms / 1000)
                self._streamed_until = max(self._streamed_until, self.lease.clock() - ago_s)

    async def _serve(self, server: BrokerServer) -> None:
        """Start ``server`` and add GET_BROKER_EPOCH_CACHE to its remoting port."""

        def epoch_cache_processor(conn: Connection, request: RemotingCommand) -> RemotingCommand:
            store = server.store
            assert store is not None
            return epoch_cache.answer(
                request, is_master=server.settings.role.is_master, cluster=self.cluster,
                broker_name=self.broker_name, broker_id=self.broker_id, entries=list(store.epochs.entries),
                max_offset=store.max_phy_offset, ha_server_addr=server.settings.ha_server_addr)

        try:
            await server.start()
        except BaseException:
            try:  # a start that failed half-way: release what it took (store locks, ports) for the next attempt
                await server.on_stop()
            except Exception:  # noqa: BLE001 - the start's own error is the one to report
                log.exception("cleaning up after a failed role switch")
            raise
        if server.remoting is not None:
            server.remoting.register(RequestCode.GET_BROKER_EPOCH_CACHE, epoch_cache_processor)
        if server.metrics is not None:
            server.metrics.registry.register(ScrapeCollector("controller-mode", lambda: metrics.families(self.facts)))
        self.server = server

    async def _become_master(self, role: Role) -> None:
        log.warning("controller mode: %s brokerId %d becomes master at masterEpoch %d", self.broker_name,
                    self.broker_id, role.master_epoch)
        self.fence.begin_term(f"becoming master at masterEpoch {role.master_epoch}")
        await self._stop_server()
        # it may have acked the old master until its HA client stopped: its first SEND_OK waits (fence.py)
        self.fence.hold_until = self._streamed_until + self.base.store.slave_timeout / 1000
        settings = role_settings(self.base, role, self.broker_id)
        server = BrokerServer(settings)
        server.state_version = role.master_epoch  # the nameserver keeps brokerId 0 for the newest epoch's master
        info = self.info
        members = info.sync_state_set if info is not None else frozenset({self.broker_id})
        sss_epoch = info.sync_state_set_epoch if info is not None else 0

        async def record_epoch(store: MessageStore) -> None:
            if role.master_epoch < store.epochs.last_epoch:
                raise RoleSwitchError(f"masterEpoch {role.master_epoch} is older than this store's last epoch "
                                      f"{store.epochs.last_epoch}")
            start = store.max_phy_offset
            await asyncio.get_running_loop().run_in_executor(None, store.epochs.append, role.master_epoch, start)
            # consumers see what was here when this broker took over, and later records once the set holds them
            store.enable_confirm_gate(start)
            self.view = SyncStateSetView(master_id=self.broker_id, members=members, epoch=sss_epoch,
                                         epoch_start=store.epochs.entries[-1].start_offset)

        def install_waiter(s: BrokerServer) -> None:
            assert s.ha is not None and s.ha.master is not None and s.store is not None
            ha_master, store = s.ha.master, s.store
            waiter = SyncStateSetWaiter(
                view=lambda: self.view, acks=lambda: {i: c.link.ack_offset for i, c in ha_master.connections.items()},
                master_max=lambda: store.max_phy_offset, fence=self.fence,
                slave_timeout_ms=settings.store.slave_timeout, all_ack=self.cfg.all_ack_in_sync_state_set)
            ha_master.ack_observers.append(waiter.on_ack)  # first: it reads the acks the gate's refresh uses
            gate = store.confirm_gate
            if gate is not None:
                gate.confirm = waiter.covered if self.cfg.all_ack_in_sync_state_set else lambda: store.max_phy_offset
                ha_master.ack_observers.append(gate.refresh)
            wait = waiter.wait if s.metrics is None else s.metrics.timed_replica_waiter(waiter.wait)
            store.set_replica_waiter(wait)
            self.waiter = waiter

        server.store_started_hooks.append(record_epoch)
        server.ha_started_hooks.append(install_waiter)
        await self._serve(server)
        self.role = role

    async def _become_slave(self, role: Role) -> None:
        log.warning("controller mode: %s brokerId %d becomes a slave of brokerId %s (%s) at masterEpoch %d",
                     self.broker_name, self.broker_id, role.master_id, role.master_addr, role.master_epoch)
        self.fence.depose(f"this broker is a slave of brokerId {role.master_id}")
        cache = await self._master_epochs(role)
        await self._stop_server()
        self.role = None
        settings = role_settings(self.base, role, self.broker_id, cache.ha_server_addr)
        await fit_to_master(settings, cache)
        self._master_confirm = 0
        server = BrokerServer(settings)
        server.state_version = role.master_epoch

        async def gate_reads(store: MessageStore) -> None:
            # consumers of a slave see what the master confirmed; nothing until the first round brings it
            store.enable_confirm_gate(0).confirm = lambda: self._master_confirm

        server.store_started_hooks.append(gate_reads)
        await self._serve(server)
        self.view = None
        self.role = role

    async def _master_epochs(self, role: Role) -> epoch_cache.EpochCache:
        deadline = time.monotonic() + MASTER_ANSWER_WAIT_S
        last = ""
        while time.monotonic() < deadline and not self.stopping:
            try:
                code, remark, cache = await epoch_cache.fetch(self.peers, role.master_addr)
                if cache is not None and cache.ha_server_addr:
                    return cache
                last = f"{code} {remark}"
            except (RemotingError, ValueError) as exc:
                last = str(exc)
            await asyncio.sleep(0.1)
        raise RoleSwitchError(f"the master {role.master_addr} did not give its epoch history: {last}")

    # SyncStateSet -------------------------------------------------------------------------------------------
    def _set_changed(self) -> None:
        """The SyncStateSet changed: release the sends and the consumer reads it now covers."""
        if self.waiter is not None:
            self.waiter.on_ack()
        server = self.server
        gate = server.store.confirm_gate if server is not None and server.store is not None else None
        if gate is not None:
            gate.refresh()

    async def _check_sync_state_set(self) -> None:
        server, view, role = self.server, self.view, self.role
        if server is None or view is None or role is None or role.kind is not Kind.MASTER or self._asking:
            return
        if server.ha is None or server.ha.master is None or server.store is None:
            return
        now = time.monotonic()
        proposal = view.proposed  # an unsettled change is asked again as it was (see sync_state_set)
        if proposal is None:
            ha_master = server.ha.master
            acks = {i: c.link.ack_offset for i, c in ha_master.connections.items()}
            connected = set(acks)
            master_max = server.store.max_phy_offset
            view.observe(now, acks, master_max)
            proposal = view.shrink(now, acks, connected, self.cfg.ha_max_time_slave_not_catchup / 1000)
            if proposal is None:
                floor = self.waiter.released_upto if self.waiter is not None else master_max
                proposal = view.grow(acks, connected, master_max, floor)
            if proposal is None:
                return
            view.proposed = proposal  # counted from now on: before the controller can accept it
            self._set_changed()  # the waiter reads the acks against both sets at once
        self._asking = True
        try:
            members, epoch = await self.controller.alter_sync_state_set(
                self.broker_name, self.broker_id, role.master_epoch, set(proposal), view.epoch)
            log.info("SyncStateSet of %s: %s -> %s (epoch %d)", self.broker_name, sorted(view.members),
                     sorted(members), epoch)
            view.adopt(members, epoch)
            view.settle()
            for i in members - {self.broker_id}:
                view.last_caught_up[i] = now
        except ControllerError as exc:
            quiet.warning("SyncStateSet change to %s refused: %s", sorted(proposal), exc)
            if exc.code in SETTLED_REFUSALS:
                view.settle()
            self._kick.set()  # a read settles the rest (a newer syncStateSetEpoch) or tells that we were deposed
        except RemotingError as exc:
            quiet.warning("SyncStateSet change to %s unanswered, asked again at the next check: %s",
                          sorted(proposal), exc)
            self._kick.set()
        finally:
            self._asking = False
            self._set_changed()
