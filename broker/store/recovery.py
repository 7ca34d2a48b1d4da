"""Startup recovery (RocketMQ DefaultMessageStore.load/recover): make the commitlog and consume queues agree.

Order, all blocking (run in the store's executor before any service starts):
1. open every commitlog file and list every consume-queue file (sizes and contiguity checked; a gap is an error;
   consume-queue files open when read, within the store's ``OpenFiles`` bound);
2. recover each consume queue: keep units while ``offset >= 0 and size > 0`` from its newest three files with
   data, cut the rest;
3. recover the commitlog: after a clean stop (no abort marker) scan from the third-newest file; after a crash
   from the newest file whose first record is older than the checkpoint's ``min_timestamp``; stop at the first
   record that is not VALID (torn tail, garbage, CRC under ``checkCRCOnRecover``) and cut everything after it;
4. cut every consume queue back to the recovered commitlog end;
5. return the range to re-dispatch: from the newest consume-queue end (clean stop) or from the crash scan's
   start file (crash), up to the commitlog end. The dispatcher's writes are idempotent per queue offset.

With no commitlog file left at all every consume queue is destroyed (RocketMQ does the same).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from broker.store.consume_queue import ConsumeQueue
from broker.store.mapped_file import FileCache

if TYPE_CHECKING:
    from broker.store.message_store import MessageStore


def load_consume_queues(root: Path, file_size: int, cache: FileCache | None = None) -> dict[str, dict[int, ConsumeQueue]]:
    out: dict[str, dict[int, ConsumeQueue]] = {}
    if not root.exists():
        return out
    for topic_dir in root.iterdir():
        if not topic_dir.is_dir():
            continue
        for qdir in topic_dir.iterdir():
            if qdir.is_dir() and qdir.name.isascii() and qdir.name.isdigit():
                cq = ConsumeQueue(topic_dir.name, int(qdir.name), root, file_size, cache=cache)
                cq.load()
                out.setdefault(topic_dir.name, {})[int(qdir.name)] = cq
    return out


def load_and_recover(store: MessageStore, abnormal: bool) -> tuple[int, int]:
    """Steps 1-5 above; returns (re-dispatch from, commitlog end)."""
    cl = store._commitlog
    cl.load()
    store._cqs = load_consume_queues(store._cq_root, store.config.mapped_file_size_consume_queue, store._cq_files)
    cqs = list(store._all_cqs())
    for cq in cqs:
        cq.recover()
    if abnormal:
        assert store._checkpoint is not None
        start_index = cl.abnormal_start_index(store._checkpoint.min_timestamp)
    else:
        start_index = cl.normal_start_index()
    end = cl.recover(start_index, check_crc=store.config.check_crc_on_recover)
    if cl.files.empty:
        for cq in cqs:
            cq.destroy()
        store._cqs = {}
        return 0, 0
    reput_from = cl.min_offset
    for cq in cqs:
        cq.truncate_dirty(end)
        reput_from = max(reput_from, cq.max_physic_offset)
    if abnormal:
        reput_from = min(reput_from, cl.files.files[start_index].start_offset)
    return min(reput_from, end), end
