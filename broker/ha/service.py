"""HAService: the one object ``broker/server.py`` wires (RocketMQ HAService facade).

By role:
- SYNC_MASTER / ASYNC_MASTER: an ``HAMaster`` on ``0.0.0.0:haListenPort``; a SYNC_MASTER also installs the
  ``GroupTransfer`` waiter with ``store.set_replica_waiter`` so a put answers PUT_OK only after a slave ack. It is
  installed here and only here, at ``start()``, wrapped by the ``wrap_waiter`` the broker passes (its metrics'
  timing), so no put ever meets an unwrapped or a second waiter;
- SLAVE: an ``HASlave`` towards ``haMasterAddress``, or towards the address the broker passes to
  ``update_master_address`` after each registration.

``status()`` returns the typed ``HAStatus`` (``broker/ha/status.py``): ``to_json()`` is the body of
GET_BROKER_HA_STATUS (907), and broker/metrics.py exports it as it is. ``counters`` holds the monotonic
counters. Task-safety: event loop only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from broker.config import BrokerRole, BrokerSettings
from broker.ha.group_transfer import GroupTransfer
from broker.ha.master import HAMaster
from broker.ha.slave import HASlave
from broker.ha.state import ConnState, HACounters, link_state, slave_state
from broker.ha.status import ByteRate, HAStatus, MasterLinkStatus, SlaveLinkStatus, stale_after_ms

log = logging.getLogger(__name__)


class HAService:
    def __init__(self, settings: BrokerSettings, store, *, listen_host: str = "0.0.0.0",
                 wrap_waiter: Callable[[Callable], Callable] | None = None) -> None:
        self.settings = settings
        self.store = store
        self._wrap_waiter = wrap_waiter
        self.role = settings.role
        self.counters = HACounters()
        self._rates = ByteRate()
        cfg = settings.store
        self.stale_after_ms = stale_after_ms(cfg.ha_send_heartbeat_interval)
        b = settings.broker
        self.master: HAMaster | None = None
        self.slave: HASlave | None = None
        self.group_transfer: GroupTransfer | None = None
        secret = cfg.read_ha_auth_secret()  # checked at config load (broker/config.py check_ha_auth)
        if not secret:
            exposure = ("; any TCP peer that reaches the HA port and sends a hello is served as a slave and its acks "
                        "count" if self.role.is_master else "")
            log.warning("%s: no HA secret (haAuthSecretFile/haAuthSecret): the HA link is NOT authenticated%s",
                        b.broker_name, exposure)
        if self.role.is_master:
            self.master = HAMaster(store=store, store_config=cfg, cluster=b.broker_cluster_name,
                                   broker_name=b.broker_name, port=settings.ha_port, secret=secret, host=listen_host,
                                   counters=self.counters, tls=settings.tls)
            if self.role is BrokerRole.SYNC_MASTER:
                self.group_transfer = GroupTransfer(
                    broker_name=b.broker_name, ha_port=settings.ha_port, slave_timeout_ms=cfg.slave_timeout,
                    fallbehind_max=cfg.ha_slave_fallbehind_max, connected_slaves=self.master.connected_slaves)
                self.master.on_ack_listener = self.group_transfer.on_ack
        else:
            self.slave = HASlave(store=store, store_config=cfg, cluster=b.broker_cluster_name,
                                 broker_name=b.broker_name, broker_id=b.broker_id,
                                 master_addr=cfg.ha_master_address, secret=secret, counters=self.counters,
                                 broker_addr=b.broker_addr if b.listen_port else "",  # 0: no remoting port
                                 ssl=settings.tls.client_context())  # tls.enable: the HA link is TLS too

    # lifecycle -------------------------------------------------------------------------------------------
    async def start(self) -> None:
        if self.master is not None:
            await self.master.start()
            if self.group_transfer is not None:
                waiter = self.group_transfer.wait
                self.store.set_replica_waiter(self._wrap_waiter(waiter) if self._wrap_waiter else waiter)
        if self.slave is not None:
            await self.slave.start()

    async def stop(self) -> None:
        if self.group_transfer is not None:
            self.group_transfer.close()
        if self.master is not None:
            await self.master.stop()
        if self.slave is not None:
            await self.slave.stop()

    @property
    def ha_port(self) -> int:
        """The bound HA port (differs from the configured one when it was 0)."""
        return self.master.port if self.master is not None else self.settings.ha_port

    def update_master_address(self, ha_addr: str) -> None:
        """The registration reply's ``ha_server_addr``; ignored on a master or with haMasterAddress set."""
        if self.slave is not None:
            self.slave.update_master_address(ha_addr)

    @property
    def push2slave_max_offset(self) -> int:
        return self.master.push2slave_max_offset if self.master is not None else 0

    # status ----------------------------------------------------------------------------------------------
    def status(self, master_ha_addr: str = "") -> HAStatus:
        """The typed status (``broker/ha/status.py``); ``master_ha_addr`` is the registration reply's master HA
        address, shown on a slave whose HA client has none yet."""
        store = self.store
        master_max = store.max_phy_offset
        now_s = time.monotonic()
        stale_ms = self.stale_after_ms
        slaves: list[SlaveLinkStatus] = []
        if self.master is not None:
            fallbehind = self.settings.store.ha_slave_fallbehind_max
            for link in self.master.visible_links(now_s):
                ack = max(link.ack_offset, 0)
                connected = link.state is not ConnState.CLOSED
                silent_ms = int((now_s - link.last_read_mono) * 1000) if link.last_read_mono else -1
                state = slave_state(connected=connected, silent_ms=silent_ms, stale_after_ms=stale_ms,
                                    ack_offset=ack, master_max=master_max, fallbehind_max=fallbehind)
                slaves.append(SlaveLinkStatus(
                    addr=link.broker_addr or link.slave_addr,
                    broker_id=link.broker_id,
                    ack_offset=link.ack_offset,
                    diff=max(0, master_max - ack),
                    state=state.value,
                    transfer_from=link.transfer_from,
                    transferred_bytes=link.transferred_bytes,
                    transferred_bytes_per_s=self._rates.rate(("slave", link.broker_id), link.transferred_bytes, now_s),
                    last_ack_timestamp=link.last_ack_ms,
                    peer_addr=link.slave_addr,
                    last_read_timestamp=link.last_read_ms,
                    since_last_read_ms=silent_ms,
                ))
        client = None
        if self.slave is not None:
            sl = self.slave
            silence = sl.silence_s(now_s)
            silent_ms = -1 if silence is None else int(silence * 1000)
            client = MasterLinkStatus(
                master_addr=sl.master_addr or master_ha_addr,
                connected=sl.connected,
                max_offset=master_max,
                last_read_timestamp=sl.last_read_ms,
                last_write_timestamp=sl.last_write_ms,
                replicated_bytes=sl.replicated_bytes,
                transferred_bytes_per_s=self._rates.rate("master", sl.replicated_bytes, now_s),
                since_last_read_ms=silent_ms,
                state=link_state(connected=silence is not None, silent_ms=silent_ms, stale_after_ms=stale_ms).value,
            )
        return HAStatus(role=self.role.name, commitlog_max_offset=master_max,
                        commitlog_min_offset=store.min_phy_offset, slaves=tuple(slaves), client=client,
                        stale_after_ms=stale_ms, connections_accepted=self.counters.accepted,
                        reconnects=self.counters.reconnects)
