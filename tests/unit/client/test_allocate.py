"""allocate_averagely: RocketMQ's AllocateMessageQueueAveragely (every consumer computes the same split)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from client.message import MessageQueue
from client.process_queue import allocate_averagely


def queues(n: int, topic: str = "T") -> list[MessageQueue]:
    return [MessageQueue(topic, f"broker-{i % 2}", i // 2) for i in range(n)]


def test_eight_queues_over_three_consumers_give_three_three_two_in_sorted_order():
    mqs = queues(8)
    got = {c: allocate_averagely(mqs, ["c2", "c0", "c1"], c) for c in ("c0", "c1", "c2")}
    ordered = sorted(mqs)
    assert got == {"c0": ordered[0:3], "c1": ordered[3:6], "c2": ordered[6:8]}


def test_more_consumers_than_queues_leaves_the_last_ones_idle():
    mqs = queues(2)
    cids = ["a", "b", "c", "d"]
    assert [len(allocate_averagely(mqs, cids, c)) for c in cids] == [1, 1, 0, 0]


def test_a_consumer_not_in_the_list_or_no_queue_gets_nothing():
    assert allocate_averagely(queues(4), ["a", "b"], "zz") == []
    assert allocate_averagely([], ["a"], "a") == []


_cids = st.lists(st.text(alphabet="abcdef0123456789@.", min_size=1, max_size=8), min_size=1, max_size=12, unique=True)


@given(st.integers(0, 64), _cids, st.randoms())
def test_every_queue_has_exactly_one_owner_and_shares_differ_by_at_most_one(n, cids, rnd):
    mqs = queues(n)
    shuffled = list(mqs)
    rnd.shuffle(shuffled)  # each consumer may see the queues and ids in another order
    other_cids = list(cids)
    rnd.shuffle(other_cids)
    shares = [
        allocate_averagely(shuffled if i % 2 else mqs, other_cids if i % 2 else cids, c) for i, c in enumerate(cids)
    ]
    owned = [mq for share in shares for mq in share]
    assert sorted(owned) == sorted(mqs)  # all queues, none twice
    sizes = [len(s) for s in shares]
    assert max(sizes) - min(sizes) <= 1
    # The earlier (sorted) consumer ids take the larger shares, each a contiguous run of the sorted queues.
    by_id = [len(allocate_averagely(mqs, cids, c)) for c in sorted(cids)]
    assert by_id == sorted(by_id, reverse=True)
    for share in shares:
        if share:
            ordered = sorted(mqs)
            start = ordered.index(share[0])
            assert share == ordered[start : start + len(share)]
