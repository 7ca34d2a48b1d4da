"""Fit a store to its new master's log before it serves as that master's slave (RocketMQ 5's truncateInvalidMsg).

Why a module of its own: this is the one step of a role switch that rewrites the local log, so it deserves to be
read (and tested) apart from the controller rounds that trigger it. It needs only the broker's settings and the
master's epoch history (``epoch_cache.EpochCache``): no controller, no running server.

The store is opened alone; the consistent point of the two histories (``epoch_file.consistent_offset``) decides
what stays. A longer local log is cut back to it by ``truncation.request`` and a store restart (crash-safe: the
request is a file the store acts on at start), then the master's newer epoch entries are copied. The store is
stopped again on every path, so the ``BrokerServer`` that follows opens it as usual.
"""

from __future__ import annotations

import asyncio
import logging

from broker.config import BrokerSettings
from broker.controller_mode.epoch_cache import EpochCache
from broker.controller_mode.roles import RoleSwitchError
from broker.store import truncation
from broker.store.epoch_file import consistent_offset
from broker.store.message_store import MessageStore

log = logging.getLogger(__name__)


async def fit_to_master(settings: BrokerSettings, cache: EpochCache) -> None:
    """Cut the local log back to where it agrees with the master's, and copy the master's newer epochs.

    Raises ``RoleSwitchError`` (with a hint) when the two histories share no epoch."""
    host = (settings.broker.broker_ip1, settings.broker.listen_port)
    store = MessageStore(settings.store, store_host=host)
    await store.start()
    try:
        local, local_end = list(store.epochs.entries), store.max_phy_offset
        point = consistent_offset(local, local_end, list(cache.entries), cache.max_offset)
        if point is None:
            raise RoleSwitchError(
                f"this store's epoch history {local} shares no epoch with the master's {list(cache.entries)}",
                hint="move this broker's store aside so it copies the group's log again as a new replica")
        if point < local_end:
            log.warning("controller mode: cutting the log from %d back to %d (never confirmed: the master's "
                        "history diverges there)", local_end, point)
            await store.stop()
            truncation.request(settings.store.root_dir, point)
            store = MessageStore(settings.store, store_host=host)
            await store.start()
        loop = asyncio.get_running_loop()
        for entry in cache.entries:
            if entry.epoch > store.epochs.last_epoch:
                await loop.run_in_executor(None, store.epochs.append, entry.epoch, entry.start_offset)
    finally:
        await store.stop()
