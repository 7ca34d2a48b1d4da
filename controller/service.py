"""ControllerService: one controller instance (RocketMQ 5's ControllerManager), wiring only.

It owns the etcd store, its campaign for the active key, the replicas manager and the remoting server. Two loops:
the campaign (renew the lease every ttl/3 while active; otherwise look for the active instance every 0.5 s and take
the key when it is free) and the scan (``scanNotActiveBrokerInterval``). Instances hold no state of their own:
any number may run against one etcd, standalone (``mqcontroller``) or embedded; exactly one is active at a time,
and a stale one cannot write (see controller.store).

Embedded (``enableControllerInNamesrv``, as RocketMQ's): the nameserver passes its own remoting server and metrics
registry; the controller's codes are then served on the nameserver's port, and its metrics on the nameserver's page.

Start: check the ports, listen (requests are answered from the start: CONTROLLER_NOT_LEADER until active), metrics,
then the loops; etcd unreachable at start is no failure: the instance keeps trying and says why in its answers.
Stop: the loops, resign the active key (another instance takes over at once instead of after the TTL), the
remoting server with a grace for requests in flight, the etcd clients.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from pathlib import Path

from common.log import RateLimitedLog
from common.metrics import new_registry
from common.metrics_server import MetricsServer
from common.ports import check_ports
from common.service import Service
from controller.config import ControllerConfig
from controller.manager import ReplicasManager
from controller.metrics import ControllerMetrics
from controller.processors import ControllerProcessors
from controller.store import Campaign, EtcdStore, StoreUnavailable
from remoting.server import RemotingServer

log = logging.getLogger(__name__)
store_log = RateLimitedLog(log, every_s=10.0)
STOP_GRACE_S = 3.0
CONTROLLER_HOME = "~/controller"  # a standalone controller's users and ACLs (auth.json), unless authConfigPath
STANDBY_POLL_S = 0.5


class ControllerService(Service):
    def __init__(self, config: ControllerConfig, *, remoting: RemotingServer | None = None,
                 metrics_registry=None) -> None:
        super().__init__("ControllerService")
        self.config = config
        self.embedded = remoting is not None
        self.instance_id = config.controller_instance_id or (
            f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}")
        self.store = EtcdStore(config.etcd_endpoints, prefix=config.controller_store_path_prefix,
                               timeout_s=config.etcd_request_timeout_millis / 1000)
        self.remoting = remoting or RemotingServer("controller", config.listen_host, config.listen_port,
                                                   tls=config.tls)
        self.bound_port = 0
        self.campaign = Campaign(self.store, self.instance_id, "", config.controller_lease_ttl_seconds)
        self.metrics_registry = metrics_registry if metrics_registry is not None else new_registry()
        self.metrics = ControllerMetrics(self.metrics_registry, node_id=self.instance_id,
                                         is_active=lambda: self.campaign.is_active,
                                         groups=lambda: [s for s, _ in self.manager.cache.values()],
                                         without_master_s=lambda name: self.manager.seconds_without_master(name))
        self.manager = ReplicasManager(config, self.store, self.campaign, self.metrics)
        self.processors = ControllerProcessors(self.manager, describe_not_active=self._not_active,
                                               metadata=self._metadata)
        self.processors.register(self.remoting)
        if not self.embedded and config.auth is not None:
            # standalone, its own ACL 2.0 (embedded: the nameserver's gate covers its port): with authentication on
            # only the inner credentials and Super users are answered (controller codes are in no Normal policy)
            from broker.auth import setup as auth_setup

            auth_setup.install(config.auth, Path(CONTROLLER_HOME).expanduser(), [self.remoting], name="controller")
        self.remoting.on_close(self.manager.on_connection_closed)
        self.metrics_server: MetricsServer | None = None
        self.store_error = ""  # the last etcd failure of the campaign, "" once etcd answers again

    @property
    def listen_addr(self) -> str:
        host = self.remoting.host if self.embedded else self.config.listen_host
        if host in ("0.0.0.0", "::", "[::]"):
            host = "127.0.0.1"
        return f"{host}:{self.bound_port}"

    @property
    def advertised_addr(self) -> str:
        return self.config.controller_advertised_addr or self.listen_addr

    @property
    def is_active(self) -> bool:
        return self.campaign.is_active

    def _not_active(self) -> tuple[str, dict[str, str]]:
        other = self.campaign.active_info
        if self.store_error:
            return (f"no controller can be active: {self.store_error}. Brokers keep the roles they have and nothing "
                    "is elected until etcd's majority answers again", {})
        if other is None or other.instance_id == self.instance_id:
            return ("no controller is active right now (the active one's lease just ended); retry in a second",
                    {})
        return (f"controller {self.instance_id} is not the active one: send controller requests to "
                f"{other.address} (controller {other.instance_id})",
                {"controllerLeaderAddress": other.address, "controllerLeaderId": other.instance_id})

    def _metadata(self) -> dict[str, str]:
        other = self.campaign.active_info
        return {
            "group": f"etcd:{self.store.describe()}{self.store.prefix}",
            "controllerLeaderId": other.instance_id if other else "",
            "controllerLeaderAddress": other.address if other else "",
            "isLeader": "true" if self.is_active else "false",
            "peers": other.address if other else "",
        }

    async def on_start(self) -> None:
        if self.embedded:  # the nameserver listens already and serves the metrics
            self.bound_port = self.remoting.port
        else:
            check_ports(self.config.listen_ports(), server="the controller")
            self.bound_port = await self.remoting.start()
        self.campaign.address = self.advertised_addr
        if self.config.metrics_enabled and not self.embedded:
            self.metrics_server = MetricsServer(self.metrics_registry, host=self.config.metrics_prom_exporter_host,
                                                port=self.config.metrics_prom_exporter_port)
            await self.metrics_server.start()
        self.spawn("campaign", self._campaign_loop())
        self.run_every("scan", self.config.scan_not_active_broker_interval / 1000, self._scan)
        log.info("controller %s listening on %s (advertised %s); etcd %s, prefix %s, lease ttl %d s",
                 self.instance_id, self.listen_addr, self.advertised_addr, self.store.describe(), self.store.prefix,
                 self.config.controller_lease_ttl_seconds)

    async def _campaign_loop(self) -> None:
        while not self.stopping:
            was_active = self.campaign.is_active
            try:
                active = await self.campaign.step()
                if self.store_error:
                    log.info("etcd answers again")
                self.store_error = ""
            except StoreUnavailable as exc:
                self.store_error = str(exc)
                store_log.warning("controller %s: %s", self.instance_id, exc)
                active = self.campaign.is_active
            if active and not was_active:
                self.manager.became_active()
            if self.campaign.is_active:
                delay = self.config.controller_lease_ttl_seconds / 3
                # wake up in time to step down at the deadline even if no renewal answers
                delay = min(delay, max(0.05, self.campaign.deadline - time.monotonic()))
            else:
                delay = STANDBY_POLL_S
            if await self.sleep(delay):
                return

    async def _scan(self) -> None:
        try:
            await self.manager.scan()
        except StoreUnavailable as exc:
            store_log.warning("scan for inactive masters skipped: %s", exc)

    async def on_stop(self) -> None:
        if self.metrics_server is not None:
            await self.metrics_server.stop()
        tasks = [t for t in self._tasks.values() if not t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        try:
            await self.campaign.resign()
        except Exception as exc:  # noqa: BLE001 - stopping: the lease expires by itself
            log.info("resigning the active key failed: %s", exc)
        await self.manager.close()
        if not self.embedded:
            await self.remoting.stop(STOP_GRACE_S)
        await self.store.close()
        log.info("controller %s stopped", self.instance_id)
