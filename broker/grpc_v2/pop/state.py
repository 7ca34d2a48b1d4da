"""Pop state: checkpoints (``ck``) and acks as revive-topic records, and the in-memory index built from them.

Record bodies (JSON, RocketMQ's PopCheckPoint / AckMsg short names, spec/pop.md §2.1, §3.1):

* ck: ``{"so": startOffset, "pt": popTime ms, "it": invisibleTime ms, "n": count, "q": queueId, "t": topic read
  (a %RETRY% topic for redeliveries), "c": group, "d": [offset - so per message], "bn": brokerName}``, tag ``ck``;
* ack: ``{"ao": ackedOffset, "so", "pt", "q", "t", "c", "bn"}``, tag ``ack``.

FIFO pop (a group with consumeMessageOrderly) writes the same checkpoints with ``"fifo": true`` and ``"ac"``, the
delivery attempt of each message. RocketMQ keeps its order state in memory and ``consumerOrderInfo.json``, not
replicated (spec/pop.md §5); pyrmq derives it from these records, so it survives a restart and the slave has it:

* **order lock**: a queue is blocked while a FIFO checkpoint of it holds an un-acked offset whose revive time has
  not come (``fifo_blocked``);
* **redelivery first**: an expired FIFO checkpoint is not revived to a retry topic; it stays held, and the next
  pop of its queue hands its un-acked offsets out again, attempt + 1, before any later message
  (``fifo_redeliveries``); a FIFO checkpoint takes over each offset it covers from the queue's older FIFO
  checkpoints (they count it as handed on), in memory and when the records are scanned back alike.

A checkpoint written again with the same key (an auto-renewal: a longer ``it``) replaces the held one's invisible
time and keeps its acks and its first revive-queue offset, so a restart scans from the first record.

A checkpoint is identified by (t, c, q, so, pt) (RocketMQ's merge key, minus the broker name, which must be this
broker's); an ack sets the bit of its offset. ``PopState`` is pure (no I/O, no clock): the service feeds it the
records it writes and, at start, the records it scans back from the revive queue; ``due(now_ms)`` names the
checkpoints whose reviveTime (pt + it) has passed, in revive-queue order. Invariant: an offset is "in flight"
exactly while its checkpoint is held and its bit is clear.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import orjson

TAG_CK = "ck"
TAG_ACK = "ack"

CkKey = tuple[str, str, int, int, int]  # topic, group, queue id, start offset, pop time


@dataclass
class Checkpoint:
    topic: str
    group: str
    queue_id: int
    start_offset: int
    pop_time_ms: int
    invisible_ms: int
    diffs: list[int]
    broker_name: str
    revive_offset: int = -1  # queue offset of the ck record in the revive queue
    acked: set[int] = field(default_factory=set)  # queue offsets
    fifo: bool = False
    attempts: list[int] = field(default_factory=list)  # FIFO: delivery attempt per message, aligned with diffs
    renew_client: str = ""  # in memory only: the client whose auto_renew receive this was, renewed while it lives
    renewals: int = 0

    @property
    def key(self) -> CkKey:
        return self.topic, self.group, self.queue_id, self.start_offset, self.pop_time_ms

    @property
    def revive_time_ms(self) -> int:
        return self.pop_time_ms + self.invisible_ms

    @property
    def offsets(self) -> list[int]:
        return [self.start_offset + d for d in self.diffs]

    @property
    def queue(self) -> tuple[str, str, int]:
        return self.topic, self.group, self.queue_id

    def unacked(self) -> list[int]:
        return [o for o in self.offsets if o not in self.acked]

    def attempt(self, offset: int) -> int:
        """The delivery attempt this checkpoint handed ``offset`` out with (FIFO; 1 when not recorded)."""
        i = offset - self.start_offset
        return self.attempts[self.diffs.index(i)] if self.attempts and i in self.diffs else 1

    def to_json(self) -> bytes:
        o = {"so": self.start_offset, "pt": self.pop_time_ms, "it": self.invisible_ms, "n": len(self.diffs),
             "q": self.queue_id, "t": self.topic, "c": self.group, "d": self.diffs, "bn": self.broker_name}
        if self.fifo:
            o["fifo"] = True
            o["ac"] = self.attempts
        return orjson.dumps(o)

    @classmethod
    def from_json(cls, body: bytes) -> Checkpoint:
        o = orjson.loads(body)
        ck = cls(str(o["t"]), str(o["c"]), int(o["q"]), int(o["so"]), int(o["pt"]), int(o["it"]),
                 [int(d) for d in o.get("d") or range(int(o["n"]))], str(o.get("bn", "")))
        if o.get("fifo"):
            ck.fifo = True
            ck.attempts = [int(a) for a in o.get("ac") or ()]
            if len(ck.attempts) != len(ck.diffs):
                raise ValueError("a FIFO checkpoint needs one attempt count per message")
        return ck


@dataclass(frozen=True)
class Ack:
    topic: str
    group: str
    queue_id: int
    start_offset: int
    pop_time_ms: int
    offset: int
    broker_name: str

    @property
    def key(self) -> CkKey:
        return self.topic, self.group, self.queue_id, self.start_offset, self.pop_time_ms

    def to_json(self) -> bytes:
        return orjson.dumps({"ao": self.offset, "so": self.start_offset, "pt": self.pop_time_ms, "q": self.queue_id,
                             "t": self.topic, "c": self.group, "bn": self.broker_name})

    @classmethod
    def from_json(cls, body: bytes) -> Ack:
        o = orjson.loads(body)
        return cls(str(o["t"]), str(o["c"]), int(o["q"]), int(o["so"]), int(o["pt"]), int(o["ao"]), str(o.get("bn", "")))


class PopState:
    """Checkpoints held until revived or fully acked; bounded by the revive queue the service scans."""

    def __init__(self) -> None:
        self._cks: dict[CkKey, Checkpoint] = {}
        self._fifo: dict[tuple[str, str, int], set[CkKey]] = {}  # (topic, group, queue) -> its FIFO checkpoints

    def __len__(self) -> int:
        return len(self._cks)

    def add_checkpoint(self, ck: Checkpoint) -> None:
        old = self._cks.get(ck.key)
        if old is not None:  # the same record again (scanned back, or renewed): keep the acks and the first record
            ck.acked |= old.acked
            if old.revive_offset >= 0:
                ck.revive_offset = old.revive_offset if ck.revive_offset < 0 else min(ck.revive_offset,
                                                                                        old.revive_offset)
            ck.renew_client, ck.renewals = ck.renew_client or old.renew_client, max(ck.renewals, old.renewals)
        self._cks[ck.key] = ck
        if ck.fifo:
            covered = set(ck.offsets)
            for other in [self._cks[k] for k in self._fifo.get(ck.queue, ()) if k != ck.key]:
                other.acked |= covered & set(other.offsets)  # handed on to the newer checkpoint
                if not other.unacked():
                    self._drop(other)
            self._fifo.setdefault(ck.queue, set()).add(ck.key)

    def _drop(self, ck: Checkpoint) -> None:
        self._cks.pop(ck.key, None)
        keys = self._fifo.get(ck.queue)
        if keys is not None:
            keys.discard(ck.key)
            if not keys:
                del self._fifo[ck.queue]

    def add_ack(self, ack: Ack) -> bool:
        """Mark the offset acked; a checkpoint with every offset acked is dropped. False: no such in-flight offset
        (unknown checkpoint, offset not in it, or acked already)."""
        ck = self._cks.get(ack.key)
        if ck is None or ack.offset not in ck.offsets or ack.offset in ck.acked:
            return False
        ck.acked.add(ack.offset)
        if not ck.unacked():
            self._drop(ck)
        return True

    def in_flight(self, key: CkKey, offset: int) -> bool:
        ck = self._cks.get(key)
        return ck is not None and offset in ck.offsets and offset not in ck.acked

    # FIFO ---------------------------------------------------------------------------------------------------
    def fifo_blocked(self, topic: str, group: str, queue_id: int, now_ms: int) -> bool:
        """True while a batch of the queue is in flight: an un-acked offset whose revive time has not come."""
        return any(self._cks[k].revive_time_ms > now_ms and self._cks[k].unacked()
                   for k in self._fifo.get((topic, group, queue_id), ()))

    def fifo_redeliveries(self, topic: str, group: str, queue_id: int) -> list[tuple[int, int, Checkpoint]]:
        """The queue's handed-out, un-acked offsets as (offset, attempts so far, checkpoint), lowest first."""
        out = [(o, self._cks[k].attempt(o), self._cks[k]) for k in self._fifo.get((topic, group, queue_id), ())
               for o in self._cks[k].unacked()]
        return sorted(out, key=lambda t: t[0])

    def renewable(self, now_ms: int, ahead_ms: int) -> list[Checkpoint]:
        """Auto-renew checkpoints (``renew_client`` set) with messages in flight that are due within ``ahead_ms``."""
        return [ck for ck in self._cks.values()
                if ck.renew_client and now_ms < ck.revive_time_ms <= now_ms + ahead_ms and ck.unacked()]

    def get(self, key: CkKey) -> Checkpoint | None:
        return self._cks.get(key)

    def due(self, now_ms: int) -> list[Checkpoint]:
        return sorted((ck for ck in self._cks.values() if ck.revive_time_ms <= now_ms), key=lambda c: c.revive_offset)

    def remove(self, ck: Checkpoint) -> None:
        self._drop(ck)

    def min_revive_offset(self) -> int | None:
        """The revive-queue offset the next start must scan from: the oldest held checkpoint's record."""
        offsets = [ck.revive_offset for ck in self._cks.values() if ck.revive_offset >= 0]
        return min(offsets) if offsets else None

    def in_flight_count(self) -> int:
        return sum(len(ck.unacked()) for ck in self._cks.values())

    def in_flight_by_topic(self) -> dict[tuple[str, str], int]:
        """(topic read, group) -> messages in flight."""
        out: dict[tuple[str, str], int] = {}
        for ck in self._cks.values():
            n = len(ck.unacked())
            if n:
                out[ck.topic, ck.group] = out.get((ck.topic, ck.group), 0) + n
        return out

    def in_flight_queues(self, group: str) -> dict[tuple[str, int], tuple[int, int]]:
        """(topic read, queue id) -> (lowest offset in flight, messages in flight) for ``group``."""
        out: dict[tuple[str, int], tuple[int, int]] = {}
        for ck in self._cks.values():
            if ck.group != group:
                continue
            unacked = ck.unacked()
            if not unacked:
                continue
            key = ck.topic, ck.queue_id
            low, n = out.get(key, (unacked[0], 0))
            out[key] = min(low, *unacked), n + len(unacked)
        return out

    def oldest_revive_time_ms(self) -> int | None:
        return min((ck.revive_time_ms for ck in self._cks.values()), default=None)
