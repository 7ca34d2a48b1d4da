"""Every parser of numbers that come from outside the process refuses Unicode digits (issue 12 item 7).

``"²"`` passes ``str.isdigit()`` and then makes ``int()`` raise; ``"٣"`` passes both and becomes 3, a number the
sender never wrote. ``remoting.headers.parse_int`` is the one strict parser; each case below is a call site that
used ``isdigit()`` or a bare ``int()`` on a header, a JSON body, a stored property, an address or an option.
"""

from __future__ import annotations

import struct
import zlib

import pytest

from broker.config import parse_delay_levels
from broker.ha.slave import parse_master_addr
from broker.metadata.consumer_offsets import ConsumerOffsetManager
from broker.metadata.delay_offsets import DelayOffsetManager
from broker.metadata.topics import TopicConfig
from broker.processors.client_manage import BodyError, parse_subscription
from broker.schedule import runs_by_target
from broker.slave_sync import parse_consumer_offsets, parse_delay_offsets
from broker.store.cleanup import delete_hours
from broker.store.mapped_file import parse_file_name
from broker.store.message_store import MessageStore
from broker.store.types import PutStatus
from client.admin_bodies import AdminBodyError, parse_all_delay_offsets, parse_topic_stats
from client.namesrv import broker_addrs, parse_namesrv_addr
from client.route_cache import build_route
from connectors.spark.errors import OptionError
from connectors.spark.offsets import parse_qkey
from connectors.spark.options import source_options
from namesrv import bodies as namesrv_bodies
from remoting.client import split_addr
from remoting.data_version import DataVersion
from remoting.headers import LONG_MAX, NumberError, parse_host_port, parse_int
from remoting.message_codec import StoredMessage
from tests.unit.store.conftest import draft, small_config

UNICODE_DIGITS = ["²", "٣", "١٢", "𝟙"]  # superscript two, Arabic-Indic three and twelve, mathematical bold one


@pytest.mark.parametrize("text", ["0", "7", "-5", "+7", "123456789012", str(LONG_MAX)])
def test_parse_int_takes_ascii_decimal_text(text):
    assert parse_int(text) == int(text)


@pytest.mark.parametrize("value", [*UNICODE_DIGITS, "", " 1", "1 ", "1_000", "1.0", "1e3", "0x10", "9" * 21, "--1",
                                   True, 1.5, None, b"1"])
def test_parse_int_refuses_what_int_would_bend(value):
    with pytest.raises(NumberError):
        parse_int(value)


def test_parse_int_checks_the_range_and_names_the_value():
    assert parse_int(5, 0, 7) == 5
    with pytest.raises(NumberError, match=r"perm=9 does not fit in 0\.\.7"):
        parse_int("9", 0, 7, what="perm")
    with pytest.raises(NumberError, match="queueId='٣' is not a decimal integer"):
        parse_int("٣", what="queueId")
    assert isinstance(NumberError("x"), ValueError)  # callers that catch ValueError keep working


@pytest.mark.parametrize(("addr", "expected"), [("h:80", ("h", 80)), ("[::1]:9876", ("::1", 9876)),
                                                 ("10.0.0.1:65535", ("10.0.0.1", 65535))])
def test_parse_host_port_reads_an_address(addr, expected):
    assert parse_host_port(addr) == expected


@pytest.mark.parametrize("addr", ["h:²", "h:٣", "h:0", "h:65536", "h", ":80", "h: 80", "h:-1", ""])
def test_parse_host_port_refuses_a_port_that_is_not_ascii_in_range(addr):
    with pytest.raises(NumberError, match="is not host:port"):
        parse_host_port(addr, "address")


@pytest.mark.parametrize("digit", UNICODE_DIGITS)
def test_remoting_client_refuses_a_route_address_with_a_unicode_port(digit):
    with pytest.raises(ValueError, match="is not host:port"):
        split_addr(f"10.0.0.1:1{digit}")


@pytest.mark.parametrize("digit", UNICODE_DIGITS)
def test_sdk_refuses_a_nameserver_address_with_a_unicode_port(digit):
    with pytest.raises(ValueError, match="nameserver address"):
        parse_namesrv_addr(f"127.0.0.1:9876;h:{digit}")


@pytest.mark.parametrize("digit", UNICODE_DIGITS)
def test_namesrv_compressed_registration_refuses_unicode_queue_numbers(digit):
    line = f"T {digit} 4 6 SINGLE_TAG".encode()
    raw = struct.pack(">i", 2) + b"{}" + struct.pack(">i", 1) + struct.pack(">i", len(line)) + line
    raw += struct.pack(">i", 2) + b"[]"
    with pytest.raises(namesrv_bodies.BodyError, match="readQueueNums"):
        namesrv_bodies.decode_register_body(zlib.compress(raw), compressed=True)


