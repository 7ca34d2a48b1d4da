"""AllocateService: creates the next store file in the background (RocketMQ's AllocateMappedFileService).

When the writer rolls into file N it asks for file N+1 at once (``prefetch``); creation (open, posix_fallocate,
optional pre-touch under ``warmMappedFileEnable``) runs on the store's disk executor, so the event loop never
blocks on it. ``get`` awaits the pending creation or starts one. ``take_now`` is for the synchronous replicated
append path: it waits for a pending creation or creates the file in the calling thread (rare: the prefetch
normally finished long before the writer reaches the file end).

A creation failure (ENOSPC, EROFS, ...) is raised to the caller that needs the file and is not cached, so the
next attempt retries: space freed later lets the broker resume without a restart.

Crash behaviour: a pre-created but unused file is an empty file after the last data file; recovery removes it.
``stop`` destroys files that were created but never handed out.

Task-safety: call from the event loop only; creation itself runs in worker threads.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from pathlib import Path

from broker.store.mapped_file import MappedFile
from common.service import Service

log = logging.getLogger(__name__)

_Key = tuple[str, int]


class AllocateService(Service):
    def __init__(self, executor: concurrent.futures.Executor) -> None:
        super().__init__("allocate")
        self._executor = executor
        self._pending: dict[_Key, concurrent.futures.Future] = {}
        self._lock = threading.Lock()
        self.created = 0

    def _create(self, directory: Path, start: int, size: int, warm: bool) -> MappedFile:
        mf = MappedFile.create(directory, start, size, warm=warm)
        self.created += 1
        return mf

    def prefetch(self, directory: Path, start: int, size: int, *, warm: bool = False) -> None:
        key = (str(directory), start)
        with self._lock:
            if key in self._pending:
                return
            fut = self._executor.submit(self._create, directory, start, size, warm)
            self._pending[key] = fut
        fut.add_done_callback(lambda f, key=key: self._forget_failed(key, f))

    def _forget_failed(self, key: _Key, fut: concurrent.futures.Future) -> None:
        if fut.cancelled() or fut.exception() is not None:
            with self._lock:
                if self._pending.get(key) is fut:
                    del self._pending[key]
            if not fut.cancelled():
                log.warning("pre-creating %s/%020d failed: %s", key[0], key[1], fut.exception())

    def _pop(self, directory: Path, start: int) -> concurrent.futures.Future | None:
        with self._lock:
            return self._pending.pop((str(directory), start), None)

    async def get(self, directory: Path, start: int, size: int, *, warm: bool = False) -> MappedFile:
        """The file starting at ``start``: the prefetched one, or a new one created in the executor."""
        fut = self._pop(directory, start)
        if fut is not None:
            try:
                return await asyncio.wrap_future(fut)
            except FileExistsError:
                pass  # raced with a synchronous take; fall through and fail loudly below
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._create, directory, start, size, False)

    def take_now(self, directory: Path, start: int, size: int) -> MappedFile:
        fut = self._pop(directory, start)
        if fut is not None:
            try:
                return fut.result()
            except OSError as exc:
                log.info("prefetch of %020d failed (%s); creating it synchronously", start, exc)
        return self._create(directory, start, size, False)

    async def wait_idle(self) -> None:
        """Wait for every pending creation (benchmarks use it to keep pre-touching out of a measurement)."""
        with self._lock:
            pending = list(self._pending.values())
        for fut in pending:
            try:
                await asyncio.wrap_future(fut)
            except OSError:
                pass

    async def on_stop(self) -> None:
        with self._lock:
            pending = list(self._pending.values())
            self._pending.clear()
        for fut in pending:
            try:
                mf = await asyncio.wrap_future(fut)
            except OSError:
                continue  # nothing was created; the failure was logged when it happened
            mf.destroy()
