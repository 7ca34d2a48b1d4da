"""IndexService: builds the message index from the commitlog and answers key lookups (RocketMQ IndexService).

Every record is indexed under ``topic#UNIQ_KEY`` (the msgId a producer reports) and ``topic#k`` for each
space-separated ``k`` of its ``KEYS``, except a rolled-back transaction's (RocketMQ skips those too). Master and
slave build the same index, each from its own commitlog, by tailing it like the slave's dispatcher: an append
wakes the service, which indexes up to the commitlog end in rounds of about ``ROUND_BYTES`` and yields between
them, so sends and the HA link never wait behind a backlog. Files roll when full (``maxIndexNum`` entries) and are
created only when the first record is indexed, sparse (``index_file``).

The records are not parsed twice: the master's put path offers each batch it appended (``offer_put``: topic and
properties it already holds) and a slave's dispatcher the records its scan parsed (``offer_scanned``); a round
takes the offers that start where the index stands and reads the commitlog itself only where nothing was offered
(a restart, a backlog past ``MAX_OFFERED_BYTES``). A round's keys are hashed and written as one batch
(``index_keys.hashes``, ``IndexFile.put_many``).

Restart: indexing resumes at the newest file's ``endPhyOffset`` (records at or below it are skipped, so nothing is
indexed twice). A newest file whose header and last entry disagree (a power loss) is deleted and rebuilt from the
previous file's end. Entries pointing past the commitlog end (a truncated tail) or at expired files are harmless:
every candidate is checked against the record's own keys by the caller. ``delete_below`` drops files that only
point into deleted commitlog files.

Task-safety: event loop only; lookups and building share the loop, never a thread.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import deque
from operator import itemgetter
from pathlib import Path

from broker.store.commitlog import CommitLog
from broker.store.index_file import IndexFile, file_name
from broker.store.index_keys import record_keys
from broker.store.put_prepare import E_COMMON, E_PROPS, E_TOPIC
from common.log import RateLimitedLog
from common.service import Service
from remoting.message_codec import RecordStatus, check_record

log = logging.getLogger(__name__)

ROUND_BYTES = 256 << 10
_TOPIC_OF, _PROPS_OF = itemgetter(E_TOPIC), itemgetter(E_PROPS)
# what offers may hold while they wait for the tail task (their properties' bytes, plus RECORD_WEIGHT per record);
# past it the tail reads the commitlog instead
MAX_OFFERED_BYTES = 16 << 20
RECORD_WEIGHT = 128
TRANSACTION_TYPE_MASK = 0x3 << 2
TRANSACTION_ROLLBACK = 0x3 << 2


class IndexService(Service):
    def __init__(self, root: Path, commitlog: CommitLog, *, slots: int, entries: int) -> None:
        super().__init__("index")
        self.directory = Path(root) / "index"
        self._commitlog = commitlog
        self._slots = slots
        self._entries = entries
        self.files: list[IndexFile] = []
        self.position = 0  # the next commitlog offset to look at
        self._skip_upto = -1  # records at or below this offset are already indexed
        self._wakeup = asyncio.Event()
        # (weight, (start offset, end offset, records, their offsets or None, store timestamp, no transaction record
        # among them)): batches the put path and the dispatcher parsed, waiting for the tail task (``offer_put``,
        # ``offer_scanned``); records are (topics, properties, sys flags or None) of a put batch, or the
        # dispatcher's tuples
        self._offered: deque[tuple] = deque()
        self._offered_bytes = 0
        self._failures = RateLimitedLog(log, 60.0)

    # loading (blocking: the store's disk executor, before start) ----------------------------------------------
    def load(self) -> None:
        if self.directory.is_dir():
            for name in sorted(os.listdir(self.directory)):
                if name.isdigit():
                    self.files.append(IndexFile(self.directory / name, self._slots, self._entries, create=False))
        if self.files and not self.files[-1].consistent():
            torn = self.files.pop()
            log.warning("index file %s is torn (header and newest entry disagree); rebuilding it from the commitlog",
                        torn.path)
            torn.destroy()
        if self.files:
            self._skip_upto = self.files[-1].end_phy
            self.position = self.files[-1].end_phy
        else:
            self.position = self._commitlog.min_offset

    # building --------------------------------------------------------------------------------------------
    def on_append(self, _end: int) -> None:
        self._wakeup.set()

    async def on_start(self) -> None:
        self.spawn("tail", self._tail())

    async def on_stop(self) -> None:
        self._wakeup.set()

    async def _tail(self) -> None:
        while not self.stopping:
            self._wakeup.clear()
            if self.position < self._commitlog.max_offset:
                try:
                    moved = self.build(ROUND_BYTES)
                except Exception:
                    self._failures.exception("indexing stopped at commitlog offset %d (a full disk, or see the error); "
                                             "retrying every second", self.position)
                    await self.sleep(1.0)
                    continue
                if moved and self.position < self._commitlog.max_offset:
                    await asyncio.sleep(0)  # more to index: let sends run between rounds
                    continue
            try:
                async with asyncio.timeout(1.0):  # no task per wait, as wait_for would make (one per put batch)
                    await self._wakeup.wait()
            except TimeoutError:
                pass

    # what the writers already parsed -------------------------------------------------------------------
    def offer_put(self, entries: list, phys: list[int], store_ts: int, end: int, plain: bool) -> None:
        """A batch the put path just appended (its ``put_prepare`` entries and their offsets), indexed from what
        the put path already holds instead of parsing the records again; ``plain``: no transaction record in it.
        Only the topics and properties are kept (two C-level passes), never the bodies."""
        props = list(map(_PROPS_OF, entries))
        flags = None if plain else [entry[E_COMMON][0] for entry in entries]
        self._offer((phys[0], end, (list(map(_TOPIC_OF, entries)), props, flags), phys, store_ts, plain),
                    sum(map(len, props)) + RECORD_WEIGHT * len(props))

    def offer_scanned(self, start: int, end: int, records: list[tuple[int, str, bytes, int, int]]) -> None:
        """Records the dispatcher parsed in ``[start, end)`` (a slave's replicated bytes, or recovery), as
        ``(offset, topic, properties, store timestamp, sys flag)``."""
        if records:
            self._offer((start, end, records, None, 0, False),
                        sum(len(r[2]) for r in records) + RECORD_WEIGHT * len(records))

    def _offer(self, item: tuple, weight: int) -> None:
        if self._offered_bytes + weight > MAX_OFFERED_BYTES:  # far behind (recovery): read the commitlog instead
            self._drop_offered()
        self._offered.append((weight, item))
        self._offered_bytes += weight

    def _drop_offered(self) -> None:
        self._offered.clear()
        self._offered_bytes = 0

    # building --------------------------------------------------------------------------------------------
    def build(self, budget: int) -> bool:
        """Index records from ``position`` for about ``budget`` bytes; True if it moved. The records come from
        what the put path or the dispatcher offered where it starts at ``position``, else from the commitlog; their
        keys are hashed and written as one batch (``index_keys``, ``IndexFile.put_many``)."""
        cl = self._commitlog
        begin = self.position = max(self.position, cl.min_offset)
        stop = min(cl.max_offset, begin + budget)
        offered = self._offered
        batch: tuple[list, list, list, list] = ([], [], [], [])  # records' topics, properties, offsets, store times
        try:
            while self.position < stop:
                while offered and offered[0][1][1] <= self.position:
                    self._offered_bytes -= offered.popleft()[0]  # already indexed (a restart, a re-dispatch)
                if offered and offered[0][1][0] <= self.position:
                    weight, item = offered.popleft()
                    self._offered_bytes -= weight
                    self._take(item, batch)
                    continue
                if not self._scan(min(stop, offered[0][1][0]) if offered else stop, batch):
                    break
            self._index(*batch)
        except BaseException:
            self.position = begin  # the next round collects the same records again, from the commitlog
            self._drop_offered()
            raise
        if self.files:
            self.files[-1].write_header()
        return self.position > begin

    def _take(self, item: tuple, batch: tuple[list, list, list, list]) -> None:
        start, end, records, phys, store_ts, plain = item
        topics, props, offsets, stamps = batch
        low = max(self.position, self._skip_upto + 1)
        if plain and phys[0] >= low:  # a put batch without transaction records: every record, C-level passes
            topics += records[0]
            props += records[1]
            offsets += phys
            stamps += [store_ts] * len(phys)
        elif phys is not None:  # a put batch with transaction records, or partly indexed already
            flags = records[2] or [0] * len(phys)
            for topic, raw, sys_flag, phy in zip(*records[:2], flags, phys, strict=True):
                if phy >= low and sys_flag & TRANSACTION_TYPE_MASK != TRANSACTION_ROLLBACK:
                    topics.append(topic)
                    props.append(raw)
                    offsets.append(phy)
                    stamps.append(store_ts)
        else:
            for phy, topic, raw, ts, sys_flag in records:
                if phy >= low and sys_flag & TRANSACTION_TYPE_MASK != TRANSACTION_ROLLBACK:
                    topics.append(topic)
                    props.append(raw)
                    offsets.append(phy)
                    stamps.append(ts)
        self.position = end

    def _scan(self, limit: int, batch: tuple[list, list, list, list]) -> bool:
        """Parse the commitlog from ``position`` up to ``limit`` (nobody offered these records: a restart, a
        backlog); True if it moved."""
        cl = self._commitlog
        begin = offset = self.position
        records = []
        while offset < limit:
            found = cl.view_at(offset)
            if found is None:
                break
            mf, pos = found
            res = check_record(mf.buffer[: mf.wrote_position], pos, max_size=cl.max_record_size)
            if res.status is RecordStatus.BLANK:
                offset = mf.end_offset
                continue
            if res.status is not RecordStatus.VALID:
                break  # an append in progress on a slave: the next wakeup goes on from here
            info = res.info
            records.append((offset, info.topic, info.properties, info.store_timestamp, info.sys_flag))
            offset += res.size
        self._take((begin, offset, records, None, 0, False), batch)
        return offset > begin

    def _index(self, topics: list[str], props: list[bytes], phys: list[int], times: list[int]) -> None:
        hashed, offsets, stamps = record_keys(topics, props, phys, times)
        done = 0
        while done < len(hashed):
            put = self.files[-1].put_many(hashed[done:], offsets[done:], stamps[done:]) if self.files else 0
            if put == 0:
                self._roll()
            done += put

    def _roll(self) -> None:
        if self.files:
            self.files[-1].flush()
        self.directory.mkdir(parents=True, exist_ok=True)
        now = int(time.time() * 1000)
        while True:
            path = self.directory / file_name(now)
            if not path.exists() and (not self.files or path.name > self.files[-1].path.name):
                break
            now += 1
        self.files.append(IndexFile(path, self._slots, self._entries, create=True))
        log.info("index file %s created", path)

    # lookups ---------------------------------------------------------------------------------------------
    def lookup(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        """Candidate commitlog offsets for ``key`` in ``topic``, newest file first, without duplicates."""
        full = f"{topic}#{key}"
        out: list[int] = []
        seen: set[int] = set()
        for f in reversed(self.files):
            if len(out) >= max_num:
                break
            if not f.overlaps(begin_ms, end_ms):
                continue
            for phy in f.lookup(full, max_num - len(out), begin_ms, end_ms):
                if phy not in seen:
                    seen.add(phy)
                    out.append(phy)
        return out

    @property
    def last_update(self) -> tuple[int, int]:
        """(indexLastUpdateTimestamp, indexLastUpdatePhyoffset) of QUERY_MESSAGE's answer."""
        if not self.files:
            return 0, 0
        return self.files[-1].end_ts, self.files[-1].end_phy

    # maintenance -----------------------------------------------------------------------------------------
    def delete_below(self, phy_min: int) -> int:
        """Delete files all of whose entries point below the commitlog's first offset (never the newest)."""
        gone = 0
        while len(self.files) > 1 and self.files[0].end_phy < phy_min:
            f = self.files.pop(0)
            f.destroy()
            gone += 1
            log.info("index file %s deleted (its messages expired)", f.path)
        return gone

    def flush(self) -> None:
        for f in self.files[-2:]:
            f.flush()

    def close(self) -> None:
        for f in self.files:
            f.flush()
            f.close()
