"""BrokerServer: the composition root of one broker process (RocketMQ BrokerController without its logic).

Start order: bind the gRPC port (so a taken port fails before anything is touched), load the metadata
(``<root>/config/*.json``, falling back to ``.bak``), start the store (recovery included), wire the store's
dispatch listener to long polling and the schedule service, start serving, then register with the nameservers
(RocketMQ also registers only once the store is up).

Stop order (SIGTERM): unregister from the nameservers and close the keep-alive streams (clients stop routing
here), release held pulls, stop gRPC with a 5 s grace, stop the services, persist all metadata, stop the store
(flush, checkpoint, remove the abort marker).

HA wiring points (the HA service lives in broker/ha/ and is wired by the lead): ``self.ha`` and
``self.slave_sync`` stay None here; ``on_registration_result`` records the master's HA and broker address from
each registration round and calls every function in ``registration_listeners``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from broker.client_manager import ClientManager
from broker.config import BrokerSettings
from broker.dedup import SendDedupWindow, restore_from_store
from broker.grpc.admin import BrokerAdminServicer
from broker.context import BrokerContext
from broker.grpc.messaging import MessagingServicer
from broker.ha.service import HAService
from broker.long_polling import PullRequestHoldService
from broker.metadata.consumer_offsets import ConsumerOffsetManager
from broker.metadata.delay_offsets import DelayOffsetManager
from broker.metadata.subscription_groups import SubscriptionGroupManager
from broker.metadata.topics import TopicConfigManager
from broker.metrics import BrokerMetrics
from broker.registration import RegistrationService
from broker.retry import RetryService
from broker.schedule import ScheduleService
from broker.slave_sync import (
    SlaveSynchronize,
    fetch_slave_addrs,
    group_internal_addr,
    pull_offsets_from_slaves,
)
from broker.store.message_store import MessageStore
from common.metrics import MetricsServer, new_registry
from common.service import Service
from remoting.channel import aio_server, bind
from remoting.pb import admin_pb2_grpc, broker_pb2_grpc

log = logging.getLogger(__name__)

GRPC_STOP_GRACE_S = 5.0


class BrokerServer(Service):
    def __init__(self, settings: BrokerSettings) -> None:
        super().__init__("broker")
        self.settings = settings
        # HA wiring points (see module docstring).
        self.ha = None
        self.slave_sync = None
        self.master_ha_addr = ""
        self.master_addr = ""
        self.registration_listeners: list[Callable[[str, str], None]] = []
        self.store: MessageStore | None = None
        self.ctx: BrokerContext | None = None
        self.registration: RegistrationService | None = None
        self.schedule: ScheduleService | None = None
        self._grpc = None
        self._services: list[Service] = []
        self.metrics_registry = new_registry()
        self.metrics: BrokerMetrics | None = None
        self.metrics_server: MetricsServer | None = None

    @property
    def listen_addr(self) -> str:
        return self.settings.broker.broker_addr

    def on_registration_result(self, ha_server_addr: str, master_addr: str) -> None:
        """Called after each registration round with the first successful reply (spec §2.3, §2.7)."""
        if ha_server_addr and ha_server_addr != self.master_ha_addr:
            log.info("nameserver reports master HA address %s", ha_server_addr)
        if ha_server_addr:  # a reply without one keeps the previous address, as RocketMQ does
            self.master_ha_addr = ha_server_addr
        self.master_addr = master_addr
        for listener in self.registration_listeners:
            try:
                listener(ha_server_addr, master_addr)
            except Exception:
                log.exception("registration listener %r failed", listener)

    # lifecycle ----------------------------------------------------------------------------------------------
    async def on_start(self) -> None:
        settings = self.settings
        self._grpc = aio_server()
        port = bind(self._grpc, "0.0.0.0", settings.broker.listen_port)
        if port != settings.broker.listen_port:  # listenPort=0: use the bound port everywhere
            ha_port = settings.store.ha_listen_port or port + 1
            settings = self.settings = settings.with_ports(listen_port=port, ha_port=ha_port)
        if settings.broker.metrics_exporter_type == "PROM":
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

        config_dir = store_cfg.config_dir
        topics = TopicConfigManager(config_dir, schedule_queue_nums=len(levels))
        groups = SubscriptionGroupManager(config_dir, auto_create=broker.auto_create_subscription_group)
        offsets = ConsumerOffsetManager(config_dir)
        delay_offsets = DelayOffsetManager(config_dir)
        for manager in (topics, groups, offsets, delay_offsets):
            manager.load()
        topics.ensure_system_topics()
        await topics.persist()

        self.store = store = MessageStore(store_cfg, store_host=(broker.broker_ip1, port))
        await store.start()
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

        hold = PullRequestHoldService(store.max_offset_in_queue)
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
            retry=RetryService(store, topics, groups, len(levels)),
            dedup=await self._restored_dedup_window(store),
            server=self,
            metrics=metrics,
        )
        store.add_dispatch_listener(hold.notify)
        self._services = [hold, clients]
        if settings.role.is_master:
            self.schedule = ScheduleService(
                store, delay_offsets, levels, flush_interval_ms=store_cfg.flush_delay_offset_interval
            )
            store.add_dispatch_listener(self.schedule.on_dispatch)
            self._services.append(self.schedule)
        # HA: a restarting master first takes the offsets its slaves accepted while it was down (DESIGN §4)
        if settings.role.is_master and broker.namesrv_list:
            slave_addrs = await fetch_slave_addrs(broker.namesrv_list, broker.broker_name)
            if slave_addrs:
                await pull_offsets_from_slaves(offsets, slave_addrs)
        self.ha = HAService(settings, store)
        await self.ha.start()  # a SYNC_MASTER installs its replica waiter here
        metrics.attach(ha=self.ha)
        if self.ha.group_transfer is not None:
            store.set_replica_waiter(metrics.timed_replica_waiter(self.ha.group_transfer.wait))
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
        self.registration = RegistrationService(settings, topics, self.on_registration_result)
        ctx.register_now = self.registration.register_now

        broker_pb2_grpc.add_MessagingServicer_to_server(MessagingServicer(ctx), self._grpc)
        admin_pb2_grpc.add_BrokerAdminServicer_to_server(BrokerAdminServicer(ctx), self._grpc)
        for service in self._services:
            await service.start()
        await self._grpc.start()
        self.run_every("persist-offsets", broker.flush_consumer_offset_interval / 1000, offsets.persist)
        self.run_every("persist-metadata", 10.0, self._persist_tables)
        await self.registration.start()
        log.info(
            "broker %s id %d (%s) serving on %s",
            broker.broker_name,
            broker.broker_id,
            settings.role.name,
            self.listen_addr,
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
        self.ha.update_master_address(ha_server_addr)  # ignored when haMasterAddress is configured
        self.slave_sync.update_master_addr(self._group_internal_addr(master_addr))

    def _group_internal_addr(self, master_addr: str) -> str:
        """The master's admin address as seen from inside the broker group (see ``group_internal_addr``)."""
        if not master_addr:
            return ""
        return group_internal_addr(master_addr, self.settings.store.ha_master_address or self.master_ha_addr)

    async def _persist_tables(self) -> None:
        assert self.ctx is not None
        await self.ctx.topics.persist()
        await self.ctx.groups.persist()

    async def on_stop(self) -> None:
        ctx = self.ctx
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        if self.registration is not None:
            await self.registration.stop()
        if ctx is not None:
            await ctx.hold.stop()
        if self._grpc is not None:
            await self._grpc.stop(GRPC_STOP_GRACE_S)
        for service in reversed(self._services):
            await service.stop()
        if ctx is not None:
            await ctx.drain_background()
            for manager in (ctx.topics, ctx.groups, ctx.offsets, ctx.delay_offsets):
                try:
                    await manager.persist(force=True)
                except Exception:
                    log.exception("persisting %s at stop failed", manager.path)
        if self.ha is not None:
            await self.ha.stop()
        if self.store is not None:
            await self.store.stop()
        if self.registration is not None:
            await self.registration.close()
