"""KVConfigManager: the nameserver's namespaced key/value store (RocketMQ's KVConfigManager), persisted.

Its one real user is namespace ``ORDER_TOPIC_CONFIG``: ``mqadmin updateTopic -o true`` puts
``<topic> -> "brokerName:queueNums;..."`` there, routes carry it as ``orderTopicConf`` (when
``orderMessageEnable``) and every REGISTER_BROKER reply carries the namespace as a KVTable.

It is the only state the nameserver persists (routes are rebuilt from registrations). File format, RocketMQ's
``kvConfig.json``: ``{"configTable":{"<namespace>":{"<key>":"<value>"}}}``, written atomically (common.persist: tmp,
fsync, rename, ``.bak`` kept) after a change, never before one, so a nameserver that is never asked to store a
key never creates the file. A damaged file falls back to its ``.bak``; a file of the wrong shape or one that cannot
be read is logged and ignored until the next change replaces it (the old content stays in ``.bak``); the
nameserver's main job, routing, does not depend on it.

PUT_KV_CONFIG and DELETE_KV_CONFIG answer once the change is on disk, as RocketMQ's persist-per-put did, so nothing a
caller was told is stored is lost to a crash. But the writes are batched (``common.persist.BatchedJsonWriter``): every
put that arrives while a write runs shares the next one, the table is serialised in a worker thread, and writes take
at most a tenth of a core (a large file is written less often). RocketMQ rewrote the file per put on the caller's
thread; here 19,800 puts took over 20 minutes and made a 20 MB file before the change.

Anyone who reaches the port may put (RocketMQ has no ACL on it), so the table is bounded: ``maxKvConfigEntries`` in
all, ``maxKvConfigEntriesPerNamespace`` per namespace. A put of a new key beyond either is refused (replacing an
existing key's value always works); the caller deletes entries (``mqadmin deleteKvConfig``) or raises the key.

Not thread-safe: the event loop calls it; the write itself runs in a worker thread, one write at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from common.persist import BatchedJsonWriter, Render, read_json

log = logging.getLogger(__name__)

ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"  # RocketMQ's NamesrvUtil.NAMESPACE_ORDER_TOPIC_CONFIG
DEFAULT_MAX_ENTRIES = 100_000
DEFAULT_MAX_ENTRIES_PER_NAMESPACE = 10_000
DEFAULT_FLUSH_INTERVAL_S = 0.0  # every change is flushed by its put, so only the CPU cap spaces the writes


class KVConfigFull(Exception):
    """A put of a new key beyond ``maxKvConfigEntries`` / ``maxKvConfigEntriesPerNamespace``; the text says what
    to do."""


class KVConfigManager:
    def __init__(
        self,
        path: str | Path | None,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_entries_per_namespace: int = DEFAULT_MAX_ENTRIES_PER_NAMESPACE,
        flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
    ) -> None:
        self.path = Path(path).expanduser() if path else None
        self.table: dict[str, dict[str, str]] = {}
        self.max_entries = max_entries
        self.max_entries_per_namespace = max_entries_per_namespace
        self.entries = 0
        self.refusals = 0
        self.writer = (
            BatchedJsonWriter(self.path, self._snapshot, min_interval_s=flush_interval_s) if self.path else None
        )

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
        self.table = {ns: dict(kv) for ns, kv in table.items() if kv}
        self.entries = sum(len(kv) for kv in self.table.values())
        log.info("loaded %d KV config entries in %d namespaces from %s", self.entries, len(self.table), self.path)
        if self.entries > self.max_entries:
            log.warning("%s holds %d KV config entries, more than maxKvConfigEntries=%d: new keys are refused until "
                        "entries are deleted", self.path, self.entries, self.max_entries)

    # reads -----------------------------------------------------------------------------------------------------
    def get(self, namespace: str, key: str) -> str | None:
        return self.table.get(namespace, {}).get(key)

    def namespace(self, namespace: str) -> dict[str, str] | None:
        """The namespace's entries, or None when it holds none (RocketMQ answers QUERY_NOT_FOUND then)."""
        kv = self.table.get(namespace)
        return dict(kv) if kv else None

    # writes: the caller awaits persist() before answering -----------------------------------------------------
    def put(self, namespace: str, key: str, value: str) -> str | None:
        """Store; returns the previous value. Raises KVConfigFull for a new key beyond a limit."""
        kv = self.table.get(namespace)
        previous = kv.get(key) if kv is not None else None
        if previous is None:
            in_namespace = len(kv) if kv is not None else 0
            if self.entries >= self.max_entries or in_namespace >= self.max_entries_per_namespace:
                self.refusals += 1
                raise KVConfigFull(
                    f"the KV config holds {self.entries} entries ({in_namespace} in namespace {namespace}), the limit"
                    f" is maxKvConfigEntries={self.max_entries} (maxKvConfigEntriesPerNamespace="
                    f"{self.max_entries_per_namespace} per namespace); delete unused entries (mqadmin deleteKvConfig)"
                    " or raise the limit in the nameserver's conf"
                )
            kv = self.table.setdefault(namespace, {})
            self.entries += 1
        kv[key] = value
        self._changed()
        return previous

    def delete(self, namespace: str, key: str) -> bool:
        kv = self.table.get(namespace)
        if kv is None or key not in kv:
            return False
        del kv[key]
        self.entries -= 1
        if not kv:
            del self.table[namespace]
        self._changed()
        return True

    def _changed(self) -> None:
        if self.writer is not None:
            self.writer.changed()

    def _snapshot(self) -> Render:
        # The inner dicts change in place, so they are copied here (C-level copies: about 1 ms per 100,000 entries);
        # the file's object is built and serialised in the writer's thread.
        table = {ns: kv.copy() for ns, kv in self.table.items()}
        return lambda: {"configTable": table}

    async def persist(self) -> None:
        """Wait until every change so far is on disk; raises OSError when the file cannot be written (the caller
        reports it; the write is retried with the next change or interval)."""
        if self.writer is not None:
            await self.writer.flush()

    async def close(self) -> None:
        """Graceful stop: write what is pending now."""
        if self.writer is not None:
            await self.writer.close()

    # metrics --------------------------------------------------------------------------------------------------
    def metric_families(self) -> Iterable[Metric]:
        writes = self.writer.writes if self.writer is not None else 0
        failures = self.writer.failures if self.writer is not None else 0
        return [
            GaugeMetricFamily("rocketmq_namesrv_kv_config_entries", "KV config entries held (all namespaces).",
                              self.entries),
            GaugeMetricFamily("rocketmq_namesrv_kv_config_limit", "maxKvConfigEntries.", self.max_entries),
            CounterMetricFamily("rocketmq_namesrv_kv_config_refusals",
                                "PUT_KV_CONFIG of new keys refused by maxKvConfigEntries(PerNamespace).",
                                self.refusals),
            CounterMetricFamily("rocketmq_namesrv_kv_config_persists", "Completed writes of kvConfig.json.", writes),
            CounterMetricFamily("rocketmq_namesrv_kv_config_persist_failures", "Failed writes of kvConfig.json.",
                                failures),
        ]
