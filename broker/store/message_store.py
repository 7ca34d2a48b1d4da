"""MessageStore: the broker's storage facade (RocketMQ DefaultMessageStore), statuses in, statuses out.

On disk under ``storePathRootDir``: ``commitlog/`` (commitlog.py), ``consumequeue/<topic>/<queueId>/``
(consume_queue.py), ``checkpoint`` and ``abort`` (checkpoint.py). A ``broker.lock`` file (an flock held while running) in
every directory the store or the broker writes: the root, the commitlog directory (``storePathCommitLog`` may lie
outside the root), ``consumequeue`` and ``config``; a second broker sharing any of them fails at start with an
error naming the directory and the holder (``checkpoint.StoreLocks``).

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

Slave path: ``append_replicated`` writes raw bytes at the commitlog end and wakes the dispatcher.

Task-safety: one event loop. Blocking disk work runs on private executors: fdatasync, consume-queue file
creation, truncation and loading on two threads; commitlog file creation and pre-touching on a third, so a slow
pre-touch never delays a group commit. ``kill`` simulates a crash for tests (no flush, abort marker stays).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from broker.config import BrokerRole, MessageStoreConfig
from broker.store import get as get_path
from broker.store import put as put_path
from broker.store.allocate import AllocateService
from broker.store.checkpoint import AbortMarker, StoreCheckpoint, StoreLockedError, StoreLocks  # noqa: F401
from broker.store.cleanup import CleanupService, DiskMonitor
from broker.store.commitlog import CommitLog
from broker.store.consume_queue import UNIT_SIZE, ConsumeQueue
from broker.store.dispatcher import Dispatcher
from broker.store.flush import GroupCommitService, build_flush_services
from broker.store.open_files import OpenFiles
from broker.store.recovery import load_and_recover
from broker.store.types import (
    CommitlogSlice,
    GetResult,
    MessageDraft,
    PutResult,
    PutStatus,
    RawBatch,
    StoreOffsetMismatch,
)
from remoting.message_codec import (
    MAX_PROPERTIES_LEN,
    MAX_RETRY_TOPIC_LEN,
    MIN_RECORD_SIZE,
    RecordError,
    StoredMessage,
    TagFilter,
    decode,
    host_bytes,
)

log = logging.getLogger(__name__)

# waiter(next_offset) or waiter(next_offset, deadline): (status, remark) once replicated, or at slaveTimeout or the
# sender's deadline (event-loop time), whichever comes first
ReplicaWaiter = Callable[..., Awaitable[tuple[PutStatus, str]]]


class MessageStore:
    def __init__(self, config: MessageStoreConfig, *, store_host: tuple[str, int] = ("127.0.0.1", 10911)) -> None:
        self.config = config
        self.role = config.broker_role
        self.store_host = store_host
        self._store_host_bytes = host_bytes(*store_host)
        self.root = config.root_dir
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
        self._cq_root = config.consume_queue_dir
        self._cq_files = OpenFiles(config.max_open_consume_queue_files)
        self._cqs: dict[str, dict[int, ConsumeQueue]] = {}
        self._delay_levels_ms = config.delay_levels_ms
        self._checkpoint: StoreCheckpoint | None = None
        self._abort = AbortMarker(self.root / "abort")
        self._locks = StoreLocks(
            [self.root, config.commitlog_dir, config.consume_queue_dir, config.config_dir], owner=str(self.root)
        )
        self._put_lock = asyncio.Lock()
        self._dispatched = 0
        self._running = False
        self._stopping = False
        self._replica_waiter: ReplicaWaiter | None = None
        self._dispatch_listeners: list[Callable[[str, int, int], None]] = []
        self._append_listeners: list[Callable[[int], None]] = []
        self._dispatcher = Dispatcher(self)
        self.disk = DiskMonitor(self)
        self._cleanup = CleanupService(self)
        self._group_commit: GroupCommitService | None = None
        self._services: list = []
        self._last_put_ts = 0
        self._last_dispatched_ts = 0
        self.stats = {
            "putMessageTimesTotal": 0,
            "putMessageSizeTotal": 0,
            "getMessageTimesTotal": 0,
            "getMessageFoundTotal": 0,
        }

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
            self._checkpoint = StoreCheckpoint(self.root / "checkpoint")
            reput_from, end = await loop.run_in_executor(self._executor, load_and_recover, self, abnormal)
            self._cq_files.bind_owner()  # from here on consume-queue files are parked on the loop only
            self._cq_files.trim()
            self._last_put_ts = self._commitlog.last_store_timestamp
            if reput_from < end:
                log.info("store: re-dispatching commitlog [%d, %d) into consume queues", reput_from, end)
                self._dispatched = await self._dispatcher.dispatch(reput_from, end)
            else:
                self._dispatched = end
            for cq in self._all_cqs():
                cq.correct_min_offset(self._commitlog.min_offset)
            await loop.run_in_executor(self._executor, self._abort.create)
            await self._start_services()
            self._running = True
            log.info(
                "store %s started (%s recovery): commitlog [%d, %d), %d consume queues, role %s",
                self.root,
                "abnormal" if abnormal else "normal",
                self.min_phy_offset,
                self.max_phy_offset,
                sum(len(q) for q in self._cqs.values()),
                self.role.name,
            )
        except BaseException:
            for svc in reversed(self._services):
                await svc.stop(timeout_s=0.5)
            self._close_files()
            self._locks.release()
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._alloc_executor.shutdown(wait=False, cancel_futures=True)
            raise

    async def _start_services(self) -> None:
        services: list = [self._allocator]
        flushers = build_flush_services(self)
        self._group_commit = next((f for f in flushers if isinstance(f, GroupCommitService)), None)
        services += flushers
        services.append(self._cleanup)
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
        async with self._put_lock:
            self._running = False
        for svc in reversed(self._services):
            await svc.stop()
        self._services = []
        await loop.run_in_executor(self._executor, self._final_flush)
        await loop.run_in_executor(self._executor, self._abort.remove)
        self._close_files()
        self._locks.release()
        self._executor.shutdown(wait=True)
        self._alloc_executor.shutdown(wait=True)
        log.info("store %s stopped cleanly at commitlog offset %d", self.root, self.max_phy_offset)

    def _final_flush(self) -> None:
        self._commitlog.files.flush_sync(self._commitlog.max_offset)
        for cq in self._all_cqs():
            cq.flush_sync()
        assert self._checkpoint is not None
        ts = max(self._last_put_ts, self._last_dispatched_ts)
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
        self._close_files()
        self._locks.release()
        self._executor.shutdown(wait=True, cancel_futures=True)
        self._alloc_executor.shutdown(wait=True, cancel_futures=True)

    def _close_files(self) -> None:
        self._commitlog.close()
        for cq in self._all_cqs():
            cq.close()
        if self._checkpoint is not None:
            self._checkpoint.close()

    # consume queues --------------------------------------------------------------------------------------
    def _all_cqs(self):
        for queues in self._cqs.values():
            yield from queues.values()

    def _cq(self, topic: str, queue_id: int, *, create: bool = False) -> ConsumeQueue | None:
        queues = self._cqs.get(topic)
        cq = queues.get(queue_id) if queues else None
        if cq is None and create:
            cq = ConsumeQueue(
                topic, queue_id, self._cq_root, self.config.mapped_file_size_consume_queue, cache=self._cq_files
            )
            self._cqs.setdefault(topic, {})[queue_id] = cq
        return cq

    async def _run_disk(self, fn: Callable[[], object]) -> object:
        """Run a blocking consume-queue call (file creation, block reservation) on the disk executor."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    def _notify_dispatch(self, topic: str, queue_id: int) -> None:
        if not self._dispatch_listeners:
            return
        cq = self._cq(topic, queue_id)
        max_offset = cq.max_offset if cq else 0
        for cb in self._dispatch_listeners:
            try:
                cb(topic, queue_id, max_offset)
            except Exception:
                log.exception("dispatch listener %r failed", cb)

    def _on_dispatched(self, store_ts: int) -> None:
        self._last_dispatched_ts = store_ts
        if self.role is BrokerRole.SLAVE and self._checkpoint is not None:
            self._checkpoint.physic_msg_timestamp = store_ts  # a slave records what it dispatched (RocketMQ)

    def _set_dispatched(self, offset: int) -> None:
        self._dispatched = max(self._dispatched, offset)

    # put path --------------------------------------------------------------------------------------------
    def set_replica_waiter(self, waiter: ReplicaWaiter | None) -> None:
        self._replica_waiter = waiter

    def add_dispatch_listener(self, cb: Callable[[str, int, int], None]) -> None:
        self._dispatch_listeners.append(cb)

    def add_append_listener(self, cb: Callable[[int], None]) -> None:
        self._append_listeners.append(cb)

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
        prepared = put_path.prepare_batch(
            topic,
            queue_id,
            drafts,
            max_message_size=cfg.max_message_size,
            file_size=cfg.mapped_file_size_commit_log,
            max_delay_level=len(self._delay_levels_ms),
        )
        if isinstance(prepared, PutResult):
            return prepared
        if wait is not None:
            prepared = prepared._replace(wait=wait)
        return await self._put_prepared(prepared, deadline)

    async def put_batch(
        self, topic: str, queue_id: int, batch: RawBatch, *, deadline: float | None = None
    ) -> PutResult:
        """Append a batch as decoded from SEND_BATCH_MESSAGE without a draft per message (``put.prepare_raw``);
        ``deadline`` as for ``put_messages``."""
        refused = self._refusal()
        if refused is not None:
            return refused
        cfg = self.config
        prepared = put_path.prepare_raw(
            topic,
            queue_id,
            batch,
            max_message_size=cfg.max_message_size,
            file_size=cfg.mapped_file_size_commit_log,
        )
        if isinstance(prepared, PutResult):
            return prepared
        return await self._put_prepared(prepared, deadline)

    async def _put_prepared(self, prepared: put_path.Prepared, deadline: float | None = None) -> PutResult:
        result = None
        try:
            if prepared.single_queue and prepared.all_dispatched and not self._put_lock.locked():
                # No await on this path, so nothing can interleave: the lock would only cost time.
                result = put_path.append_simple(self, prepared)
            if result is None:
                async with self._put_lock:
                    refused = self._refusal()
                    if refused is not None:
                        return refused
                    result = await put_path.append_batch(self, prepared)
        except OSError as exc:
            return self._on_write_error(exc)
        if prepared.wait:
            gc, waiter, end = self._group_commit, self._replica_waiter, result.next_offset
            replicated = None
            if waiter is not None:
                replicated = waiter(end) if deadline is None else waiter(end, deadline)
            if gc is not None and replicated is not None:  # both at once, like RocketMQ's combined futures
                outcomes = await asyncio.gather(gc.wait_flushed(end, deadline), replicated)
            elif gc is not None:
                outcomes = [await gc.wait_flushed(end, deadline)]
            elif replicated is not None:
                outcomes = [await replicated]
            else:
                outcomes = []
            for status, remark in outcomes:  # flush first, then the replica: the replica's status wins
                if status is not PutStatus.PUT_OK:
                    result.status, result.remark = status, remark
        return result

    def _on_write_error(self, exc: OSError) -> PutResult:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            self.disk.mark_no_space(str(exc))
            return PutResult(
                PutStatus.CREATE_MAPPED_FILE_FAILED,
                remark=f"no space for the next commitlog file: {exc}; {self.disk.remark()}",
            )
        log.exception("commitlog write failed")
        return PutResult(PutStatus.UNKNOWN_ERROR, remark=f"commitlog write failed: {exc}")

    def _notify_append(self, max_offset: int) -> None:
        for cb in self._append_listeners:
            try:
                cb(max_offset)
            except Exception:
                log.exception("append listener %r failed", cb)

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
        self._notify_append(new_max)
        return new_max

    def commitlog_slice(self, phy_offset: int, max_bytes: int) -> CommitlogSlice | None:
        cl = self._commitlog
        if phy_offset >= cl.max_offset or phy_offset < cl.min_offset or max_bytes <= 0:
            return None
        mf = cl.files.find(phy_offset)
        if mf is None:
            return None
        pos = phy_offset - mf.start_offset
        end = min(pos + max_bytes, mf.wrote_position)
        if end <= pos:
            return None
        return CommitlogSlice(mf.fd, pos, end - pos, phy_offset, mf.view(pos, end))

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
    ) -> GetResult:
        self.stats["getMessageTimesTotal"] += 1
        result = get_path.get_message(self, topic, queue_id, offset, max_msg_nums, max_total_bytes, tag_filter)
        if result.message_count:
            self.stats["getMessageFoundTotal"] += 1
        return result

    def read_record(self, phy_offset: int) -> bytes | None:
        return get_path.read_record(self._commitlog, phy_offset)

    def read_message(self, phy_offset: int) -> StoredMessage | None:
        raw = get_path.read_record(self._commitlog, phy_offset)
        if raw is None:
            return None
        try:
            return decode(raw)
        except RecordError:
            return None

    def scan_commitlog(self, begin: int, end: int | None = None):
        """Yield ``(phy_offset, CheckResult)`` for the records in [begin, end) (default: to the max offset),
        following BLANK records into the next file; the last item is not VALID if the scan met a bad record."""
        return self._commitlog.iter_records(
            max(begin, self.min_phy_offset), self.max_phy_offset if end is None else end
        )

    def commitlog_start_at_time(self, timestamp_ms: int) -> int:
        """Start of the newest commitlog file whose first record is stored at or before ``timestamp_ms`` (the min
        offset when none is): a scan from there sees every record newer than that time."""
        files = self._commitlog.files.files
        if not files:
            return self.min_phy_offset
        return max(files[self._commitlog.abnormal_start_index(timestamp_ms)].start_offset, self.min_phy_offset)

    def _store_time_of(self, phy_offset: int, size: int = 0) -> int:
        return get_path.store_time_of(self._commitlog, phy_offset)

    def min_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self._cq(topic, queue_id)
        return cq.min_offset if cq else 0

    def max_offset_in_queue(self, topic: str, queue_id: int) -> int:
        cq = self._cq(topic, queue_id)
        return cq.max_offset if cq else 0

    def store_timestamp_at(self, topic: str, queue_id: int, queue_offset: int) -> int:
        cq = self._cq(topic, queue_id)
        if cq is None or not cq.min_offset <= queue_offset < cq.max_offset:
            return 0
        unit = cq.unit(queue_offset)
        if unit is None:
            return 0
        ts = self._store_time_of(unit[0], unit[1])
        return max(ts, 0)

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        cq = self._cq(topic, queue_id)
        if cq is None:
            return 0
        return cq.offset_by_time(timestamp_ms, self._store_time_of)

    def queue_ids(self, topic: str) -> list[int]:
        return sorted(self._cqs.get(topic, {}))

    def topics(self) -> list[str]:
        return sorted(self._cqs)

    def delete_topic(self, topic: str) -> None:
        for cq in self._cqs.pop(topic, {}).values():
            cq.destroy()
        with contextlib.suppress(OSError):
            (self._cq_root / topic).rmdir()

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
        return self._dispatched

    @property
    def disk_full(self) -> bool:
        return self.disk.full

    @property
    def running(self) -> bool:
        return self._running

    def runtime_info(self) -> dict[str, str]:
        first = self._commitlog.files.first
        earliest = 0
        if first is not None:
            earliest = max(self._store_time_of(first.start_offset, 0), 0)
        info = {
            "commitLogMinOffset": str(self.min_phy_offset),
            "commitLogMaxOffset": str(self.max_phy_offset),
            "commitLogDiskRatio": f"{self.disk.used_ratio():.4f}",
            "dispatchBehindBytes": str(max(0, self.max_phy_offset - self._dispatched)),
            "remainHowManyDataToFlush": str(max(0, self.max_phy_offset - self.flushed_phy_offset)),
            "earliestMessageTimeStamp": str(earliest),
            "brokerRole": self.role.name,
            "diskFull": str(self.disk.full).lower(),
            "consumeQueueCount": str(sum(len(q) for q in self._cqs.values())),
            "consumeQueueOpenFiles": str(len(self._cq_files)),
            "unitSize": str(UNIT_SIZE),
        }
        info.update({k: str(v) for k, v in self.stats.items()})
        return info
