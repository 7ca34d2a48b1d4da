"""MessageStore: the broker's storage facade (RocketMQ DefaultMessageStore), statuses in, statuses out.

On disk under ``storePathRootDir``: ``commitlog/`` (commitlog.py), ``consumequeue/<topic>/<queueId>/``
(consume_queue.py), ``checkpoint`` and ``abort`` (checkpoint.py). A ``broker.lock`` file (an flock held while running) in
every directory the store or the broker writes: the root, the commitlog directory (``storePathCommitLog`` may lie
outside the root), ``consumequeue`` and ``config``; a second broker sharing any of them fails at start with an
error naming the directory and the holder (``checkpoint.StoreLocks``).

Parts, each passed the collaborators it works on (none reaches back into the facade): ``CommitLog``, the
``ConsumeQueueStore`` (every consume queue), the ``DispatchState`` (how far the queues index the commitlog, and its
listeners), the put path's ``Appender``, the ``Dispatcher``, the flush services, ``CleanupService`` with its
``DiskMonitor``, and the ``AllocateService`` that creates commitlog files ahead.

Lifecycle: ``lock`` takes the locks (the broker calls it before it touches its config files; ``start`` takes them
if nobody did), ``start`` loads the files, recovers (normal without an abort marker, abnormal with
one), cuts every consume queue back to the recovered commitlog end, re-dispatches what the queues lack,
corrects queue min offsets, creates the abort marker and starts the services (flush, consume-queue flush,
allocation, cleanup, and on a SLAVE the tailing dispatcher). ``stop`` refuses new puts, waits for the one in
flight, stops the services, flushes everything, writes the checkpoint and removes the abort marker.

Put path (master): validate (nothing touches the disk on a refusal), then under the put lock assign queue
offsets and the store time, encode the batch into one bytearray, one pwrite per commitlog file touched, one
consume-queue write per queue, advance the dispatched offset, notify listeners; then outside the lock wait
for the group commit (SYNC_FLUSH) and the replica waiter (SYNC_MASTER) unless every message says WAIT=false.

``put_grouped`` (single-message sends): the puts of one event-loop pass share one append per queue and one flush and
replica wait (``put_group.PutGroup``); each gets its own result.

Slave path: ``append_replicated`` writes raw bytes at the commitlog end and wakes the dispatcher.

Task-safety: one event loop. Blocking disk work runs on private executors: fdatasync, consume-queue file
creation, truncation and loading on two threads; commitlog file creation and pre-touching on a third, so a slow
pre-touch never delays a group commit. ``kill`` simulates a crash for tests (no flush, abort marker stays).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from broker.config import BrokerRole, MessageStoreConfig
from broker.store import get as get_path
from broker.store import put as put_path
from broker.store import put_prepare
from broker.store.put_group import PutGroup
from broker.store.allocate import AllocateService
from broker.store.checkpoint import AbortMarker, StoreCheckpoint, StoreLockedError, StoreLocks  # noqa: F401
from broker.store.cleanup import CleanupService, DiskMonitor
from broker.store.commitlog import CommitLog
from broker.store.consume_queue import UNIT_SIZE
from broker.store.consume_queue_store import ConsumeQueueStore
from broker.store.dispatch_state import AppendListener, DispatchListener, DispatchState
from broker.store.dispatcher import Dispatcher
from broker.store.epoch_file import EpochFile
from broker.store.index_service import IndexService
from broker.store.flush import GroupCommitService, build_flush_services
from broker.store.recovery import load_and_recover
from broker.store.types import CommitlogSlice, GetResult, MessageDraft, PutResult, PutStatus, RawBatch
from broker.store.types import StoreOffsetMismatch
from broker.store.visibility import ConfirmGate, visible_max_offset
from common import fd_limit
from remoting.message_codec import MAX_PROPERTIES_LEN, MAX_RETRY_TOPIC_LEN, MIN_RECORD_SIZE, StoredMessage, TagFilter
from remoting.message_codec import host_bytes

log = logging.getLogger(__name__)


class MessageStore:
    def __init__(self, config: MessageStoreConfig, *, store_host: tuple[str, int] = ("127.0.0.1", 10911)) -> None:
        self.config = config
        self.role = config.broker_role
        self.store_host = store_host
        self.root = config.root_dir
        self.epochs = EpochFile(self.root)  # the masterEpoch history (controller mode); empty in classic mode
        # Flushes, consume-queue files and recovery on one pool; commitlog file creation (which may pre-touch a
        # whole GiB) on its own thread, so it never delays a group commit.
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="store-disk")
        self._alloc_executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-alloc")
        self._allocator = AllocateService(self._alloc_executor)
        max_record = config.max_message_size + MIN_RECORD_SIZE + MAX_RETRY_TOPIC_LEN + MAX_PROPERTIES_LEN
        self._commitlog = CommitLog(
            config.commitlog_dir,
            config.mapped_file_size_commit_log,
            self._allocator,
            warm=config.warm_mapped_file_enable,
            max_record_size=max_record,
        )
        self._queues = ConsumeQueueStore(
            config.consume_queue_dir,
            config.mapped_file_size_consume_queue,
            max_open_files=config.max_open_consume_queue_files or fd_limit.current_budget(),
            run_disk=self._run_disk,
        )
        self._state = DispatchState(self._queues, slave=self.role is BrokerRole.SLAVE)
        stats = ("putMessageTimesTotal", "putMessageSizeTotal", "getMessageTimesTotal", "getMessageFoundTotal")
        self.stats = dict.fromkeys(stats, 0)
        self._delay_levels_ms = config.delay_levels_ms
        self._appender = put_path.Appender(
            self._commitlog, self._queues, self._state,
            store_host=host_bytes(*store_host), delay_levels_ms=self._delay_levels_ms, stats=self.stats,
        )
        self._checkpoint: StoreCheckpoint | None = None
        self._abort = AbortMarker(self.root / "abort")
        self._locks = StoreLocks(
            [self.root, config.commitlog_dir, config.consume_queue_dir, config.config_dir], owner=str(self.root)
        )
        self._put_lock = asyncio.Lock()
        self._running = False
        self._stopping = False
        self._replica_waiter: put_path.ReplicaWaiter | None = None
        self._dispatcher = Dispatcher(self._commitlog, self._queues, self._state, delay_levels_ms=self._delay_levels_ms)
        self.disk = DiskMonitor(config)
        self._cleanup = CleanupService(config, self.disk, self._commitlog, self._queues, self._state)
        self.index: IndexService | None = None
        if config.message_index_enable:
            self.index = IndexService(self.root, self._commitlog, slots=config.max_hash_slot_num,
                                      entries=config.max_index_num)
            self._state.append_listeners.append(self.index.on_append)
            self._appender.index_feed = self.index.offer_put
            self._dispatcher.index_feed = self.index.offer_scanned
            self._cleanup.commitlog_min_listeners.append(self.index.delete_below)
        self._group_commit: GroupCommitService | None = None
        self._services: list = []
        self._gate: ConfirmGate | None = None  # controller mode's confirm-offset gate; None in classic mode
        self._put_group = PutGroup(self._append_prepared, self._wait_stored,
                                   replicated=lambda: self._replica_waiter is not None)

    # lifecycle -------------------------------------------------------------------------------------------
    def lock(self) -> None:
        """Lock every directory this broker writes (blocking, quick); StoreLockedError names a directory another
        broker holds and that broker. Idempotent; ``stop``, ``kill`` or a failed ``start`` release the locks."""
        if not self._locks.held:
            self._locks.acquire()

    def unlock(self) -> None:
        """Release the locks of a store that was locked but will not be started."""
        if not self._running:
            self._locks.release()

    @property
    def lock_paths(self) -> list[Path]:
        return self._locks.paths

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.root.mkdir(parents=True, exist_ok=True)
        self.lock()
        try:
            abnormal = self._abort.exists
            self._checkpoint = checkpoint = StoreCheckpoint(self.root / "checkpoint")
            self._state.checkpoint = checkpoint
            recover = functools.partial(
                load_and_recover, self._commitlog, self._queues, checkpoint,
                abnormal=abnormal, check_crc=self.config.check_crc_on_recover, epochs=self.epochs,
            )
            reput_from, end = await loop.run_in_executor(self._executor, recover)
            if self.index is not None:
                await loop.run_in_executor(self._executor, self.index.load)
            self._queues.bind_owner()  # from here on consume-queue files are parked on the loop only
            self._state.last_put_ts = self._commitlog.last_store_timestamp
            if reput_from < end:
                log.info("store: re-dispatching commitlog [%d, %d) into consume queues", reput_from, end)
                self._state.dispatched = await self._dispatcher.dispatch(reput_from, end)
            else:
                self._state.dispatched = end
            for cq in self._queues:
                cq.correct_min_offset(self._commitlog.min_offset)
            await loop.run_in_executor(self._executor, self._abort.create)
            await self._start_services()
            self._running = True
            log.info(
                "store %s started (%s recovery): commitlog [%d, %d), %d consume queues (at most %d files open), "
                "role %s",
                self.root,
                "abnormal" if abnormal else "normal",
                self.min_phy_offset,
                self.max_phy_offset,
                len(self._queues),
                self._queues.open_files.limit,
                self.role.name,
            )
        except BaseException:
            for svc in reversed(self._services):
                await svc.stop(timeout_s=0.5)
            self._release(wait=False, cancel=True)
            raise

    def consume_queue_files(self) -> tuple[int, int, int]:
        """(open now, the limit, parked since start) of the consume-queue files (``open_files``)."""
        cache = self._queues.open_files
        return len(cache), cache.limit, cache.parked_total

    async def _start_services(self) -> None:
        services: list = [self._allocator]
        assert self._checkpoint is not None
        flushers = build_flush_services(
            self.config, self._commitlog, self._queues, self._state, self._checkpoint, self._executor
        )
        self._group_commit = next((f for f in flushers if isinstance(f, GroupCommitService)), None)
        services += flushers
        services.append(self._cleanup)
        if self.index is not None:
            services.append(self.index)
        if self.role is BrokerRole.SLAVE:
            services.append(self._dispatcher)
        self._services = []
        for svc in services:
            await svc.start()
            self._services.append(svc)  # as each starts, so a failed start stops exactly those

    async def stop(self) -> None:
        if not self._running:
            self.unlock()  # locked by the broker, but its start failed before the store's
            return
        self._stopping = True
        loop = asyncio.get_running_loop()
        self._put_group.flush_now()
        async with self._put_lock:
            self._running = False
        for svc in reversed(self._services):
            await svc.stop()
        self._services = []
        await loop.run_in_executor(self._executor, self._final_flush)
        await loop.run_in_executor(self._executor, self._abort.remove)
        self._release(wait=True, cancel=False)
        log.info("store %s stopped cleanly at commitlog offset %d", self.root, self.max_phy_offset)

    def _final_flush(self) -> None:
        self._commitlog.files.flush_sync(self._commitlog.max_offset)
        for cq in self._queues:
            cq.flush_sync()
        assert self._checkpoint is not None
        ts = max(self._state.last_put_ts, self._state.last_dispatched_ts)
        self._checkpoint.physic_msg_timestamp = max(self._checkpoint.physic_msg_timestamp, ts)
        self._checkpoint.logics_msg_timestamp = max(self._checkpoint.logics_msg_timestamp, ts)
        self._checkpoint.flush()

    async def kill(self) -> None:
        """Die like ``kill -9`` (tests): no final flush, no checkpoint, the abort marker stays; files and lock
        are closed as the kernel would. The page cache keeps what was written, exactly as after a process crash."""
        self._running = False
        self._stopping = True
        for svc in reversed(self._services):
            await svc.stop(timeout_s=0.5)
        self._services = []
        self._release(wait=True, cancel=True)

    def _release(self, *, wait: bool, cancel: bool) -> None:
        """Close every file, drop the directory locks and end the executors (the services are stopped)."""
        if self.index is not None:
            self.index.close()
        self._commitlog.close()
        self._queues.close()
        if self._checkpoint is not None:
            self._checkpoint.close()
        self._locks.release()
        self._executor.shutdown(wait=wait, cancel_futures=cancel)
        self._alloc_executor.shutdown(wait=wait, cancel_futures=cancel)

    async def _run_disk(self, fn: Callable[[], object]) -> object:
        """Run a blocking consume-queue call (file creation, block reservation) on the disk executor."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    # the message index -------------------------------------------------------------------------------------
    def index_candidates(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        """Commitlog offsets the index holds for ``key`` (a KEYS entry or a UNIQ_KEY) in ``topic``, newest first;
        candidates only (hash collisions, expired or truncated records): read each and check its keys."""
        if self.index is None:
            return []
        return self.index.lookup(topic, key, max_num, begin_ms, end_ms)

    # put path --------------------------------------------------------------------------------------------
    def set_replica_waiter(self, waiter: put_path.ReplicaWaiter | None) -> None:
        self._replica_waiter = waiter

    def add_dispatch_listener(self, cb: DispatchListener, *, confirmed: bool = False) -> None:
        """``cb(topic, queue_id, max_queue_offset)`` after new units of that queue were written; with ``confirmed``
        (a consumer's wakeup) and a confirm gate, only once the confirm offset covers them."""
        if confirmed and self._gate is not None:
            self._gate.listeners.append(cb)
        else:
            self._state.dispatch_listeners.append(cb)

    def enable_confirm_gate(self, initial: int) -> ConfirmGate:
        """Controller mode: consumer reads (``confirmed_only``) stop at the confirm offset from now on, starting at
        ``initial``; the caller sets ``gate.confirm`` and calls ``gate.refresh`` when acks or the set change. Call it
        before any ``confirmed`` listener is added."""
        if self._gate is None:
            self._gate = ConfirmGate(initial, lambda: self._commitlog.max_offset)
            self._state.dispatch_listeners.append(self._gate.on_dispatch)
        return self._gate

    @property
    def confirm_gate(self) -> ConfirmGate | None:
        return self._gate

    def add_append_listener(self, cb: AppendListener) -> None:
        """``cb(max_phy_offset)`` after every commitlog append."""
        self._state.append_listeners.append(cb)

    def _refusal(self) -> PutResult | None:
        if self._accepting and not self.disk.full:
            return None
        if self.role is BrokerRole.SLAVE:
            return PutResult(
                PutStatus.SERVICE_NOT_AVAILABLE,
                remark="this broker is a SLAVE and does not accept writes; send to the master of its brokerName",
            )
        if not self._running or self._stopping:
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark="the message store is not running (stopping)")
        if self.disk.full and self.disk.recheck():
            return PutResult(PutStatus.SERVICE_NOT_AVAILABLE, remark=self.disk.remark())
        return None

    @property
    def _accepting(self) -> bool:
        return self._running and not self._stopping and self.role is not BrokerRole.SLAVE

    async def put_messages(
        self,
        topic: str,
        queue_id: int,
        drafts: Sequence[MessageDraft],
        *,
        wait: bool | None = None,
        deadline: float | None = None,
    ) -> PutResult:
        """Append ``drafts`` to one queue. ``wait`` overrides the messages' own ``WAIT`` property (a remoting send
        drops ``WAIT`` from what is stored but keeps its meaning, as RocketMQ does). ``deadline`` (event-loop time)
        ends the flush and replica waits early: the sender stops waiting for the answer then."""
        refused = self._refusal()
        if refused is not None:
            return refused
        cfg = self.config
        prepared = put_prepare.prepare_batch(
            topic, queue_id, drafts, max_message_size=cfg.max_message_size,
            file_size=cfg.mapped_file_size_commit_log, max_delay_level=len(self._delay_levels_ms),
        )
        if isinstance(prepared, PutResult):
            return prepared
        if wait is not None:
            prepared = prepared._replace(wait=wait)
        return await self._put_prepared(prepared, deadline)

    async def put_batch(
        self, topic: str, queue_id: int, batch: RawBatch, *, deadline: float | None = None
    ) -> PutResult:
        """Append a batch as decoded from SEND_BATCH_MESSAGE without a draft per message
        (``put_prepare.prepare_raw``); ``deadline`` as for ``put_messages``."""
        refused = self._refusal()
        if refused is not None:
            return refused
        cfg = self.config
        prepared = put_prepare.prepare_raw(
            topic, queue_id, batch, max_message_size=cfg.max_message_size, file_size=cfg.mapped_file_size_commit_log
        )
        if isinstance(prepared, PutResult):
            return prepared
        return await self._put_prepared(prepared, deadline)

    def put_grouped(
        self, topic: str, queue_id: int, draft: MessageDraft, *, wait: bool, deadline: float | None = None,
        on_done: Callable[[PutResult], None] | None = None,
    ) -> asyncio.Future[PutResult] | PutResult | None:
        """One message, stored with the others submitted in the same event-loop pass: one append per queue and one
        flush/replica wait for all of them (``put_group``). A refusal (store not writable, an illegal message)
        comes back at once as a PutResult; otherwise ``on_done(result)`` is called with this message's own result
        as soon as it is known (and None returned), or without ``on_done`` a future of it is returned. The future may
        be cancelled (its awaiting caller gave up): the message is still stored, and the group still answers the
        others."""
        refused = self._refusal()
        if refused is not None:
            return refused
        cfg = self.config
        prepared = put_prepare.prepare_batch(
            topic, queue_id, (draft,), max_message_size=cfg.max_message_size,
            file_size=cfg.mapped_file_size_commit_log, max_delay_level=len(self._delay_levels_ms),
        )
        if isinstance(prepared, PutResult):
            return prepared
        if prepared.wait is not wait:
            prepared = prepared._replace(wait=wait)
        fut = None
        if on_done is None:
            fut = asyncio.get_running_loop().create_future()
            on_done = functools.partial(_settle, fut)
        if not prepared.all_dispatched:  # a transaction record (no queue offset): on its own
            task = asyncio.ensure_future(self._put_prepared(prepared, deadline))
            task.add_done_callback(lambda t: on_done(t.result()) if not t.cancelled() and t.exception() is None
                                   else on_done(PutResult(PutStatus.UNKNOWN_ERROR, remark="the put failed")))
        else:
            self._put_group.submit(prepared, deadline, on_done)
        return fut

    @property
    def grouped_appends(self) -> tuple[int, int]:
        """(store appends, puts) the grouped puts made so far: a benchmark's appends per put."""
        return self._put_group.appends, self._put_group.puts

    async def _append_prepared(self, prepared: put_prepare.Prepared) -> PutResult:
        """The writing half of a put, without the waits (the put group waits once for all its appends)."""
        refused = self._refusal()
        if refused is not None:
            return refused
        try:
            if prepared.single_queue and prepared.all_dispatched and not self._put_lock.locked():
                result = self._appender.append_simple(prepared)
                if result is not None:
                    return result
            async with self._put_lock:
                refused = self._refusal()
                if refused is not None:
                    return refused
                return await self._appender.append_batch(prepared)
        except OSError as exc:
            return put_path.write_failed(exc, self.disk)

    async def _wait_stored(self, result: PutResult, deadline: float | None) -> None:
        await put_path.wait_stored(result, self._group_commit, self._replica_waiter, deadline)

    async def _put_prepared(self, prepared: put_prepare.Prepared, deadline: float | None = None) -> PutResult:
        result = None
        try:
            if prepared.single_queue and prepared.all_dispatched and not self._put_lock.locked():
                # No await on this path, so nothing can interleave: the lock would only cost time.
                result = self._appender.append_simple(prepared)
            if result is None:
                async with self._put_lock:
                    refused = self._refusal()
                    if refused is not None:
                        return refused
                    result = await self._appender.append_batch(prepared)
        except OSError as exc:
            return put_path.write_failed(exc, self.disk)
        if prepared.wait:
            await put_path.wait_stored(result, self._group_commit, self._replica_waiter, deadline)
        return result

    # replication -----------------------------------------------------------------------------------------
    def append_replicated(self, phy_offset: int, data: bytes | memoryview) -> int:
        if self.role is not BrokerRole.SLAVE:
            raise RuntimeError("append_replicated is for SLAVE stores; this store is " + self.role.name)
        if not self._running:
            raise RuntimeError(f"store {self.root} is not running; start it before replicating into it")
        cl = self._commitlog
        if not cl.files.empty and phy_offset != cl.max_offset:
            raise StoreOffsetMismatch(cl.max_offset, phy_offset, path=str(cl.directory))
        if not data:
            return cl.max_offset
        new_max = cl.append_replicated(phy_offset, data)
        self._dispatcher.wakeup()
        self._state.notify_append(new_max)
        return new_max

    def commitlog_slice(self, phy_offset: int, max_bytes: int) -> CommitlogSlice | None:
        return self._commitlog.slice(phy_offset, max_bytes)

    # reads -----------------------------------------------------------------------------------------------
    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msg_nums: int,
        *,
        max_total_bytes: int = 0,
        tag_filter: TagFilter | None = None,
        record_filter: get_path.RecordFilter | None = None,
        confirmed_only: bool = False,
    ) -> GetResult:
        """``confirmed_only``: a consumer's read, which stops at the confirm offset in controller mode."""
        self.stats["getMessageTimesTotal"] += 1
        gate = self._gate
        result = get_path.get_message(
            self.config, self._commitlog, self._queues, topic, queue_id, offset, max_msg_nums, max_total_bytes,
            tag_filter, record_filter, gate.limit if confirmed_only and gate is not None else None,
        )
        if result.message_count:
            self.stats["getMessageFoundTotal"] += 1
        return result

    def read_record(self, phy_offset: int) -> bytes | None:
        return get_path.read_record(self._commitlog, phy_offset)

    def read_message(self, phy_offset: int) -> StoredMessage | None:
        return get_path.read_message(self._commitlog, phy_offset)

    def scan_commitlog(self, begin: int, end: int | None = None):
        """Yield ``(phy_offset, CheckResult)`` for the records in [begin, end) (default: to the max offset),
        following BLANK records into the next file; the last item is not VALID if the scan met a bad record."""
        end = self.max_phy_offset if end is None else end
        return self._commitlog.iter_records(max(begin, self.min_phy_offset), end)

    def commitlog_start_at_time(self, timestamp_ms: int) -> int:
        """Start of the newest commitlog file whose first record is stored at or before ``timestamp_ms`` (the min
        offset when none is): a scan from there sees every record newer than that time."""
        return self._commitlog.start_at_time(timestamp_ms)

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self._queues.find(topic, queue_id)
        return cq.min_offset if cq else 0

    def max_offset_in_queue(self, topic: str, queue_id: int, *, confirmed_only: bool = False) -> int:
        cq = self._queues.find(topic, queue_id)
        if cq is None:
            return 0
        if confirmed_only and self._gate is not None:
            return visible_max_offset(cq, self._gate.limit)
        return cq.max_offset

    def store_timestamp_at(self, topic: str, queue_id: int, queue_offset: int) -> int:
        return get_path.store_timestamp_at(self._commitlog, self._queues.find(topic, queue_id), queue_offset)

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return get_path.offset_by_time(self._commitlog, self._queues.find(topic, queue_id), timestamp_ms)

    def queue_ids(self, topic: str) -> list[int]:
        return self._queues.queue_ids(topic)

    def topics(self) -> list[str]:
        return self._queues.topics()

    def delete_topic(self, topic: str) -> None:
        self._queues.delete_topic(topic)

    # collaborators (RocketMQ's getCommitLog / getConsumeQueueStore ...): for tools, tests and benchmarks -------
    @property
    def commitlog(self) -> CommitLog:
        return self._commitlog

    @property
    def consume_queues(self) -> ConsumeQueueStore:
        return self._queues

    @property
    def cleanup(self) -> CleanupService:
        return self._cleanup

    @property
    def allocator(self) -> AllocateService:
        return self._allocator

    @property
    def group_commit(self) -> GroupCommitService | None:
        """The SYNC_FLUSH group commit while running (None under ASYNC_FLUSH)."""
        return self._group_commit

    # state -----------------------------------------------------------------------------------------------
    @property
    def min_phy_offset(self) -> int:
        return self._commitlog.min_offset

    @property
    def max_phy_offset(self) -> int:
        return self._commitlog.max_offset

    @property
    def flushed_phy_offset(self) -> int:
        return self._commitlog.flushed_offset

    @property
    def dispatched_phy_offset(self) -> int:
        return self._state.dispatched

    @property
    def disk_full(self) -> bool:
        return self.disk.full

    @property
    def running(self) -> bool:
        return self._running

    def runtime_info(self) -> dict[str, str]:
        first = self._commitlog.files.first
        earliest = 0 if first is None else max(get_path.store_time_of(self._commitlog, first.start_offset), 0)
        cq_open, cq_limit, cq_parked = self.consume_queue_files()
        info = {
            "commitLogMinOffset": str(self.min_phy_offset),
            "commitLogMaxOffset": str(self.max_phy_offset),
            "commitLogDiskRatio": f"{self.disk.used_ratio():.4f}",
            "dispatchBehindBytes": str(max(0, self.max_phy_offset - self._state.dispatched)),
            "remainHowManyDataToFlush": str(max(0, self.max_phy_offset - self.flushed_phy_offset)),
            "earliestMessageTimeStamp": str(earliest),
            "brokerRole": self.role.name,
            "diskFull": str(self.disk.full).lower(),
            "consumeQueueCount": str(len(self._queues)),
            "consumeQueueOpenFiles": str(cq_open),
            "consumeQueueOpenFilesLimit": str(cq_limit),
            "consumeQueueFilesParked": str(cq_parked),
            "unitSize": str(UNIT_SIZE),
        }
        info.update({k: str(v) for k, v in self.stats.items()})
        return info


def _settle(fut: asyncio.Future[PutResult], result: PutResult) -> None:
    """A grouped put's answer to its future, unless the caller awaiting it was cancelled (the future with it)."""
    if not fut.done():
        fut.set_result(result)
