"""Pure rules of the controller-mode broker: the role lease (fencing deadline), the SyncStateSet changes and ack
counting, role decisions, the identity file, and the SyncStateSet replica waiter."""

from __future__ import annotations

import asyncio

import pytest

from broker.config import BrokerRole, BrokerSettings, BrokerConfig, MessageStoreConfig
from broker.controller_mode import identity
from broker.controller_mode.ack_waiter import SyncStateSetWaiter
from broker.controller_mode.fence import RoleLease, SendFence
from broker.controller_mode.roles import Kind, Role, decide, role_settings, same_role
from broker.controller_mode.sync_state_set import SyncStateSetView
from broker.store.types import PutStatus


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_lease_ends_a_margin_before_the_controller_may_take_the_master_for_dead():
    clock = Clock()
    lease = RoleLease(timeout_ms=1500, margin_ms=500, clock=clock)
    assert not lease.valid()  # never confirmed
    lease.renew(sent_at=100.0)
    clock.now = 100.99
    assert lease.valid()
    clock.now = 101.0  # sent_at + timeout - margin: the controller could declare it dead only at >= 101.5
    assert not lease.valid()
    assert "fenced" in lease.remark() and "resend" in lease.remark()
    lease.renew(sent_at=99.9)  # a late answer to an older heartbeat counts from its own send time
    assert not lease.valid()
    lease.renew(sent_at=100.9)
    lease.renew(sent_at=100.1)  # a renewal never shortens
    assert lease.valid_until == pytest.approx(101.9)
    lease.revoke("the controller names brokerId 2 master")
    assert not lease.valid() and "brokerId 2" in lease.remark()
    with pytest.raises(ValueError):
        RoleLease(timeout_ms=500, margin_ms=500)


def test_acks_count_against_the_union_while_a_change_is_in_flight():
    view = SyncStateSetView(master_id=1, members=frozenset({1, 2}), epoch=3, epoch_start=0)
    acks = {2: 500, 3: 100}
    assert view.confirm_offset(acks, master_max=800) == 500
    view.proposed = frozenset({1, 3})  # shrinking 2 out, growing 3 in: both count until the controller answers
    assert view.counted == {2, 3}
    assert view.confirm_offset(acks, master_max=800) == 100
    view.proposed = None
    assert SyncStateSetView(1, frozenset({1}), 0, 0).confirm_offset({}, master_max=77) == 77
    assert view.confirm_offset({}, master_max=800) == -1  # a member without a connection holds it back


def test_shrink_drops_the_disconnected_and_those_not_caught_up_for_too_long():
    view = SyncStateSetView(master_id=1, members=frozenset({1, 2, 3}), epoch=1, epoch_start=0)
    view.observe(10.0, {2: 100, 3: 100}, master_max=100)
    assert view.shrink(10.0, {2: 100, 3: 100}, {2, 3}, max_not_catchup_s=5) is None
    view.observe(14.0, {2: 100, 3: 150}, master_max=150)  # 2 falls behind at 14 s, 3 keeps up
    assert view.shrink(14.0, {2: 100, 3: 150}, {2, 3}, 5) is None
    assert view.shrink(15.1, {2: 100, 3: 150}, {2, 3}, 5) == {1, 3}  # 5.1 s since 2 was last caught up
    assert view.shrink(10.0, {3: 100}, {3}, 5) == {1, 3}  # 2 is no longer connected


def test_grow_takes_a_slave_that_caught_up_within_this_epoch():
    view = SyncStateSetView(master_id=1, members=frozenset({1}), epoch=1, epoch_start=1000)
    assert view.grow({2: 900}, {2}, master_max=900) is None  # all of it, but from before this epoch began
    assert view.grow({2: 1200}, {2}, master_max=1300) is None  # not caught up
    assert view.grow({2: 1300, 3: 10}, {2, 3}, master_max=1300) == {1, 2}
    view.members = frozenset({1, 2})
    assert view.grow({2: 1300, 3: 1300}, {2, 3}, master_max=1400) == {1, 2, 3}  # 3 reached the confirm offset


