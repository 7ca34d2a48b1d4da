"""Which transactions are open, and what the check service and END_TRANSACTION must do about them. Pure.

Built from the records alone (``records.py``), so a restarted or promoted master rebuilds it by replaying the half
queue from ``half_offset`` and the op queue from ``op_offset`` (the offsets of the system group
``CID_RMQ_SYS_TRANS``, kept like any consumer offset and synced to the slaves):

- a half copy is *closed* when it lies below ``half_offset`` or an op record names its queue offset;
- a transaction may have several copies: the check service re-puts a half that is due for a check as a newer copy
  (its check count one higher) and closes the old one with a ``renewed`` op, so the producer's answer always
  concerns an open copy;
- END_TRANSACTION names one copy by its commitlog offset, but resolves the *transaction*: it closes every open copy
  of it at once, so a late answer about an older copy, a second answer, or a check answered after the producer's
  own commit never commit twice (RocketMQ #8158 keeps checking after a late commit).

Invariants: ``half_offset`` only grows and every copy below it is closed; an op about a copy at or above
``half_offset`` lies at or above ``op_offset``, because ``op_offset`` only passes ops whose copies are all below
``half_offset`` (a decision's op also closes the copies of its transaction put after it, ``late``); so replaying
both windows rebuilds exactly the open set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RESOLUTIONS_FINAL = ("commit", "rollback", "discarded")


@dataclass(slots=True)
class HalfCopy:
    queue_offset: int
    commit_log_offset: int
    tx_id: str
    producer_group: str
    due_ms: int  # the store time plus the check immunity: not checked before
    check_times: int


@dataclass(slots=True)
class Ledger:
    half_offset: int = 0
    op_offset: int = 0
    open: dict[int, HalfCopy] = field(default_factory=dict)  # queue offset -> open copy
    closed_ahead: set[int] = field(default_factory=set)  # copies at or above half_offset closed by an op
    by_tx: dict[str, set[int]] = field(default_factory=dict)  # transaction id -> queue offsets of open copies
    resolved: dict[str, str] = field(default_factory=dict)  # transaction id -> final outcome seen in the op window
    # (op queue offset, highest half offset it names, transactions it decided): what advance() may pass
    ops: list[tuple[int, int, tuple[str, ...]]] = field(default_factory=list)
    seen_half_end: int = 0  # the half queue offset after the last copy replayed or put
    # transaction id -> highest queue offset of a copy put after its transaction was decided (a check's renewal
    # racing the producer's END_TRANSACTION): closed only by that decision's op, which must stay in the replayed
    # window until half_offset passes the copy
    late: dict[str, int] = field(default_factory=dict)

    # replay and new records ----------------------------------------------------------------------------------
    def on_half(self, copy: HalfCopy) -> bool:
        """A half copy stored (replayed at start, or just put). True for a copy put after its transaction was
        decided (a check's renewal racing END_TRANSACTION): it stays closed, because the deciding op stays in the
        replayed window until ``half_offset`` passes the copy (``late``); a caller may also close it with an op."""
        q = copy.queue_offset
        self.seen_half_end = max(self.seen_half_end, q + 1)
        if q < self.half_offset or q in self.closed_ahead:
            return False
        if self.resolved.get(copy.tx_id) in RESOLUTIONS_FINAL:
            self.late[copy.tx_id] = max(self.late.get(copy.tx_id, -1), q)
            return True
        self.open[q] = copy
        self.by_tx.setdefault(copy.tx_id, set()).add(q)
        return False

    def is_open(self, queue_offset: int) -> bool:
        """Whether a copy still needs a decision (check it before acting on an entry of ``due``: an earlier step of
        the same pass may have closed it)."""
        return queue_offset in self.open

    def on_op(self, op_queue_offset: int, half_offsets: list[int], tx_ids: list[str], resolution: str) -> None:
        """An op record stored (replayed, or just written)."""
        for q in half_offsets:
            if q >= self.half_offset:
                self.closed_ahead.add(q)
            self._close(q)
        highest = max(half_offsets, default=-1)
        if resolution in RESOLUTIONS_FINAL:
            for tx in tx_ids:
                self.resolved[tx] = resolution
                for q in list(self.by_tx.get(tx, ())):  # a copy the op does not list (stored while it was written)
                    highest = max(highest, q)
                    self._close(q)
        final = tuple(tx_ids) if resolution in RESOLUTIONS_FINAL else ()
        self.ops.append((op_queue_offset, highest, final))

    def _close(self, q: int) -> None:
        copy = self.open.pop(q, None)
        if copy is None:
            return
        copies = self.by_tx.get(copy.tx_id)
        if copies is not None:
            copies.discard(q)
            if not copies:
                del self.by_tx[copy.tx_id]

    # decisions -----------------------------------------------------------------------------------------------
    def end(self, copy_queue_offset: int, tx_id: str) -> tuple[str, list[int]]:
        """What END_TRANSACTION about ``copy_queue_offset`` must do: ``("resolve", open copies to close)``,
        ``("already", outcome)`` when the transaction was decided, or ``("closed", [])`` when that copy and the
        transaction are unknown here (decided long ago, or never a half message of this broker)."""
        copies = sorted(self.by_tx.get(tx_id, ()))
        if copies:
            return "resolve", copies
        outcome = self.resolved.get(tx_id)
        if outcome is not None:
            return "already", [outcome]  # type: ignore[list-item]
        return "closed", []

    def due(self, now_ms: int, limit: int) -> list[HalfCopy]:
        """Open copies whose check time came, oldest first."""
        out = []
        for q in sorted(self.open):
            copy = self.open[q]
            if copy.due_ms <= now_ms:
                out.append(copy)
                if len(out) >= limit:
                    break
        return out

    def advance(self) -> tuple[int, int]:
        """Move ``half_offset`` past the closed copies it has reached and ``op_offset`` past ops that name only
        copies below it; returns both (to be stored as the system group's offsets)."""
        q = self.half_offset
        while q < self.seen_half_end and q not in self.open:
            self.closed_ahead.discard(q)
            q += 1
        self.half_offset = q
        kept = []
        for op_q, highest, decided in sorted(self.ops):
            reach = max([highest, *(self.late.get(tx, -1) for tx in decided)])
            if reach < q and not kept:
                self.op_offset = max(self.op_offset, op_q + 1)
                for tx in decided:  # out of the window a restart replays: forget it here too (bounded memory)
                    if tx not in self.by_tx:
                        self.resolved.pop(tx, None)
                        self.late.pop(tx, None)
            else:
                kept.append((op_q, highest, decided))
        self.ops = kept
        return self.half_offset, self.op_offset

    @property
    def open_count(self) -> int:
        return len(self.open)
