"""ConsumerOffsetManager: persistence, .bak fallback, and the merge rule checked against a model with Hypothesis."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from broker.metadata.consumer_offsets import ConsumerOffsetManager


def test_offsets_and_reset_versions_survive_a_persist_and_reload(tmp_path):
    m = ConsumerOffsetManager(tmp_path)
    m.commit("g", "T", 0, 10)
    m.commit("g", "T", 3, 7)
    version = m.reset("g2", "T", {1: 5})
    m.persist_now()
    data = json.loads((tmp_path / "consumerOffset.json").read_text())
    assert data["offsetTable"]["T@g"] == {"0": 10, "3": 7}
    again = ConsumerOffsetManager(tmp_path)
    assert again.load()
    assert again.query("g", "T", 0) == 10 and again.query("g", "T", 3) == 7
    assert again.reset_versions["T@g2"] == version


def test_a_damaged_file_falls_back_to_the_previous_version_in_the_bak(tmp_path):
    m = ConsumerOffsetManager(tmp_path)
    m.commit("g", "T", 0, 1)
    m.persist_now()
    m.commit("g", "T", 0, 2)
    m.persist_now()  # the first version is now consumerOffset.json.bak
    (tmp_path / "consumerOffset.json").write_text("{not json")
    again = ConsumerOffsetManager(tmp_path)
    assert again.load()
    assert again.query("g", "T", 0) == 1


def test_an_empty_directory_loads_nothing(tmp_path):
    m = ConsumerOffsetManager(tmp_path)
    assert not m.load()
    assert m.query("g", "T", 0) is None


def test_a_consumer_commit_may_move_an_offset_back(tmp_path):
    m = ConsumerOffsetManager(tmp_path)
    m.commit("g", "T", 0, 10)
    m.commit("g", "T", 0, 4)
    assert m.query("g", "T", 0) == 4


def test_a_stale_master_table_never_moves_the_slaves_offsets_back(tmp_path):
    slave = ConsumerOffsetManager(tmp_path)
    slave.commit("g", "T", 0, 100)
    changed = slave.merge_from_master({"T@g": {0: 40, 1: 9}}, {})
    assert changed == {"T@g"}
    assert slave.queues_of("g", "T") == {0: 100, 1: 9}


def test_a_newer_reset_on_the_master_wins_even_when_it_is_smaller(tmp_path):
    slave = ConsumerOffsetManager(tmp_path)
    slave.commit("g", "T", 0, 100)
    slave.merge_from_master({"T@g": {0: 5}}, {"T@g": 7})
    assert slave.queues_of("g", "T") == {0: 5}
    slave.merge_from_master({"T@g": {0: 3}}, {"T@g": 7})  # same reset generation: monotonic again
    assert slave.queues_of("g", "T") == {0: 5}


def test_a_restarted_master_takes_the_offsets_its_slave_accepted(tmp_path):
    master = ConsumerOffsetManager(tmp_path)
    master.commit("g", "T", 0, 10)
    master.merge_from_slave({"T@g": {0: 25}, "U@g": {2: 3}}, {})
    assert master.queues_of("g", "T") == {0: 25} and master.queues_of("g", "U") == {2: 3}


# model-based check ---------------------------------------------------------------------------------------------
keys = st.sampled_from(["T@g", "T@h", "U@g"])
queues = st.integers(0, 3)
offsets = st.integers(0, 1000)
versions = st.integers(0, 5)
tables = st.dictionaries(keys, st.dictionaries(queues, offsets, max_size=4), max_size=3)
version_maps = st.dictionaries(keys, versions, max_size=3)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("commit"), keys, queues, offsets),
        st.tuples(st.just("merge"), tables, version_maps),
    ),
    max_size=30,
)


@settings(max_examples=300, deadline=None)
@given(ops)
def test_merges_match_a_model_and_offsets_only_go_back_with_a_newer_reset_version(tmp_path_factory, operations):
    m = ConsumerOffsetManager(tmp_path_factory.mktemp("offsets"))
    model: dict[str, dict[int, int]] = {}
    model_versions: dict[str, int] = {}
    for op in operations:
        if op[0] == "commit":
            _, key, q, off = op
            topic, group = key.split("@")
            m.commit(group, topic, q, off)
            model.setdefault(key, {})[q] = off
            continue
        _, table, vmap = op
        before = {k: dict(v) for k, v in m.table.items()}
        m.merge_from_master(table, vmap)
        for key, incoming in table.items():
            theirs, ours = vmap.get(key, 0), model_versions.get(key, 0)
            if theirs > ours:
                model_versions[key] = theirs
                model[key] = dict(incoming)
            elif theirs == ours:
                entry = model.setdefault(key, {})
                for q, off in incoming.items():
                    entry[q] = max(entry.get(q, -1), off)
                if not entry:
                    del model[key]
            # an older reset generation is ignored
            if theirs <= ours:
                for q, off in before.get(key, {}).items():
                    assert m.table[key][q] >= off, "a merge without a newer reset moved an offset back"
        assert {k: v for k, v in m.table.items() if v} == {k: v for k, v in model.items() if v}
