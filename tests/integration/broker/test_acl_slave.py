"""ACL 2.0 on a nameserver, a master and its slave (all checking): registration and the slave's metadata sync sign
with innerClientAuthenticationCredentials and get through the checks; ``mqctl createUser -c`` reaches all three; the
user's route query and pull are authorized, an unsigned route query is refused."""

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
from remoting.frame_codec import RemotingCommand
from tests.brokers import master_and_slave
from tests.integration.broker.rpc import BrokerClient

pytestmark = pytest.mark.integration

ROOT, ROOT_PW = "root", "root-secret-3"
AUTH = {
    "authenticationEnabled": "true", "authorizationEnabled": "true",
    "initAuthenticationUser": json.dumps({"username": ROOT, "password": ROOT_PW}),
    "innerClientAuthenticationCredentials": json.dumps({"accessKey": "inner", "secretKey": "inner-secret-4"}),
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

    with (Namesrv(tmp_path / "ns", **AUTH) as ns,
          master_and_slave(tmp_path, ns.addr, "broker-acl-ms", slaveSynchronizeInterval=500, **AUTH) as (m, s)):
        async def create_topic() -> None:
            async with AdminClient(ns.addr, credentials=(ROOT, ROOT_PW)) as admin:
                await admin.update_topic(m.addr, "AclReplicated", read_queue_nums=1, write_queue_nums=1)
        asyncio.run(create_topic())
        wait_until(lambda: "AclReplicated" in topics_on(s.addr), 20, "the slave to sync the topic from its master")
        assert "refused" not in m.log_path.read_text(errors="replace")  # the slave's sync was signed

        env = {"MQCTL_ACCESS_KEY": ROOT, "MQCTL_SECRET_KEY": ROOT_PW, "NAMESRV_ADDR": ns.addr}
        wait_until(lambda: mqctl("listUser", "-c", "DefaultCluster", "--json", env=env).output.count(ROOT) == 3,
                   20, "both brokers to be routed (their registrations are signed)")
        for args in (["createUser", "-u", "frank", "-p", "frank-pw-5"],
                     ["createAcl", "-s", "User:frank", "-r", "Topic:AclReplicated,Group:g-frank", "-a", "Sub"]):
            result = mqctl(*args, "-c", "DefaultCluster", env=env)
            assert result.exit_code == 0, result.output
            assert m.addr in result.output and s.addr in result.output and ns.addr in result.output

        async def frank_pulls_from_the_slave() -> int:
            client = BrokerClient(s.addr)
            client.remoting.signer = signer("frank", "frank-pw-5")
            async with client:
                return (await client.pull("g-frank", "AclReplicated", 0, 0)).code
        assert asyncio.run(frank_pulls_from_the_slave()) != ResponseCode.NO_PERMISSION

        async def route_query(access_key: str | None, secret_key: str = "") -> RemotingCommand:
            client = BrokerClient(ns.addr)
            if access_key:
                client.remoting.signer = signer(access_key, secret_key)
            async with client:
                return await client.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "AclReplicated"})
        assert asyncio.run(route_query("frank", "frank-pw-5")).code == ResponseCode.SUCCESS
        refused = asyncio.run(route_query(None))
        assert refused.code == ResponseCode.NO_PERMISSION and "not signed" in refused.remark
        refused = asyncio.run(route_query("nobody", "x"))
        assert refused.code == ResponseCode.NO_PERMISSION and "no user 'nobody'" in refused.remark
