"""Send dedup window: ``(topic, UNIQ_KEY) -> first send result``, for SendMessageRequest.dedup=true.

A send with ``dedup`` set asks the broker not to store a message whose UNIQ_KEY it already stored for the topic
within ``sendDedupWindowSeconds``; the response repeats the first result (queue, queue offset, offsetMsgId,
physical offset, code). Idempotent producers (the Spark sink) give every message a deterministic UNIQ_KEY and
resend freely after a failure.

Pure and single-threaded (the broker's event loop): no I/O, no asyncio; the clock is injected.

Structure: one ``dict`` in insertion order (= store-time order, since entries are added when stored), keyed by
``topic + "\\x00" + uniq_key`` (one string per entry, ~250 bytes with its value). Bounds, both enforced on every
insert, oldest first:

- time: entries older than ``window_s`` are dropped (and never returned, even before they are dropped);
- count: at most ``max_entries``; an entry dropped by count before its window ended is counted in
  ``evicted_early`` (the effective window shrank under load: raise ``max_entries`` or lower the rate).

Cost is paid only by dedup requests: a plain send never touches the window.

Concurrency: ``plan()`` claims the new keys of a request as *pending* before the store append is awaited, so a
second request carrying a key that is still being stored (a client retry racing its own first attempt) sees
IN_FLIGHT and is told to retry, instead of storing the message twice. ``complete()`` fills the claims with the
stored results; ``release()`` drops them when the append failed, so a retry may store the messages.

Restart: the window lives in memory. After a restart it is rebuilt from the commitlog tail with
``restore_from_store`` (every record of the last window with a UNIQ_KEY; the record does not say whether its
send asked for dedup, so all are indexed, newest ``max_entries`` kept). That matters: the commonest reason for
an idempotent producer to resend is that the broker went down mid-send, which is exactly when an in-memory-only
window would be empty and let the resent messages in twice.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from remoting.message_codec import PROPERTY_UNIQ_KEY, RecordStatus, offset_msg_id, property_value

DEFAULT_MAX_ENTRIES = 200_000
_SEP = "\x00"


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class FirstSend:
    """What the broker answered for the first send of a UNIQ_KEY (the fields a repeat response carries)."""

    code: int
    queue_id: int
    queue_offset: int
    physical_offset: int
    msg_id: str  # offsetMsgId: store host + physical offset, hex
    stored_at_ms: int  # store timestamp (wall clock, epoch ms); the window is measured from it


class _Pending:
    """Marker value of a claimed key whose append is still running."""

    __slots__ = ("stored_at_ms",)

    def __init__(self, stored_at_ms: int) -> None:
        self.stored_at_ms = stored_at_ms


class Verdict(enum.Enum):
    NEW = "NEW"  # store it
    DUPLICATE = "DUPLICATE"  # stored before within the window: repeat the first result
    REPEAT = "REPEAT"  # the same key earlier in this very request: same result as that message
    IN_FLIGHT = "IN_FLIGHT"  # another request is storing it right now: ask the client to retry shortly


@dataclass(slots=True)
class DedupPlan:
    """The decision for one request, message by message (indices into the request's messages)."""

    topic: str
    keys: list[str]
    new_indices: list[int] = field(default_factory=list)  # to store, in request order
    duplicates: dict[int, FirstSend] = field(default_factory=dict)
    repeats: dict[int, int] = field(default_factory=dict)  # index -> earlier index with the same key
    in_flight: list[int] = field(default_factory=list)
    claimed: list[str] = field(default_factory=list)  # window keys claimed as pending by this plan

    @property
    def all_duplicates(self) -> bool:
        return not self.new_indices and not self.in_flight

    def results(self, stored: Sequence[FirstSend]) -> list[FirstSend]:
        """One FirstSend per request message, given the results of ``new_indices`` in order."""
        if len(stored) != len(self.new_indices):
            raise ValueError(f"{len(stored)} results for {len(self.new_indices)} stored messages")
        out: list[FirstSend | None] = [None] * len(self.keys)
        for i, first in self.duplicates.items():
            out[i] = first
        for i, first in zip(self.new_indices, stored, strict=True):
            out[i] = first
        for i in sorted(self.repeats):
            out[i] = out[self.repeats[i]]
        missing = [i for i, f in enumerate(out) if f is None]
        if missing:
            raise ValueError(f"messages {missing} have no result (in flight); answer the request with a retry")
        return out  # type: ignore[return-value]


class SendDedupWindow:
    """The broker's dedup window. See the module docstring for bounds, cost and restart."""

    def __init__(
        self,
        window_s: float,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        *,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        if window_s <= 0:
            raise ValueError(f"sendDedupWindowSeconds must be positive, got {window_s}")
        if max_entries <= 0:
            raise ValueError(f"the dedup window needs room for at least one entry, got max_entries={max_entries}")
        self.window_ms = int(window_s * 1000)
        self.max_entries = max_entries
        self.clock_ms = clock_ms
        self._entries: dict[str, FirstSend | _Pending] = {}
        self.hits = 0  # messages answered from the window
        self.evicted_early = 0  # entries dropped by the count bound before their window ended

    def __len__(self) -> int:
        return len(self._entries)

    def oldest_age_s(self) -> float:
        """Age of the oldest entry: the window actually covered now (less than window_s under load)."""
        for value in self._entries.values():
            return max(0.0, (self.clock_ms() - value.stored_at_ms) / 1000)
        return 0.0

    # lookups ---------------------------------------------------------------------------------------------
    def lookup(self, topic: str, uniq_key: str) -> FirstSend | None:
        """The first result of ``uniq_key`` on ``topic`` if it is within the window (pending counts as absent)."""
        value = self._entries.get(topic + _SEP + uniq_key)
        if isinstance(value, FirstSend) and self.clock_ms() - value.stored_at_ms <= self.window_ms:
            return value
        return None

    def plan(self, topic: str, keys: Sequence[str]) -> DedupPlan:
        """Decide every message of one request and claim the new keys. An empty key is never deduplicated.

        When any message is IN_FLIGHT nothing is claimed: the caller answers the whole request with a retry.
        """
        now = self.clock_ms()
        plan = DedupPlan(topic, list(keys))
        seen: dict[str, int] = {}
        for i, key in enumerate(plan.keys):
            if not key:
                plan.new_indices.append(i)
                continue
            if key in seen:
                plan.repeats[i] = seen[key]
                continue
            seen[key] = i
            value = self._entries.get(topic + _SEP + key)
            if isinstance(value, _Pending):
                plan.in_flight.append(i)
            elif value is not None and now - value.stored_at_ms <= self.window_ms:
                plan.duplicates[i] = value
            else:
                plan.new_indices.append(i)
        if plan.in_flight:
            return plan
        self.hits += len(plan.duplicates) + sum(1 for j in plan.repeats.values() if j in plan.duplicates)
        pending = _Pending(now)
        for i in plan.new_indices:
            if plan.keys[i]:
                wkey = topic + _SEP + plan.keys[i]
                self._entries.pop(wkey, None)  # an expired entry: re-insert at the young end
                self._entries[wkey] = pending
                plan.claimed.append(wkey)
        self._evict(now)
        return plan

    # outcomes --------------------------------------------------------------------------------------------
    def complete(self, plan: DedupPlan, stored: Sequence[FirstSend]) -> None:
        """Record the results of ``plan.new_indices`` (in order) after the append succeeded."""
        if len(stored) != len(plan.new_indices):
            raise ValueError(f"{len(stored)} results for {len(plan.new_indices)} stored messages")
        for i, first in zip(plan.new_indices, stored, strict=True):
            key = plan.keys[i]
            if not key:
                continue
            wkey = plan.topic + _SEP + key
            if wkey in self._entries:  # still claimed (not evicted meanwhile): keep its place in the order
                self._entries[wkey] = first
        plan.claimed.clear()

    def release(self, plan: DedupPlan) -> None:
        """Drop the claims of a plan whose append failed (nothing stored), so a retry can store them."""
        for wkey in plan.claimed:
            if isinstance(self._entries.get(wkey), _Pending):
                del self._entries[wkey]
        plan.claimed.clear()

    def restore(self, topic: str, uniq_key: str, first: FirstSend) -> None:
        """Add one entry found in the commitlog at start (oldest first); entries outside the window are skipped."""
        now = self.clock_ms()
        if not uniq_key or now - first.stored_at_ms > self.window_ms:
            return
        wkey = topic + _SEP + uniq_key
        if wkey not in self._entries:  # the first store of a key wins
            self._entries[wkey] = first
            self._evict(now, restoring=True)

    def _evict(self, now: int, *, restoring: bool = False) -> None:
        entries = self._entries
        moved = 0
        while entries and moved < len(entries):
            wkey = next(iter(entries))
            value = entries[wkey]
            expired = now - value.stored_at_ms > self.window_ms
            if not expired and len(entries) <= self.max_entries:
                return
            if isinstance(value, _Pending) and not expired:
                # Never drop a live claim by count: its request is mid-append. Move it to the young end.
                del entries[wkey]
                entries[wkey] = value
                moved += 1
                continue
            del entries[wkey]
            if not expired and not restoring:
                self.evicted_early += 1


def restore_from_records(
    window: SendDedupWindow,
    records: Iterable[tuple[int, object]],
    store_host: tuple[str, int],
    *,
    code: int = 0,
) -> int:
    """Feed ``(phy_offset, CheckResult)`` pairs, as ``CommitLog.iter_records`` yields them, into ``window``.

    Every VALID record with a UNIQ_KEY whose store time is within the window becomes an entry (the repeat of a
    restored key answers SUCCESS: the original code is not in the record). Stops at the first non-VALID record.
    Returns the number of entries added.
    """
    before = len(window)
    id_prefix = offset_msg_id(store_host, 0)[:16]  # store IPv4 + port: the same for every record
    for phy_offset, result in records:
        if result.status is not RecordStatus.VALID:  # type: ignore[attr-defined]
            break
        info = result.info  # type: ignore[attr-defined]
        key = property_value(info.properties, PROPERTY_UNIQ_KEY)
        if not key:
            continue
        window.restore(
            info.topic,
            key,
            FirstSend(
                code,
                info.queue_id,
                info.queue_offset,
                phy_offset,
                f"{id_prefix}{phy_offset:016X}",
                info.store_timestamp,
            ),
        )
    return len(window) - before


DEFAULT_MAX_SCAN_BYTES = 512 * 1024 * 1024


def restore_from_store(
    window: SendDedupWindow,
    store,
    store_host: tuple[str, int],
    *,
    max_scan_bytes: int = DEFAULT_MAX_SCAN_BYTES,
) -> tuple[int, int]:
    """Rebuild ``window`` from the tail of a recovered ``MessageStore`` at broker start, before sends are taken.

    Scans from the newest commitlog file whose first record is older than the window (RocketMQ's
    ``isMappedFileMatchedRecover`` choice), but never more than ``max_scan_bytes`` back from the end (whole
    files are skipped to stay within it, so the scan starts where a record starts; ~1 M records of 1 KiB per
    512 MiB, a few seconds). Blocking: run it in an executor. Returns (entries added, offset the scan began at).
    """
    end = store.max_phy_offset
    if end <= store.min_phy_offset:
        return 0, store.min_phy_offset
    file_size = store.config.mapped_file_size_commit_log
    begin = store.commitlog_start_at_time(window.clock_ms() - window.window_ms)
    floor = end - max_scan_bytes
    if begin < floor:
        last_file = (end - 1) - (end - 1) % file_size
        begin = min(-(-floor // file_size) * file_size, last_file)  # the first whole file within the budget
    return restore_from_records(window, store.scan_commitlog(begin, end), store_host), begin
