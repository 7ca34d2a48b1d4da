"""Controller mode against a real etcd and real controller processes: one active instance, failover of the active
one, fencing of stale writers, elections of a broker group driven over the wire, and etcd majority loss."""

from __future__ import annotations

import asyncio
import time
import urllib.request

import pytest

from controller.client import ControllerClient, ControllerError
from controller.state import GroupState, Member
from controller.config import parse_endpoints
from controller.store import Campaign, CasRefused, EtcdStore, Fence
from harness.controller import FAST, BrokerDriver, Controller
from harness.procs import Namesrv
from harness.procs import free_port
from harness.waiting import async_wait_until
from remoting.client import RemotingClient
from remoting.codes import RequestCode
from remoting.codes import ResponseCode as RC
from remoting.frame_codec import RemotingCommand

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def metadata(addr: str) -> dict[str, str]:
    client = RemotingClient()
    try:
        resp = await client.invoke(addr, RemotingCommand(RequestCode.CONTROLLER_GET_METADATA_INFO), 3)
        return dict(resp.ext or {})
    finally:
        await client.close()


async def active_of(controllers) -> list:
    found = []
    for c in controllers:
        if c.running():
            try:
                if (await metadata(c.addr)).get("isLeader") == "true":
                    found.append(c)
            except Exception:  # noqa: BLE001 - a controller being killed answers nothing
                pass
    return found


async def one_active(controllers, timeout_s: float = 20.0):
    async def exactly_one():
        active = await active_of(controllers)
        return active[0] if len(active) == 1 else None

    return await async_wait_until(exactly_one, timeout_s, "exactly one active controller", 0.1)


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return resp.read().decode()


async def test_one_instance_is_active_and_a_killed_one_is_replaced(controllers):
    active = await one_active(controllers)
    standby = next(c for c in controllers if c is not active)
    driver = BrokerDriver([standby.addr], "c", "broker-a", "127.0.0.1:10911")
    try:
        async def standby_names_the_active_one():
            # a standby learns the active instance from etcd's key, a moment after that instance took the lease
            resp = await driver.call(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                                     {"clusterName": "c", "brokerName": "broker-a"}, addr=standby.addr)
            assert resp.code == RC.CONTROLLER_NOT_LEADER
            return (resp.ext or {}).get("controllerLeaderAddress") == active.addr and resp

        resp = await async_wait_until(standby_names_the_active_one, 10, "the standby to name the active controller")
        assert active.addr in resp.remark
        assert (await metadata(standby.addr))["controllerLeaderAddress"] == active.addr
        assert "rocketmq_controller_active" in scrape(active.metrics_port)

        active.kill()  # SIGKILL: no resignation, the lease has to expire (ttl 2 s)
        t0 = time.monotonic()
        assert await one_active([standby], timeout_s=15) is standby
        took = time.monotonic() - t0
        resp = await driver.call(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID,
                                 {"clusterName": "c", "brokerName": "broker-a"}, addr=standby.addr)
        assert resp.code == RC.SUCCESS and resp.ext["nextBrokerId"] == "1"
        print(f"standby active {took:.2f} s after the SIGKILL of the active controller (lease ttl 2 s)")
    finally:
        await driver.close()


async def test_a_stale_writer_is_fenced_by_etcd(etcd):
    store = EtcdStore(parse_endpoints(etcd.endpoint), timeout_s=2)
    try:
        a = Campaign(store, "a", "127.0.0.1:1", 2)
        b = Campaign(store, "b", "127.0.0.1:2", 2)
        assert await a.step() and not await b.step()
        assert b.active_info.instance_id == "a"
        state = GroupState("c", "broker-a", {1: Member("127.0.0.1:10911")})
        rev = await store.cas_group(state, 0, a.fence)
        with pytest.raises(CasRefused) as stale:  # a decision on an old read loses
            await store.cas_group(state.replace(members={}), 0, a.fence)
        assert stale.value.reason == "stale"
        with pytest.raises(CasRefused) as forged:  # a writer that never held the active key
            await store.cas_group(state, rev, Fence(store.active_key, a.fence.create_revision + 1))
        assert forged.value.reason == "fenced"
        # a stops renewing (a paused process): its lease expires and b takes over
        await async_wait_until(b.step, 15, "b becomes active once a's lease expired", 0.2)
        with pytest.raises(CasRefused) as late:  # a's late write, with the revision it read, is refused by etcd
            await store.cas_group(state, rev, a.fence)
        assert late.value.reason == "fenced"
        assert (await store.get_group("broker-a")) == (state, rev)
        assert not await a.step() and not a.is_active  # a learns it lost and steps down
        await b.resign()
    finally:
        await store.close()