def test_role_decisions():
    assert decide(2, None, "", 3).kind is Kind.NONE
    master = decide(2, 2, "h:2", 3)
    assert master == Role(Kind.MASTER, 3, 2, "h:2")
    slave = decide(1, 2, "h:2", 3)
    assert slave.kind is Kind.SLAVE and slave.master_addr == "h:2"
    assert same_role(master, decide(2, 2, "h:2", 3)) and not same_role(master, decide(2, 2, "h:2", 4))
    assert same_role(slave, decide(1, 2, "h:2", 3))
    assert not same_role(slave, decide(1, 2, "h:2", 4))  # the same master re-elected: copy its new epoch entry
    assert not same_role(slave, decide(1, 3, "h:3", 4)) and not same_role(None, slave)
    base = BrokerSettings(BrokerConfig(broker_name="b"), MessageStoreConfig(broker_role=BrokerRole.SYNC_MASTER))
    as_master = role_settings(base, master, 2)
    assert as_master.role is BrokerRole.SYNC_MASTER and as_master.broker.broker_id == 0
    as_slave = role_settings(base, slave, 1, "h:3")
    assert as_slave.role is BrokerRole.SLAVE and as_slave.broker.broker_id == 1
    assert as_slave.store.ha_master_address == "h:3"


def test_identity_file_round_trip_and_a_crash_between_apply_and_commit(tmp_path):
    assert identity.load(tmp_path, "c", "b") is None
    identity.save_pending(tmp_path, "c", "b", 3, "h:1;42")
    assert identity.load_pending(tmp_path, "c", "b") == (3, "h:1;42")  # re-apply with the same code
    identity.commit(tmp_path, "c", "b", 3)
    assert identity.load(tmp_path, "c", "b") == 3 and identity.load_pending(tmp_path, "c", "b") is None
    with pytest.raises(identity.IdentityError, match="own storePathRootDir"):
        identity.load(tmp_path, "c", "other")


async def test_the_waiter_needs_every_member_and_a_valid_lease():
    clock = Clock()
    lease = RoleLease(1500, 500, clock=clock)
    fence = SendFence(lease)
    view = SyncStateSetView(master_id=1, members=frozenset({1, 2, 3}), epoch=1, epoch_start=0)
    acks: dict[int, int] = {2: 0, 3: 0}
    waiter = SyncStateSetWaiter(view=lambda: view, acks=lambda: acks, master_max=lambda: 100, fence=fence,
                                slave_timeout_ms=2000, all_ack=True)
    lease.renew(clock.now)
    pending = asyncio.ensure_future(waiter.wait(100))
    await asyncio.sleep(0)
    acks[2] = 100
    waiter.on_ack()
    await asyncio.sleep(0)
    assert not pending.done()  # 3 has not acked
    acks[3] = 100
    waiter.on_ack()
    assert await pending == (PutStatus.PUT_OK, "")
    clock.now += 10  # the lease ran out: the same put is refused, saying why
    status, remark = await waiter.wait(100)
    assert status is PutStatus.SLAVE_NOT_AVAILABLE and "fenced" in remark and "elects cleanly" in remark
    fence.clean_election = True  # rule (b): every member of a set of three acked, the controller elects cleanly
    assert await waiter.wait(100) == (PutStatus.PUT_OK, "")
    fence.depose("the controller names brokerId 2 master at masterEpoch 2")
    status, remark = await waiter.wait(100)
    assert status is PutStatus.SLAVE_NOT_AVAILABLE and "brokerId 2" in remark
    fence.begin_term("becoming master at masterEpoch 3")
    lease.renew(clock.now)
    short = SyncStateSetWaiter(view=lambda: view, acks=lambda: {2: 100}, master_max=lambda: 200, fence=fence,
                               slave_timeout_ms=20, all_ack=True)
    status, remark = await short.wait(200)
    assert status is PutStatus.FLUSH_SLAVE_TIMEOUT and "[2, 3]" in remark
    one = SyncStateSetWaiter(view=lambda: view, acks=lambda: {2: 200, 3: 0}, master_max=lambda: 200, fence=fence,
                             slave_timeout_ms=20, all_ack=False)
    assert (await one.wait(200))[0] is PutStatus.PUT_OK  # allAckInSyncStateSet=false: one member suffices


def test_epoch_cache_answer_round_trip_and_a_slave_refuses():
    from broker.controller_mode import epoch_cache
    from broker.store.epoch_file import EpochEntry
    from remoting.codes import RequestCode, ResponseCode
    from remoting.frame_codec import RemotingCommand

    request = RemotingCommand(RequestCode.GET_BROKER_EPOCH_CACHE)
    entries = [EpochEntry(1, 0), EpochEntry(3, 500)]
    resp = epoch_cache.answer(request, is_master=True, cluster="c", broker_name="b", broker_id=2, entries=entries,
                              max_offset=900, ha_server_addr="h:10912")
    assert resp.code == ResponseCode.SUCCESS
    cache = epoch_cache.parse(resp)
    assert cache == epoch_cache.EpochCache(tuple(entries), 900, "h:10912")
    refused = epoch_cache.answer(request, is_master=False, cluster="c", broker_name="b", broker_id=2,
                                 entries=entries, max_offset=900, ha_server_addr="h:10912")
    assert refused.code != ResponseCode.SUCCESS and "not the master" in refused.remark
    with pytest.raises(ValueError, match="does not parse"):
        epoch_cache.parse(RemotingCommand(ResponseCode.SUCCESS, body=b'{"epochList": [{"epoch": -1}]}'))


