"""The SyncStateSet with real processes (allAckInSyncStateSet=true): a SEND_OK needs every member's ack, a member
that stops acking leaves the set after haMaxTimeSlaveNotCatchup (then sends are SEND_OK again without it), and it
joins again once it caught up."""

from __future__ import annotations

import pytest

from harness.controller_mode import group_of_three, replica_info, sync_state_set_is
from harness.waiting import async_wait_until
from remoting.codes import ResponseCode
from tests.integration.broker.rpc import BrokerClient, message

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(180)]

TOPIC = "SyncSetTopic"
GROUP = "broker-s"


async def test_every_member_acks_a_lagging_one_leaves_and_rejoins(tmp_path, cns):
    # slaveTimeout 1 s, well inside haMaxTimeSlaveNotCatchup 5 s: the first send after the freeze times out
    async with group_of_three(tmp_path, cns, GROUP, slaveTimeout=1000, haMaxTimeSlaveNotCatchup=5000) as brokers:
        client = BrokerClient(brokers[0].addr)
        try:
            assert (await replica_info(cns, GROUP)).master_broker_id == 1
            assert (await client.create_topic(TOPIC, queues=1)).code == ResponseCode.SUCCESS
            assert (await client.send(TOPIC, 0, [message(b"all-three")])).code == ResponseCode.SUCCESS

            brokers[2].pause()  # connected but silent: its acks stop
            late = await client.send(TOPIC, 0, [message(b"two-of-three")])
            assert late.code == ResponseCode.FLUSH_SLAVE_TIMEOUT and "[3]" in late.remark, (late.code, late.remark)

            await async_wait_until(sync_state_set_is(cns, GROUP, {1, 2}), 20, "the lagging member leaves the set")
            assert (await client.send(TOPIC, 0, [message(b"without-3")])).code == ResponseCode.SUCCESS

            brokers[2].resume()
            await async_wait_until(sync_state_set_is(cns, GROUP, {1, 2, 3}), 20, "the member rejoins once caught up")
            assert (await client.send(TOPIC, 0, [message(b"all-three-again")])).code == ResponseCode.SUCCESS
        finally:
            await client.close()
