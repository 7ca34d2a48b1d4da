"""mqctl against a real controller-mode group (one etcd, a nameserver running the controller, three brokers):
getControllerMetaData, getSyncStateSet, getBrokerEpoch, clusterList and haStatus show the controller, the
masterEpoch and the SyncStateSet; electMaster moves the master to a designated SyncStateSet member, which answers
SYNC sends with SEND_OK and holds every message acknowledged before; a broker outside the SyncStateSet is refused
with the members that could be elected; with etcd gone the commands say that etcd is the problem."""

from __future__ import annotations

import asyncio

import pytest

from client import Message, Producer, SendStatus
from harness.controller_mode import drain, group_of_three, replica_info, sync_state_set_is
from harness.metrics_page import first_sample
from harness.waiting import async_wait_until
from tests.integration.ctl.cli import fails, mqctl, ok, ok_json

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(240)]

GROUP = "broker-a"
TOPIC = "MqctlControllerTopic"


async def run(*args: str):
    """mqctl runs its own event loop: call it from a thread."""
    return await asyncio.to_thread(ok, *args)


async def run_json(*args: str):
    return await asyncio.to_thread(ok_json, *args)


async def run_fails(*args: str) -> str:
    return await asyncio.to_thread(fails, *args)


async def pulled_ids(ns, queues: int) -> set[str]:
    return {r.id for r in await drain(ns.addr, TOPIC, GROUP, queues)}


