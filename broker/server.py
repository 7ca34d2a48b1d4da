"""BrokerServer: the composition root of one broker process (RocketMQ BrokerController without its logic).

Ports (spec remoting.md §1.7): the remoting server on ``listenPort`` serves every processor of
``broker.processors``; the fast (VIP) server on ``BrokerSettings.fast_port`` (``listenPort - 2`` unless
``fastListenPort`` says otherwise, 0 = off) serves the same ones except PULL_MESSAGE, as RocketMQ's does, so a
client with ``vipChannelEnabled`` sends there and a long poll never queues behind sends. HA has its own port.

Start order: check that every port the conf binds can be bound (``common.ports``: a taken port fails before anything
is touched, naming the key to change),
load the metadata (``<root>/config/*.json``, falling back to ``.bak``), start the store (recovery included), wire
the store's dispatch listener to long polling and the schedule service, register the processors and start
serving, then register with the nameservers (RocketMQ also registers only once the store is up).

Stop order (SIGTERM): unregister from the nameservers (clients stop routing here), release held pulls (they are
answered at once with what the store has), stop the remoting servers (stop accepting, give requests in flight
``REMOTING_STOP_GRACE_S`` to finish, then close every connection), stop the services, persist all metadata, stop
the store (flush, checkpoint, remove the abort marker).

HA: ``self.ha`` (every role) and, on a slave, ``self.slave_sync``; both reach handlers through the context.
``on_registration_result`` records the master's HA and broker addresses from each registration round in
``self.master`` (the context's ``MasterAddrs``) and calls every function in ``registration_listeners``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace

from broker import processors
from broker.auth import setup as auth_setup
from broker.auth.gate import AuthGate
from broker.client_manager import ClientManager
from broker.config import BrokerSettings
from broker.context import BrokerContext, MasterAddrs
from broker.dedup import SendDedupWindow, restore_from_store
from broker.grpc_v2.auth import V2Auth
from broker.grpc_v2.endpoint import GrpcEndpoint
from broker.ha.service import HAService
from broker.long_polling import PullRequestHoldService
from broker.metadata.consumer_offsets import ConsumerOffsetManager
from broker.metadata.delay_offsets import DelayOffsetManager
from broker.metadata.metrics import metadata_families
from broker.metadata.subscription_groups import SubscriptionGroupManager
from broker.metadata.topics import TopicConfigManager
from broker.metrics import BrokerMetrics
from broker.rebalance_lock import RebalanceLockManager
from broker.registration import RegistrationService
from broker.retry import RetryService
from broker.schedule import ScheduleService
from broker.slave_notify import SlaveNotifier
from broker.transaction.service import transaction_service
from broker.slave_sync import (
    SlaveSynchronize,
    fetch_slave_addrs,
    group_internal_addr,
    pull_offsets_from_slaves,
)
from broker.store.message_store import MessageStore
from common.loop_lag import LoopLagProbe
from common.metrics import ScrapeCollector, held_bytes_collector, new_registry
from common.metrics_server import MetricsServer
from common.perm import PERM_INHERIT, PERM_RW
from common.ports import check_ports
from common.service import Service
from remoting.codes import RequestCode
from remoting.connection import Connection, Limits
from remoting.held_bytes import HeldBytes
from remoting.message_headers import DEFAULT_TOPIC
from remoting.server import Processor, RemotingServer

log = logging.getLogger(__name__)

REMOTING_STOP_GRACE_S = 5.0
LISTEN_HOST = "0.0.0.0"


class _Ports:
    """What processors register on: every code goes to the main server, and to the fast server unless it is
    PULL_MESSAGE (RocketMQ's ``registerProcessor`` does the same for its VIP server)."""

    def __init__(self, main: RemotingServer, fast: RemotingServer | None) -> None:
        self.main = main
        self.fast = fast

    def register(self, code: int, processor: Processor) -> None:
        self.main.register(code, processor)
        if self.fast is not None and code != RequestCode.PULL_MESSAGE:
            self.fast.register(code, processor)

    def on_close(self, callback: Callable[[Connection], None]) -> None:
        self.main.on_close(callback)
        if self.fast is not None:
            self.fast.on_close(callback)


class BrokerServer(Service):
    def __init__(self, settings: BrokerSettings) -> None:
        super().__init__("broker")
        self.settings = settings
        self.ha: HAService | None = None
        self.slave_sync: SlaveSynchronize | None = None
        self.master = MasterAddrs()
        self.registration_listeners: list[Callable[[str, str], None]] = []
        # controller mode (broker/controller_mode): run after the store recovered, before anything is served (the
        # new master's epoch entry), and after HA started (its SyncStateSet replica waiter replaces GroupTransfer's)
        self.store_started_hooks: list[Callable[[MessageStore], Awaitable[None]]] = []
        self.ha_started_hooks: list[Callable[[BrokerServer], None]] = []
        self.store: MessageStore | None = None
        self.ctx: BrokerContext | None = None
        self.registration: RegistrationService | None = None
        self.state_version = 0  # RocketMQ 5's stateVersion in registrations: the masterEpoch in controller mode
        self.schedule: ScheduleService | None = None
        self.remoting: RemotingServer | None = None
        self.fast_remoting: RemotingServer | None = None
        self.auth_gate: AuthGate | None = None  # ACL 2.0, None when both switches are off
        self.grpc_v2: GrpcEndpoint | None = None  # the RocketMQ 5 endpoint on grpcServerPort
        self._services: list[Service] = []
        self.metrics_registry = new_registry()
        self.metrics: BrokerMetrics | None = None
        self.metrics_server: MetricsServer | None = None

    @property
    def listen_addr(self) -> str:
        return self.settings.broker.broker_addr

    def on_registration_result(self, ha_server_addr: str, master_addr: str) -> None:
        """Called after each registration round with the first successful reply (spec §2.3, §2.7)."""
        if ha_server_addr and ha_server_addr != self.master.ha:
            log.info("nameserver reports master HA address %s", ha_server_addr)
        if ha_server_addr:  # a reply without one keeps the previous address, as RocketMQ does
            self.master.ha = ha_server_addr
        self.master.broker = master_addr
        for listener in self.registration_listeners:
            try:
                listener(ha_server_addr, master_addr)
            except Exception:
                log.exception("registration listener %r failed", listener)

    # lifecycle ----------------------------------------------------------------------------------------------
    def _bind_ports(self) -> BrokerSettings:
        """Check every port the conf binds (a taken one fails here, naming its key, before the store is touched) and
        fill in the bound ones (listenPort=0: use the bound port everywhere)."""
        settings = self.settings
        broker = settings.broker
        fast = settings.fast_port  # from the configured listenPort: a bound listenPort must not move it
        bound = check_ports(settings.listen_ports(), server=f"broker {broker.broker_name}", source=settings.source)
        port = bound["listenPort"]
        if port != broker.listen_port:
            ha_port = settings.store.ha_listen_port or port + 1
            settings = settings.with_ports(listen_port=port, ha_port=ha_port)
        # Record the resolved fast port so nothing derives it again from the bound listenPort.
        return replace(settings, broker=replace(settings.broker, fast_listen_port=fast))

    async def on_start(self) -> None:
        settings = self.settings = self._bind_ports()
        if settings.broker.metrics_enabled:
            self.metrics_server = MetricsServer(
                self.metrics_registry,
                host=settings.broker.metrics_prom_exporter_host,
                port=settings.broker.metrics_prom_exporter_port,
            )
            await self.metrics_server.start()
            if self.metrics_server.bound_port != settings.broker.metrics_prom_exporter_port:
                settings = self.settings = settings.with_ports(
                    listen_port=settings.broker.listen_port,
                    ha_port=settings.ha_port,
                    metrics_port=self.metrics_server.bound_port,
                )
        broker, store_cfg = settings.broker, settings.store
        levels = store_cfg.delay_levels_ms

        # Lock every directory this broker writes before the config files are read or written: a second broker
        # sharing any of them (storePathCommitLog included) stops here, naming the directory and its holder.
        self.store = store = MessageStore(store_cfg, store_host=(broker.broker_ip1, broker.listen_port))
        store.lock()
        config_dir = store_cfg.config_dir
        metadata_interval_s = broker.flush_metadata_interval / 1000
        topics = TopicConfigManager(config_dir, schedule_queue_nums=len(levels),
                                    max_auto_created=broker.max_auto_created_topics,
                                    persist_interval_s=metadata_interval_s)
        groups = SubscriptionGroupManager(config_dir, auto_create=broker.auto_create_subscription_group,
                                          max_auto_created=broker.max_auto_created_subscription_groups,
                                          persist_interval_s=metadata_interval_s)
        offsets = ConsumerOffsetManager(config_dir, persist_interval_s=broker.flush_consumer_offset_interval / 1000)
        delay_offsets = DelayOffsetManager(config_dir, persist_interval_s=store_cfg.flush_delay_offset_interval / 1000)
        for manager in (topics, groups, offsets, delay_offsets):
            manager.load()
        topics.ensure_system_topics()
        if broker.trace_topic_enable:  # RocketMQ's TopicConfigManager: the trace topic, one queue
            topics.create_if_absent(broker.msg_trace_topic_name, 1)
        if broker.auto_create_topic_enable:
            # RocketMQ's auto-creation template: producers route an unknown topic by TBW102's route (spec §7.3)
            # and the broker creates the topic from it on the first send (send_admit).
            topics.create_if_absent(DEFAULT_TOPIC, broker.default_topic_queue_nums, PERM_INHERIT | PERM_RW)
        await topics.persist()

        await store.start()
        for hook in self.store_started_hooks:
            await hook(store)
        self.metrics = metrics = BrokerMetrics(
            self.metrics_registry,
            cluster=broker.broker_cluster_name,
            broker_name=broker.broker_name,
            broker_id=broker.broker_id,
            role=settings.role,
            broker_addr=broker.broker_addr,
            store_dir=store_cfg.root_dir,
        )
        metrics.attach(store=store, offsets=offsets)
        metrics.registry.register(ScrapeCollector("metadata", lambda: metadata_families(
            topics=topics, groups=groups, files=(topics, groups, offsets, delay_offsets))))

        hold = PullRequestHoldService(functools.partial(store.max_offset_in_queue, confirmed_only=True))
        clients = ClientManager()
        self.ctx = ctx = BrokerContext(
            settings=settings,
            store=store,
            topics=topics,
            groups=groups,
            offsets=offsets,
            delay_offsets=delay_offsets,
            clients=clients,
            hold=hold,
            locks=RebalanceLockManager(),
            retry=RetryService(store, topics, groups, len(levels)),
            dedup=await self._restored_dedup_window(store),
            master=self.master,
            metrics=metrics,
        )
        store.add_dispatch_listener(hold.notify, confirmed=True)
        self._services = [hold, clients, LoopLagProbe(metrics.loop_lag)]
        if settings.role.is_master:
            ctx.slave_notifier = notifier = SlaveNotifier(topics=topics, groups=groups, offsets=offsets,
                                                          delay_offsets=delay_offsets)
            topics.change_listeners.append(notifier.on_tables_changed)
            groups.change_listeners.append(notifier.on_tables_changed)
            offsets.change_listeners.append(notifier.on_offsets_changed)
            delay_offsets.change_listeners.append(notifier.on_delay_offsets_changed)
            self._services.append(notifier)
            self.schedule = ScheduleService(
                store, delay_offsets, levels, flush_interval_ms=store_cfg.flush_delay_offset_interval
            )
            store.add_dispatch_listener(self.schedule.on_dispatch)
            self._services.append(self.schedule)
            if not broker.reject_transaction_message:
                ctx.transactions = transaction_service(settings, store, topics, offsets, clients, metrics)
                self._services.append(ctx.transactions)
        # HA: a restarting master first takes the offsets its slaves accepted while it was down (DESIGN §4)
        if settings.role.is_master and broker.namesrv_list:
            inner = auth_setup.inner_signer(settings.auth)  # the nameserver and the slaves may check ACL 2.0
            slave_addrs = await fetch_slave_addrs(broker.namesrv_list, broker.broker_name, signer=inner)
            if slave_addrs:
                await pull_offsets_from_slaves(offsets, slave_addrs, signer=inner)
        self.ha = ctx.ha = HAService(settings, store, wrap_waiter=metrics.timed_replica_waiter)
        await self.ha.start()  # a SYNC_MASTER installs its (timed) replica waiter here, once
        metrics.attach(ha=self.ha)
        for ha_hook in self.ha_started_hooks:
            ha_hook(self)
        if not settings.role.is_master:
            self.slave_sync = SlaveSynchronize(
                topics=topics,
                groups=groups,
                offsets=offsets,
                delay_offsets=delay_offsets,
                own_addr=broker.broker_addr,
                interval_ms=broker.slave_synchronize_interval,
            )
            self.slave_sync.metrics = metrics
            self._services.append(self.slave_sync)
            self.registration_listeners.append(self._on_master_learned)
        self.registration = RegistrationService(settings, topics, self.on_registration_result,
                                                state_version=self.state_version)
        ctx.register_now = self.registration.register_now

        # one cap over the listen and fast ports' connections together
        held = HeldBytes(broker.server_max_held_bytes, name="broker")
        limits = Limits(frame_timeout_s=broker.server_frame_timeout_millis / 1000)
        metrics.registry.register(held_bytes_collector(held.snapshot))
        tls = settings.tls
        self.remoting = RemotingServer("broker", LISTEN_HOST, broker.listen_port, limits=limits, held_bytes=held,
                                       tls=tls)
        if broker.fast_listen_port:
            self.fast_remoting = RemotingServer("broker-fast", LISTEN_HOST, broker.fast_listen_port, limits=limits,
                                                held_bytes=held, tls=tls)
        processors.register_all(_Ports(self.remoting, self.fast_remoting), ctx)
        self.auth_gate = auth_setup.install(settings.auth, store_cfg.config_dir, [self.remoting, self.fast_remoting])
        # innerClientAuthenticationCredentials sign what the broker asks of the nameserver and its master
        self.registration.client.signer = auth_setup.inner_signer(settings.auth)
        if self.slave_sync is not None:
            self.slave_sync.client.signer = auth_setup.inner_signer(settings.auth)
            self.slave_sync.auth_store = None if self.auth_gate is None else self.auth_gate.store
        if ctx.slave_notifier is not None and self.auth_gate is not None:
            self.auth_gate.store.change_listeners.append(ctx.slave_notifier.on_auth_changed)
        for service in self._services:
            await service.start()
        await self.remoting.start()
        if self.fast_remoting is not None:
            await self.fast_remoting.start()
        if broker.grpc_server_port:
            v2_auth = None if self.auth_gate is None else V2Auth(
                self.auth_gate, settings.auth.authentication_date_time_skew_millis)
            self.grpc_v2 = GrpcEndpoint(ctx, LISTEN_HOST, broker.grpc_server_port, auth=v2_auth,
                                        on_refused=held.closed)  # counted with the remoting ports' closes
            await self.grpc_v2.start()
        await self.registration.start()
        log.info(
            "broker %s id %d (%s) serving remoting on %s (fast port %s)",
            broker.broker_name,
            broker.broker_id,
            settings.role.name,
            self.listen_addr,
            broker.fast_listen_port or "off",
        )

    async def _restored_dedup_window(self, store: MessageStore) -> SendDedupWindow | None:
        """The send dedup window, rebuilt from the commitlog tail before any send is taken.

        The usual reason an idempotent producer (the Spark sink) resends is that the broker went down mid-send,
        so an empty window after a restart would store those messages twice (``dedup.restore_from_store``).
        """
        broker = self.settings.broker
        if broker.send_dedup_window_seconds <= 0:
            return None
        window = SendDedupWindow(broker.send_dedup_window_seconds)
        if not self.settings.role.is_master:
            return window
        host = (broker.broker_ip1, broker.listen_port)
        added, begin = await asyncio.get_running_loop().run_in_executor(
            None, lambda: restore_from_store(window, store, host)
        )
        if added:
            log.info("send dedup window: %d UNIQ_KEYs of the last %d s restored from commitlog offset %d",
                     added, broker.send_dedup_window_seconds, begin)
        return window

    def _on_master_learned(self, ha_server_addr: str, master_addr: str) -> None:
        assert self.ha is not None and self.slave_sync is not None  # registered as a listener on a slave only
        self.ha.update_master_address(ha_server_addr)  # ignored when haMasterAddress is configured
        self.slave_sync.update_master_addr(self._group_internal_addr(master_addr))

    def _group_internal_addr(self, master_addr: str) -> str:
        """The master's admin address as seen from inside the broker group (see ``group_internal_addr``)."""
        if not master_addr:
            return ""
        return group_internal_addr(master_addr, self.settings.store.ha_master_address or self.master.ha)

    async def on_stop(self) -> None:
        ctx = self.ctx
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        if self.registration is not None:
            await self.registration.stop()
        if ctx is not None:
            await ctx.hold.stop()
        if self.grpc_v2 is not None:
            await self.grpc_v2.stop(REMOTING_STOP_GRACE_S)
        for server in (self.fast_remoting, self.remoting):
            if server is not None:
                await server.stop(REMOTING_STOP_GRACE_S)
        for service in reversed(self._services):
            await service.stop()
        if ctx is not None:
            await ctx.drain_background()
            for manager in (ctx.topics, ctx.groups, ctx.offsets, ctx.delay_offsets):
                try:
                    await manager.close()  # writes what the batching still holds
                except Exception:
                    log.exception("persisting %s at stop failed", manager.path)
        if self.ha is not None:
            await self.ha.stop()
        if self.store is not None:
            await self.store.stop()
        if self.registration is not None:
            await self.registration.close()
