"""Pure pieces of the admin processors: the 200 body parser, rates, morning totals, the HA status body."""

from __future__ import annotations

import datetime
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.ha.status import ByteRate, HAStatus, MasterLinkStatus, SlaveLinkStatus
from broker.metadata.subscription_groups import SubscriptionGroupConfig
from broker.processors.admin_groups import ConsumeRate, parse_group_config
from broker.processors.admin_rates import PutRate
from broker.processors.admin_info import MorningTotals
from broker.processors.admin_topics import message_queue
from remoting import fastjson


def test_a_group_config_body_takes_rocketmq_names_and_defaults_for_what_it_leaves_out():
    cfg = parse_group_config(b'{"groupName":"G","brokerId":1,"retryMaxTimes":5,"consumeEnable":false,'
                             b'"groupRetryPolicy":{"type":"CUSTOMIZED"}}')  # a 5.x field is ignored
    assert cfg == SubscriptionGroupConfig("G", consume_enable=False, retry_max_times=5, broker_id=1)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"", "SubscriptionGroupConfig JSON object"),
        (b"[1]", "SubscriptionGroupConfig JSON object"),
        (b"{", "not JSON"),
        (b'{"brokerId":1}', "groupName is missing"),
        (b'{"groupName":"G","retryQueueNums":"2"}', "retryQueueNums='2' must be an integer"),
        (b'{"groupName":"G","brokerId":true}', "brokerId=True must be an integer"),
        (b'{"groupName":"G","consumeEnable":1}', "consumeEnable=1 must be true or false"),
        (b'{"groupName":7}', "groupName=7 must be a string"),
    ],
)
def test_a_bad_group_config_body_is_named(body, says):
    error = parse_group_config(body)
    assert isinstance(error, str) and says in error


def test_message_queue_keys_are_written_inline_as_fastjson_does():
    body = fastjson.dumps({"offsetTable": {message_queue("T", "broker-a", 1): {"maxOffset": 3}}})
    assert body == b'{"offsetTable":{{"brokerName":"broker-a","queueId":1,"topic":"T"}:{"maxOffset":3}}}'
    [(key, value)] = fastjson.loads(body)["offsetTable"].items()
    assert key.dict() == {"brokerName": "broker-a", "queueId": 1, "topic": "T"} and value == {"maxOffset": 3}


def test_consume_rate_averages_since_boot_until_a_sample_is_a_minute_old():
    rate = ConsumeRate(boot_s=100.0, window_s=60.0)
    assert rate.rate(("T", "G"), 500, 110.0) == 50.0  # no sample yet: since boot
    assert rate.rate(("T", "G"), 600, 120.0) == pytest.approx(600 / 20)  # no sample a minute old: since boot
    assert rate.rate(("T", "G"), 1200, 180.0) == pytest.approx((1200 - 600) / 60)  # from the sample at 120
    assert rate.rate(("T", "G"), 1200, 250.0) == pytest.approx(0.0)  # nothing pulled within the last 70 s
    assert rate.rate(("T", "other"), 0, 250.0) == 0.0


def test_put_rate_counts_from_the_first_request_and_restarts_when_the_topic_was_recreated():
    rate = PutRate(window_s=60.0)
    assert rate.rate("T", 5_000, 100.0) == 0.0  # what was stored before the first request is not a rate
    assert rate.rate("T", 5_100, 110.0) == pytest.approx(10.0)
    assert rate.rate("T", 40, 120.0) == 0.0  # deleted and created again: a new baseline
    assert rate.rate("T", 100, 130.0) == pytest.approx(6.0)


@given(st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=30))
def test_consume_rate_is_never_negative_for_a_growing_counter(steps):
    rate, total, now = ConsumeRate(boot_s=0.0), 0, 0.0
    for step in steps:
        total, now = total + step, now + 1.5
        assert rate.rate(("T", "G"), total, now) >= 0.0


def test_byte_rate_measures_between_reads_a_second_apart_and_restarts_with_a_new_connection():
    r = ByteRate()
    assert r.rate("s", 1000, 10.0) == 0
    assert r.rate("s", 5000, 10.5) == 0  # too soon: the last rate again
    assert r.rate("s", 5000, 12.0) == 2000
    assert r.rate("s", 100, 13.0) == 0  # the count went back: a new connection


def test_morning_totals_shift_at_the_first_request_of_a_new_day():
    m = MorningTotals()
    day1 = time.mktime(datetime.datetime(2026, 11, 24, 15, 0).timetuple())
    m.observe(day1, 10, 5)
    assert (m.put_today, m.put_yesterday) == (0, 0)  # started today: like RocketMQ before its first midnight
    m.observe(day1 + 3600, 20, 9)
    assert (m.put_today, m.get_today) == (0, 0)
    m.observe(day1 + 12 * 3600, 50, 30)  # the next day
    assert (m.put_yesterday, m.put_today, m.get_today) == (0, 50, 30)
    m.observe(day1 + 36 * 3600, 80, 31)
    assert (m.put_yesterday, m.put_today, m.get_yesterday, m.get_today) == (50, 80, 30, 31)


def test_ha_status_body_uses_rocketmq_5_names_plus_pyrmqs_own():
    link = SlaveLinkStatus("127.0.0.1:5000", 1, 900, 100, "FALL_BEHIND", 0, 900, 12, 1700000000000)
    body = HAStatus("SYNC_MASTER", 1000, 0, slaves=(link,)).to_json()
    assert body["master"] is True and body["masterCommitLogMaxOffset"] == 1000 and body["inSyncSlaveNums"] == 0
    assert body["haConnectionInfo"] == [{
        "addr": "127.0.0.1:5000", "brokerId": 1, "diff": 100, "haPeerAddr": "", "inSync": False,
        "lastAckTimestamp": 1700000000000, "lastReadTimestamp": 0, "sinceLastReadMs": -1, "slaveAckOffset": 900,
        "state": "FALL_BEHIND", "transferFromWhere": 0, "transferredByteInSecond": 12, "transferredBytes": 900}]
    assert body["haClientRuntimeInfo"]["masterAddr"] == "" and body["role"] == "SYNC_MASTER"
    link_up = MasterLinkStatus("10.0.0.1:10912", True, 800, 5, 6, 800, 0, since_last_read_ms=40, state="OK")
    slave = HAStatus("SLAVE", 800, 0, client=link_up, stale_after_ms=7500).to_json()
    assert slave["master"] is False and slave["masterCommitLogMaxOffset"] == 0 and slave["commitLogMaxOffset"] == 800
    assert slave["haClientRuntimeInfo"] == {
        "isActivated": True, "lastReadTimestamp": 5, "lastWriteTimestamp": 6, "masterAddr": "10.0.0.1:10912",
        "masterFlushOffset": 0, "maxOffset": 800, "replicatedBytes": 800, "sinceLastReadMs": 40, "state": "OK",
        "transferredByteInSecond": 0}
    assert slave["staleAfterMs"] == 7500
    assert list(fastjson.loads(fastjson.dumps(slave))) == sorted(slave)  # fastjson's alphabetical order
