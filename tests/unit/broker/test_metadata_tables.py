"""Topics, subscription groups and delay offsets: defaults, DataVersion bumps, persistence, slave replace_all."""

from __future__ import annotations

import json

from broker.metadata.delay_offsets import DelayOffsetManager
from broker.metadata.subscription_groups import SubscriptionGroupConfig, SubscriptionGroupManager
from broker.metadata.topics import TopicConfig, TopicConfigManager, is_system_topic
from common.perm import PERM_WRITE
from remoting.data_version import DataVersion


def test_system_topics_exist_after_start_with_one_queue_per_delay_level_and_at_least_18(tmp_path):
    m = TopicConfigManager(tmp_path, schedule_queue_nums=3)
    m.ensure_system_topics()
    cfg = m.get("SCHEDULE_TOPIC_XXXX")
    assert cfg is not None and cfg.read_queue_nums == 18
    assert is_system_topic("SCHEDULE_TOPIC_XXXX") and is_system_topic("RMQ_SYS_X") and not is_system_topic("orders")


def test_every_topic_change_bumps_the_data_version_once_and_the_file_uses_rocketmq_keys(tmp_path):
    m = TopicConfigManager(tmp_path)
    m.update(TopicConfig("A", 4, 4))
    assert m.data_version.counter == 1
    _, created = m.create_if_absent("A", 8)
    assert not created and m.data_version.counter == 1
    cfg, created = m.create_dlq_topic("g")
    assert created and cfg.perm == PERM_WRITE and cfg.topic_name == "%DLQ%g"
    m.persist_now()
    data = json.loads((tmp_path / "topics.json").read_text())
    assert data["dataVersion"]["counter"] == 2
    assert data["topicConfigTable"]["A"] == {
        "topicName": "A",
        "readQueueNums": 4,
        "writeQueueNums": 4,
        "perm": 6,
        "topicFilterType": "SINGLE_TAG",
        "topicSysFlag": 0,
        "order": False,
    }
    again = TopicConfigManager(tmp_path)
    again.load()
    assert again.get("A") == TopicConfig("A", 4, 4) and again.data_version == m.data_version


def test_a_slave_replaces_its_topics_only_when_the_masters_version_differs(tmp_path):
    slave = TopicConfigManager(tmp_path)
    slave.update(TopicConfig("local", 1, 1))
    master_version = DataVersion(timestamp=123, counter=9)
    assert slave.replace_all([TopicConfig("A", 2, 2)], master_version)
    assert list(slave.table) == ["A"] and slave.data_version == master_version
    assert not slave.replace_all([TopicConfig("B", 2, 2)], master_version)


def test_subscription_groups_have_rocketmq_defaults_and_round_trip_through_the_file(tmp_path):
    m = SubscriptionGroupManager(tmp_path)
    cfg = m.find_or_create("g")
    assert cfg == SubscriptionGroupConfig("g", True, True, True, 1, 16, 0, 1, True)
    m.update(SubscriptionGroupConfig("h", consume_enable=False, retry_max_times=3))
    assert m.data_version.counter == 2
    m.persist_now()
    data = json.loads((tmp_path / "subscriptionGroup.json").read_text())
    assert data["subscriptionGroupTable"]["h"]["consumeEnable"] is False
    assert data["subscriptionGroupTable"]["h"]["whichBrokerWhenConsumeSlowly"] == 1
    again = SubscriptionGroupManager(tmp_path)
    again.load()
    assert again.get("h") == SubscriptionGroupConfig("h", consume_enable=False, retry_max_times=3)


def test_groups_are_not_created_when_auto_creation_is_off(tmp_path):
    m = SubscriptionGroupManager(tmp_path, auto_create=False)
    assert m.find_or_create("g") is None and m.data_version.counter == 0


def test_delay_offsets_persist_per_level(tmp_path):
    m = DelayOffsetManager(tmp_path)
    m.set(1, 10)
    m.set(3, 2)
    m.persist_now()
    assert json.loads((tmp_path / "delayOffset.json").read_text()) == {"offsetTable": {"1": 10, "3": 2}}
    again = DelayOffsetManager(tmp_path)
    again.load()
    assert again.get(1) == 10 and again.get(2) == 0 and again.get(3) == 2


def test_auto_created_groups_stop_at_the_limit_and_the_count_survives_a_reload(tmp_path):
    m = SubscriptionGroupManager(tmp_path, max_auto_created=2)
    assert m.find_or_create("a") and m.find_or_create("b")
    assert m.find_or_create("c") is None and m.auto_create_refusals == 1
    remark = m.refusal_remark("c", "broker-a")
    assert "maxAutoCreatedSubscriptionGroups=2" in remark and "mqctl updateSubGroup -g c" in remark
    m.update(SubscriptionGroupConfig("c"))  # an operator's group does not count
    m.update(SubscriptionGroupConfig("a"))  # and updating an auto-created one makes it an operator's
    assert m.auto_created == {"b"}
    m.persist_now()
    again = SubscriptionGroupManager(tmp_path, max_auto_created=2)
    assert again.load() and again.auto_created == {"b"} and set(again.table) == {"a", "b", "c"}
    assert again.find_or_create("d") is not None and again.find_or_create("e") is None


def test_auto_created_topics_stop_at_the_limit_retry_topics_do_not_count(tmp_path):
    m = TopicConfigManager(tmp_path, max_auto_created=1)
    cfg, created = m.auto_create("t1", 4, 6)
    assert created and cfg.write_queue_nums == 4 and m.unsaved("t1")
    assert m.auto_create("t2", 4, 6) == (None, False) and m.auto_create_refusals == 1
    assert "maxAutoCreatedTopics=1" in m.refusal_remark("t2", "broker-a", "DefaultCluster")
    assert m.create_retry_topic("g", 1)[1] and m.auto_created == {"t1"}
    m.persist_now()
    assert not m.unsaved("t1")  # on disk: its next send does not wait
    again = TopicConfigManager(tmp_path, max_auto_created=1)
    again.load()
    assert again.auto_created == {"t1"} and again.auto_create("t3", 4, 6) == (None, False)
