"""Fixtures: one real master broker per test module (the nameserver is tests/integration/conftest.py's); helpers
to run SDK clients."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter

import pytest

from client import AdminClient, ConsumeFromWhere, ConsumeStatus, MessageExt, PushConsumer
from harness.procs import Broker
from tests.brokers import broker_fixture

# Level 1 = 1 s, level 2 = 2 s; retries (level 3 + reconsumeTimes, capped at the top level) wait 1 s.
SHORT_DELAY_LEVELS = "1s 2s 1s"
_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}_{next(_names)}"


@pytest.fixture(scope="module")
def broker(tmp_path_factory, namesrv):
    yield from broker_fixture(tmp_path_factory, namesrv, "broker-a", messageDelayLevel=SHORT_DELAY_LEVELS,
                              mappedFileSizeCommitLog=64 * 1024 * 1024)


async def create_topic(admin: AdminClient, broker: Broker, topic: str, queues: int = 4) -> None:
    """Create ``topic`` on the broker and wait until the nameserver routes it."""
    await admin.update_topic(broker.addr, topic, read_queue_nums=queues, write_queue_nums=queues)

    async def routed() -> bool:  # an error (no route yet) is kept by the wait as its last one
        return len((await admin.topic_route(topic)).publish_queues) == queues

    await wait_for(routed, 15.0, f"the nameserver to route {topic}")


def push_consumer(namesrv, group: str, topic: str, listener, expression: str = "*", **conf) -> PushConsumer:
    """A PushConsumer of ``group`` subscribed to ``topic`` with ``listener``, not started. It reads a new group's
    queues from the first offset and long-polls 1 s (not 15 s), so a test's messages arrive and a stop ends
    soon; ``conf`` adds or overrides settings."""
    conf = {"consume_from_where": ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, "suspend_ms": 1000, **conf}
    consumer = PushConsumer(group, namesrv.addr, **conf)
    consumer.subscribe(topic, expression)
    consumer.register_message_listener(listener)
    return consumer


async def wait_for(condition, timeout_s: float, what: str, interval_s: float = 0.05):
    from harness.waiting import async_wait_until

    return await async_wait_until(condition, timeout_s, f"waiting for {what}", interval_s)


class Recorder:
    """A listener that records every message body it accepted, with optional failures."""

    def __init__(self, fail_first: int = 0) -> None:
        self.bodies: list[bytes] = []
        self.messages: list[MessageExt] = []
        self.attempts: Counter[bytes] = Counter()
        self.fail_first = fail_first  # RECONSUME_LATER for the first N deliveries of each message
        self.event = asyncio.Event()

    async def __call__(self, msgs: list[MessageExt]) -> ConsumeStatus:
        for m in msgs:
            self.attempts[m.body] += 1
            if self.attempts[m.body] <= self.fail_first:
                return ConsumeStatus.RECONSUME_LATER
        for m in msgs:
            self.bodies.append(m.body)
            self.messages.append(m)
        self.event.set()
        return ConsumeStatus.CONSUME_SUCCESS

    def unique_count(self) -> int:
        return len(set(self.bodies))
