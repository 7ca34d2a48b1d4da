"""The chaos checker: classify a history of sends and reads like Jepsen's queue checker (spec/reliability.md §8).

Pure: no I/O, no clock. Input is what the workload recorded:

- every send, with its outcome: ACKED (SEND_OK), WEAK (FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT,
  SLAVE_NOT_AVAILABLE: stored on the master, not replicated as asked), FAILED (a definite refusal: the broker
  answered that it did not store it) or UNKNOWN (a timeout or a broken connection: it may or may not be stored);
  with the writer and its sequence number, and the commitlog offset of a stored message (from its offsetMsgId);
- every read by the consumer group (at-least-once: an id may come twice);
- optionally the reads of one node on its own (the slave, drained after the master was destroyed: killed and
  never restarted, as if its disk were gone) and the slave's acknowledged offset recorded at that fault;
- optionally every SEND_OK with its broker group, the broker that answered it and the client's send and answer
  times (``SendOk``), for the split-brain check.

Output (``Report``): attempted / acked / weak / failed / unknown; read (by the group and the drained node);
``lost`` = acked - read (split per writer into prefix / middle / postfix, Jepsen's lost-breakout) and
``lost_below_ack``, those of them whose whole record lies below the slave's acknowledged offset; ``weak_lost`` and
``recovered`` (weak or unknown, yet read); ``unexpected`` = reads of ids never attempted; ``aborted_reads`` = reads
of FAILED sends; ``duplicated`` (by the group); ``inconsistent_offsets`` = one queue offset holding different ids
across reads; ``lost_on_slave`` = acked ids the slave does not hold, and ``lost_on_slave_below_ack``;
``overlapping_send_ok`` = SEND_OKs answered inside another broker's SEND_OK period of the same group.

**Non-overlapping SEND_OK periods** (``send_ok_overlaps``): a broker's SEND_OK was answered at some instant
between the client's send and the answer, so a term's period certainly spans from its earliest *answer* time to its
latest *send* time. Another broker of the group overlaps it when one of its SEND_OKs was both sent after that start
and answered before that end: it answered inside the period (two brokers of one group answering SEND_OK in turns,
A, B, A). Concurrent sends in flight across a clean handover never count (their windows straddle the ends).

Terms: a broker that becomes master again later (a failback) starts a new term. An explicit ``term`` (e.g. the
masterEpoch) says so; otherwise, when the SEND_OKs carry their commitlog offsets, the terms are the runs of one
broker along the group's log (one history: A's first term, then B's, then A's again, each appending after the
last), and without offsets a broker's SEND_OKs form one period. With offsets there is a second check: a SEND_OK
sent after another one was answered lies higher in the log (the acknowledged history of a group is one log); two
masters appending at once on diverging logs break that order even when their SEND_OKs interleave too finely for
periods to show.

The verdict (``Report.problems(mode)``): in both modes unexpected = aborted reads = inconsistent offsets =
overlapping SEND_OK periods = 0.
SYNC: lost = 0 and lost on the slave = 0 (every SEND_OK was on the slave when it was acknowledged, so neither a
destroyed master nor anything else may take one away). ASYNC: lost = 0 unless the master was destroyed; then a
message may be lost, or missing on the slave, only beyond the slave's acknowledged offset at that fault (the
unreplicated suffix). Duplicates, weak losses and recoveries are reported, never a failure (at-least-once
delivery; stored-on-master-only statuses).

A record's end is not known from the client, so "below the ack" uses the next known record start after it (the
smallest commitlog offset of any stored send above it): the record ends at or before it. That bound is never
below the true end, so the check can miss a loss just under the ack but never accuses a message that was not
wholly acknowledged.
"""

from __future__ import annotations

import bisect
import enum
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field


class Outcome(enum.Enum):
    ACKED = "acked"
    WEAK = "weak"
    FAILED = "failed"
    UNKNOWN = "unknown"


class Mode(enum.Enum):
    SYNC = "SYNC"
    ASYNC = "ASYNC"


@dataclass(frozen=True, slots=True)
class Send:
    id: str
    writer: str
    seq: int
    outcome: Outcome
    offset: int | None = None  # commitlog offset of the stored message (ACKED and WEAK), from its offsetMsgId
    detail: str = ""  # the status or the error, for the report