async def group_of_three(controllers, *, sss=(1, 2), timeout_ms: int = 1500):
    addrs = [c.addr for c in controllers]
    brokers = [BrokerDriver(addrs, "c", "broker-a", f"127.0.0.1:{free_port()}", heartbeat_timeout_ms=timeout_ms)
               for _ in range(3)]
    for b in brokers:
        await b.join()
    assert [b.broker_id for b in brokers] == [1, 2, 3]
    for b in brokers:
        b.start_heartbeats()
    await async_wait_until(lambda: all(b.last_heartbeat and b.last_heartbeat.code == RC.SUCCESS for b in brokers),
                           10, "every driver heartbeats")
    first = await brokers[0].elect()
    assert first.code == RC.SUCCESS, first.remark
    assert first.ext["masterBrokerId"] == "1" and first.ext["masterEpoch"] == "1"
    resp = await brokers[0].alter(set(sss), master_epoch=1, sss_epoch=1)
    assert resp.code == RC.SUCCESS, resp.remark
    return brokers


async def wait_master(driver: BrokerDriver, broker_id: int, timeout_s: float = 15):
    async def elected():
        resp, body = await driver.replica_info()
        return (resp, body) if resp.code == RC.SUCCESS and resp.ext.get("masterBrokerId") == str(broker_id) else None

    return await async_wait_until(elected, timeout_s, f"brokerId {broker_id} becomes master", 0.1)


async def test_a_silent_master_is_replaced_from_the_sync_state_set(controllers):
    await one_active(controllers)
    b1, b2, b3 = await group_of_three(controllers)
    try:
        b2.epoch, b2.max_offset = 1, 500
        b3.epoch, b3.max_offset = 1, 10_000  # further ahead, but outside the SyncStateSet: never eligible
        await b1.stop_heartbeats()  # silent, connection still open: the heartbeat timeout and the scan find it
        resp, body = await wait_master(b2, 2)
        assert resp.ext["masterEpoch"] == "2" and resp.ext["masterAddress"] == b2.address
        assert body == {"syncStateSet": [2], "syncStateSetEpoch": 3}
        for b in (b2, b3):  # the live members are told (notifyBrokerRoleChanged), not only left to poll
            await async_wait_until(lambda b=b: any(n.get("masterBrokerId") == "2" and n.get("masterEpoch") == "2"
                                                   for n in b.notified), 5, f"{b.address} notified of the change")
        # the deposed master's view is stale: its SyncStateSet change is fenced by the new masterEpoch
        stale = await b1.alter({1, 2}, master_epoch=1, sss_epoch=2)
        assert stale.code == RC.CONTROLLER_FENCED_MASTER_EPOCH
        # the new master grows the set with its epochs; a member outside it is still never elected
        assert (await b2.alter({2, 3}, master_epoch=2, sss_epoch=3)).code == RC.SUCCESS
        active = (await active_of(controllers))[0]
        assert 'rocketmq_controller_elections_total{broker_name="broker-a"' in scrape(active.metrics_port)
    finally:
        for b in (b1, b2, b3):
            await b.close()


