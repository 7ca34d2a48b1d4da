"""ACL 2.0 on a real broker process (authenticationEnabled and authorizationEnabled on): signed requests of a user
with the right policy are served; unsigned ones, wrong signatures, disabled users, missing grants and matching
denies are refused with NO_PERMISSION and a remark naming the failed check; the init Super user may do anything,
and a user created over remoting works at once. The broker's log names who was refused and never a secret."""

from __future__ import annotations

import json

import pytest

from client import AdminClient, BrokerError, Message, Producer, SendStatus
from client import acl_admin
from harness.memory_attacks import rss_bytes
from remoting.acl_signature import sign
from remoting.codes import RequestCode, ResponseCode
from tests.brokers import acl_conf, broker_fixture
from tests.integration.broker.rpc import BrokerClient, message

pytestmark = pytest.mark.integration

ROOT, ROOT_PW = "root", "root-secret-1"
ALICE_PW = "alice-secret-2"


@pytest.fixture(scope="module")
def master(tmp_path_factory, namesrv):
    yield from broker_fixture(tmp_path_factory, namesrv, "broker-acl", **acl_conf(ROOT, ROOT_PW))


@pytest.fixture
async def root_admin(namesrv, master):
    async with AdminClient(namesrv.addr, credentials=(ROOT, ROOT_PW)) as admin:
        yield admin


def as_user(addr: str, access_key: str | None, secret_key: str = "") -> BrokerClient:
    return BrokerClient(addr, credentials=None if access_key is None else (access_key, secret_key))


async def test_signed_users_are_served_and_others_refused_by_name_of_the_check(master, root_admin):
    addr = master.addr
    for topic in ("AclOrders", "AclSecret", "AclOther"):
        await root_admin.update_topic(addr, topic, read_queue_nums=1, write_queue_nums=1)
    await acl_admin.create_user(root_admin, addr, acl_admin.user_info("alice", ALICE_PW, "Normal"))
    await acl_admin.create_acl(root_admin, addr, acl_admin.acl_info("User:alice", ["Topic:Acl*"], ["Pub"]))
    await acl_admin.update_acl(root_admin, addr, acl_admin.acl_info("User:alice", ["Topic:AclSecret"], ["Pub"],
                                                                    decision="Deny"))

    async with as_user(addr, "alice", ALICE_PW) as alice:
        sent = await alice.send("AclOrders", 0, [message(b"by alice")])
        assert sent.code == ResponseCode.SUCCESS, sent.remark
        denied = await alice.send("AclSecret", 0, [message(b"denied")])  # deny wins over the Topic:Acl* allow
        assert denied.code == ResponseCode.NO_PERMISSION and "Pub on Topic:AclSecret" in denied.remark
        pulled = await alice.pull("g-alice", "AclOrders", 0, 0)  # no Sub granted
        assert pulled.code == ResponseCode.NO_PERMISSION and "authorization failed" in pulled.remark

    async with as_user(addr, None) as anonymous:
        refused = await anonymous.send("AclOrders", 0, [message(b"unsigned")])
        assert refused.code == ResponseCode.NO_PERMISSION and "not signed" in refused.remark
    async with as_user(addr, "alice", "not-her-secret") as forger:
        refused = await forger.send("AclOrders", 0, [message(b"forged")])
        assert refused.code == ResponseCode.NO_PERMISSION and "signature does not match" in refused.remark
        assert ALICE_PW not in refused.remark
    async with as_user(addr, "mallory", "x") as stranger:
        refused = await stranger.send("AclOrders", 0, [message(b"who")])
        assert refused.code == ResponseCode.NO_PERMISSION and "no user 'mallory'" in refused.remark

    async with as_user(addr, ROOT, ROOT_PW) as root:  # Super: anything, AclSecret and a pull included
        assert (await root.send("AclSecret", 0, [message(b"root")])).code == ResponseCode.SUCCESS
        assert [m.body for m in (await root.pull("g-root", "AclOrders", 0, 0)).messages] == [b"by alice"]

    log = master.log_path.read_text(errors="replace")
    assert "refused code" in log and "'alice'" in log
    assert ALICE_PW not in log and ROOT_PW not in log