@dataclass(frozen=True, slots=True)
class SendOk:
    group: str  # the broker group (brokerName)
    broker: str  # the broker that answered (its address)
    sent: float  # the client's clock when the send left
    answered: float  # the client's clock when SEND_OK came back
    id: str = ""
    term: int | None = None  # a failback's new period (None: from the offsets, else one period per broker)
    offset: int | None = None  # the commitlog offset of the message (from its offsetMsgId)


@dataclass(frozen=True, slots=True)
class Read:
    id: str
    queue: str  # topic:queueId
    queue_offset: int
    node: str = "group"  # "group" for the consumer group; a node name for a per-node drain


@dataclass
class Breakout:
    prefix: int = 0
    middle: int = 0
    postfix: int = 0


@dataclass
class Report:
    attempted: int = 0
    acked: int = 0
    weak: int = 0
    failed: int = 0
    unknown: int = 0
    read: int = 0  # distinct ids read by the group or the drained node
    reads: int = 0  # reads by the group, duplicates included
    lost: list[str] = field(default_factory=list)
    lost_breakout: Breakout = field(default_factory=Breakout)
    lost_below_ack: list[str] = field(default_factory=list)
    weak_lost: int = 0
    recovered: int = 0
    unexpected: list[str] = field(default_factory=list)
    aborted_reads: list[str] = field(default_factory=list)
    duplicated: int = 0  # ids read more than once
    duplicate_reads: int = 0  # reads beyond the first
    inconsistent_offsets: list[str] = field(default_factory=list)
    slave_checked: bool = False
    slave_ack: int | None = None
    slave_read: int = 0
    lost_on_slave: list[str] = field(default_factory=list)
    lost_on_slave_below_ack: list[str] = field(default_factory=list)
    send_oks: int = 0  # SEND_OKs given to the split-brain check
    overlapping_send_ok: list[str] = field(default_factory=list)

    def problems(self, mode: Mode) -> list[str]:
        """What breaks the promise of ``mode``; empty when the history is valid."""
        out = []
        if self.lost and (mode is Mode.SYNC or not self.slave_checked):
            out.append(f"{len(self.lost)} acknowledged messages never read (lost-breakout {self.lost_breakout}), "
                       f"e.g. {self.lost[:5]}")
        if mode is Mode.ASYNC and self.slave_checked and self.lost_below_ack:
            out.append(f"ASYNC: {len(self.lost_below_ack)} acknowledged messages never read lie below the slave's "
                       f"acked offset {self.slave_ack}, e.g. {self.lost_below_ack[:5]}")
        if self.unexpected:
            out.append(f"{len(self.unexpected)} reads of ids never sent, e.g. {self.unexpected[:5]}")
        if self.aborted_reads:
            out.append(f"{len(self.aborted_reads)} reads of sends the broker refused, e.g. {self.aborted_reads[:5]}")
        if self.inconsistent_offsets:
            out.append(f"{len(self.inconsistent_offsets)} queue offsets hold different ids, "
                       f"e.g. {self.inconsistent_offsets[:5]}")
        if self.overlapping_send_ok:
            out.append(f"{len(self.overlapping_send_ok)} SEND_OKs answered inside another broker's SEND_OK period "
                       f"of the same group (split brain), e.g. {self.overlapping_send_ok[:3]}")
        if self.slave_checked:
            if mode is Mode.SYNC and self.lost_on_slave:
                out.append(f"SYNC: {len(self.lost_on_slave)} SEND_OK messages missing on the slave, "
                           f"e.g. {self.lost_on_slave[:5]}")
            if mode is Mode.ASYNC and self.lost_on_slave_below_ack:
                out.append(f"ASYNC: {len(self.lost_on_slave_below_ack)} acknowledged messages missing on the slave "
                           f"below its acked offset {self.slave_ack}, e.g. {self.lost_on_slave_below_ack[:5]}")
        return out

    def figures(self) -> dict[str, object]:
        """Counts only (for tables and JSON)."""
        return {
            "attempted": self.attempted, "acked": self.acked, "weak": self.weak, "failed": self.failed,
            "unknown": self.unknown, "read": self.read, "reads": self.reads, "lost": len(self.lost),
            "lost_prefix": self.lost_breakout.prefix, "lost_middle": self.lost_breakout.middle,
            "lost_postfix": self.lost_breakout.postfix, "lost_below_ack": len(self.lost_below_ack),
            "weak_lost": self.weak_lost, "recovered": self.recovered,
            "unexpected": len(self.unexpected), "aborted_reads": len(self.aborted_reads),
            "duplicated": self.duplicated, "duplicate_reads": self.duplicate_reads,
            "inconsistent_offsets": len(self.inconsistent_offsets), "slave_checked": self.slave_checked,
            "slave_ack": self.slave_ack, "slave_read": self.slave_read, "lost_on_slave": len(self.lost_on_slave),
            "lost_on_slave_below_ack": len(self.lost_on_slave_below_ack),
            "send_oks": self.send_oks, "overlapping_send_ok": len(self.overlapping_send_ok),
        }


