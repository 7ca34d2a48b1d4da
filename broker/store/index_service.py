"""IndexService: builds the message index from the commitlog and answers key lookups (RocketMQ IndexService).

Every record is indexed under ``topic#UNIQ_KEY`` (the msgId a producer reports) and ``topic#k`` for each
space-separated ``k`` of its ``KEYS``, except a rolled-back transaction's (RocketMQ skips those too). Master and
slave build the same index, each from its own commitlog, by tailing it like the slave's dispatcher: an append
wakes the service, which indexes up to the commitlog end in rounds of about ``ROUND_BYTES`` and yields between
them, so sends and the HA link never wait behind a backlog. Files roll when full (``maxIndexNum`` entries) and are
created only when the first record is indexed, sparse (``index_file``).

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
from pathlib import Path

from broker.store.commitlog import CommitLog
from broker.store.index_file import IndexFile, file_name
from common.log import RateLimitedLog
from common.service import Service
from remoting.message_codec import PROPERTY_KEYS, PROPERTY_UNIQ_KEY, RecordStatus, check_record, property_value

log = logging.getLogger(__name__)

ROUND_BYTES = 256 << 10
TRANSACTION_TYPE_MASK = 0x3 << 2
TRANSACTION_ROLLBACK = 0x3 << 2


def keys_of(topic: str, properties: bytes) -> list[str]:
    """The index keys of one record."""
    out = []
    uniq = property_value(properties, PROPERTY_UNIQ_KEY)
    if uniq:
        out.append(f"{topic}#{uniq}")
    keys = property_value(properties, PROPERTY_KEYS)
    if keys:
        out.extend(f"{topic}#{k}" for k in keys.split(" ") if k)
    return out


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
        # the tail waits on the event alone (a wait_for per append made a task and a timer each time, which
        # one-message appends paid for every message); this tick is the once-a-second retry it gave
        self.run_every("tick", 1.0, self._wakeup.set)

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
            await self._wakeup.wait()

    def build(self, budget: int) -> bool:
        """Index records from ``position`` for about ``budget`` bytes; True if it moved."""
        cl = self._commitlog
        begin = offset = self.position = max(self.position, cl.min_offset)
        end = min(cl.max_offset, begin + budget)
        while offset < end:
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
            if offset > self._skip_upto and info.sys_flag & TRANSACTION_TYPE_MASK != TRANSACTION_ROLLBACK:
                for key in keys_of(info.topic, info.properties):
                    self._put(key, offset, info.store_timestamp)
            offset += res.size
        self.position = offset
        if self.files:
            self.files[-1].write_header()
        return offset > begin

    def _put(self, key: str, offset: int, store_ts: int) -> None:
        if not self.files or not self.files[-1].put(key, offset, store_ts):
            self._roll()
            self.files[-1].put(key, offset, store_ts)

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
