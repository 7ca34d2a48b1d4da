"""Apache's C++ client (PyPI ``rocketmq`` 0.4.4, rocketmq-client-cpp 1.0.1) against a real pyrmq cluster: one
nameserver, a SYNC_MASTER and its SLAVE, all processes on 127.0.0.1.

- a Producer sends to the SYNC_MASTER and gets SEND_OK (and the slave has the messages);
- a PushConsumer with a tag filter receives exactly the matching messages, once each;
- the same consumer keeps consuming from the slave after the master is SIGKILLed, and commits its offsets there;
- mqctl consumerProgress lists the C++ client's group, its topic's queues and its connection;
- mqctl queryMsgByKey and queryMsgByUniqueKey find the C++ client's messages, through the brokers' message index, by
  the keys it set and the msg ids (UNIQ_KEY) it reported.

Where the client does something the spec does not say, the client is believed: see CLIENT_NOTES.md beside this
file. Every wait is bounded and names what it waited for.
"""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from tests.compat.harness import BROKER_NAME, create_topic, progress, unique
from tests.integration.ctl.cli import mqctl, ok_json
from harness.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

DELIVERY_S = 60.0
COMMIT_S = 60.0  # the client persists offsets every 5 s (UPDATE_CONSUMER_OFFSET) and also commits through pulls
# After the master dies the client pulls from the slave only once its cached route no longer lists the master,
# and it refreshes routes every 30 s (CLIENT_NOTES.md). The nameserver must drop the master when its connection
# closes; the bound also covers one that only expires it after 120 s.
FAILOVER_S = 150.0
PULL_BATCH = 32  # the client's maxMsgNums per PULL_MESSAGE (observed, fixed)
TAGS = ("TagA", "TagB", "TagC", "TagD")
FILTER = "TagA || TagC"


def send_ok(producer, topic: str, key: str, tags: str, body: str, queue: int | None = None):
    from rocketmq.client import SendStatus
    from rocketmq.exceptions import RocketMQException

    try:
        result = producer.send(topic, key, tags, body, queue)
    except RocketMQException as exc:
        # e.g. "No route info of this topic": the log says whether the nameserver answered 105 at all
        raise AssertionError(f"send of {key} to {topic} failed: {exc}\nC++ log tail:\n{producer.log_tail()}") from exc
    assert result.status == SendStatus.OK, f"{key}: {result}"
    return result


def wait_delivered(consumer, keys: set[str], timeout_s: float = DELIVERY_S) -> None:
    def missing() -> list[str]:
        return sorted(keys - set(consumer.keys()))

    wait_until(
        lambda: not missing(),
        timeout_s,
        lambda: (
            f"{len(missing())} of {len(keys)} messages never reached the C++ push consumer, e.g. {missing()[:5]}"
            f"\n{consumer.diagnostics()}"
        ),
        interval_s=0.2,
    )


def wait_committed(
    group, consumer_group: str, topic: str, queues: int, total: int, read_from: str, timeout_s: float = COMMIT_S
) -> dict:
    """``mqctl consumerProgress -g GROUP`` lists each of the topic's ``queues`` queues, committed to its end, the
    ends adding up to ``total`` messages, as read from broker ``read_from``. Returns the document."""
    last: list = []

    def committed():
        doc = progress(group, consumer_group)  # exits 1 while the group has committed nothing: retried
        last[:] = [doc]
        rows = [q for q in doc["queues"] if q["topic"] == topic]
        return (
            sorted(q["queueId"] for q in rows) == list(range(queues))
            and all(q["consumerOffset"] == q["brokerOffset"] for q in rows)
            and sum(q["brokerOffset"] for q in rows) == total
            and all(q["readFrom"] == read_from and q["brokerName"] == BROKER_NAME for q in rows)
            and doc
        )

    return wait_until(
        committed,
        timeout_s,
        lambda: (
            f"consumerProgress -g {consumer_group} never showed the {queues} queues of {topic} committed to "
            f"their ends ({total} messages in all) on {read_from}; last answer: {last}"
        ),
        interval_s=0.5,
    )


