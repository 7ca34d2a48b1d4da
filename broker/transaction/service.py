"""The master's transaction service: half puts, END_TRANSACTION's resolution and the check-back (RocketMQ
TransactionalMessageServiceImpl, EndTransactionProcessor, TransactionalMessageCheckService).

Every decision is a record (``records.py``) and the open set is the ``Ledger`` rebuilt from the records at start,
from the system group ``CID_RMQ_SYS_TRANS``'s offsets on the half and op queues, so a restarted or promoted master
goes on where the last one stopped. Write orders that make a crash between two writes safe (the ledger's tests):

- commit: the real message BEFORE its op; before putting it the message index is asked whether the real topic
  already holds a COMMIT record of that transaction (a crash between the two writes), so it is never put twice.
  Only transactions that may be in that state ask: those replayed at start and those whose op write failed;
- check: the renewed copy (check count + 1) BEFORE the ``renewed`` op for the old one, then the producer is asked
  about the new copy; after ``transactionCheckMax`` checks the half goes to TRANS_CHECK_MAX_TIME_TOPIC before its
  ``discarded`` op.

The ledger learns every half and op this service writes right after the store took it. Its ``advance`` must not
pass a record that was appended but not yet told to the ledger, so writes hold the gate shared and ``advance``
takes it exclusively (briefly, once per check round). Two END_TRANSACTIONs of one transaction never run at once
(``_resolving``): the second is answered SYSTEM_BUSY.

Requests that arrive together share their writes (``coalesce.Coalescer``): the halves of concurrent sends are one
append to the half queue, and concurrent ENDs are one append per real queue followed by one op record per outcome
naming all of their transactions, each transaction's real message still before its op.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from broker.store.types import GetStatus, MessageDraft, PutResult
from broker.transaction import records as tx
from broker.transaction.coalesce import Coalescer
from broker.transaction.ledger import HalfCopy, Ledger
from common.perm import PERM_RW
from common.service import Service
from remoting.codes import RequestCode, ResponseCode
from remoting.frame_codec import RemotingCommand
from remoting.message_codec import (
    PROPERTY_UNIQ_KEY,
    StoredMessage,
    decode,
    encode_properties,
    encode_record,
    host_bytes,
    offset_msg_id,
)

log = logging.getLogger(__name__)

READ_BATCH = 32
CHECKS_PER_ROUND = 2000  # due halves one round handles; the rest wait for the next round
MAX_INDEX_CANDIDATES = 32
LONG_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    timeout_ms: int = 6000  # transactionTimeOut: a half is not checked before it is this old
    check_interval_ms: int = 30_000  # transactionCheckInterval
    check_max: int = 15  # transactionCheckMax


@dataclass(frozen=True, slots=True)
class EndOutcome:
    code: int
    remark: str


class WriteGate:
    """Many shared holders (writes) or one exclusive holder (``Ledger.advance``). A waiting exclusive holder
    keeps new shared ones out, so a steady stream of sends cannot starve the check round."""

    def __init__(self) -> None:
        self._shared = 0
        self._exclusive = False
        self._exclusive_waiting = 0
        self._cond = asyncio.Condition()

    @asynccontextmanager
    async def shared(self):
        async with self._cond:
            await self._cond.wait_for(lambda: not self._exclusive and not self._exclusive_waiting)
            self._shared += 1
        try:
            yield
        finally:
            async with self._cond:
                self._shared -= 1
                self._cond.notify_all()

    @asynccontextmanager
    async def exclusive(self):
        async with self._cond:
            self._exclusive_waiting += 1
            try:
                await self._cond.wait_for(lambda: not self._exclusive and self._shared == 0)
            finally:
                self._exclusive_waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            async with self._cond:
                self._exclusive = False
                self._cond.notify_all()


def op_parts(chosen: dict[str, tuple[int, list[int]]]):
    """``chosen`` in parts whose copies fit one op record (``records.MAX_OP_OFFSETS``, what a replay reads)."""
    part: dict[str, tuple[int, list[int]]] = {}
    size = 0
    for tx_id, (i, copies) in chosen.items():
        if part and size + len(copies) > tx.MAX_OP_OFFSETS:
            yield part
            part, size = {}, 0
        part[tx_id] = (i, copies)
        size += len(copies)
    if part:
        yield part


def half_copy(msg: StoredMessage, timeout_ms: int) -> HalfCopy:
    return HalfCopy(
        queue_offset=msg.queue_offset,
        commit_log_offset=msg.physical_offset,
        tx_id=tx.transaction_id(msg),
        producer_group=msg.properties.get(tx.PROPERTY_PRODUCER_GROUP, ""),
        due_ms=msg.store_timestamp + tx.immunity_ms(msg, timeout_ms),
        check_times=tx.check_times(msg),
    )


def check_request(half: StoredMessage, store_host: tuple[str, int]) -> RemotingCommand:
    """CHECK_TRANSACTION_STATE (39) about ``half``: RocketMQ's header, and the half in the body as MessageDecoder
    encodes it, with its real topic and queue restored (sendCheckMessage)."""
    real_topic = half.properties.get(tx.PROPERTY_REAL_TOPIC, half.topic)
    qid_text = half.properties.get(tx.PROPERTY_REAL_QID, "")
    real_qid = int(qid_text) if qid_text.isascii() and qid_text.isdigit() and len(qid_text) < 10 else half.queue_id
    body = encode_record(
        topic_bytes=real_topic.encode(), queue_id=real_qid, flag=half.flag, queue_offset=half.queue_offset,
        physical_offset=half.physical_offset, sys_flag=half.sys_flag, born_timestamp=half.born_timestamp,
        born_host=host_bytes(*half.born_host), store_timestamp=half.store_timestamp,
        store_host=host_bytes(*half.store_host), reconsume_times=half.reconsume_times, body=half.body,
        properties=encode_properties(half.properties), prepared_transaction_offset=half.prepared_transaction_offset,
    )
    ext = {
        "tranStateTableOffset": str(half.queue_offset),
        "commitLogOffset": str(half.physical_offset),
        "msgId": half.properties.get(PROPERTY_UNIQ_KEY, ""),
        "transactionId": tx.transaction_id(half),
        "offsetMsgId": offset_msg_id(store_host, half.physical_offset),
    }
    return RemotingCommand(RequestCode.CHECK_TRANSACTION_STATE, ext=ext, body=body)


class TransactionService(Service):
    def __init__(self, store, offsets, clients, config: TransactionConfig, *, store_host: tuple[str, int],
                 metrics=None, clock_ms: Callable[[], int] | None = None) -> None:
        super().__init__("transaction")
        self.store = store
        self.offsets = offsets  # ConsumerOffsetManager: the system group's offsets are the ledger's
        self.clients = clients  # ClientManager: live producer connections of a group
        self.config = config
        self.store_host = store_host
        self.metrics = metrics
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.ledger = Ledger()
        self._gate = WriteGate()
        self._resolving: set[str] = set()
        # transactions whose real message may already be stored without its op (replayed at start, or an op write
        # failed after the commit): only these ask the index before a commit puts the real message
        self._unsure: set[str] = set()
        self._halves: Coalescer[tuple, PutResult] = Coalescer(self._put_halves)
        self._ends: Coalescer[tuple[StoredMessage, bool, bool], EndOutcome] = Coalescer(self._end_batch)
        self.checks_sent = 0

    @property
    def open_count(self) -> int:
        return self.ledger.open_count

    # lifecycle -----------------------------------------------------------------------------------------------
    async def on_start(self) -> None:
        self.rebuild()
        self.spawn("check", self._check_loop())

    async def on_stop(self) -> None:
        await self._halves.drained()
        await self._ends.drained()

    def rebuild(self) -> None:
        """The ledger from the records: the half queue from the system group's half offset, the op queue from
        its op offset (never below the queues' min: expired records are closed or lost with their files)."""
        store = self.store
        half_from = max(self._stored(tx.HALF_TOPIC), store.min_offset_in_queue(tx.HALF_TOPIC, 0))
        op_from = max(self._stored(tx.OP_TOPIC), store.min_offset_in_queue(tx.OP_TOPIC, 0))
        ledger = self.ledger = Ledger(half_offset=half_from, op_offset=op_from, seen_half_end=half_from)
        # ops first: a copy stored after its transaction's decision is then known as late (Ledger.late)
        for msg in self._read(tx.OP_TOPIC, op_from):
            offsets, ids, resolution = tx.parse_op(msg.body, msg.properties)
            ledger.on_op(msg.queue_offset, offsets, ids, resolution)
        for msg in self._read(tx.HALF_TOPIC, half_from):
            ledger.on_half(half_copy(msg, self.config.timeout_ms))
        self._unsure = set(ledger.by_tx)
        log.info("transactions: %d open half copies (half queue from %d, op queue from %d)",
                 ledger.open_count, half_from, op_from)

    def _stored(self, topic: str) -> int:
        return self.offsets.query(tx.SYSTEM_GROUP, topic, 0) or 0

    def _read(self, topic: str, offset: int):
        store = self.store
        end = store.max_offset_in_queue(topic, 0)
        while offset < end:
            result = store.get_message(tx.SYSTEM_GROUP, topic, 0, offset, READ_BATCH)
            if result.status is not GetStatus.FOUND or not result.records:
                if result.next_begin_offset > offset:
                    offset = result.next_begin_offset
                    continue
                return
            for raw in result.records:
                msg = decode(raw)
                yield msg
                offset = msg.queue_offset + 1

    # half messages -------------------------------------------------------------------------------------------
    async def put_half(self, draft: MessageDraft, topic: str, queue_id: int, producer_group: str,
                       wait: bool, deadline: float | None) -> PutResult:
        """Store a producer's half message in the half queue and open its transaction. Halves arriving together
        are stored by one append (``_put_halves``)."""
        return await self._halves.submit((draft, topic, queue_id, producer_group, wait, deadline))

    async def _put_halves(self, items: list[tuple]) -> list[PutResult]:
        """One append of every half in ``items`` (all go to the half queue), then each copy into the ledger. The
        append waits for the flush and the replica when any sender asked to, until the earliest deadline."""
        drafts, groups, ids = [], [], []
        wait, deadlines = False, []
        for draft, topic, queue_id, producer_group, w, deadline in items:
            props = tx.half_properties(draft.properties, topic, queue_id, producer_group)
            drafts.append(MessageDraft(draft.body, props, draft.flag, draft.born_timestamp, draft.born_host,
                                       draft.reconsume_times, draft.sys_flag & ~tx.TRANSACTION_MASK))
            groups.append(producer_group)
            ids.append(props.get(tx.PROPERTY_TRANSACTION_ID, ""))
            if w:
                wait = True
                if deadline is not None:
                    deadlines.append(deadline)
        async with self._gate.shared():
            result = await self.store.put_messages(tx.HALF_TOPIC, 0, drafts, wait=wait,
                                                   deadline=min(deadlines) if deadlines else None)
            if not result.status.stored:
                return [result] * len(items)
            due = result.store_timestamp + self.config.timeout_ms
            for i, phy in enumerate(result.physical_offsets):
                self.ledger.on_half(HalfCopy(queue_offset=result.queue_offset + i, commit_log_offset=phy,
                                             tx_id=ids[i], producer_group=groups[i], due_ms=due, check_times=0))
        if len(items) == 1:
            return [result]
        phys = result.physical_offsets
        ends = [*phys[1:], result.next_offset]
        return [PutResult(result.status, result.remark, phy, ends[i] - phy, result.queue_offset + i, 1,
                          result.store_timestamp, [phy]) for i, phy in enumerate(phys)]

    # END_TRANSACTION -----------------------------------------------------------------------------------------
    def open_half(self, queue_offset: int, commit_log_offset: int) -> StoredMessage | None:
        """The half at ``commit_log_offset`` when it is the open copy at ``queue_offset`` that this service
        stored (a producer's usual END_TRANSACTION): read without verifying again that a record starts there, the
        ledger knows it does. None otherwise: the caller verifies the client's offset (``record_at``)."""
        copy = self.ledger.open.get(queue_offset)
        if copy is None or copy.commit_log_offset != commit_log_offset:
            return None
        return self.store.read_message(commit_log_offset)

    async def end(self, half: StoredMessage, commit: bool, from_check: bool) -> EndOutcome:
        """Resolve the transaction of ``half`` (a verified half record the caller read at the request's
        commitLogOffset): every open copy is closed by an op, after the real message for a commit. ENDs arriving
        together are resolved at once (``_end_batch``)."""
        return await self._ends.submit((half, commit, from_check))

    async def _end_batch(self, items: list[tuple[StoredMessage, bool, bool]]) -> list[EndOutcome]:
        """Resolve many ENDs with one append per real queue and one op record per outcome (RocketMQ 5 batches its
        op records too; more when their copies exceed what one op lists, ``op_parts``). The write order of each transaction is kept: its real message before the op that names
        it, so a crash between them is the case ``_already_committed`` handles. Two ENDs of one transaction in a
        batch, or one whose transaction a check is handling: the later one is answered SYSTEM_BUSY."""
        out: list[EndOutcome | None] = [None] * len(items)
        taken: set[str] = set()
        # transaction id -> (item index, open copies) for the ones this batch resolves
        commits: dict[str, tuple[int, list[int]]] = {}
        rollbacks: dict[str, tuple[int, list[int]]] = {}
        async with self._gate.shared():
            for i, (half, commit, _) in enumerate(items):
                tx_id = tx.transaction_id(half)
                verb = "commit" if commit else "rollback"
                if tx_id in self._resolving or tx_id in taken:
                    out[i] = EndOutcome(ResponseCode.SYSTEM_BUSY, f"transaction {tx_id} is being resolved by another"
                                        " END_TRANSACTION right now; nothing was done for this one")
                    continue
                decision, data = self.ledger.end(half.queue_offset, tx_id)
                if decision == "already":
                    out[i] = EndOutcome(ResponseCode.SYSTEM_ERROR, f"transaction {tx_id} was already resolved"
                                        f" ({data[0]}); this {verb} changed nothing")
                elif decision != "resolve":
                    out[i] = EndOutcome(ResponseCode.QUERY_NOT_FOUND, f"transaction {tx_id} has no open half message"
                                        " on this broker (resolved long ago, or never a half here); nothing was done")
                else:
                    taken.add(tx_id)
                    (commits if commit else rollbacks)[tx_id] = (i, data)
            self._resolving |= taken
            try:
                if commits:
                    for tx_id, failed in (await self._commit_reals(
                            [(items[i][0], tx_id) for tx_id, (i, _) in commits.items()])).items():
                        out[commits.pop(tx_id)[0]] = failed
                for resolution, chosen in (("commit", commits), ("rollback", rollbacks)):
                    for part in op_parts(chosen):
                        await self._resolve_part(part, resolution, items, out)
            finally:
                self._resolving -= taken
        return out  # type: ignore[return-value]

    async def _resolve_part(self, chosen: dict[str, tuple[int, list[int]]], resolution: str, items: list,
                            out: list) -> None:
        """One op record closing every copy of the transactions in ``chosen``, and their answers."""
        copies = [q for _, qs in chosen.values() for q in qs]
        failed = await self._put_op(copies, list(chosen), resolution)
        for tx_id, (i, _) in chosen.items():
            if failed is not None:
                if resolution == "commit":
                    self._unsure.add(tx_id)
                out[i] = failed
                continue
            out[i] = EndOutcome(ResponseCode.SUCCESS, "")
            if self.metrics is not None:
                self.metrics.on_transaction_end(resolution == "commit")
            log.debug("transaction %s: %s (%s)", tx_id, resolution, "check answer" if items[i][2] else "producer")

    async def _commit_reals(self, halves: list[tuple[StoredMessage, str]]) -> dict[str, EndOutcome]:
        """Store the real message of each committed half, one append per real queue; the transactions whose
        message could not be stored, with their answer (they stay open and will be checked)."""
        queues: dict[tuple[str, int], list[tuple[str, MessageDraft]]] = {}
        for half, tx_id in halves:
            topic, queue_id, props = tx.committed_target(half)
            if tx_id in self._unsure and self._already_committed(topic, tx_id):
                continue  # a crash came between the real message and its op: write only the op
            draft = MessageDraft(half.body, props, half.flag, half.born_timestamp, half.born_host,
                                 half.reconsume_times,
                                 (half.sys_flag & ~tx.TRANSACTION_MASK) | tx.TRANSACTION_COMMIT_TYPE)
            queues.setdefault((topic, queue_id), []).append((tx_id, draft))
        failed: dict[str, EndOutcome] = {}
        for (topic, queue_id), drafts in queues.items():
            result = await self.store.put_messages(topic, queue_id, [d for _, d in drafts])
            if not result.status.stored:
                for tx_id, _ in drafts:
                    failed[tx_id] = EndOutcome(
                        ResponseCode.SYSTEM_ERROR, f"storing the committed message of transaction {tx_id} in"
                        f" {topic}/{queue_id} failed ({result.status.value}: {result.remark}); the transaction stays"
                        " open and will be checked")
        return failed

    def _already_committed(self, topic: str, tx_id: str) -> bool:
        if not tx_id:
            return False
        for phy in self.store.index_candidates(topic, tx_id, MAX_INDEX_CANDIDATES, 0, LONG_MAX):
            msg = self.store.read_message(phy)
            if (msg is not None and msg.topic == topic and tx.transaction_id(msg) == tx_id
                    and msg.sys_flag & tx.TRANSACTION_MASK == tx.TRANSACTION_COMMIT_TYPE):
                return True
        return False

    async def _put_op(self, half_offsets: list[int], tx_ids: list[str], resolution: str) -> EndOutcome | None:
        draft = MessageDraft(tx.op_body(half_offsets), tx.op_properties(tx_ids, resolution),
                             born_timestamp=self._clock_ms(), born_host=self.store_host)
        result = await self.store.put_messages(tx.OP_TOPIC, 0, [draft])
        if not result.status.stored:
            return EndOutcome(ResponseCode.SYSTEM_ERROR, f"writing the {resolution} op record failed"
                              f" ({result.status.value}: {result.remark}); retry the END_TRANSACTION")
        self.ledger.on_op(result.queue_offset, half_offsets, tx_ids, resolution)
        if resolution != "renewed":
            self._unsure.difference_update(tx_ids)
        return None

    # the check-back ------------------------------------------------------------------------------------------
    async def _check_loop(self) -> None:
        interval_s = self.config.check_interval_ms / 1000
        while not await self.sleep(interval_s):
            try:
                await self.check_round()
            except asyncio.CancelledError:
                raise
            except Exception:  # the next round tries again (RocketMQ #9500: an error must not stop the checks)
                log.exception("transaction check round failed; the next round retries")

    async def check_round(self) -> int:
        """Check every due open copy once, then move and store the system group's offsets; how many checked."""
        checked = 0
        for copy in self.ledger.due(self._clock_ms(), CHECKS_PER_ROUND):
            if self.stopping:
                break
            if copy.tx_id in self._resolving or copy.queue_offset not in self.ledger.open:
                continue
            self._resolving.add(copy.tx_id)
            try:
                async with self._gate.shared():
                    if copy.queue_offset in self.ledger.open:
                        outcome = await self._check_one(copy)
                        checked += 1
                        if self.metrics is not None:
                            self.metrics.on_transaction_check(outcome)
            finally:
                self._resolving.discard(copy.tx_id)
        async with self._gate.exclusive():
            half_offset, op_offset = self.ledger.advance()
        self.offsets.commit(tx.SYSTEM_GROUP, tx.HALF_TOPIC, 0, half_offset)
        self.offsets.commit(tx.SYSTEM_GROUP, tx.OP_TOPIC, 0, op_offset)
        return checked

    async def _check_one(self, copy: HalfCopy) -> str:
        if max(self.ledger.by_tx.get(copy.tx_id, ()), default=copy.queue_offset) > copy.queue_offset:
            # a newer copy is open (its renewed op was not written: a failed write or a crash): close this one
            failed = await self._put_op([copy.queue_offset], [copy.tx_id], "renewed")
            return "failed" if failed else "renewed"
        half = self.store.read_message(copy.commit_log_offset)
        if half is None or half.topic != tx.HALF_TOPIC:
            log.warning("transaction %s: half copy at %d is gone (expired); discarding it", copy.tx_id,
                        copy.commit_log_offset)
            await self._put_op([copy.queue_offset], [copy.tx_id], "discarded")
            return "discarded"
        if tx.check_times(half) >= self.config.check_max:
            draft = MessageDraft.stored_again(half, dict(half.properties), half.reconsume_times)
            put = await self.store.put_messages(tx.CHECK_MAX_TOPIC, 0, [draft])
            if not put.status.stored:
                log.warning("transaction %s: moving to %s failed (%s); next round", copy.tx_id, tx.CHECK_MAX_TOPIC,
                            put.remark)
                return "failed"
            failed = await self._put_op([copy.queue_offset], [copy.tx_id], "discarded")
            return "failed" if failed else "discarded"
        renewed = MessageDraft.stored_again(half, tx.renewed_properties(half), half.reconsume_times)
        put = await self.store.put_messages(tx.HALF_TOPIC, 0, [renewed])
        if not put.status.stored:
            log.warning("transaction %s: renewing the half failed (%s); next round", copy.tx_id, put.remark)
            return "failed"
        new_copy = HalfCopy(put.queue_offset, put.physical_offsets[0], copy.tx_id, copy.producer_group,
                            put.store_timestamp + tx.immunity_ms(half, self.config.timeout_ms), copy.check_times + 1)
        self.ledger.on_half(new_copy)
        if await self._put_op([copy.queue_offset], [copy.tx_id], "renewed") is not None:
            return "failed"
        return self._ask_producer(copy.producer_group, new_copy)

    def _ask_producer(self, group: str, copy: HalfCopy) -> str:
        """Send CHECK_TRANSACTION_STATE about ``copy`` to one live producer of ``group`` (oneway)."""
        msg = self.store.read_message(copy.commit_log_offset)
        if msg is None:
            return "failed"
        request = check_request(msg, self.store_host)
        channels = self.clients.producer_channels(group)
        start = copy.check_times % len(channels) if channels else 0
        for channel in channels[start:] + channels[:start]:
            conn = channel.conn
            try:
                conn.invoke_oneway(request)
            except Exception as exc:  # noqa: BLE001 - closed under us: try the next producer
                log.debug("check of %s to %s failed: %r", copy.tx_id, channel.addr, exc)
                continue
            self.checks_sent += 1
            return "sent"
        return "no_producer"


def transaction_service(settings, store, topics, offsets, clients, metrics) -> TransactionService:
    """The master's service from the broker's conf (transactionTimeOut, transactionCheckInterval,
    transactionCheckMax). The three system topics get one-queue configs, as RocketMQ creates them, so admin tools
    and pulls see them."""
    broker = settings.broker
    for topic in (tx.HALF_TOPIC, tx.OP_TOPIC, tx.CHECK_MAX_TOPIC):
        topics.create_if_absent(topic, 1, PERM_RW)
    config = TransactionConfig(broker.transaction_time_out, broker.transaction_check_interval,
                               broker.transaction_check_max)
    service = TransactionService(store, offsets, clients, config, store_host=(broker.broker_ip1, broker.listen_port),
                                 metrics=metrics)
    if metrics is not None:
        metrics.attach_transactions(lambda: service.open_count)
    return service