async def test_mqctl_controller_commands_and_a_designated_switchover(tmp_path, cns, etcd):
    ns = cns.addr
    async with group_of_three(tmp_path, cns, GROUP, join_timeout_s=30, haMaxTimeSlaveNotCatchup=1500) as brokers:
        producer = None
        try:

            # getControllerMetaData: -a defaults to the nameserver, where the controller is embedded
            meta = await run_json("getControllerMetaData", "-n", ns)
            assert meta[0]["isLeader"] is True and meta[0]["controllerLeaderId"] == "ns-controller", meta
            text = (await run("getControllerMetaData", "-a", ns)).stdout
            assert "#ControllerLeaderAddress" in text and "#IsLeader\ttrue" in text, text

            # getSyncStateSet: master 1 at masterEpoch 1, every broker in the set
            [group] = await run_json("getSyncStateSet", "-n", ns, "-b", GROUP)
            assert group["masterBrokerId"] == 1 and group["masterEpoch"] == 1, group
            assert group["syncStateSet"] == [1, 2, 3] and group["masterAddress"] == brokers[0].addr, group
            text = (await run("getSyncStateSet", "-a", ns, "-b", GROUP)).stdout
            assert "#MasterEpoch\t1" in text and "#SyncStateSet\t[1, 2, 3]" in text, text
            unknown = await run_fails("getSyncStateSet", "-n", ns, "-b", "no-such-group")
            assert "knows no broker group no-such-group" in unknown and "clusterList" in unknown, unknown

            # clusterList and haStatus: the controller, the masterEpoch and the SyncStateSet
            listing = await run_json("clusterList", "-n", ns)
            assert listing["controller"]["activeId"] == "ns-controller", listing
            assert listing["controller"]["groups"][GROUP]["syncStateSet"] == [1, 2, 3], listing
            rows = {r["addr"]: r for r in listing["brokers"]}
            assert {r["controllerBrokerId"] for r in rows.values()} == {1, 2, 3}, rows
            assert all(r["masterEpoch"] == 1 and r["inSyncStateSet"] is True for r in rows.values()), rows
            text = (await run("clusterList", "-n", ns)).stdout
            assert "#MasterEpoch" in text and "#Controller" in text and "SyncStateSet [1, 2, 3]" in text, text
            text = (await run("haStatus", "-n", ns, "-c", "DefaultCluster")).stdout
            assert "#MasterEpoch 1" in text and "#SyncStateSet [1, 2, 3]" in text and "#InSyncStateSet" in text, text

            # getBrokerEpoch: every broker of the group, slaves included
            epochs = await run_json("getBrokerEpoch", "-n", ns, "-b", GROUP)
            assert len(epochs) == 3 and all("error" not in e for e in epochs), epochs
            assert all(e["epochList"][0]["epoch"] == 1 for e in epochs), epochs

            producer = await Producer("mqctl-producer", ns, send_timeout_s=8.0).start()
            await asyncio.to_thread(ok, "updateTopic", "-n", ns, "-b", brokers[0].addr, "-t", TOPIC,
                                    "-r", "2", "-w", "2")
            acked: list[str] = []
            for i in range(30):
                result = await producer.send(Message(TOPIC, f"before-{i}".encode()))
                assert result.status is SendStatus.SEND_OK, result
                acked.append(f"before-{i}")

            # a designated switchover to brokerId 2: the nameserver routes to it, SYNC sends get SEND_OK from it
            elected = await run_json("electMaster", "-n", ns, "-b", GROUP, "-i", "2")
            assert elected["masterBrokerId"] == 2 and elected["masterEpoch"] == 2, elected
            assert elected["masterAddress"] == brokers[1].addr and elected["routed"] is True, elected
            # the producer's cached route may still name the old master, which no longer confirms: its answer is not
            # SEND_OK (nothing acknowledged is lost), and the producer moves on once its route follows
            tries = iter(range(1000))

            async def send_ok() -> bool:
                ident = f"switch-{next(tries)}"
                ok_now = (await producer.send(Message(TOPIC, ident.encode()))).status is SendStatus.SEND_OK
                if ok_now:
                    acked.append(ident)
                return ok_now

            await async_wait_until(send_ok, 30, "a SEND_OK after the switchover", 0.05)
            for i in range(30):
                result = await producer.send(Message(TOPIC, f"after-{i}".encode()))
                assert result.status is SendStatus.SEND_OK, result
                acked.append(f"after-{i}")
            info = await replica_info(cns, GROUP)
            assert info.master_broker_id == 2 and info.master_epoch == 2, info
            assert set(acked) <= await pulled_ids(cns, 2)
            epochs = {e["brokerAddr"]: e for e in await run_json("getBrokerEpoch", "-n", ns, "-b", GROUP)}
            assert [e["epoch"] for e in epochs[brokers[1].addr]["epochList"]] == [1, 2], epochs

            # metrics: the new master follows masterEpoch 2 after one switch to MASTER; the controller counted the
            # elections and the group has a master
            port = brokers[1].metrics_port
            epoch = "rocketmq_controller_master_epoch"
            await async_wait_until(lambda: first_sample(port, epoch) == 2, 20,
                                   lambda: f"masterEpoch on the new master: {first_sample(port, epoch)}")
            assert first_sample(port, "rocketmq_role_changes_total", to_role="MASTER") == 1
            assert first_sample(port, "rocketmq_sync_state_set_size") >= 1
            assert first_sample(port, "rocketmq_fenced_sends_total") == 0
            assert first_sample(brokers[0].metrics_port, "rocketmq_controller_master_epoch") == 2
            assert first_sample(cns.metrics_port, "rocketmq_controller_elections_total", broker_name=GROUP,
                          result="elected") == 2
            assert first_sample(cns.metrics_port, "rocketmq_controller_seconds_without_master", broker_name=GROUP) == 0

            # a broker outside the SyncStateSet is refused, with the members that could be elected
            await async_wait_until(sync_state_set_is(cns, GROUP, {1, 2, 3}), 30, "the group is whole again")
            brokers[2].pause()
            await async_wait_until(sync_state_set_is(cns, GROUP, {1, 2}), 30, "the paused slave leaves the set")
            refused = await run_fails("electMaster", "-n", ns, "-b", GROUP, "-i", "3")
            assert "brokerId 3 of broker-a cannot be elected" in refused and "eligible now are" in refused, refused
            assert (await replica_info(cns, GROUP)).master_broker_id == 2
            brokers[2].resume()
            assert first_sample(cns.metrics_port, "rocketmq_controller_elections_total", broker_name=GROUP,
                          result="refused") == 1

            # every broker gone: the controller counts the time the group has no live master
            for b in brokers:
                b.kill()
            without = "rocketmq_controller_seconds_without_master"
            await async_wait_until(lambda: (first_sample(cns.metrics_port, without, broker_name=GROUP) or 0) > 0.5, 20,
                                   f"{without} stays 0 with every broker dead")

            # etcd gone: the commands say so
            etcd.stop()

            def says_etcd() -> bool:
                result = mqctl("getSyncStateSet", "-n", ns, "-b", GROUP)
                return result.exit_code == 1 and "etcd" in result.stderr

            await async_wait_until(lambda: asyncio.to_thread(says_etcd), 30, "an error that names etcd")
        finally:
            if producer is not None:
                await producer.stop()
