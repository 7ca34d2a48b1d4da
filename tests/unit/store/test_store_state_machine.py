"""A Hypothesis state machine: appends, reads, clean restarts and crashes (optionally with a torn or garbage
tail) against a plain list model. After every step the consume queues equal a rebuild from the commitlog."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.store.message_store import MessageStore
from broker.store.types import GetStatus, PutStatus
from remoting.message_codec import iter_records

from .conftest import assert_queues_match_commitlog, draft, small_config

FILE = 4096
TOPICS = ["A", "B", "%RETRY%g"]


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.dir = Path(tempfile.mkdtemp(prefix="store-sm-"))
        self.config = small_config(self.dir, mapped_file_size_commit_log=FILE, mapped_file_size_consume_queue=20 * 8)
        self.store = self._open()
        self.model: list[tuple[int, str, int, bytes]] = []  # (phy offset, topic, queue, body) in append order

    def _run(self, coro):
        return self.loop.run_until_complete(coro)

    def _open(self) -> MessageStore:
        s = MessageStore(self.config)
        self._run(s.start())
        return s

    def teardown(self) -> None:
        try:
            if self.store.running:
                self._run(self.store.stop())
        finally:
            self.loop.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    @rule(
        topic=st.sampled_from(TOPICS),
        qid=st.integers(0, 1),
        bodies=st.lists(st.binary(min_size=1, max_size=600), min_size=1, max_size=12),
    )
    def put(self, topic, qid, bodies):
        res = self._run(self.store.put_messages(topic, qid, [draft(b, TAGS="t") for b in bodies]))
        assert res.status is PutStatus.PUT_OK, res
        expected_first = sum(1 for m in self.model if m[1] == topic and m[2] == qid)
        assert res.queue_offset == expected_first
        self.model += [(p, topic, qid, b) for p, b in zip(res.physical_offsets, bodies, strict=True)]

    @rule(topic=st.sampled_from(TOPICS), qid=st.integers(0, 1), data=st.data())
    def read(self, topic, qid, data):
        queue = [m for m in self.model if m[1] == topic and m[2] == qid]
        if not queue:
            assert self.store.max_offset_in_queue(topic, qid) == 0
            return
        offset = data.draw(st.integers(0, len(queue) - 1))
        got = self.store.get_message("g", topic, qid, offset, 4)
        assert got.status is GetStatus.FOUND
        bodies = [m.body for m in iter_records(b"".join(got.records), check_crc=True)]
        assert bodies == [m[3] for m in queue[offset : offset + len(bodies)]] and bodies

    @rule()
    def clean_restart(self):
        self._run(self.store.stop())
        self.store = self._open()

    @rule()
    def crash_restart(self):
        self._run(self.store.kill())
        self.store = self._open()

    @precondition(lambda self: self.model)
    @rule(data=st.data(), kind=st.sampled_from(["zeros", "ones", "random"]))
    def crash_with_torn_last_record(self, data, kind):
        end = self.store.max_phy_offset
        last = self.model[-1][0]
        self._run(self.store.kill())
        cut = data.draw(st.integers(last, end - 1))
        n = end - cut
        fill = {"zeros": bytes(n), "ones": b"\xff" * n, "random": os.urandom(n)}[kind]
        self._overwrite(cut, fill)
        self.store = self._open()
        if self.store.max_phy_offset == last:
            self.model.pop()
        else:  # a random fill may rebuild the exact bytes of the record's tail (e.g. a zero props length)
            assert self.store.max_phy_offset == end

    @rule(garbage=st.binary(min_size=1, max_size=64))
    def crash_with_garbage_after_the_end(self, garbage):
        end = self.store.max_phy_offset
        self._run(self.store.kill())
        if end % FILE + len(garbage) <= FILE and end % FILE:
            self._overwrite(end, garbage)
        self.store = self._open()
        assert self.store.max_phy_offset == end

    def _overwrite(self, offset: int, data: bytes) -> None:
        start = offset - offset % FILE
        fd = os.open(self.dir / "commitlog" / f"{start:020d}", os.O_WRONLY)
        try:
            os.pwrite(fd, data[: FILE - offset % FILE], offset - start)
        finally:
            os.close(fd)

    @invariant()
    def queues_match_the_commitlog(self):
        assert_queues_match_commitlog(self.store)
        assert self.store.max_phy_offset == (self.model[-1][0] + self._size_of_last() if self.model else 0) or (
            self.model and self.store.max_phy_offset % FILE == 0
        )

    def _size_of_last(self) -> int:
        raw = self.store.read_record(self.model[-1][0])
        assert raw is not None
        return len(raw)


StoreMachine.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_store_state_machine = StoreMachine.TestCase