async def test_a_user_created_over_remoting_works_at_once_and_a_disabled_one_is_refused(master, namesrv, root_admin):
    addr = master.addr
    await root_admin.update_topic(addr, "AclFresh", read_queue_nums=1, write_queue_nums=1)
    await acl_admin.create_user(root_admin, addr, acl_admin.user_info("carol", "carol-pw", "Normal"))
    await acl_admin.create_acl(root_admin, addr, acl_admin.acl_info("User:carol", ["Topic:AclFresh"], ["Pub"]))
    await acl_admin.create_acl(root_admin, addr, acl_admin.acl_info("User:carol", ["*"], ["Get"]))
    async with Producer("carol-producer", namesrv.addr, send_timeout_s=3.0,
                        credentials=("carol", "carol-pw")) as producer:
        result = await producer.send(Message("AclFresh", b"from the SDK"))
        assert result.status is SendStatus.SEND_OK
    assert await acl_admin.get_user(root_admin, addr, "carol") == {
        "username": "carol", "userType": "Normal", "userStatus": "enable"}  # never the password
    assert "carol" in [u["username"] for u in await acl_admin.list_users(root_admin, addr)]

    await acl_admin.update_user(root_admin, addr, {"username": "carol", "userStatus": "disable"})
    async with as_user(addr, "carol", "carol-pw") as carol:
        refused = await carol.send("AclFresh", 0, [message(b"disabled")])
        assert refused.code == ResponseCode.NO_PERMISSION and "disabled" in refused.remark
    await acl_admin.create_user(root_admin, addr, acl_admin.user_info("dave", "dave-pw", "Normal"))
    async with as_user(addr, "dave", "dave-pw") as dave:  # Normal users may not manage users: Super only
        refused = await dave.request(RequestCode.AUTH_LIST_USER)
        assert refused.code == ResponseCode.NO_PERMISSION and "for Super users only" in refused.remark

    async with AdminClient(namesrv.addr, credentials=("dave", "wrong")) as bad_admin:
        with pytest.raises(BrokerError) as err:
            await acl_admin.list_users(bad_admin, addr)
        assert err.value.code == ResponseCode.NO_PERMISSION

    await acl_admin.delete_user(root_admin, addr, "carol")
    assert "carol" not in [u["username"] for u in await acl_admin.list_users(root_admin, addr)]


def test_mqctl_manages_users_and_acls_and_never_prints_a_password(master, namesrv):
    import asyncio

    from tests.integration.ctl.cli import mqctl

    env = {"MQCTL_ACCESS_KEY": ROOT, "MQCTL_SECRET_KEY": ROOT_PW, "NAMESRV_ADDR": namesrv.addr}
    target = ["-b", master.addr]
    for args in (["updateTopic", "-t", "AclCtl", "-r", "1", "-w", "1", *target],
                 ["createUser", "-u", "erin", "-p", "erin-pw-9", "-t", "Normal", *target],
                 ["createAcl", "-s", "User:erin", "-r", "Topic:AclCtl,Group:g-erin", "-a", "Pub,Sub", *target],
                 ["createAcl", "-s", "User:erin", "-r", "Topic:AclCtl*", "-a", "Sub", "-d", "Deny", "-i",
                  "10.0.0.0/8", *target]):  # a second resource: an entry for the same one would replace the first
        result = mqctl(*args, env=env)
        assert result.exit_code == 0, result.output
    shown = mqctl("getUser", "-u", "erin", *target, env=env)
    assert shown.exit_code == 0 and "erin" in shown.output and "Normal" in shown.output
    listed = mqctl("listUser", *target, "--json", env=env)
    assert "erin" in listed.output and "erin-pw-9" not in shown.output + listed.output
    acl = mqctl("getAcl", "-s", "User:erin", *target, env=env)
    assert acl.exit_code == 0 and "Topic:AclCtl*" in acl.output and "10.0.0.0/8" in acl.output
    by_cluster = mqctl("listUser", "-c", "DefaultCluster", "--json", env=env)  # this nameserver has ACL off:
    assert by_cluster.exit_code == 0 and "erin" in by_cluster.output          # it is skipped, not an error
    refused = mqctl("listUser", *target, env={**env, "MQCTL_SECRET_KEY": "wrong"})
    assert refused.exit_code != 0 and "signature does not match" in refused.output

    async def erin_sends_and_pulls() -> tuple[int, int]:
        async with as_user(master.addr, "erin", "erin-pw-9") as erin:
            sent = await erin.send("AclCtl", 0, [message(b"via mqctl")])
            pulled = await erin.pull("g-erin", "AclCtl", 0, 0)  # the Deny is for 10.0.0.0/8 only: 127.0.0.1 may
            return sent.code, pulled.code

    sent, pulled = asyncio.run(erin_sends_and_pulls())
    assert sent == ResponseCode.SUCCESS and pulled in (ResponseCode.SUCCESS, ResponseCode.PULL_NOT_FOUND)
    assert mqctl("deleteAcl", "-s", "User:erin", *target, env=env).exit_code == 0

    async def erin_sends():
        async with as_user(master.addr, "erin", "erin-pw-9") as erin:
            return await erin.send("AclCtl", 0, [message(b"no longer")])

    refused = asyncio.run(erin_sends())  # the decision remembered for her sends is gone with her ACL
    assert refused.code == ResponseCode.NO_PERMISSION and "Pub on Topic:AclCtl" in refused.remark
    assert mqctl("deleteUser", "-u", "erin", *target, env=env).exit_code == 0