@pytest.mark.parametrize("digit", UNICODE_DIGITS)
def test_heartbeat_subscription_refuses_a_unicode_sub_version(digit):
    with pytest.raises(BodyError, match="subVersion"):
        parse_subscription({"topic": "T", "subString": "*", "subVersion": digit}, "subscriptionDataSet[0]")
    assert parse_subscription({"topic": "T", "subVersion": "1795563103827"}, "s").sub_version == 1795563103827


def _parked(real_qid: str) -> StoredMessage:
    return StoredMessage("SCHEDULE_TOPIC_XXXX", 0, 0, 0, 100, b"b", {"REAL_TOPIC": "T", "REAL_QID": real_qid}, 0, 0,
                         1, ("1.2.3.4", 5), 1, ("1.2.3.4", 6), 0, 0)


@pytest.mark.parametrize("digit", UNICODE_DIGITS)
def test_schedule_treats_a_unicode_real_qid_as_missing_instead_of_crashing_or_guessing(digit):
    assert [(t, q) for t, q, _ in runs_by_target([_parked(digit)])] == [("T", -1)]
    assert [(t, q) for t, q, _ in runs_by_target([_parked("3")])] == [("T", 3)]


@pytest.mark.parametrize("digit", UNICODE_DIGITS)
def test_sdk_route_and_broker_addrs_refuse_unicode_numbers(digit):
    with pytest.raises(ValueError, match="brokerId"):
        broker_addrs({"brokerAddrs": {digit: "h:1"}})
    with pytest.raises(ValueError, match="writeQueueNums"):
        build_route("T", [{"brokerName": "b", "perm": 6, "writeQueueNums": digit, "readQueueNums": 4}],
                    [{"brokerName": "b", "brokerAddrs": {"0": "h:1"}}])


@pytest.mark.parametrize("digit", UNICODE_DIGITS)
def test_admin_answer_bodies_refuse_unicode_numbers(digit):
    with pytest.raises(AdminBodyError, match="not a decimal integer"):
        parse_all_delay_offsets(b'{"offsetTable":{"1":"%s"}}' % digit.encode())
    body = '{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"maxOffset":"' + digit + '"}}}'
    with pytest.raises(AdminBodyError):
        parse_topic_stats(body.encode(), "T")


@pytest.mark.parametrize("digit", UNICODE_DIGITS)
def test_stored_and_synced_metadata_refuse_unicode_numbers(digit, tmp_path):
    with pytest.raises(ValueError):
        TopicConfig.from_json({"topicName": "T", "readQueueNums": digit})
    with pytest.raises(ValueError):
        DataVersion.from_json({"counter": digit})
    with pytest.raises(ValueError):
        DelayOffsetManager(tmp_path).load_json({"offsetTable": {"1": digit}})
    with pytest.raises(ValueError):
        ConsumerOffsetManager(tmp_path).load_json({"offsetTable": {"T@g": {"0": digit}}})
    with pytest.raises(ValueError):
        parse_delay_offsets({"offsetTable": {digit: 1}})
    with pytest.raises(ValueError):
        parse_consumer_offsets({"offsetTable": {"T@g": {"0": digit}}})


@pytest.mark.parametrize("digit", UNICODE_DIGITS)
def test_spark_connector_refuses_unicode_queue_keys_and_ports(digit):
    with pytest.raises(ValueError, match="brokerName:queueId"):
        parse_qkey(f"broker-a:{digit}")
    assert parse_qkey("broker-a:3") == ("broker-a", 3)
    with pytest.raises(OptionError, match="namesrv"):
        source_options({"namesrv": f"127.0.0.1:98{digit}", "topic": "T"})
    with pytest.raises(OptionError, match="maxMessagesPerTrigger"):
        source_options({"namesrv": "127.0.0.1:9876", "topic": "T", "maxMessagesPerTrigger": digit})


@pytest.mark.parametrize("digit", UNICODE_DIGITS)
def test_broker_config_and_store_file_names_refuse_unicode_digits(digit):
    with pytest.raises(ValueError, match="messageDelayLevel"):
        parse_delay_levels(f"1s {digit}s")
    assert parse_delay_levels("1s 2m") == [1000, 120_000]
    assert delete_hours(f"04;{digit};23") == {4, 23}
    assert parse_file_name(digit * 20) is None and parse_file_name("0" * 19 + "7") == 7


@pytest.mark.parametrize("digit", UNICODE_DIGITS)
async def test_the_store_refuses_a_unicode_delay_level_whoever_puts_it(digit, tmp_path):
    store = MessageStore(small_config(tmp_path))
    await store.start()
    try:
        result = await store.put_messages("T", 0, [draft(DELAY=digit)])
        assert result.status is PutStatus.MESSAGE_ILLEGAL and "DELAY" in result.remark
    finally:
        await store.stop()


@pytest.mark.parametrize("addr", ["h:²", "h:٣", "h:0", "h"])
def test_the_ha_slave_does_not_dial_a_master_address_with_a_bad_port(addr):
    with pytest.raises(ValueError, match="HA master address"):
        parse_master_addr(addr)
    assert parse_master_addr(" 10.0.0.1:10912 ") == ("10.0.0.1", 10912)
