"""Read advice against a naive model of spec §5.2's "Net effect" table."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from broker.read_advice import offset_moved_advice, suggest_broker_id
from remoting.codes import ResponseCode

ids = st.integers(0, 16)


def table(served_by_slave: bool, slave_read_enable: bool, lagging: bool, g_broker_id: int, g_slow: int) -> int:
    """The table, row by row."""
    rows = {
        (False, False): lambda: 0,
        (False, True): lambda: g_slow if lagging else g_broker_id,
        (True, False): lambda: 0,
        (True, True): lambda: g_slow if lagging else g_broker_id,
    }
    return rows[(served_by_slave, slave_read_enable)]()


@given(slave=st.booleans(), enable=st.booleans(), lagging=st.booleans(), gid=ids, slow=ids)
def test_suggestion_matches_the_net_effect_table(slave, enable, lagging, gid, slow):
    got = suggest_broker_id(slave_read_enable=enable, suggest_pulling_from_slave=lagging, group_broker_id=gid,
                            which_broker_when_consume_slowly=slow)
    assert got == table(slave, enable, lagging, gid, slow)


def test_defaults_send_a_lagging_consumer_to_slave_1_only_with_slave_read_enable():
    kw = dict(suggest_pulling_from_slave=True, group_broker_id=0,
              which_broker_when_consume_slowly=1)
    assert suggest_broker_id(slave_read_enable=True, **kw) == 1
    assert suggest_broker_id(slave_read_enable=False, **kw) == 0


@given(slave=st.booleans(), check=st.booleans(), gid=ids)
def test_offset_moved_is_kept_except_on_a_slave_without_offset_check(slave, check, gid):
    advice = offset_moved_advice(role_is_slave=slave, offset_check_in_slave=check, group_broker_id=gid)
    if slave and not check:
        assert advice.code is ResponseCode.PULL_RETRY_IMMEDIATELY
        assert advice.override_suggest and advice.suggest_broker_id == gid
        assert not advice.correct_offset
    else:
        assert advice.code is ResponseCode.PULL_OFFSET_MOVED
        assert not advice.override_suggest and advice.correct_offset