def test_producer_gets_send_ok_from_a_sync_master(group, cpp_producer):
    topic = unique("T_cpp_send")
    create_topic(group, topic, queues=2)
    producer = cpp_producer(group.namesrv_addr)

    sent = {f"{topic}-k{i}": f"body-{i}" for i in range(4)}
    results = {key: send_ok(producer, topic, key, "TagA", body) for key, body in sent.items()}

    msg_ids = [r.msg_id for r in results.values()]
    assert all(re.fullmatch(r"[0-9A-F]{32}", m) for m in msg_ids), msg_ids  # the client's own UNIQ_KEY
    assert len(set(msg_ids)) == len(msg_ids)
    # the client round-robins the 2 queues; `offset` is the broker's queueOffset
    assert sorted(r.offset for r in results.values()) == [0, 0, 1, 1]

    # SEND_OK from a SYNC_MASTER: the slave has them. Read both queues from the slave without moving a group.
    def on_slave():
        rows = []
        for queue in (0, 1):
            rows += ok_json(
                "consumeMessage",
                "-n",
                group.namesrv_addr,
                "-t",
                topic,
                "-b",
                BROKER_NAME,
                "-i",
                str(queue),
                "-o",
                "0",
                "--from-slave",
                "--timeout",
                "1",
            )
        return len(rows) == len(sent) and rows

    rows = wait_until(on_slave, 30, f"the slave did not serve the {len(sent)} messages acknowledged SEND_OK")
    assert sorted((r["keys"], r["body"], r["tags"], r["msgId"]) for r in rows) == sorted(
        (key, body, "TagA", results[key].msg_id) for key, body in sent.items()
    )


def test_push_consumer_with_a_tag_filter_receives_exactly_what_was_sent(group, cpp_producer, cpp_consumer):
    topic, consumer_group, queues = unique("T_cpp_tags"), unique("CG_cpp_tags"), 4
    create_topic(group, topic, queues)
    # Started before the sends: a new group on a fresh queue starts at offset 0 (QUERY_CONSUMER_OFFSET answers 0
    # there, as RocketMQ's broker does), so nothing sent after this line can be skipped.
    consumer = cpp_consumer(group.namesrv_addr, consumer_group, topic, FILTER)
    producer = cpp_producer(group.namesrv_addr)

    sent: dict[str, tuple[str, str, str]] = {}  # key -> (tags, body, msgId)
    for i in range(24):
        key, tags, body = f"{consumer_group}-{i}", TAGS[i % len(TAGS)], f"body-{i}"
        sent[key] = (tags, body, send_ok(producer, topic, key, tags, body).msg_id)
    # A matching last message on every queue: once it arrives, every earlier message of its queue was pulled.
    for q in range(queues):
        key, body = f"{consumer_group}-fence-{q}", f"fence-{q}"
        sent[key] = ("TagC", body, send_ok(producer, topic, key, "TagC", body, queue=q).msg_id)
    expected = {key for key, (tags, _, _) in sent.items() if tags in ("TagA", "TagC")}

    wait_delivered(consumer, expected)
    # Offsets reach the end of every queue, past the filtered-out messages too; meanwhile nothing else arrives.
    wait_committed(group, consumer_group, topic, queues, len(sent), group.master.addr)
    got = consumer.messages()
    assert Counter(m["keys"] for m in got) == Counter(expected), "each matching message once, and nothing else"
    for m in got:
        assert (m["tags"], m["body"], m["msgId"]) == sent[m["keys"]], m
        assert (m["topic"], m["reconsumeTimes"]) == (topic, 0), m


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_push_consumer_keeps_consuming_from_the_slave_after_the_master_is_killed(own_group, cpp_producer, cpp_consumer):
    """The consumer is SIGSTOPped while a second batch goes in, the master is SIGKILLed, the consumer resumes.

    A stopped process sends no pull: only the pulls it had outstanding (one per queue, long-polling) can still be
    answered by the master, each with at most PULL_BATCH messages. Each queue gets more matching messages than
    that, so some of every queue can only come from the slave, and the offsets past them can only have been
    committed to the slave (the master never saw a commit of the second batch).
    """
    group = own_group
    topic, consumer_group, queues = unique("T_cpp_failover"), unique("CG_cpp_failover"), 2
    create_topic(group, topic, queues)
    consumer = cpp_consumer(group.namesrv_addr, consumer_group, topic, FILTER)
    producer = cpp_producer(group.namesrv_addr)

    first = [f"{consumer_group}-first-{q}-{i}" for q in range(queues) for i in range(3)]
    for key in first:
        send_ok(producer, topic, key, "TagA", key, queue=int(key.split("-")[-2]))
    wait_delivered(consumer, set(first))
    wait_committed(group, consumer_group, topic, queues, len(first), group.master.addr)

    per_queue = 60  # tags cycle A, B, C: 40 matching per queue, more than one pull of PULL_BATCH carries
    second: dict[str, str] = {}
    consumer.pause()
    try:
        for q in range(queues):
            for i in range(per_queue):
                key, tags = f"{consumer_group}-second-{q}-{i}", ("TagA", "TagB", "TagC")[i % 3]
                send_ok(producer, topic, key, tags, key, queue=q)  # SEND_OK from the SYNC_MASTER: on the slave
                second[key] = tags
        group.master.kill()
    finally:
        consumer.resume()
    matching = {key for key, tags in second.items() if tags in ("TagA", "TagC")}
    assert sum(1 for k in matching if "-second-0-" in k) > PULL_BATCH

    wait_delivered(consumer, matching, FAILOVER_S)
    doc = wait_committed(group, consumer_group, topic, queues, len(first) + len(second), group.slave.addr, FAILOVER_S)
    assert doc["diffTotal"] == 0
    got = Counter(consumer.keys())
    assert set(got) == set(first) | matching, "only the matching messages, every one of them"
    assert all(got[key] == 1 for key in first), "the first batch, consumed before the fault, came once"


