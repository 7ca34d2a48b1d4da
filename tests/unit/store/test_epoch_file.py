"""The epoch history: RocketMQ's file format, its checks, and the consistent point against a model of a group.

The model: a log is a list of the epochs that wrote each of its messages. Within one epoch a single master writes
one sequence, so two logs hold the same message at a position exactly when they hold the same epoch there. Brokers
are elected, write and replicate at random (unclean elections included, which only make histories stranger); a
replica that syncs cuts its log at ``consistent_offset`` and copies from the master. The point must never keep a
message the master does not have, nor cut one it does: it is the longest common prefix.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.store.epoch_file import (
    EpochEntry,
    EpochFile,
    EpochFileError,
    consistent_offset,
    cut_from,
    decode,
    encode,
    fit_to,
)


def test_rocketmq_example_round_trips():
    data = b"2\n773307083\n7-7000\n8-8000\n"
    assert decode(data, "f") == [EpochEntry(7, 7000), EpochEntry(8, 8000)]
    assert encode([EpochEntry(7, 7000), EpochEntry(8, 8000)]) == data


histories = st.lists(st.tuples(st.integers(1, 50), st.integers(0, 10**6)), max_size=8).map(
    lambda pairs: [EpochEntry(e, s) for e, s in zip(sorted({p[0] for p in pairs}), sorted(p[1] for p in pairs))]
)


@given(histories)
def test_encode_decode_round_trip(entries):
    assert decode(encode(entries), "f") == entries


@given(histories.filter(bool), st.data())
def test_any_changed_byte_is_refused_or_harmless(entries, data):
    raw = bytearray(encode(entries))
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] = data.draw(st.integers(0, 255).filter(lambda b: b != raw[i]))
    try:
        got = decode(bytes(raw), "f")
    except EpochFileError:
        return
    # A change the CRC cannot see (only the header's digits, e.g. a leading zero) must still mean the same history.
    assert got == entries


@pytest.mark.parametrize("bad", [
    b"", b"1\n", b"x\n0\n", b"1\n0\n1-0\n", b"2\n" + encode([EpochEntry(1, 0)])[2:],
    encode([EpochEntry(2, 0), EpochEntry(1, 5)]), encode([EpochEntry(1, 9), EpochEntry(2, 5)]),
    encode([EpochEntry(1, 0)]).rstrip(b"\n"), "1\n0\n\u00b2-0\n".encode(),
])
def test_damaged_files_are_refused(bad):
    with pytest.raises(EpochFileError):
        decode(bad, "f")


def test_file_append_reload_and_backup(tmp_path):
    f = EpochFile(tmp_path)
    f.load()
    assert f.entries == [] and f.last_epoch == 0
    f.append(1, 0)
    f.append(1, 0)  # a replay of the same step is a no-op
    f.append(3, 500)
    with pytest.raises(EpochFileError):
        f.append(2, 900)
    with pytest.raises(EpochFileError):
        f.append(4, 100)
    again = EpochFile(tmp_path)
    again.load()
    assert again.entries == [EpochEntry(1, 0), EpochEntry(3, 500)]
    f.path.write_bytes(b"garbage")  # a torn main file: the backup holds the history before the last append
    again.load()
    assert again.entries == [EpochEntry(1, 0)]
    f.path.with_name(f.path.name + ".bak").write_bytes(b"garbage")
    with pytest.raises(EpochFileError, match="move the broker's store aside"):
        again.load()


def test_cut_and_fit():
    h = [EpochEntry(1, 0), EpochEntry(2, 100), EpochEntry(3, 250)]
    assert cut_from(h, 250) == h[:2]  # a reign cut to nothing is learnt again from the master
    assert fit_to(h, 250) == h  # a new master's reign starts at the end before it writes
    assert fit_to(h, 249) == h[:2]
    assert cut_from(h, 0) == []


def history_of(log: list[int], starts: dict[int, int]) -> list[EpochEntry]:
    """The history a broker holding ``log`` keeps (its own entries plus those copied from the master's frames)."""
    out: list[EpochEntry] = []
    for epoch in log:
        if not out or out[-1].epoch != epoch:
            out.append(EpochEntry(epoch, starts[epoch]))
    return out


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


ops = st.lists(st.tuples(st.sampled_from(["elect", "write", "sync"]), st.integers(0, 2), st.integers(0, 4)),
               max_size=40)


@settings(max_examples=300)
@given(ops)
def test_consistent_offset_is_the_longest_common_prefix(steps):
    logs: list[list[int]] = [[], [], []]
    extra: list[list[EpochEntry]] = [[], [], []]  # reigns a broker started but wrote nothing in (yet)
    starts: dict[int, int] = {}
    master, epoch = None, 0
    for op, who, n in steps:
        if op == "elect":
            epoch += 1
            master = who
            starts[epoch] = len(logs[who])
            extra[who] = [EpochEntry(epoch, len(logs[who]))]
        elif op == "write" and master is not None:
            logs[master] += [epoch] * n
            extra[master] = []
        elif op == "sync" and master is not None and who != master:
            mine, theirs = logs[who], logs[master]
            local = history_of(mine, starts) + [e for e in extra[who] if e.start_offset == len(mine)]
            remote = history_of(theirs, starts) + [e for e in extra[master] if e.start_offset == len(theirs)]
            point = consistent_offset(local, len(mine), remote, len(theirs))
            if not mine:
                assert point == 0
            if point is None:  # no shared reign (only after an unclean election): RocketMQ wants an operator too
                assert common_prefix(mine, theirs) == 0
                continue
            assert point == common_prefix(mine, theirs), (mine, theirs, local, remote)
            logs[who] = theirs[: point + n] if point + n <= len(theirs) else list(theirs)
            extra[who] = []
