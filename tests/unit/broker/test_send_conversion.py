"""The send path's one-pass screen (convert.checked_drafts) against the exact per-message check
(validate.messages): a batch the screen accepts must be one the exact check accepts, with the same drafts as
convert.drafts; the screen may only be conservative (send it to the exact check), never lenient."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.grpc import convert, validate
from broker.context import BrokerContext
from broker.store.types import MessageDraft
from remoting.message_codec import offset_msg_id
from remoting.pb import broker_pb2

_text = st.text(alphabet=st.sampled_from("ab\x01\x02 DELAY0123456789"), max_size=6)
_props = st.dictionaries(st.one_of(_text, st.sampled_from(["DELAY", "UNIQ_KEY", "TAGS", ""])), _text, max_size=3)
_message = st.builds(
    lambda body, props, flag, ts: broker_pb2.Message(body=body, properties=props, flag=flag, born_timestamp=ts),
    st.binary(max_size=12),
    _props,
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**62),
)


@given(st.lists(_message, max_size=6), st.integers(0, 10), st.integers(0, 20), st.sampled_from(["1.2.3.4:5", "x"]))
@settings(max_examples=400)
def test_the_screen_never_accepts_what_the_exact_check_refuses(msgs, max_body, max_level, born_host):
    checked = convert.checked_drafts(msgs, born_host, 3, max_body, max_level)
    exact = validate.messages(msgs, max_body, max_level)
    if checked is not None:
        assert exact is None
        assert checked.drafts == convert.drafts(msgs, born_host, 3)
        assert checked.sizes == [len(m.body) for m in msgs]
    # And for ordinary batches (no separators, no DELAY over the limit) the screen does accept.
    if exact is None and all("" not in m.properties for m in msgs):
        assert checked is not None


def test_a_big_batch_of_ordinary_messages_passes_the_screen():
    msgs = [broker_pb2.Message(body=b"x" * 1024, properties={"UNIQ_KEY": "A" * 32, "TAGS": "t"}) for _ in range(512)]
    checked = convert.checked_drafts(msgs, "10.0.0.1:0", 0, 4 << 20, 18)
    assert checked is not None and len(checked.drafts) == 512
    assert checked.drafts[0].born_host == ("10.0.0.1", 0)
    assert checked.drafts[0].properties == {"UNIQ_KEY": "A" * 32, "TAGS": "t"}


def test_one_message_over_the_property_limit_in_a_big_batch_goes_to_the_exact_check():
    msgs = [broker_pb2.Message(body=b"x", properties={"k": "v" * 200}) for _ in range(200)]
    assert convert.checked_drafts(msgs, "", 0, 100, 18) is None  # the batch total is over 32767
    assert validate.messages(msgs, 100, 18) is None  # but each message is fine: the handler stores it


def test_message_draft_field_order_is_what_the_positional_constructor_assumes():
    assert [f.name for f in dataclasses.fields(MessageDraft)][:6] == [
        "body",
        "properties",
        "flag",
        "born_timestamp",
        "born_host",
        "reconsume_times",
    ]


class _Settings:
    class broker:  # mimics BrokerSettings.broker
        broker_ip1 = "192.168.1.2"
        listen_port = 10911


@given(st.lists(st.integers(0, 2**63 - 1), max_size=20))
def test_offset_msg_ids_use_a_cached_prefix_with_the_same_result(offsets):
    ctx = BrokerContext(
        settings=_Settings,
        store=None,
        topics=None,
        groups=None,
        offsets=None,
        delay_offsets=None,
        clients=None,
        hold=None,
    )
    assert ctx.offset_msg_ids(offsets) == [offset_msg_id(("192.168.1.2", 10911), p) for p in offsets]
