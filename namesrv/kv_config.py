"""KVConfigManager: the nameserver's namespaced key/value store (RocketMQ's KVConfigManager), persisted.

Its one real user is namespace ``ORDER_TOPIC_CONFIG``: ``mqadmin updateTopic -o true`` puts
``<topic> -> "brokerName:queueNums;..."`` there, routes carry it as ``orderTopicConf`` (when
``orderMessageEnable``) and every REGISTER_BROKER reply carries the namespace as a KVTable.

It is the only state the nameserver persists (routes are rebuilt from registrations). File format, RocketMQ's
``kvConfig.json``: ``{"configTable":{"<namespace>":{"<key>":"<value>"}}}``, written atomically (common.persist: tmp,
fsync, rename, ``.bak`` kept) after each change, never before one, so a nameserver that is never asked to store a
key never creates the file. A damaged file falls back to its ``.bak``; a file of the wrong shape or one that cannot
be read is logged and ignored until the next change replaces it (the old content stays in ``.bak``); the
nameserver's main job, routing, does not depend on it.

Not thread-safe: the event loop calls it; the write itself runs in a worker thread, one write at a time.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from common.persist import read_json, write_json_atomic

log = logging.getLogger(__name__)

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"  # RocketMQ's NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG


class KVConfigManager:
    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path).expanduser() if path else None
        self.table: dict[str, dict[str, str]] = {}
        self._write_lock = asyncio.Lock()

    def load(self) -> None:
        if self.path is None:
            return
        try:
            data = read_json(self.path, default=None)
        except OSError as exc:
            log.error("cannot read the KV config %s (%s); starting with none: fix kvConfigPath", self.path, exc)
            return
        if data is None:
            return
        table = data.get("configTable") if isinstance(data, dict) else None
        if not isinstance(table, dict) or not all(
            isinstance(ns, str) and isinstance(kv, dict) and all(isinstance(v, str) for v in kv.values())
            for ns, kv in table.items()
        ):
            log.error('%s is not {"configTable":{namespace:{key:value}}}; starting with no KV config '
                      "(the next change keeps the old file as .bak)", self.path)
            return
        self.table = {ns: dict(kv) for ns, kv in table.items()}
        log.info("loaded %d KV config namespaces from %s", len(self.table), self.path)

    # reads -----------------------------------------------------------------------------------------------------
    def get(self, namespace: str, key: str) -> str | None:
        return self.table.get(namespace, {}).get(key)

    def namespace(self, namespace: str) -> dict[str, str] | None:
        """The namespace's entries, or None when it holds none (RocketMQ answers QUERY_NOT_FOUND then)."""
        kv = self.table.get(namespace)
        return dict(kv) if kv else None

    # writes: the caller persists after each ----------------------------------------------------------------
    def put(self, namespace: str, key: str, value: str) -> str | None:
        """Store; returns the previous value."""
        kv = self.table.setdefault(namespace, {})
        previous = kv.get(key)
        kv[key] = value
        return previous

    def delete(self, namespace: str, key: str) -> bool:
        kv = self.table.get(namespace)
        if kv is None or key not in kv:
            return False
        del kv[key]
        if not kv:
            del self.table[namespace]
        return True

    async def persist(self) -> None:
        """Write the whole table; raises OSError when the file cannot be written (the caller reports it)."""
        if self.path is None:
            return
        async with self._write_lock:
            snapshot = {"configTable": {ns: dict(kv) for ns, kv in self.table.items()}}
            await asyncio.to_thread(write_json_atomic, self.path, snapshot)
