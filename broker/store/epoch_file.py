"""The store's epoch history (RocketMQ 5 EpochFileCache): which master epoch wrote which range of the commitlog.

Controller mode gives each reign of a broker group's master a ``masterEpoch``. A broker that becomes master appends
``(epoch, its max offset)``; a slave copies the master's entries as it streams. Comparing two histories tells a
demoted master where its log stops agreeing with the new master's (``consistent_offset``), which is where it must
truncate before it streams again (spec rocketmq-replication.md §9.5).

File ``<storePathRootDir>/epochFileCheckpoint``, RocketMQ's CheckpointFile text format, UTF-8::

    line 1     N, the number of entries (decimal)
    line 2     CRC32 of the entry text (lines 3 .. N+2, each with its '\\n'), masked to 31 bits, decimal
    lines 3..  one ``epoch-startOffset`` per entry, oldest first

Example: ``2\\n773307083\\n7-7000\\n8-8000\\n``. The previous content is kept as ``epochFileCheckpoint.bak``.

Invariants (checked by ``check``, so a damaged or hand-edited file is refused, never half-trusted): epochs grow
strictly; start offsets never decrease; every offset and epoch is >= 0. Entry ``i`` covers
``[start_i, start_{i+1})``; the last entry runs to the log's end. An entry may be empty (a master that wrote
nothing before it lost its role).

Crash behaviour: the file is replaced atomically (tmp, fsync, rename, directory fsync; ``common.persist``). A
crash leaves the old or the new history, and a history longer than the log (entries starting past the recovered
commitlog end) is cut after recovery by ``EpochFile.fit_to``: those epochs wrote nothing that survived.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from common.errors import PyrmqError
from common.persist import write_bytes_atomic

FILE_NAME = "epochFileCheckpoint"


class EpochFileError(PyrmqError):
    """An epoch history that cannot be trusted; the store must not serve as a replica until an operator looks."""


@dataclass(frozen=True, slots=True, order=True)
class EpochEntry:
    epoch: int
    start_offset: int


def crc_of(text: bytes) -> int:
    """RocketMQ's ``UtilAll.crc32``: CRC32 with the sign bit cleared."""
    return zlib.crc32(text) & 0x7FFFFFFF


def encode(entries: Sequence[EpochEntry]) -> bytes:
    body = "".join(f"{e.epoch}-{e.start_offset}\n" for e in entries).encode("ascii")
    return f"{len(entries)}\n{crc_of(body)}\n".encode("ascii") + body


def _number(text: str, what: str, source: str) -> int:
    if not text.isascii() or not text.isdigit():
        raise EpochFileError(f"{source}: {what} {text!r} is not a decimal number")
    return int(text)


def decode(data: bytes, source: str) -> list[EpochEntry]:
    """Parse and check a whole file; raises ``EpochFileError`` naming what is wrong."""
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise EpochFileError(f"{source}: not ASCII text") from None
    head, sep, rest = text.partition("\n")
    crc_text, sep2, body = rest.partition("\n")
    if not sep or not sep2:
        raise EpochFileError(f"{source}: truncated header (want the entry count and the CRC on two lines)")
    count = _number(head, "entry count", source)
    crc = _number(crc_text, "CRC", source)
    if crc != crc_of(body.encode("ascii")):
        raise EpochFileError(f"{source}: CRC mismatch (the file was cut or edited)")
    lines = body.split("\n")
    if lines[-1] != "":
        raise EpochFileError(f"{source}: the last entry has no line end")
    lines.pop()
    if len(lines) != count:
        raise EpochFileError(f"{source}: header says {count} entries, the file holds {len(lines)}")
    entries = []
    for line in lines:
        epoch, dash, start = line.partition("-")
        if not dash:
            raise EpochFileError(f"{source}: entry {line!r} is not epoch-startOffset")
        entries.append(EpochEntry(_number(epoch, "epoch", source), _number(start, "start offset", source)))
    check(entries, source)
    return entries


def check(entries: Sequence[EpochEntry], source: str) -> None:
    for prev, cur in zip(entries, entries[1:]):
        if cur.epoch <= prev.epoch:
            raise EpochFileError(f"{source}: epoch {cur.epoch} follows epoch {prev.epoch} (epochs must grow)")
        if cur.start_offset < prev.start_offset:
            raise EpochFileError(f"{source}: epoch {cur.epoch} starts at {cur.start_offset}, before epoch "
                                 f"{prev.epoch} at {prev.start_offset}")