def check(
    sends: Iterable[Send],
    reads: Iterable[Read],
    *,
    slave_reads: Iterable[Read] | None = None,
    slave_ack: int | None = None,
    send_oks: Iterable[SendOk] | None = None,
) -> Report:
    """Classify the history. ``slave_reads``: what a drain of the slave alone found after the master was
    destroyed; ``slave_ack``: the slave's acknowledged commitlog offset recorded at that fault (None: unknown,
    then nothing counts as below it)."""
    by_id: dict[str, Send] = {}
    for s in sends:
        by_id[s.id] = s
    rep = Report(attempted=len(by_id))
    counts = Counter(s.outcome for s in by_id.values())
    rep.acked, rep.weak = counts[Outcome.ACKED], counts[Outcome.WEAK]
    rep.failed, rep.unknown = counts[Outcome.FAILED], counts[Outcome.UNKNOWN]

    group_reads = list(reads)
    node_reads = list(slave_reads) if slave_reads is not None else []
    times_read = Counter(r.id for r in group_reads)
    on_node = {r.id for r in node_reads}
    read_all = set(times_read) | on_node
    rep.reads = len(group_reads)
    rep.read = len(read_all)
    rep.duplicated = sum(1 for n in times_read.values() if n > 1)
    rep.duplicate_reads = sum(n - 1 for n in times_read.values() if n > 1)
    rep.unexpected = sorted(i for i in read_all if i not in by_id)
    rep.aborted_reads = sorted(i for i in read_all if i in by_id and by_id[i].outcome is Outcome.FAILED)
    rep.recovered = sum(1 for i in read_all if i in by_id and by_id[i].outcome in (Outcome.WEAK, Outcome.UNKNOWN))
    rep.weak_lost = sum(1 for s in by_id.values() if s.outcome is Outcome.WEAK and s.id not in read_all)

    acked = [s for s in by_id.values() if s.outcome is Outcome.ACKED]
    lost = [s for s in acked if s.id not in read_all]
    rep.lost = sorted(s.id for s in lost)
    rep.lost_breakout = _breakout(lost, by_id.values(), read_all)
    rep.inconsistent_offsets = _inconsistent(group_reads + node_reads)
    if send_oks is not None:
        oks = list(send_oks)
        rep.send_oks = len(oks)
        rep.overlapping_send_ok = send_ok_overlaps(oks)
    if slave_reads is not None:
        rep.slave_checked = True
        rep.slave_ack = slave_ack
        rep.slave_read = len(on_node)
        missing = [s for s in acked if s.id not in on_node]
        rep.lost_on_slave = sorted(s.id for s in missing)
        below = _below(by_id.values(), slave_ack)
        rep.lost_on_slave_below_ack = sorted(s.id for s in missing if below(s))
        rep.lost_below_ack = sorted(s.id for s in lost if below(s))
    return rep


def _below(sends: Iterable[Send], ack: int | None):
    """A predicate: does the whole record of a send lie below ``ack``? (False when either is unknown.)"""
    starts = sorted({s.offset for s in sends if s.offset is not None})

    def below(s: Send) -> bool:
        return ack is not None and s.offset is not None and _end_bound(starts, s.offset) <= ack

    return below


