"""ACL 2.0 on a nameserver, a master and its slave (all checking): registration and the slave's metadata sync sign
with innerClientAuthenticationCredentials and get through the checks; ``mqctl createUser -c`` reaches the nameserver
and the master, and the slave copies it; the
user's route query and pull are authorized, an unsigned route query is refused."""

from __future__ import annotations

import asyncio
import json

import pytest

from client import AdminClient
from client import acl_admin
from harness.procs import Namesrv
from harness.waiting import wait_until
from remoting.codes import RequestCode, ResponseCode
from remoting.frame_codec import RemotingCommand
from tests.brokers import acl_conf, master_and_slave
from tests.integration.broker.rpc import BrokerClient

pytestmark = pytest.mark.integration

ROOT, ROOT_PW = "root", "root-secret-3"
AUTH = acl_conf(ROOT, ROOT_PW, inner=("inner", "inner-secret-4"))


def topics_on(addr: str) -> set[str]:
    async def ask() -> set[str]:
        async with BrokerClient(addr, credentials=(ROOT, ROOT_PW)) as client:
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
            assert m.addr in result.output and ns.addr in result.output
            assert s.addr not in result.output  # a change goes to the masters: the slave copies it from its master
        wait_until(lambda: mqctl("getUser", "-u", "frank", "-b", s.addr, env=env).exit_code == 0, 10,
                   "the slave to take frank from its master")

        async def frank_pulls_from_the_slave() -> int:
            async with BrokerClient(s.addr, credentials=("frank", "frank-pw-5")) as client:
                return (await client.pull("g-frank", "AclReplicated", 0, 0)).code
        assert asyncio.run(frank_pulls_from_the_slave()) != ResponseCode.NO_PERMISSION

        async def route_query(access_key: str | None, secret_key: str = "") -> RemotingCommand:
            async with BrokerClient(ns.addr, credentials=(access_key, secret_key) if access_key else None) as client:
                return await client.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "AclReplicated"})
        assert asyncio.run(route_query("frank", "frank-pw-5")).code == ResponseCode.SUCCESS
        refused = asyncio.run(route_query(None))
        assert refused.code == ResponseCode.NO_PERMISSION and "not signed" in refused.remark
        refused = asyncio.run(route_query("nobody", "x"))
        assert refused.code == ResponseCode.NO_PERMISSION and "no user 'nobody'" in refused.remark


def test_users_made_on_the_master_alone_reach_the_slave_by_its_sync_and_survive_its_restart(tmp_path):
    """A user and ACL created on the master only (``-b``) are copied by the slave's metadata sync within seconds and
    checked there; a deleted ACL stops working on the slave too; the slave keeps its copy across a restart while the
    master is down; the master's start-up offset pull from the slave is signed and gets through the slave's check."""
    def pull_code(addr: str, access_key: str, secret_key: str) -> int:
        async def pull() -> int:
            async with BrokerClient(addr, credentials=(access_key, secret_key)) as client:
                return (await client.pull("g-gina", "AclCopied", 0, 0)).code
        return asyncio.run(pull())

    async def manage(addr: str, ns_addr: str, call) -> None:
        async with AdminClient(ns_addr, credentials=(ROOT, ROOT_PW)) as admin:
            await call(admin, addr)

    with (Namesrv(tmp_path / "ns", **AUTH) as ns,
          master_and_slave(tmp_path, ns.addr, "broker-acl-copy", slaveSynchronizeInterval=500, **AUTH) as (m, s)):
        asyncio.run(manage(m.addr, ns.addr, lambda admin, addr: admin.update_topic(
            addr, "AclCopied", read_queue_nums=1, write_queue_nums=1)))
        wait_until(lambda: "AclCopied" in topics_on(s.addr), 20, "the slave to sync the topic")
        assert pull_code(s.addr, "gina", "gina-pw-6") == ResponseCode.NO_PERMISSION

        async def create(admin, addr):
            await acl_admin.create_user(admin, addr, acl_admin.user_info("gina", "gina-pw-6", "Normal"))
            await acl_admin.create_acl(admin, addr, acl_admin.acl_info(
                "User:gina", ["Topic:AclCopied", "Group:g-gina"], ["Sub"]))
        asyncio.run(manage(m.addr, ns.addr, create))  # the master only
        wait_until(lambda: pull_code(s.addr, "gina", "gina-pw-6") != ResponseCode.NO_PERMISSION, 10,
                   "the slave to take gina and her ACL from its master")
        assert "took 2 users and 1 ACLs from master" in s.log_path.read_text(errors="replace")
        assert "gina-pw-6" not in s.log_path.read_text(errors="replace") + m.log_path.read_text(errors="replace")

        asyncio.run(manage(m.addr, ns.addr, lambda admin, addr: acl_admin.delete_acl(admin, addr, "User:gina")))
        wait_until(lambda: pull_code(s.addr, "gina", "gina-pw-6") == ResponseCode.NO_PERMISSION, 10,
                   "the slave to drop gina's ACL as its master did")
        asyncio.run(manage(m.addr, ns.addr, lambda admin, addr: acl_admin.create_acl(admin, addr, acl_admin.acl_info(
            "User:gina", ["Topic:AclCopied", "Group:g-gina"], ["Sub"]))))
        wait_until(lambda: pull_code(s.addr, "gina", "gina-pw-6") != ResponseCode.NO_PERMISSION, 10,
                   "the slave to take gina's new ACL")

        s.stop()
        m.stop()
        s.start()  # its master is down: what it checks with is its own copy on disk
        assert pull_code(s.addr, "gina", "gina-pw-6") != ResponseCode.NO_PERMISSION
        assert pull_code(s.addr, "gina", "wrong") == ResponseCode.NO_PERMISSION
        m.start()
        master_log = m.new_output()
        assert "merged consumer offsets from slave" in master_log, master_log[-3000:]
        assert "cannot pull consumer offsets" not in master_log