def end_of(entries: Sequence[EpochEntry], index: int, log_end: int) -> int:
    """Where entry ``index`` stops: the next entry's start, or the log's end for the last one."""
    return entries[index + 1].start_offset if index + 1 < len(entries) else log_end


def consistent_offset(
    local: Sequence[EpochEntry], local_end: int, master: Sequence[EpochEntry], master_end: int
) -> int | None:
    """The offset up to which a replica's log is the master's (spec §9.5), or None when they share no epoch.

    Walking the local history from its newest entry, the first epoch that the master also has with the same start
    offset is the newest reign both logs agree began at the same place; both copies of it are prefixes of that
    reign's writes, so they agree up to the shorter one. A local history none of whose reigns holds a message (a
    new replica, or a broker elected and deposed before it wrote) agrees at 0: start over, which is always safe.
    """
    if all(end_of(local, i, local_end) <= e.start_offset for i, e in enumerate(local)):
        return 0
    starts = {e.epoch: (i, e.start_offset) for i, e in enumerate(master)}
    for i in range(len(local) - 1, -1, -1):
        entry = local[i]
        found = starts.get(entry.epoch)
        if found is None or found[1] != entry.start_offset:
            continue
        return min(end_of(local, i, local_end), end_of(master, found[0], master_end))
    return None


def cut_from(entries: Sequence[EpochEntry], offset: int) -> list[EpochEntry]:
    """The history of a log truncated at ``offset``: reigns that begin at or past it have nothing left (the replica
    learns them again from the master's frames as it streams)."""
    return [e for e in entries if e.start_offset < offset]


def fit_to(entries: Sequence[EpochEntry], log_end: int) -> list[EpochEntry]:
    """The history of a log that ends at ``log_end`` after recovery: reigns that begin past the end lost their
    writes in the crash. One that begins exactly at the end is kept: a new master records its reign at its max
    offset before it has written anything."""
    return [e for e in entries if e.start_offset <= log_end]


class EpochFile:
    """The history on disk. Blocking (small file, fsynced): call from the store's disk executor."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.path = self.root / FILE_NAME
        self.entries: list[EpochEntry] = []

    def load(self) -> None:
        """Read the file, else its backup; missing both is an empty history. A damaged main file with a good
        backup is a crash between the two renames of an update, so the backup is the last complete history."""
        errors = []
        for candidate in (self.path, self.path.with_name(self.path.name + ".bak")):
            try:
                data = candidate.read_bytes()
            except FileNotFoundError:
                continue
            try:
                self.entries = decode(data, str(candidate))
                return
            except EpochFileError as exc:
                errors.append(str(exc))
        if errors:
            raise EpochFileError("; ".join(errors), hint="the epoch history is damaged: move the broker's store "
                                 "aside and let it copy the group's log again as a new replica")
        self.entries = []

    @property
    def last_epoch(self) -> int:
        return self.entries[-1].epoch if self.entries else 0

    def append(self, epoch: int, start_offset: int) -> None:
        """Record a new reign (a broker becoming master writes its own; a slave copies the master's)."""
        if self.entries:
            last = self.entries[-1]
            if epoch == last.epoch and start_offset == last.start_offset:
                return  # idempotent: a replay of the same step after a crash
            if epoch <= last.epoch:
                raise EpochFileError(f"{self.path}: epoch {epoch} is not newer than the last, {last.epoch}",
                                     hint="a broker may only take a masterEpoch the controller handed out after "
                                          "the one it holds")
            if start_offset < last.start_offset:
                raise EpochFileError(f"{self.path}: epoch {epoch} would start at {start_offset}, before epoch "
                                     f"{last.epoch} at {last.start_offset}")
        self._write([*self.entries, EpochEntry(epoch, start_offset)])

    def fit_to(self, log_end: int) -> None:
        """After recovery: see the module function."""
        self._replace(fit_to(self.entries, log_end))

    def cut_from(self, offset: int) -> None:
        """After a truncation: see the module function."""
        self._replace(cut_from(self.entries, offset))

    def _replace(self, kept: list[EpochEntry]) -> None:
        if len(kept) != len(self.entries):
            self._write(kept)

    def _write(self, entries: list[EpochEntry]) -> None:
        check(entries, str(self.path))
        write_bytes_atomic(self.path, encode(entries))
        self.entries = entries
