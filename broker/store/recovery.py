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
   then finish a pending truncation (``truncation.py``: a demoted master cutting its unconfirmed tail) and cut the
   epoch history back to the log's end;
5. return the range to re-dispatch: from the newest consume-queue end (clean stop) or from the crash scan's
   start file (crash), up to the commitlog end. The dispatcher's writes are idempotent per queue offset.

With no commitlog file left at all every consume queue is destroyed (RocketMQ does the same).
"""

from __future__ import annotations

from broker.store import truncation
from broker.store.checkpoint import StoreCheckpoint
from broker.store.commitlog import CommitLog
from broker.store.consume_queue_store import ConsumeQueueStore
from broker.store.epoch_file import EpochFile


def load_and_recover(
    commitlog: CommitLog,
    queues: ConsumeQueueStore,
    checkpoint: StoreCheckpoint,
    *,
    abnormal: bool,
    check_crc: bool,
    epochs: EpochFile | None = None,
) -> tuple[int, int]:
    """Steps 1-5 above; returns (re-dispatch from, commitlog end)."""
    cl = commitlog
    cl.load()
    queues.load()
    cqs = list(queues)
    for cq in cqs:
        cq.recover()
    if abnormal:
        start_index = cl.abnormal_start_index(checkpoint.min_timestamp)
    else:
        start_index = cl.normal_start_index()
    end = cl.recover(start_index, check_crc=check_crc)
    if epochs is not None:
        epochs.load()
        target = truncation.pending(epochs.root)
        if target is not None:
            end = truncation.apply(target, cl, queues, epochs, epochs.root)
        epochs.fit_to(end)
    if cl.files.empty:
        queues.destroy_all()
        return 0, 0
    reput_from = cl.min_offset
    for cq in cqs:
        cq.truncate_dirty(end)
        reput_from = max(reput_from, cq.max_physic_offset)
    if abnormal:
        reput_from = min(reput_from, cl.files.files[start_index].start_offset)
    return min(reput_from, end), end
