"""Issue 23 item 5 with RocketMQ's own clients: a controller-mode broker group (one etcd, a nameserver running the
controller, three controller-mode brokers; ``harness.client_failover``) is the topic's only group, and its master is
SIGKILLed while the client produces.

- Apache's C++ client (PyPI ``rocketmq`` 0.4.4) keeps producing: its sends fail while its cached route names the
  dead master, and succeed again once its route poll (30 s) brings the new one. Its push consumer, started before,
  gets every message the producer saw acknowledged.
- The official RocketMQ 5 client (``rocketmq-python-client`` 5.1.2, the v2 endpoint, every broker's endpoint in its
  access point) does the same through its own 30 s route poll, and a simple consumer of it receives every
  acknowledged message.

Both histories are judged by ``harness.checker`` against the new master's log (SYNC mode: no SEND_OK lost, nothing
read that was never sent, one id per queue offset). How long each client took from the kill to its first SEND_OK is
a figure of ``bench/client_failover_bench.py``, never an assertion here.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from harness.checker import Mode, check
from harness.client_failover import GROUP, ControllerGroup, SendLog
from harness.controller_mode import drain
from harness.etcd import ensure_etcd
from harness.rocketmq5 import Rmq5Client, client_python
from harness.waiting import wait_until
from tests.compat.harness import unique

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(420)]

QUEUES = 2
BEFORE, AFTER = 20, 20  # SEND_OKs before the kill, and after the first one on the new master
# RocketMQ's clients learn the new master from their route poll: every 30 s (the v2 client's first after 10 s),
# plus a send's own timeouts and retries on a loaded machine.
RECOVER_S = 150.0


@pytest.fixture
def cgroup(tmp_path):
    binary, why = ensure_etcd()
    if binary is None:
        pytest.skip(f"no etcd for the controller: {why}")
    with ControllerGroup(tmp_path / "cluster", binary) as g:
        yield g


def produce_through_kill(g: ControllerGroup, topic: str, send) -> SendLog:
    """``send(ident)`` raises on failure. BEFORE SEND_OKs, the kill, sends until AFTER SEND_OKs followed the first
    one on the new master (failures recorded as UNKNOWN)."""
    log = SendLog()
    for _ in range(BEFORE):
        ident = log.next_id()
        send(ident)  # before the kill every send must succeed
        log.ok(ident)
    old, log.killed_at = g.kill_master()
    deadline = time.monotonic() + RECOVER_S
    oks_after = 0
    while oks_after < AFTER:
        assert time.monotonic() < deadline, f"{oks_after} SEND_OKs within {RECOVER_S} s of the kill: {log.sends[-1]}"
        ident = log.next_id()
        try:
            send(ident)
        except Exception as exc:  # noqa: BLE001 - the client's own error types; the checker judges the history
            log.unknown(ident, str(exc))
            time.sleep(0.05)
            continue
        log.ok(ident)
        oks_after += 1
    assert g.master() is not old and g.routed_master(topic) == g.master().addr
    return log


def judge(g: ControllerGroup, topic: str, log: SendLog) -> None:
    reads = asyncio.run(drain(g.namesrv_addr, topic, GROUP, QUEUES, ident=bytes.decode))
    report = check(log.sends, reads)
    assert not report.problems(Mode.SYNC), (report.problems(Mode.SYNC), report.figures())
    assert report.acked == BEFORE + AFTER


def test_cpp_client_keeps_producing_through_a_kill_of_its_only_master(cgroup, cpp_producer, cpp_consumer):
    from rocketmq.client import SendStatus

    topic, consumer_group = unique("T_cpp_ctl"), unique("CG_cpp_ctl")
    cgroup.create_topic(topic, QUEUES)
    consumer = cpp_consumer(cgroup.namesrv_addr, consumer_group, topic, "*")  # before the sends: reads from 0
    producer = cpp_producer(cgroup.namesrv_addr)

    def send(ident: str) -> None:
        result = producer.send(topic, ident, "T", ident)
        if result.status != SendStatus.OK:
            raise AssertionError(f"status {result.status}")

    log = produce_through_kill(cgroup, topic, send)
    judge(cgroup, topic, log)
    acked = log.acked()
    wait_until(lambda: acked <= set(consumer.keys()), RECOVER_S,
               lambda: f"the C++ consumer never got {sorted(acked - set(consumer.keys()))[:5]}\n"
                       f"{consumer.diagnostics()}", interval_s=0.2)
    assert set(consumer.keys()) <= {s.id for s in log.sends}  # nothing that was never sent


@pytest.fixture
def rmq5(tmp_path):
    client = Rmq5Client(client_python(), tmp_path / "rmq5-home")
    yield client
    client.close()


def test_official_rocketmq5_client_keeps_producing_through_a_kill_of_its_only_master(cgroup, rmq5):
    topic, consumer_group = unique("T_v2_ctl"), unique("CG_v2_ctl")
    cgroup.create_topic(topic, QUEUES)
    access = cgroup.access_point()
    rmq5.call(op="producer", endpoint=access, topics=[topic])

    def send(ident: str) -> None:
        rmq5.call(timeout_s=60, op="send", topic=topic, body=ident)  # ClientError when the client gives up

    log = produce_through_kill(cgroup, topic, send)
    judge(cgroup, topic, log)
    rmq5.call(op="simple_consumer", endpoint=access, group=consumer_group, topic=topic, await_s=2)
    got = rmq5.call(timeout_s=120, op="drain", invisible_s=30, idle_receives=2, total_s=90)
    bodies = [m["body"] for m in got]
    assert log.acked() <= set(bodies), sorted(log.acked() - set(bodies))[:5]
    assert set(bodies) <= {s.id for s in log.sends}

