"""One message index file (RocketMQ IndexFile): a hash table on disk from ``topic#key`` to commitlog offsets.

File ``<storePathRootDir>/index/<yyyyMMddHHmmssSSS>`` (its creation time), ``40 + slots * 4 + entries * 20``
bytes, big-endian, RocketMQ's layout so its tools could read it::

    header (40 B)   off 0   i64  beginTimestamp   store time (ms) of the first entry
                    off 8   i64  endTimestamp     store time of the newest entry
                    off 16  i64  beginPhyOffset   commitlog offset of the first entry
                    off 24  i64  endPhyOffset     commitlog offset of the newest entry
                    off 32  i32  hashSlotCount    slots in use
                    off 36  i32  indexCount       next entry number (entries are numbered from 1; 0 = none)
    slots           i32 per slot: the number of the newest entry whose key hashes there (0: empty)
    entries (20 B)  i32 keyHash, i64 phyOffset, i32 timeDiff (seconds since beginTimestamp), i32 prevIndex

``keyHash`` is ``abs(key.hashCode())`` of Java's String (0 for Integer.MIN_VALUE), the slot ``keyHash % slots``;
each entry links to the previous entry of its slot, so a lookup walks one chain, newest first.

Space: the file is created sparse (``ftruncate``, blocks reserved page by page just before use): RocketMQ's default 5,000,000 slots and
20,000,000 entries make 420,000,040 bytes of address space, but only the pages written take disk: entries fill
pages in order (20 bytes each), slots are touched at random (at most the 20 MB slot table, reached after some
thousands of distinct keys). A broker that indexed nothing has no index file at all.

Invariants: entries are written before the header that counts them (``write_header`` publishes a round of puts);
``endPhyOffset`` is the offset of entry ``indexCount - 1``. ``consistent`` checks that on load: a file whose header and newest entry disagree (a power
loss tore it) is rebuilt by the index service from the commitlog. Hash collisions are possible, so a lookup
returns candidates that the caller checks against the record's own keys. Not thread-safe: the index service's
task only.
"""

from __future__ import annotations

import functools
import mmap
import os
import struct
import time
from collections import deque
from itertools import chain, repeat
from pathlib import Path

from broker.store.index_keys import native
from remoting.message_codec import java_string_hash

HEADER = struct.Struct(">qqqqii")
HEADER_SIZE = 40
SLOT = struct.Struct(">i")
ENTRY = struct.Struct(">iqii")
ENTRY_SIZE = 20
INT_MAX = 2**31 - 1
PAGE = 4096
PACK_ENTRIES = 256  # entries one struct call packs
RESERVE_AHEAD = 256 << 10  # entry bytes given disk blocks ahead of the writes (about 13,000 entries)


@functools.lru_cache(maxsize=PACK_ENTRIES)
def _entries(n: int) -> struct.Struct:
    """``n`` (at most PACK_ENTRIES) entries packed at once (``put_many``)."""
    return struct.Struct(">" + "iqii" * n)


def key_hash(key: str) -> int:
    """RocketMQ's indexKeyHashMethod: ``Math.abs(hashCode)``, and 0 where abs overflows."""
    h = abs(java_string_hash(key))
    return 0 if h > INT_MAX else h


