"""A broker with auto-creation and long polling turned off and slave reads on: missing topics and groups are
errors with a hint, a suspended pull waits ``shortPollingTimeMills`` instead of being woken, and pulls carry the
group's read advice."""

from __future__ import annotations

import asyncio
import time

import pytest

from remoting.codes import ResponseCode as RC
from tests.brokers import broker_fixture
from tests.integration.broker.rpc import FLAG_SUBSCRIPTION, FLAG_SUSPEND, group_config, message

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def master(tmp_path_factory, namesrv):
    """This module's broker, in place of the conftest's; its ``client`` fixture connects to this one."""
    yield from broker_fixture(tmp_path_factory, namesrv, "broker-strict", autoCreateTopicEnable=False,
                              autoCreateSubscriptionGroup=False, longPollingEnable=False, shortPollingTimeMills=300,
                              slaveReadEnable=True)


async def test_sending_to_a_missing_topic_says_to_create_it(client):
    resp = await client.send("NotCreated", 0, [message(b"x")])
    assert resp.code == RC.TOPIC_NOT_EXIST and "autoCreateTopicEnable=false" in resp.remark


async def test_pulling_with_an_unknown_group_says_to_create_the_group(client):
    await client.create_topic("StrictTopic", queues=1)
    got = await client.pull("g-unknown", "StrictTopic", 0, 0)
    assert got.code == RC.SUBSCRIPTION_GROUP_NOT_EXIST and "updateSubGroup" in got.remark


async def test_without_long_polling_a_suspended_pull_waits_the_short_polling_time(client):
    await client.create_topic("StrictTopic", queues=1)
    assert (await client.create_group(group_config("g-strict"))).code == 0
    started = time.monotonic()
    pending = asyncio.ensure_future(
        client.pull("g-strict", "StrictTopic", 0, 0, sys_flag=FLAG_SUSPEND | FLAG_SUBSCRIPTION, suspend_ms=15_000,
                    timeout=30)
    )
    # Short polling waits without parking the pull where a new message would wake it; a long-polling broker would
    # hold it in the hold service for the whole 15 s.
    held_while_waiting = []
    while not pending.done():
        held_while_waiting.append((await client.runtime_info())["heldPullRequests"])
    got = await pending
    assert got.code == RC.PULL_NOT_FOUND and time.monotonic() - started >= 0.25  # it waited shortPollingTimeMills
    assert held_while_waiting and set(held_while_waiting) == {"0"}
    await client.send("StrictTopic", 0, [message(b"x")])
    assert (await client.pull("g-strict", "StrictTopic", 0, 0)).code == RC.SUCCESS


async def test_with_slave_reads_enabled_a_pull_suggests_the_groups_broker_id(client):
    await client.create_topic("AdviceTopic", queues=1)
    assert (await client.create_group(group_config("g-advice", brokerId=1))).code == 0
    await client.send("AdviceTopic", 0, [message(b"x")])
    got = await client.pull("g-advice", "AdviceTopic", 0, 0)
    assert got.code == RC.SUCCESS and got.suggest_which_broker_id == 1