async def test_no_sync_state_set_member_alive_means_no_master_not_an_unclean_one(controllers):
    await one_active(controllers)
    b1, b2, b3 = await group_of_three(controllers, sss=(1, 2))
    try:
        await b2.close()
        await b1.stop_heartbeats()

        async def cleared():
            resp, _ = await b3.replica_info()
            return resp if resp.code == RC.SUCCESS and resp.ext.get("masterBrokerId") == "" else None

        resp = await async_wait_until(cleared, 15, "the master is cleared", 0.1)
        assert resp.ext["masterEpoch"] == "2"  # the deposed master is fenced; b3 (alive, outside the set) is not master
        refused = await b3.elect(3, designate=True)
        assert refused.code == RC.CONTROLLER_ELECT_MASTER_FAILED and "cannot be elected" in refused.remark
        b1.start_heartbeats()  # a member of the set comes back: it is elected again
        resp, _ = await wait_master(b3, 1)
        assert resp.ext["masterEpoch"] == "3"
    finally:
        for b in (b1, b2, b3):
            await b.close()


@pytest.mark.parametrize("controller_conf", [{"scanNotActiveBrokerInterval": 60_000}])
async def test_a_closed_master_connection_elects_at_once_only_under_all_ack(controllers):
    await one_active(controllers)
    # a 60 s heartbeat timeout and a 60 s scan: only the channel-close path can elect within the waits below
    b1, b2, b3 = await group_of_three(controllers, timeout_ms=60_000)
    try:
        # a master that did not declare allAckInSyncStateSet may still answer SEND_OK on its lease (the reset may
        # not have reached it): its closed connection elects nobody before its heartbeat timeout
        await b1.close()
        await asyncio.sleep(1.5)
        info = await b2.call(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "broker-a"})
        assert info.ext["masterBrokerId"] == "1" and info.ext["masterEpoch"] == "1", info.ext
        assert info.ext["electUncleanMaster"] == "false"
        # back, now declaring allAck: a member it needs an ack from can only be elected once it stopped acking
        b1.reopen()
        b1.all_ack = True
        assert (await b1.heartbeat()).code == RC.SUCCESS
        await b1.close()
        resp, _ = await wait_master(b2, 2, timeout_s=10)
        assert resp.ext["masterEpoch"] == "2"
    finally:
        for b in (b1, b2, b3):
            await b.close()


async def test_designated_switchover_and_bad_input(controllers):
    await one_active(controllers)
    b1, b2, b3 = await group_of_three(controllers)
    try:
        switched = await b1.elect(2, designate=True)
        assert switched.code == RC.SUCCESS and switched.ext["masterBrokerId"] == "2", switched.remark
        assert (await b1.elect(3, designate=True)).code == RC.CONTROLLER_ELECT_MASTER_FAILED
        # a heartbeat with an id the broker does not hold, or from another address, never counts
        stranger = BrokerDriver(b1.controllers, "c", "broker-a", "127.0.0.1:1")
        stranger.broker_id = 9
        assert (await stranger.heartbeat()).code == RC.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED
        stranger.broker_id = 3
        assert (await stranger.heartbeat()).code == RC.CONTROLLER_INVALID_REQUEST
        await stranger.close()
        # an id taken by another broker cannot be applied for
        resp = await b1.call(RequestCode.CONTROLLER_APPLY_BROKER_ID, {
            "clusterName": "c", "brokerName": "broker-a", "appliedBrokerId": "2", "registerCheckCode": "x:1;1"})
        assert resp.code == RC.CONTROLLER_BROKER_ID_INVALID
        data = await b1.call(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=b'["broker-a"]')
        assert data.code == RC.SUCCESS and b'"masterBrokerId":2' in data.body_bytes()
        # names that would escape the group's etcd key, and bodies of the wrong shape, are refused as such
        bad = await b1.call(RequestCode.CONTROLLER_GET_NEXT_BROKER_ID, {"clusterName": "c", "brokerName": "a/../b"})
        assert bad.code == RC.INVALID_PARAMETER and "etcd key" in bad.remark
        bad = await b1.call(RequestCode.CONTROLLER_GET_SYNC_STATE_DATA, body=b'{"x": 1}')
        assert bad.code == RC.INVALID_PARAMETER and "JSON list of brokerNames" in bad.remark
        bad = await b2.call(RequestCode.CONTROLLER_ALTER_SYNC_STATE_SET,
                            {"brokerName": "broker-a", "masterBrokerId": "2", "masterEpoch": "2"}, b"[1]")
        assert bad.code == RC.INVALID_PARAMETER and "syncStateSetEpoch" in bad.remark
    finally:
        for b in (b1, b2, b3):
            await b.close()


