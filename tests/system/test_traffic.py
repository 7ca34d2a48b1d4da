"""Traffic from the host through the compose cluster: mqctl sendMessage/consumeMessage and the SDK.

Both broker groups replicate (the ``whole`` fixture), so every send is SEND_OK: broker-a is a SYNC_MASTER whose
slave acks, broker-b an ASYNC_MASTER.
"""

from __future__ import annotations

from tests.system.harness import BackgroundProducer, RecordingConsumer, check, drain, ok_json, unique

PER_BROKER = 3
SDK_MESSAGES = 400


def test_mqctl_send_message_and_consume_message_round_trip(whole, topics):
    topic = topics["basic"]
    tag = unique("ctl")
    sent = []
    for broker in ("broker-a", "broker-b"):
        for i in range(PER_BROKER):
            row = ok_json("sendMessage", "-t", topic, "-p", f"{tag}-{broker}-{i}", "-b", broker, "-k", tag)[0]
            sent.append(row)
    assert [r["sendResult"] for r in sent] == ["SEND_OK"] * len(sent), sent
    assert {r["brokerName"] for r in sent} == {"broker-a", "broker-b"}

    consumed = ok_json("consumeMessage", "-t", topic, "-g", unique("sys_ctl_group"), "--timeout", "3")
    mine = {r["msgId"]: r for r in consumed if r["keys"] == tag}
    assert set(mine) == {r["msgId"] for r in sent}, f"sent {sent}\nconsumed {consumed}"
    for row in sent:
        got = mine[row["msgId"]]
        assert (got["brokerName"], got["queueId"], got["queueOffset"]) == (
            row["brokerName"],
            row["queueId"],
            row["queueOffset"],
        )
        assert got["body"].startswith(f"{tag}-{row['brokerName']}-")


async def test_sdk_producer_and_push_consumer_from_the_host(whole, topics):
    topic = topics["sdk"]
    producer = BackgroundProducer(topic, rate=400, tag=unique("sdk"))
    consumer = RecordingConsumer(unique("sys_sdk_group"), topic)
    await consumer.start()
    await producer.start()
    try:
        await producer.wait_started(SDK_MESSAGES)
        await producer.stop()
        await drain(producer, consumer.deliveries, 30, what="SDK round trip: ")
    finally:
        await producer.stop()
        await consumer.stop()
    verdict = check(producer.sends, consumer.deliveries, producer.prefix)
    assert producer.status_counts() == {"SEND_OK": len(producer.sends)}, producer.status_counts()
    assert len(producer.sends) >= SDK_MESSAGES
    assert not verdict.lost and not verdict.unexpected and not verdict.duplicated, verdict.summary()
    brokers = {s.broker_name for s in producer.sends.values()}
    assert brokers == {"broker-a", "broker-b"}, f"sends went to {brokers} only"