async def test_bad_management_input_and_bad_keys_are_refused_and_nothing_is_stored(master, root_admin):
    addr = master.addr
    async with as_user(addr, ROOT, ROOT_PW) as root:
        bad = await root.request(RequestCode.AUTH_CREATE_USER, {"username": "x"}, b"{not json")
        assert bad.code == ResponseCode.INVALID_PARAMETER and "not JSON" in bad.remark
        bad = await root.request(RequestCode.AUTH_CREATE_ACL, {"subject": "User:x"}, json.dumps(
            acl_admin.acl_info("User:x", ["Topic:t"], ["Fly"])).encode())
        assert bad.code == ResponseCode.INVALID_PARAMETER and "'Fly' is not one of" in bad.remark
        bad = await root.request(RequestCode.AUTH_CREATE_ACL, {"subject": "User:x"}, json.dumps(
            acl_admin.acl_info("User:x", ["Topic:t"], ["Pub"], source_ips=["10.0.0.999/8"])).encode())
        assert bad.code == ResponseCode.INVALID_PARAMETER and "CIDR" in bad.remark
        bad = await root.request(RequestCode.AUTH_DELETE_USER, {"username": ""})  # no name (a missing user is done)
        assert bad.code == ResponseCode.INVALID_PARAMETER and "username" in bad.remark
        secrets = await root.request(RequestCode.AUTH_LIST_USER, {"withPassword": "true"})  # the slaves' own call
        assert secrets.code == ResponseCode.NO_PERMISSION and "innerClientAuthenticationCredentials" in secrets.remark
        assert ROOT_PW.encode() not in secrets.body_bytes()
    assert "x" not in [u["username"] for u in await acl_admin.list_users(root_admin, addr)]
    assert not await acl_admin.list_acls(root_admin, addr, subject_filter="User:x")
    async with as_user(addr, "k" * 300, "s") as oversize:
        refused = await oversize.send("AclOrders", 0, [message(b"big key")])
        assert refused.code == ResponseCode.NO_PERMISSION and "AccessKey is not a user name" in refused.remark
    async with as_user(addr, "ключ", "s") as non_ascii:
        refused = await non_ascii.send("AclOrders", 0, [message(b"non-ASCII key")])
        assert refused.code == ResponseCode.NO_PERMISSION and "AccessKey is not a user name" in refused.remark
    async with as_user(addr, None) as raw:
        ext = {"topic": "AclOrders"}
        for bad_ext, says in (
                ({**ext, "AccessKey": ROOT}, "signature does not match"),  # no Signature at all
                ({**ext, "AccessKey": ROOT, "Signature": "not base64 !"}, "signature does not match"),
                ({**sign(dict(ext), b"", ROOT, ROOT_PW), "topic": "AclOther"}, "signature does not match"),  # changed
                ({**ext, "Signature": sign(dict(ext), b"", ROOT, ROOT_PW)["Signature"]}, "not signed (no AccessKey)")):
            refused = await raw.request(RequestCode.GET_MAX_OFFSET, {**bad_ext, "queueId": "0"})
            assert refused.code == ResponseCode.NO_PERMISSION and says in refused.remark, (bad_ext, refused.remark)
            assert ROOT_PW not in refused.remark