async def test_a_new_master_that_streamed_until_now_holds_its_first_send_ok():
    lease = RoleLease(1500, 500)
    fence = SendFence(lease)
    fence.begin_term("becoming master", hold_until=lease.clock() + 0.2)
    lease.renew(lease.clock())
    view = SyncStateSetView(master_id=2, members=frozenset({2}), epoch=2, epoch_start=0)
    waiter = SyncStateSetWaiter(view=lambda: view, acks=dict, master_max=lambda: 100, fence=fence,
                                slave_timeout_ms=2000, all_ack=True)
    loop = asyncio.get_running_loop()
    status, remark = await waiter.wait(100, deadline=loop.time() + 0.05)
    assert status is PutStatus.FLUSH_SLAVE_TIMEOUT and "became master moments ago" in remark
    started = loop.time()
    assert await waiter.wait(100) == (PutStatus.PUT_OK, "")
    assert loop.time() - started >= 0.1  # held until the old master's waiters expired
    assert await waiter.wait(100) == (PutStatus.PUT_OK, "")


async def test_the_waiter_counts_a_proposed_member_once_told_and_shares_one_timeout_timer():
    clock = Clock()
    lease = RoleLease(1500, 500, clock=clock)
    lease.renew(clock.now)
    fence = SendFence(lease)
    view = SyncStateSetView(master_id=1, members=frozenset({1, 2}), epoch=1, epoch_start=0)
    acks: dict[int, int] = {2: 100, 3: 0}
    waiter = SyncStateSetWaiter(view=lambda: view, acks=lambda: acks, master_max=lambda: 150, fence=fence,
                                slave_timeout_ms=50, all_ack=True)
    assert waiter.covered() == 100 and (await waiter.wait(100))[0] is PutStatus.PUT_OK
    view.proposed = frozenset({1, 2, 3})  # growth in flight: acks count against both sets (RocketMQ #5663)
    waiter.on_ack()  # what replicas_manager calls as it proposes
    assert waiter.covered() == 0
    many = [asyncio.ensure_future(waiter.wait(100 + i)) for i in range(50)]
    results = await asyncio.gather(*many)
    assert all(status is PutStatus.FLUSH_SLAVE_TIMEOUT and "3]" in remark for status, remark in results)
    acks.update({2: 150, 3: 150})
    waiter.on_ack()
    assert waiter.covered() == 150 and (await waiter.wait(150))[0] is PutStatus.PUT_OK


async def test_a_stalled_master_never_answers_send_ok_after_slave_timeout_for_acks_its_kernel_buffered():
    """After a stall (SIGSTOP, a blocking call) the loop reads the acks that arrived meanwhile before it runs the
    timer that expires the waiter; a new master's hold counts on no SEND_OK after slaveTimeout (fence.py)."""
    import socket
    import time

    lease = RoleLease(1500, 500)
    fence = SendFence(lease)
    fence.clean_election = True
    view = SyncStateSetView(master_id=1, members=frozenset({1, 2}), epoch=1, epoch_start=0)
    acks: dict[int, int] = {2: 0}
    waiter = SyncStateSetWaiter(view=lambda: view, acks=lambda: acks, master_max=lambda: 100, fence=fence,
                                slave_timeout_ms=50, all_ack=True)
    ours, member = socket.socketpair()
    ours.setblocking(False)
    loop = asyncio.get_running_loop()

    def read_ack() -> None:
        acks[2] = int(ours.recv(32))
        waiter.on_ack()

    loop.add_reader(ours, read_ack)
    try:
        pending = asyncio.ensure_future(waiter.wait(100))
        await asyncio.sleep(0)
        member.send(b"100")  # the member's ack reaches the kernel in time
        time.sleep(0.1)  # noqa: ASYNC251 - the broker's loop stalls past slaveTimeout
        status, remark = await pending
        assert status is PutStatus.FLUSH_SLAVE_TIMEOUT and "stalled" in remark
        assert acks[2] == 100 and waiter.released_upto == 100  # the ack was read first, and released the put
    finally:
        loop.remove_reader(ours)
        ours.close(), member.close()