def file_name(now_ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` in local time, as RocketMQ names index files."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(now_ms / 1000)) + f"{now_ms % 1000:03d}"


class IndexFile:
    def __init__(self, path: Path, slots: int, entries: int, *, create: bool) -> None:
        self.path = Path(path)
        self.slots = slots
        self.max_entries = entries
        self.size = HEADER_SIZE + slots * SLOT.size + entries * ENTRY_SIZE
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(self.path, flags, 0o644)
        try:
            if create:
                os.ftruncate(fd, self.size)
                os.posix_fallocate(fd, 0, min(PAGE, self.size))  # the header's page
            elif os.fstat(fd).st_size != self.size:
                raise ValueError(f"{self.path} is {os.fstat(fd).st_size} bytes; an index file of {slots} slots and "
                                 f"{entries} entries is {self.size} (maxHashSlotNum / maxIndexNum changed?)")
            self._map = mmap.mmap(fd, self.size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._slot_pages = bytearray((HEADER_SIZE + slots * SLOT.size) // PAGE + 1)  # 1: known to have its block
        self._entries_reserved = 0  # entry bytes below this offset have their blocks
        (self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count,
         count) = HEADER.unpack_from(self._map, 0)
        self.count = max(1, count)
        self._entries_at = HEADER_SIZE + slots * SLOT.size

    @property
    def full(self) -> bool:
        return self.count >= self.max_entries

    @property
    def empty(self) -> bool:
        return self.count <= 1

    def consistent(self) -> bool:
        """Whether the newest entry is the one the header names (see the module docstring)."""
        if self.empty:
            return True
        _, phy, _, _ = ENTRY.unpack_from(self._map, self._entries_at + (self.count - 1) * ENTRY_SIZE)
        return phy == self.end_phy and self.count <= self.max_entries

    def put(self, key: str, phy_offset: int, store_ts: int) -> bool:
        """Index ``key`` for the record at ``phy_offset``; False when the file is full."""
        if self.full:
            return False
        h = key_hash(key)
        slot_at = HEADER_SIZE + (h % self.slots) * SLOT.size
        entry_at = self._entries_at + self.count * ENTRY_SIZE
        self._reserve(slot_at, entry_at)  # before the slot is even read: see _reserve
        (prev,) = SLOT.unpack_from(self._map, slot_at)
        if prev <= 0 or prev >= self.count:
            prev = 0
        if self.empty:
            self.begin_ts, self.begin_phy = store_ts, phy_offset
        diff = min(max((store_ts - self.begin_ts) // 1000, 0), INT_MAX)
        ENTRY.pack_into(self._map, entry_at, h, phy_offset, diff, prev)
        SLOT.pack_into(self._map, slot_at, self.count)
        if prev == 0:
            self.slot_count += 1
        self.count += 1
        self.end_phy, self.end_ts = phy_offset, store_ts
        return True

    def put_many(self, hashes: list[int], phys: list[int], stamps: list[int], use_native: bool = True) -> int:
        """Index key hashes (``index_keys.hashes``) for the records at ``phys`` stored at ``stamps``, in order;
        how many fit (the rest go to the next file). All entries are one write; each slot is read and written
        once. The pages written get their blocks before any byte changes (``_reserve``), so a full disk raises
        OSError with the file untouched. The C path (``index_keys.native``) writes the same bytes;
        ``use_native=False`` forces the Python one (tests compare the two)."""
        n = min(len(hashes), self.max_entries - self.count)
        if n <= 0:
            return 0
        m, slots, count = self._map, self.slots, self.count
        entries_at = self._entries_at + count * ENTRY_SIZE
        self._reserve(HEADER_SIZE, entries_at)
        self._reserve(HEADER_SIZE, entries_at + (n - 1) * ENTRY_SIZE)
        if self.empty:
            self.begin_ts, self.begin_phy = stamps[0], phys[0]
        begin_ts = self.begin_ts
        if n < len(hashes):
            hashes, phys, stamps = hashes[:n], phys[:n], stamps[:n]
        if native is not None and use_native:
            for page in native.missing_pages(hashes, slots, self._slot_pages):
                self._reserve_slot_page(page)
            new_slots = native.write(m, slots, entries_at, count, begin_ts, hashes, phys, stamps)
            self.slot_count += new_slots
            self.count = count + n
            self.end_phy, self.end_ts = phys[n - 1], stamps[n - 1]
            return n
        # one C-level pass per step (map, comprehensions), not a Python loop per key
        ats = [HEADER_SIZE + h % slots * 4 for h in hashes]
        slot_pages = self._slot_pages
        for page in {at >> 12 for at in ats}:
            if not slot_pages[page]:
                self._reserve_slot_page(page)
        prevs = [p if 0 < p < count else 0 for p in chain.from_iterable(map(SLOT.unpack_from, repeat(m), ats))]
        if len(set(ats)) == n:
            new_slots = prevs.count(0)
        else:  # keys sharing a slot in this batch: each links to the one before it
            new_slots, newest = 0, {}
            for i, at in enumerate(ats):
                e = newest.get(at)
                if e is None:
                    new_slots += prevs[i] == 0
                else:
                    prevs[i] = e
                newest[at] = count + i
        diffs = {ts: min(max((ts - begin_ts) // 1000, 0), INT_MAX) for ts in set(stamps)}
        flat = list(chain.from_iterable(zip(hashes, phys, map(diffs.__getitem__, stamps), prevs)))
        for k in range(0, n, PACK_ENTRIES):
            _entries(min(PACK_ENTRIES, n - k)).pack_into(m, entries_at + k * ENTRY_SIZE,
                                                         *flat[k * 4 : (k + PACK_ENTRIES) * 4])
        deque(map(SLOT.pack_into, repeat(m), ats, range(count, count + n)), maxlen=0)  # in order: the newest wins
        self.slot_count += new_slots
        self.count = count + n
        self.end_phy, self.end_ts = phys[n - 1], stamps[n - 1]
        return n

    def write_header(self) -> None:
        """Publish the puts so far: the index service calls it once per round of records, not per key. A header
        behind its entries is consistent (its newest entry is still the one it names); the records after it are
        indexed again after a crash, and slots naming entries past its count read as empty."""
        HEADER.pack_into(self._map, 0, self.begin_ts, self.end_ts, self.begin_phy, self.end_phy, self.slot_count,
                         self.count)

    def _reserve_slot_page(self, page: int) -> None:
        os.posix_fallocate(self._fd, page * PAGE, min(PAGE, self.size - page * PAGE))
        self._slot_pages[page] = 1

    def _reserve(self, slot_at: int, entry_at: int) -> None:
        """Give the pages this put writes their disk blocks first: a store to a hole of a shared mapping on a full
        disk kills the process with SIGBUS, a failed fallocate only raises OSError (ENOSPC) here, before any
        byte changed, and the index service retries later. On tmpfs even a load from a hole takes a page, so the
        slot's page is reserved before it is read, and ``lookup`` reads slots with pread, which does not allocate.
        Entries are reserved ahead in RESERVE_AHEAD steps."""
        page = slot_at // PAGE
        if not self._slot_pages[page]:
            os.posix_fallocate(self._fd, page * PAGE, min(PAGE, self.size - page * PAGE))
            self._slot_pages[page] = 1
        if entry_at + ENTRY_SIZE > self._entries_reserved:
            start = max(self._entries_reserved, entry_at - entry_at % PAGE)
            end = min(self.size, entry_at + ENTRY_SIZE + RESERVE_AHEAD)
            os.posix_fallocate(self._fd, start, end - start)
            self._entries_reserved = end

    def lookup(self, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        """Commitlog offsets of entries whose hash is ``key``'s and whose time falls in ``[begin_ms, end_ms]``,
        newest first. An entry's time is kept in whole seconds, so it may read up to 999 ms early: it matches a
        range that starts within that second (RocketMQ compares the rounded time and can miss such a message)."""
        out: list[int] = []
        if self.empty or max_num <= 0:
            return out
        h = key_hash(key)
        (index,) = SLOT.unpack(os.pread(self._fd, SLOT.size, HEADER_SIZE + (h % self.slots) * SLOT.size))
        seen = 0
        while 0 < index < self.count and len(out) < max_num and seen < self.count:
            seen += 1
            entry_hash, phy, diff, prev = ENTRY.unpack_from(self._map, self._entries_at + index * ENTRY_SIZE)
            if diff < 0:
                break
            at = self.begin_ts + diff * 1000
            if entry_hash == h and at + 999 >= begin_ms and at <= end_ms:
                out.append(phy)
            if at + 999 < begin_ms or prev == index:
                break  # the chain goes back in time: nothing older can fall in the range
            index = prev
        return out

    def overlaps(self, begin_ms: int, end_ms: int) -> bool:
        return not self.empty and self.begin_ts - 999 <= end_ms and self.end_ts >= begin_ms

    def flush(self) -> None:
        self.write_header()
        self._map.flush()

    def close(self) -> None:
        if not self._map.closed:
            self.write_header()
            self._map.close()
            os.close(self._fd)

    def destroy(self) -> None:
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
