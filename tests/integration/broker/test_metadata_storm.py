"""A storm of pulls and heartbeats naming new groups (issue 22 item 4): before, each auto-created group rewrote the
whole subscriptionGroup.json on the event loop, so 1,000 such pulls kept a broker at 100 % CPU for 112 s. Now the
file is written in batches (at most once per ``flushMetadataInterval``), the groups survive a SIGKILL once written
and a graceful stop at any time, and what a client can create by naming it is bounded, with a remark that says
what to do. Real processes: the module's nameserver and a broker per test."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from harness.metrics_page import first_sample
from harness.procs import Broker
from harness.waiting import wait_until
from remoting.codes import RequestCode, ResponseCode
from tests.integration.broker.rpc import BrokerClient, group_config, message

pytestmark = pytest.mark.integration

GROUPS = 1000
INTERVAL_MS = 1000
CHUNK = 250  # requests in flight on the one connection at a time (a connection serves 1,024 at once)


def metric(broker: Broker, name: str, **labels: str) -> float | None:
    return first_sample(broker.metrics_port, name, timeout_s=30, **labels)  # the page answers late in a storm


def group_writes(broker: Broker) -> float | None:
    return metric(broker, "rocketmq_metadata_persists_total", file="subscriptionGroup.json")


def groups_on_disk(broker: Broker) -> set[str]:
    path = broker.store_dir / "config" / "subscriptionGroup.json"
    return set(json.loads(path.read_text())["subscriptionGroupTable"])


async def pull_storm(client: BrokerClient, groups: list[str], topic: str) -> list:
    replies = []
    for start in range(0, len(groups), CHUNK):
        replies += await asyncio.gather(*(client.pull(g, topic, 0, 0) for g in groups[start : start + CHUNK]))
    return replies


async def heartbeat_storm(client: BrokerClient, groups: list[str], topic: str) -> list:
    replies = []
    for start in range(0, len(groups), CHUNK):
        replies += await asyncio.gather(
            *(client.heartbeat(f"client-{g}", consumers={g: {topic: "*"}}) for g in groups[start : start + CHUNK])
        )
    return replies


async def all_groups(client: BrokerClient) -> set[str]:
    resp = await client.request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    assert resp.code == ResponseCode.SUCCESS, resp.remark
    return set(json.loads(resp.body_bytes())["subscriptionGroupTable"])


async def test_a_storm_of_new_groups_is_written_in_batches_and_survives_sigkill_and_a_graceful_stop(
    tmp_path, namesrv
):
    broker = Broker(tmp_path, name="broker-storm", namesrv_addr=namesrv.addr,
                    flushMetadataInterval=INTERVAL_MS).start()
    c = BrokerClient(broker.addr)
    try:
        assert (await c.create_topic("StormTopic", queues=1)).code == ResponseCode.SUCCESS
        pulled = [f"storm-pull-{i}" for i in range(GROUPS // 2)]
        beating = [f"storm-beat-{i}" for i in range(GROUPS // 2)]
        writes_before = group_writes(broker)
        assert writes_before is not None, "the broker exports no rocketmq_metadata_persists_total"
        started = time.monotonic()
        replies = await pull_storm(c, pulled, "StormTopic")
        assert not [r for r in replies if r.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST]
        assert {r.code for r in await heartbeat_storm(c, beating, "StormTopic")} == {ResponseCode.SUCCESS}
        probe = await c.send("StormTopic", 0, [message(b"probe")])
        assert probe.code == ResponseCode.SUCCESS, probe.remark

        wait_until(lambda: groups_on_disk(broker) >= set(pulled + beating), 60,
                   "the storm's groups never reached subscriptionGroup.json")
        elapsed_s = time.monotonic() - started
        writes = group_writes(broker) - writes_before
        # one write per flushMetadataInterval at most (+1: the first write starts at once): a fact, whatever the pace
        assert 1 <= writes <= 1 + elapsed_s / (INTERVAL_MS / 1000), (writes, elapsed_s)
        assert metric(broker, "rocketmq_metadata_auto_created_entries", table="subscription_groups") >= GROUPS

        await c.close()
        broker.kill()  # after the write: a crash loses nothing of it
        broker.start()
        c = BrokerClient(broker.addr)
        assert await all_groups(c) >= set(pulled + beating)
        assert metric(broker, "rocketmq_metadata_auto_created_entries", table="subscription_groups") >= GROUPS

        late = [f"storm-late-{i}" for i in range(100)]
        await pull_storm(c, late, "StormTopic")
        await c.close()
        assert broker.stop() == 0  # at once, inside the interval: the stop writes what the batching holds
        broker.start()
        c = BrokerClient(broker.addr)
        assert await all_groups(c) >= set(late)
    finally:
        await c.close()
        broker.stop()


async def test_auto_creation_beyond_the_limits_is_refused_with_a_remark_and_counted(tmp_path, namesrv):
    broker = Broker(tmp_path, name="broker-limit", namesrv_addr=namesrv.addr,
                    maxAutoCreatedSubscriptionGroups=5, maxAutoCreatedTopics=3).start()
    c = BrokerClient(broker.addr)
    try:
        assert (await c.create_topic("LimitTopic", queues=1)).code == ResponseCode.SUCCESS
        ok = await pull_storm(c, [f"limit-{i}" for i in range(5)], "LimitTopic")
        assert not [r for r in ok if r.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST]

        refused = await c.pull("limit-5", "LimitTopic", 0, 0)
        assert refused.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        assert "maxAutoCreatedSubscriptionGroups=5" in refused.remark and "updateSubGroup -g limit-5" in refused.remark
        # RocketMQ's heartbeat answers SUCCESS for a group it does not create; nothing is created
        assert (await c.heartbeat("limit-client", consumers={"limit-6": {"LimitTopic": "*"}})).code == 0
        assert "limit-6" not in await all_groups(c)
        assert metric(broker, "rocketmq_metadata_auto_create_refusals_total", table="subscription_groups") >= 2

        # the operator's way out: updateSubGroup, durable before its answer
        assert (await c.create_group(group_config("limit-5"))).code == ResponseCode.SUCCESS
        assert "limit-5" in groups_on_disk(broker)
        assert (await c.pull("limit-5", "LimitTopic", 0, 0)).code != ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST

        for i in range(3):
            assert (await c.send(f"auto-limit-{i}", 0, [message(b"x")])).code == ResponseCode.SUCCESS
        topic_refused = await c.send("auto-limit-3", 0, [message(b"x")])
        assert topic_refused.code == ResponseCode.TOPIC_NOT_EXIST
        assert "maxAutoCreatedTopics=3" in topic_refused.remark
        assert "updateTopic -t auto-limit-3" in topic_refused.remark
        assert metric(broker, "rocketmq_metadata_auto_create_refusals_total", table="topics") == 1

        await c.close()
        broker.kill()  # the auto-created topics were on disk before their first send was answered
        broker.start()
        c = BrokerClient(broker.addr)
        topics = await c.topic_configs()
        assert {f"auto-limit-{i}" for i in range(3)} <= set(topics)
        # the count survives the restart: no new name is created by a crash
        assert (await c.pull("limit-7", "LimitTopic", 0, 0)).code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST
        assert (await c.send("auto-limit-4", 0, [message(b"x")])).code == ResponseCode.TOPIC_NOT_EXIST
    finally:
        await c.close()
        broker.stop()
