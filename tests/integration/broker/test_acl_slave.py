"""ACL 2.0 on a master and its slave (both checking): the slave's metadata sync signs with
innerClientAuthenticationCredentials and gets through the master's check; ``mqctl createUser -c`` reaches both
brokers, and the user's pull is authorized on the slave."""

from __future__ import annotations

import asyncio
import json

import pytest

from client import AdminClient
from client import acl_admin
from harness.procs import Namesrv
from harness.waiting import wait_until
from remoting.acl_signature import signer
from remoting.codes import RequestCode, ResponseCode
from tests.brokers import master_and_slave
from tests.integration.broker.rpc import BrokerClient

pytestmark = pytest.mark.integration

ROOT, ROOT_PW = "root", "root-secret-3"
AUTH = {
    "authenticationEnabled": "true", "authorizationEnabled": "true",
    "initAuthenticationUser": json.dumps({"username": ROOT, "password": ROOT_PW}),
    "innerClientAuthenticationCredentials": json.dumps({"accessKey": "inner", "secretKey": "inner-secret-4"}),
    "slaveSynchronizeInterval": 500,
}


def topics_on(addr: str) -> set[str]:
    async def ask() -> set[str]:
        client = BrokerClient(addr)
        client.remoting.signer = signer(ROOT, ROOT_PW)
        async with client:
            response = await client.request(RequestCode.GET_ALL_TOPIC_CONFIG)
        assert response.code == ResponseCode.SUCCESS, response.remark
        return set(json.loads(response.body_bytes())["topicConfigTable"])
    return asyncio.run(ask())


def test_the_slave_syncs_through_the_masters_check_and_mqctl_reaches_both(tmp_path):
    from tests.integration.ctl.cli import mqctl

    with Namesrv(tmp_path / "ns") as ns, master_and_slave(tmp_path, ns.addr, "broker-acl-ms", **AUTH) as (m, s):
        async def create_topic() -> None:
            async with AdminClient(ns.addr, credentials=(ROOT, ROOT_PW)) as admin:
                await admin.update_topic(m.addr, "AclReplicated", read_queue_nums=1, write_queue_nums=1)
        asyncio.run(create_topic())
        wait_until(lambda: "AclReplicated" in topics_on(s.addr), 20, "the slave to sync the topic from its master")
        assert "refused" not in m.log_path.read_text(errors="replace")  # the slave's sync was signed

        env = {"MQCTL_ACCESS_KEY": ROOT, "MQCTL_SECRET_KEY": ROOT_PW, "NAMESRV_ADDR": ns.addr}
        wait_until(lambda: mqctl("listUser", "-c", "DefaultCluster", "--json", env=env).output.count(ROOT) == 2,
                   20, "both brokers to be routed")
        for args in (["createUser", "-u", "frank", "-p", "frank-pw-5"],
                     ["createAcl", "-s", "User:frank", "-r", "Topic:AclReplicated,Group:g-frank", "-a", "Sub"]):
            result = mqctl(*args, "-c", "DefaultCluster", env=env)
            assert result.exit_code == 0, result.output
            assert m.addr in result.output and s.addr in result.output

        async def frank_pulls_from_the_slave() -> int:
            client = BrokerClient(s.addr)
            client.remoting.signer = signer("frank", "frank-pw-5")
            async with client:
                return (await client.pull("g-frank", "AclReplicated", 0, 0)).code
        assert asyncio.run(frank_pulls_from_the_slave()) != ResponseCode.NO_PERMISSION