@pytest.fixture
def throttled_master(tmp_path_factory, namesrv):
    """A broker whose failed-authentication budget comes back one failure a minute: an address that used it up stays
    blocked for the whole test, however slowly the machine runs it (the default gives one back every 0.5 s)."""
    yield from broker_fixture(tmp_path_factory, namesrv, "broker-acl-throttle", **acl_conf(ROOT, ROOT_PW),
                              authenticationFailureRefillMillis=60_000)


async def test_a_flood_of_failed_logins_is_throttled_per_address_and_others_are_still_served(throttled_master):
    """1,000 failed logins a second from one address (127.0.0.2): after its budget of failures every request from it
    is refused at once, saying so (a correct signature from there too, until it waits); the broker's memory stays put,
    its log gets a few lines naming the address, and a user on another address (127.0.0.1) is served throughout."""
    import asyncio
    import time

    master = throttled_master

    before = master.log_path.read_text(errors="replace")
    rss_before = rss_bytes(master.pid)
    attacker = BrokerClient(master.addr, local_host="127.0.0.2", credentials=("alice", "guessing"))
    async with attacker, as_user(master.addr, ROOT, ROOT_PW) as root:
        for second in range(3):
            started = time.monotonic()
            answers = await asyncio.gather(*(attacker.send("AclOrders", 0, [message(b"x")]) for _ in range(1000)))
            assert {a.code for a in answers} == {ResponseCode.NO_PERMISSION}
            throttled = [a for a in answers if "too many failed authentications from 127.0.0.2" in a.remark]
            assert len(throttled) >= 1000 - 25, "past its budget the address is refused without a signature check"
            assert ALICE_PW not in " ".join(a.remark for a in answers)
            sent = await root.send("AclOrders", 0, [message(b"still served")])
            assert sent.code == ResponseCode.SUCCESS, sent.remark
            honest_from_there = BrokerClient(master.addr, local_host="127.0.0.2", credentials=(ROOT, ROOT_PW))
            async with honest_from_there:  # while blocked, a correct guess gains nothing
                blocked = await honest_from_there.send("AclOrders", 0, [message(b"right key, blocked address")])
                assert blocked.code == ResponseCode.NO_PERMISSION and "too many failed" in blocked.remark
            await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - started)))  # pace: 1,000 a second
    log = master.log_path.read_text(errors="replace")[len(before):]
    assert log.count("refused code") <= 4, "refusals are logged at most once per 5 s per server"
    assert "127.0.0.2 used up its failed-authentication budget" in log
    assert rss_bytes(master.pid) - rss_before < 32 * 1024 * 1024


async def test_creating_a_user_exactly_as_it_exists_succeeds_and_any_difference_is_refused(master, root_admin):
    """What a slave meets when a tool writes a user its master's push brought already: the same user is no error;
    another password or type is (use updateUser), and the stored user is unchanged."""
    from client.errors import BrokerError

    info = acl_admin.user_info("ivy", "ivy-pw-12", "Normal")
    await acl_admin.create_user(root_admin, master.addr, info)
    await acl_admin.create_user(root_admin, master.addr, info)
    for other in (acl_admin.user_info("ivy", "other-pw-13", "Normal"), acl_admin.user_info("ivy", "ivy-pw-12", "Super")):
        with pytest.raises(BrokerError, match="exists; use updateUser"):
            await acl_admin.create_user(root_admin, master.addr, other)
    assert (await acl_admin.get_user(root_admin, master.addr, "ivy"))["userType"] == "Normal"
    await acl_admin.delete_user(root_admin, master.addr, "ivy")