async def test_etcd_majority_loss_elects_nothing_and_says_why(controllers, etcd):
    await one_active(controllers)
    b1, b2, b3 = await group_of_three(controllers)
    try:
        etcd.kill()  # a one-member etcd: its majority is gone

        async def refused():
            resp = await b2.call(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "broker-a"})
            return resp if resp.code == RC.CONTROLLER_NOT_LEADER and "etcd" in (resp.remark or "") else None

        resp = await async_wait_until(refused, 15, "the controllers say etcd is gone", 0.2)
        assert "nothing is elected" in resp.remark
        await b1.stop_heartbeats()  # the master goes silent while etcd is down: nobody may act on it
        await asyncio.sleep(0)
        assert (await b2.elect(2, designate=True)).code == RC.CONTROLLER_NOT_LEADER
        b1.start_heartbeats()
        await asyncio.to_thread(etcd.start)
        await one_active(controllers)
        resp, body = await wait_master(b2, 1)  # the same master, the same epochs: nothing was elected
        assert resp.ext["masterEpoch"] == "1" and body == {"syncStateSet": [1, 2], "syncStateSetEpoch": 2}
    finally:
        for b in (b1, b2, b3):
            await b.close()


async def test_the_controller_client_follows_the_active_one_and_types_the_answers(controllers):
    active = await one_active(controllers)
    standby = next(c for c in controllers if c is not active)
    client = ControllerClient([standby.addr, active.addr])  # the standby first: the client must be redirected
    try:
        broker_id = await client.next_broker_id("c", "broker-b")
        assert broker_id == 1 and client.active == active.addr
        await client.apply_broker_id("c", "broker-b", 1, "127.0.0.1:20911;1")
        info = await client.register("c", "broker-b", 1, "127.0.0.1:20911")
        assert info.master_broker_id is None and info.master_epoch == 0
        await client.heartbeat("c", "broker-b", "127.0.0.1:20911", 1, timeout_ms=60_000)
        code, _, info = await client.elect("c", "broker-b", 1)
        assert code == RC.SUCCESS and info.master_broker_id == 1 and info.sync_state_set == {1}
        assert await client.replica_info("broker-b") == info
        with pytest.raises(ControllerError) as refused:
            await client.alter_sync_state_set("broker-b", 1, 0, {1}, info.sync_state_set_epoch)
        assert refused.value.code == RC.CONTROLLER_FENCED_MASTER_EPOCH and "stale" in refused.value.remark
        assert await client.alter_sync_state_set("broker-b", 1, 1, {1}, 1) == ({1}, 1)
        assert (await client.metadata(standby.addr))["controllerLeaderAddress"] == active.addr
    finally:
        await client.close()


async def test_the_controller_runs_inside_the_nameserver(tmp_path, etcd):
    """enableControllerInNamesrv: the controller's codes on the nameserver's port, its series on its page."""
    with Namesrv(tmp_path / "ns", enableControllerInNamesrv=True, controllerStoreEtcdEndpoints=etcd.endpoint,
                 controllerInstanceId="ns-controller", **FAST) as ns:
        assert (await one_active([ns])) is ns
        meta = await metadata(ns.addr)
        assert meta["controllerLeaderId"] == "ns-controller" and meta["controllerLeaderAddress"] == ns.addr
        client = ControllerClient([ns.addr])
        try:
            assert await client.next_broker_id("c", "broker-a") == 1
            await client.apply_broker_id("c", "broker-a", 1, "127.0.0.1:30911;1")
            await client.register("c", "broker-a", 1, "127.0.0.1:30911")
            # the nameserver's own requests still work on the same port
            resp = await client.client.invoke(ns.addr, RemotingCommand(RequestCode.GET_BROKER_CLUSTER_INFO), 3)
            assert resp.code == RC.SUCCESS
        finally:
            await client.close()
        page = scrape(ns.metrics_port)
        assert 'rocketmq_controller_active{node_id="ns-controller",node_type="controller"} 1.0' in page
        assert "rocketmq_namesrv_live_brokers" in page