def test_mqctl_consumer_progress_lists_the_cpp_consumer(group, cpp_producer, cpp_consumer):
    topic, consumer_group, queues = unique("T_cpp_progress"), unique("CG_cpp_progress"), 2
    create_topic(group, topic, queues)
    consumer = cpp_consumer(group.namesrv_addr, consumer_group, topic, "*")
    producer = cpp_producer(group.namesrv_addr)
    keys = [f"{consumer_group}-{i}" for i in range(6)]
    for i, key in enumerate(keys):
        send_ok(producer, topic, key, TAGS[i % len(TAGS)], key, queue=i % queues)
    wait_delivered(consumer, set(keys))

    doc = wait_committed(group, consumer_group, topic, queues, len(keys), group.master.addr)
    rows = sorted(
        (q["topic"], q["brokerName"], q["queueId"], q["brokerOffset"], q["consumerOffset"], q["diff"])
        for q in doc["queues"]
        if q["topic"] == topic
    )
    assert rows == [(topic, BROKER_NAME, 0, 3, 3, 0), (topic, BROKER_NAME, 1, 3, 3, 0)]

    # Without -g: one row per group; `count` is the group's connected consumers (GET_CONSUMER_LIST_BY_GROUP),
    # i.e. this one C++ client, known to master and slave under one clientId.
    by_group = {r["group"]: r for r in progress(group, None)}
    assert consumer_group in by_group, sorted(by_group)
    assert (by_group[consumer_group]["count"], by_group[consumer_group]["diffTotal"]) == (1, 0)


def test_mqctl_finds_the_cpp_clients_messages_by_key_and_by_the_msg_id_it_reported(group, cpp_producer):
    topic = unique("T_cpp_index")
    create_topic(group, topic, queues=2)
    producer = cpp_producer(group.namesrv_addr)
    shared = f"{topic}-all"
    sent = {}  # own key -> (body, msgId the client reported)
    for i in range(4):
        own = f"{topic}-order-{i}"
        sent[own] = (f"body-{i}", send_ok(producer, topic, f"{own} {shared}", "TagI", f"body-{i}").msg_id)

    def by_key(key: str) -> list[dict] | None:  # the index is built just after the store: wait for it
        result = mqctl("queryMsgByKey", "-n", group.namesrv_addr, "-t", topic, "-k", key, "--json")
        return json.loads(result.stdout) if result.exit_code == 0 else None

    rows = wait_until(lambda: (r := by_key(shared)) and len(r) == len(sent) and r, 30,
                      f"queryMsgByKey -k {shared} never listed the {len(sent)} messages the C++ client sent")
    assert sorted(r["msgId"] for r in rows) == sorted(msg_id for _, msg_id in sent.values())
    assert [r["msgId"] for r in by_key(f"{topic}-order-2")] == [sent[f"{topic}-order-2"][1]]
    for own, (body, msg_id) in sent.items():
        one = ok_json("queryMsgByUniqueKey", "-n", group.namesrv_addr, "-t", topic, "-i", msg_id)
        assert (one["msgId"], one["body"], one["keys"], one["tags"]) == (msg_id, body, f"{own} {shared}", "TagI")
        assert one["storeHost"] == group.master.addr
    missing = mqctl("queryMsgByUniqueKey", "-n", group.namesrv_addr, "-t", topic, "-i", "0" * 32)
    assert missing.exit_code == 1 and "208" in missing.stderr
