"""PUT_KV_CONFIG under a storm (issue 22 item 4): before, every put rewrote the whole kvConfig.json (19,800 puts took
over 20 minutes and made a 20 MB file) and nothing bounded the entries. Now puts that arrive together share one write,
each is on disk before its answer (a SIGKILL right after loses none), and new keys beyond ``maxKvConfigEntries`` /
``maxKvConfigEntriesPerNamespace`` are refused with a remark that says what to do."""

from __future__ import annotations

import asyncio
import json

import pytest

from harness.metrics_page import first_sample
from harness.procs import Namesrv
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from tests.integration.namesrv.conftest import request

pytestmark = pytest.mark.integration

PUTS = 2000
CHUNK = 500  # puts in flight at once on the one connection


def metric(ns: Namesrv, name: str) -> float | None:
    return first_sample(ns.metrics_port, name, timeout_s=30)


async def put(client, addr, namespace, key, value="v"):
    return await request(client, addr, RequestCode.PUT_KV_CONFIG, {"namespace": namespace, "key": key, "value": value})


async def test_a_put_storm_shares_writes_and_every_answered_put_survives_a_sigkill(tmp_path):
    kv_path = tmp_path / "kvConfig.json"
    ns = Namesrv(tmp_path, kvConfigPath=kv_path).start()
    client = RemotingClient()
    try:
        writes_before = metric(ns, "rocketmq_namesrv_kv_config_persists_total")
        assert writes_before is not None, "the nameserver exports no rocketmq_namesrv_kv_config_persists_total"
        for start in range(0, PUTS, CHUNK):
            replies = await asyncio.gather(
                *(put(client, ns.addr, "StormNs", f"key-{i}", "x" * 100) for i in range(start, start + CHUNK))
            )
            assert {r.code for r in replies} == {ResponseCode.SUCCESS}
        writes = metric(ns, "rocketmq_namesrv_kv_config_persists_total") - writes_before
        assert 1 <= writes <= PUTS // 20, f"{writes} writes for {PUTS} puts"
        assert metric(ns, "rocketmq_namesrv_kv_config_entries") == PUTS

        ns.kill()  # right after the last answer: every answered put is on disk
        assert len(json.loads(kv_path.read_text())["configTable"]["StormNs"]) == PUTS
        ns.start()
        await client.close()
        client = RemotingClient()
        last = {"namespace": "StormNs", "key": f"key-{PUTS - 1}"}
        got = await request(client, ns.addr, RequestCode.GET_KV_CONFIG, last)
        assert (got.code, got.ext["value"]) == (ResponseCode.SUCCESS, "x" * 100)
    finally:
        await client.close()
        ns.stop()


async def test_new_keys_beyond_the_limits_are_refused_and_a_delete_makes_room(tmp_path):
    ns = Namesrv(tmp_path, maxKvConfigEntries=6, maxKvConfigEntriesPerNamespace=4).start()
    client = RemotingClient()
    try:
        for i in range(4):
            assert (await put(client, ns.addr, "A", f"k{i}")).code == ResponseCode.SUCCESS
        full_ns = await put(client, ns.addr, "A", "k4")
        assert full_ns.code == ResponseCode.SYSTEM_ERROR
        assert "maxKvConfigEntriesPerNamespace=4" in full_ns.remark and "deleteKvConfig" in full_ns.remark
        assert (await put(client, ns.addr, "A", "k0", "new value")).code == ResponseCode.SUCCESS  # a replace fits

        for i in range(2):
            assert (await put(client, ns.addr, "B", f"k{i}")).code == ResponseCode.SUCCESS
        full = await put(client, ns.addr, "C", "k0")
        assert full.code == ResponseCode.SYSTEM_ERROR and "maxKvConfigEntries=6" in full.remark
        missing = await request(client, ns.addr, RequestCode.GET_KV_CONFIG, {"namespace": "C", "key": "k0"})
        assert missing.code == ResponseCode.QUERY_NOT_FOUND
        assert metric(ns, "rocketmq_namesrv_kv_config_refusals_total") == 2

        deleted = await request(client, ns.addr, RequestCode.DELETE_KV_CONFIG, {"namespace": "B", "key": "k0"})
        assert deleted.code == ResponseCode.SUCCESS
        assert (await put(client, ns.addr, "C", "k0")).code == ResponseCode.SUCCESS

        await client.close()
        assert ns.stop() == 0
        ns.start()
        client = RemotingClient()
        assert (await put(client, ns.addr, "D", "k0")).code == ResponseCode.SYSTEM_ERROR  # the count came back too
        got = await request(client, ns.addr, RequestCode.GET_KV_CONFIG, {"namespace": "A", "key": "k0"})
        assert got.ext["value"] == "new value"
    finally:
        await client.close()
        ns.stop()