@pytest.mark.parametrize("controller_conf", [{"controllerHeartBeatTimeoutMills": 60_000}])
async def test_a_newly_active_controller_never_clears_a_master_it_has_not_heard_from_yet(controllers):
    active = await one_active(controllers)
    b1, b2, b3 = await group_of_three(controllers)
    try:
        for b in (b1, b2, b3):
            await b.stop_heartbeats()
        active.kill()
        standby = await one_active([c for c in controllers if c is not active])
        # the new active instance has heard from nobody yet: "no live candidate" is not a fact it knows
        resp = await b2.call(RequestCode.CONTROLLER_ELECT_MASTER, {
            "clusterName": "c", "brokerName": "broker-a", "brokerId": "2", "designateElect": "false"},
            addr=standby.addr)
        assert resp.code == RC.CONTROLLER_MASTER_NOT_AVAILABLE and "not applied" in resp.remark
        resp, body = await b2.replica_info()
        assert resp.ext["masterBrokerId"] == "1" and resp.ext["masterEpoch"] == "1"
        # a live member of the set is still promoted at once
        await b2.heartbeat()
        assert (await b2.elect()).ext["masterBrokerId"] == "2"
    finally:
        for b in (b1, b2, b3):
            await b.close()


async def test_etcd_unreachable_at_start_then_a_second_endpoint(tmp_path, etcd):
    dead = f"127.0.0.1:{free_port()}"
    alone = Controller(tmp_path / "alone", dead, name="alone", **FAST).start()  # boots without etcd and says so
    try:
        driver = BrokerDriver([alone.addr], "c", "broker-a", "127.0.0.1:10911")

        async def says_etcd_is_unreachable():  # once its first campaign against etcd failed (under load: a moment)
            resp = await driver.call(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "broker-a"})
            assert resp.code == RC.CONTROLLER_NOT_LEADER
            return dead in resp.remark and "majority" in resp.remark

        await async_wait_until(says_etcd_is_unreachable, 15, "the controller to say which etcd it cannot reach", 0.2)
        await driver.close()
    finally:
        alone.stop()
    # an unreachable endpoint first in the list: the next call goes to the next one
    both = Controller(tmp_path / "both", f"{dead};{etcd.endpoint}", name="both", **FAST).start()
    try:
        assert await one_active([both]) is both
    finally:
        both.stop()


async def test_an_etcd_that_stops_answering_makes_the_active_controller_step_down(controllers, etcd):
    await one_active(controllers)
    b1, b2, b3 = await group_of_three(controllers)
    try:
        etcd.pause()  # connections stay open, nothing answers: every call ends at etcdRequestTimeoutMillis

        async def refused():
            resp = await b2.call(RequestCode.CONTROLLER_GET_REPLICA_INFO, {"brokerName": "broker-a"})
            return resp if resp.code == RC.CONTROLLER_NOT_LEADER and "etcd" in (resp.remark or "") else None

        await async_wait_until(refused, 20, "the controllers step down and say etcd does not answer", 0.2)
        assert await active_of(controllers) == []
        etcd.resume()
        await one_active(controllers)
        resp, body = await wait_master(b2, 1)
        assert resp.ext["masterEpoch"] == "1" and body == {"syncStateSet": [1, 2], "syncStateSetEpoch": 2}
    finally:
        etcd.resume()
        for b in (b1, b2, b3):
            await b.close()