def _end_bound(starts: list[int], offset: int) -> float:
    """An upper bound of the end of the record at ``offset``: the next known record start (inf if none)."""
    i = bisect.bisect_right(starts, offset)
    return starts[i] if i < len(starts) else float("inf")


def _breakout(lost: list[Send], sends: Iterable[Send], read: set[str]) -> Breakout:
    """Per writer: a lost message before every read one of its writer is prefix, after every one postfix,
    between two read ones middle ("we read things before and after that value": the worst kind). A writer of
    which nothing was read counts as postfix."""
    read_seqs: dict[str, list[int]] = defaultdict(list)
    for s in sends:
        if s.id in read:
            read_seqs[s.writer].append(s.seq)
    bounds = {w: (min(seqs), max(seqs)) for w, seqs in read_seqs.items()}
    out = Breakout()
    for s in lost:
        lo_hi = bounds.get(s.writer)
        if lo_hi is None or s.seq > lo_hi[1]:
            out.postfix += 1
        elif s.seq < lo_hi[0]:
            out.prefix += 1
        else:
            out.middle += 1
    return out


def _inconsistent(reads: list[Read]) -> list[str]:
    ids_at: dict[tuple[str, int], set[str]] = defaultdict(set)
    for r in reads:
        ids_at[(r.queue, r.queue_offset)].add(r.id)
    return sorted(f"{q}@{o}: {sorted(ids)}" for (q, o), ids in ids_at.items() if len(ids) > 1)


def send_ok_overlaps(acks: Iterable[SendOk]) -> list[str]:
    """SEND_OKs answered inside another broker's SEND_OK period of the same group, and SEND_OKs out of the group's
    log order (see the module doc)."""
    by_group: dict[str, list[SendOk]] = defaultdict(list)
    for a in acks:
        by_group[a.group].append(a)
    out = []
    for group, oks in sorted(by_group.items()):
        terms = _terms(oks)
        periods: dict[tuple[str, object], tuple[float, float]] = {}
        for a, term in zip(oks, terms):
            lo, hi = periods.get((a.broker, term), (float("inf"), float("-inf")))
            periods[(a.broker, term)] = (min(lo, a.answered), max(hi, a.sent))
        for a in oks:
            for (broker, term), (start, end) in periods.items():
                if broker != a.broker and start < a.sent and a.answered < end:
                    out.append(f"{group}: {a.id or 'a SEND_OK'} from {a.broker} answered in "
                               f"[{a.sent:.3f}, {a.answered:.3f}] while {broker} (term {term}) answered SEND_OK "
                               f"from {start:.3f} to {end:.3f}")
        out += _log_order(group, [a for a in oks if a.offset is not None])
    return out


def _terms(oks: list[SendOk]) -> list[object]:
    """Each SEND_OK's term: its explicit one, else its broker's run number along the log, else None."""
    runs: dict[int, int] = {}
    placed = sorted((a.offset, i) for i, a in enumerate(oks) if a.term is None and a.offset is not None)
    run, last = -1, None
    for _, i in placed:
        if oks[i].broker != last:
            run, last = run + 1, oks[i].broker
        runs[i] = run
    return [a.term if a.term is not None else (f"run{runs[i]}" if i in runs else None) for i, a in enumerate(oks)]


def _log_order(group: str, oks: list[SendOk]) -> list[str]:
    """SEND_OKs sent after a SEND_OK higher in the log was answered (the group's log is one history)."""
    out = []
    earliest_above = float("inf")  # the earliest answer among SEND_OKs higher in the log
    above: SendOk | None = None
    for a in sorted(oks, key=lambda x: x.offset, reverse=True):
        if earliest_above < a.sent and above is not None and above.offset != a.offset:
            out.append(f"{group}: {a.id or 'a SEND_OK'} from {a.broker} at offset {a.offset} was sent at "
                       f"{a.sent:.3f}, after {above.id or 'a SEND_OK'} from {above.broker} at offset {above.offset} "
                       f"was answered at {above.answered:.3f} (two logs written at once)")
        if a.answered < earliest_above:
            earliest_above, above = a.answered, a
    dup = Counter(a.offset for a in oks)
    out += [f"{group}: {n} SEND_OKs at offset {o} (two logs written at once)" for o, n in dup.items() if n > 1]
    return out
