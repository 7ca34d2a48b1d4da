"""Pure pieces of the transaction service and its v2 form: the write gate, the check request's body, the v2
transaction id."""

from __future__ import annotations

import asyncio

from broker.grpc_v2.transaction import parse_transaction_id, transaction_id
from broker.transaction import records as tx
from broker.transaction.service import WriteGate, check_request, op_parts
from remoting.codes import RequestCode
from remoting.message_codec import StoredMessage, decode, offset_msg_id


async def test_a_waiting_exclusive_holder_is_not_starved_by_a_steady_stream_of_shared_ones():
    gate = WriteGate()
    stop = asyncio.Event()
    order: list[str] = []

    async def writer(n: int) -> None:
        while not stop.is_set():
            async with gate.shared():
                order.append("s")
                await asyncio.sleep(0.001)

    writers = [asyncio.create_task(writer(i)) for i in range(8)]
    await asyncio.sleep(0.01)
    async with asyncio.timeout(5):
        async with gate.exclusive():
            order.append("x")
    stop.set()
    await asyncio.gather(*writers)
    assert "x" in order


def test_the_check_request_carries_the_half_with_its_real_topic_and_queue_in_rocketmq_encoding():
    props = tx.half_properties({"UNIQ_KEY": "ABC", "TAGS": "t"}, "Orders", 3, "pg")
    half = StoredMessage(tx.HALF_TOPIC, 0, 7, 4096, 0, b"body", props, 0, 0, 1, ("10.0.0.1", 5), 2,
                         ("10.0.0.2", 10911), 0, 0)
    cmd = check_request(half, ("10.0.0.2", 10911))
    assert cmd.code == RequestCode.CHECK_TRANSACTION_STATE
    assert cmd.ext == {"tranStateTableOffset": "7", "commitLogOffset": "4096", "msgId": "ABC",
                       "transactionId": "ABC", "offsetMsgId": offset_msg_id(("10.0.0.2", 10911), 4096)}
    got = decode(cmd.body)
    assert (got.topic, got.queue_id, got.body, got.properties["PGROUP"]) == ("Orders", 3, b"body", "pg")


def test_a_v2_transaction_id_names_the_half_copy_and_nothing_else_parses():
    tid = transaction_id(offset_msg_id(("10.0.0.2", 10911), 123456), 42)
    assert parse_transaction_id(tid) == (123456, 42)
    for bad in ("", "nonsense", tid + "x", tid.replace(":", ""), "zz:1", tid.split(":")[0] + ":-1"):
        assert parse_transaction_id(bad) is None


def test_ends_resolved_together_are_split_into_op_records_a_replay_reads_whole():
    chosen = {f"T{i}": (i, list(range(i * 100, i * 100 + 1 + i % 3))) for i in range(5000)}
    parts = list(op_parts(chosen))
    assert len(parts) > 1
    assert all(sum(len(c) for _, c in part.values()) <= tx.MAX_OP_OFFSETS for part in parts)
    assert [tx_id for part in parts for tx_id in part] == list(chosen)  # every transaction once, in order
    assert list(op_parts({})) == []