def test_user_and_acl_changes_reach_the_slave_by_the_masters_push(tmp_path):
    """The slave's periodic round is 10 minutes apart, so only NOTIFY_METADATA_CHANGED (``authChanged``) explains
    a user created, an ACL changed and a user deleted on the master taking effect on the slave within seconds."""
    def pull_code(access_key: str, secret_key: str) -> tuple[int, str]:
        async def pull() -> tuple[int, str]:
            async with BrokerClient(s.addr, credentials=(access_key, secret_key)) as client:
                response = await client.pull("g-hank", "AclPushed", 0, 0)
                return response.code, response.remark or ""
        return asyncio.run(pull())

    async def on_master(call) -> None:
        async with AdminClient(ns.addr, credentials=(ROOT, ROOT_PW)) as admin:
            await call(admin, m.addr)

    allowed = ResponseCode.NO_PERMISSION
    with (Namesrv(tmp_path / "ns", **AUTH) as ns,
          master_and_slave(tmp_path, ns.addr, "broker-acl-push", slaveSynchronizeInterval=600_000, **AUTH) as (m, s)):
        asyncio.run(on_master(lambda admin, addr: admin.update_topic(addr, "AclPushed", read_queue_nums=1,
                                                                     write_queue_nums=1)))
        wait_until(lambda: "AclPushed" in topics_on(s.addr), 10, "the slave to take the topic (pushed)")
        code, remark = pull_code("hank", "hank-pw-7")
        assert code == allowed and "no user 'hank'" in remark, remark

        async def create(admin, addr):
            await acl_admin.create_user(admin, addr, acl_admin.user_info("hank", "hank-pw-7", "Normal"))
            await acl_admin.create_acl(admin, addr, acl_admin.acl_info(
                "User:hank", ["Topic:AclPushed", "Group:g-hank"], ["Sub"]))
        asyncio.run(on_master(create))
        wait_until(lambda: pull_code("hank", "hank-pw-7")[0] != allowed, 5,
                   "the slave to take hank and his ACL from the master's push")

        asyncio.run(on_master(lambda admin, addr: acl_admin.update_acl(admin, addr, acl_admin.acl_info(
            "User:hank", ["Topic:AclPushed"], ["Sub"], decision="Deny"))))
        wait_until(lambda: pull_code("hank", "hank-pw-7")[0] == allowed, 5,
                   "the slave to take hank's Deny from the master's push")

        from tests.integration.ctl.cli import mqctl

        env = {"MQCTL_ACCESS_KEY": ROOT, "MQCTL_SECRET_KEY": ROOT_PW, "NAMESRV_ADDR": ns.addr}
        deleted = mqctl("deleteUser", "-u", "hank", "-c", "DefaultCluster", env=env)  # the nameserver never had him
        assert deleted.exit_code == 0, deleted.output
        assert m.addr in deleted.output and ns.addr in deleted.output and s.addr not in deleted.output
        wait_until(lambda: "no user 'hank'" in pull_code("hank", "hank-pw-7")[1], 5,
                   "the slave to drop hank as its master did")

        async def delete_as_mqadmin_does(addr: str) -> RemotingCommand:
            async with BrokerClient(addr, credentials=(ROOT, ROOT_PW)) as client:
                return await client.request(RequestCode.AUTH_DELETE_USER, {"username": "hank"})
        for addr in (s.addr, m.addr):  # mqadmin deleteUser -c writes to the slaves too, after the push or not
            again = asyncio.run(delete_as_mqadmin_does(addr))
            assert again.code == ResponseCode.SUCCESS, (addr, again.remark)
        slave_log = s.log_path.read_text(errors="replace")
        assert "took" in slave_log and "users and" in slave_log
        assert "hank-pw-7" not in slave_log + m.log_path.read_text(errors="replace")
