"""Real RocketMQ clients, unchanged, against a cluster with ACL 2.0 on (nameserver, SYNC_MASTER and slave checking
authentication and authorization; the brokers' own calls signed with innerClientAuthenticationCredentials):

- Apache's C++ client (PyPI ``rocketmq`` 0.4.4) with ``set_session_credentials`` produces and consumes where its user
  may, and is refused where it may not (its send fails, the server's log names the refused request); without
  credentials its producer and its push consumer get nothing through;
- the official RocketMQ 5 Python client with ``Credentials(ak, sk)`` produces and consumes over the v2 endpoint;
  without credentials, or with a wrong secret, it is refused (UNAUTHORIZED), with a grant missing FORBIDDEN.
"""

from __future__ import annotations

import asyncio
import pytest

from client import AdminClient, acl_admin
from harness.rocketmq5 import ClientError
from harness.waiting import wait_until
from tests.brokers import acl_conf
from tests.compat import harness

pytestmark = pytest.mark.integration

ROOT, ROOT_PW = "root", "root-secret-compat"
APP, APP_PW = "app", "app-secret-compat"
AUTH = acl_conf(ROOT, ROOT_PW, inner=("inner", "inner-secret-compat"))
TOPIC, SECRET_TOPIC = harness.unique("AclCpp"), harness.unique("AclCppSecret")
CPP_GROUP, V2_GROUP = harness.unique("GID_acl_cpp"), harness.unique("GID_acl_v2")


@pytest.fixture(scope="module")
def acl_group(tmp_path_factory):
    with pytest.MonkeyPatch.context() as env:  # mqctl (the harness's setup steps) signs as root
        env.setenv("MQCTL_ACCESS_KEY", ROOT)
        env.setenv("MQCTL_SECRET_KEY", ROOT_PW)
        g = harness.start_group(tmp_path_factory.mktemp("acl-compat"), namesrv_conf=AUTH, **AUTH)
        try:
            for topic in (TOPIC, SECRET_TOPIC):
                harness.create_topic(g, topic, 2, credentials=(ROOT, ROOT_PW))
            asyncio.run(_grant(g))
            yield g
        finally:
            for proc in g.procs():
                proc.stop()


async def _grant(g: harness.Group) -> None:
    """``app`` (Normal) may publish and subscribe on TOPIC with its two groups, on every server of the cluster."""
    async with AdminClient(g.namesrv_addr, credentials=(ROOT, ROOT_PW)) as admin:
        for addr in (g.namesrv_addr, g.master.addr, g.slave.addr):
            await acl_admin.create_user(admin, addr, acl_admin.user_info(APP, APP_PW, "Normal"))
            await acl_admin.create_acl(admin, addr, acl_admin.acl_info(
                f"User:{APP}", [f"Topic:{TOPIC}", f"Group:{CPP_GROUP}", f"Group:{V2_GROUP}"], ["Pub", "Sub"]))


def _logs(g: harness.Group) -> str:
    return "".join(p.log_path.read_text(errors="replace") for p in g.procs())


def test_the_cpp_client_with_session_credentials_produces_and_consumes_where_its_user_may(
        acl_group, cpp_producer, cpp_consumer):
    producer = cpp_producer(acl_group.namesrv_addr, credentials=(APP, APP_PW))
    keys = [f"k{i}" for i in range(10)]
    for key in keys:
        result = producer.send(TOPIC, key, "TagA", f"body-{key}")
        assert int(result.status) == 0, result
    consumer = cpp_consumer(acl_group.namesrv_addr, CPP_GROUP, TOPIC, "*", credentials=(APP, APP_PW))
    wait_until(lambda: set(keys) <= set(consumer.keys()), 60,
               lambda: f"the signed C++ consumer got {sorted(consumer.keys())}\n{consumer.diagnostics()}")

    with pytest.raises(Exception) as refused:  # its user may not publish there: the route query is refused
        producer.send(SECRET_TOPIC, "nope", "TagA", "not allowed")
    assert "ProducerSendSyncFailed" in type(refused.value).__name__ or "No route info" in str(refused.value)
    assert f"Topic:{SECRET_TOPIC} is not granted" in _logs(acl_group)
    assert APP_PW not in _logs(acl_group)


def test_the_cpp_client_without_credentials_gets_nothing_through(acl_group, cpp_producer, cpp_consumer):
    producer = cpp_producer(acl_group.namesrv_addr)
    with pytest.raises(Exception):
        producer.send(TOPIC, "anon", "TagA", "unsigned")
    before = _logs(acl_group).count("(user '-')")
    consumer = cpp_consumer(acl_group.namesrv_addr, harness.unique("GID_anon"), TOPIC, "*")
    wait_until(lambda: _logs(acl_group).count("(user '-')") > before, 45,
               "the unsigned consumer's requests to be refused")
    assert consumer.messages() == [], "an unsigned consumer received messages"


def test_the_official_client_with_credentials_produces_and_consumes_and_without_is_refused(acl_group, client):
    endpoint = acl_group.master.grpc_addr
    producer = client()
    producer.call(op="producer", endpoint=endpoint, topics=[TOPIC], credentials=[APP, APP_PW])
    sent = [producer.call(op="send", topic=TOPIC, body=f"v2-{i}")["message_id"] for i in range(5)]
    consumer = client()
    consumer.call(op="simple_consumer", endpoint=endpoint, group=V2_GROUP, topic=TOPIC, await_s=1,
                  credentials=[APP, APP_PW])
    got = consumer.call(op="drain", invisible_s=20, idle_receives=2, total_s=40, timeout_s=60)
    assert set(sent) <= {m["id"] for m in got}

    with pytest.raises(ClientError) as forbidden:  # its user may not publish to the other topic
        producer.call(op="send", topic=SECRET_TOPIC, body="not allowed")
    assert "route" in forbidden.value.error  # the client says it could not fetch the route; its log says why:
    assert f"40300, authorization failed: user '{APP}': Pub/Sub on Topic:{SECRET_TOPIC} is not granted" in str(
        forbidden.value)

    for credentials, why in ((None, "the authorization header has no Credential"),  # empty Credentials() send one
                             ([APP, "wrong-secret"], "the signature does not match")):
        anonymous = client()
        with pytest.raises(ClientError) as refused:
            anonymous.call(op="producer", endpoint=endpoint, topics=[TOPIC], credentials=credentials)
            anonymous.call(op="send", topic=TOPIC, body="refused")
        assert f"40100, authentication failed: {why}" in str(refused.value), str(refused.value)[-2000:]
        assert "wrong-secret" not in _logs(acl_group)
        reader = client()
        with pytest.raises(ClientError) as refused:
            reader.call(op="simple_consumer", endpoint=endpoint, group=V2_GROUP, topic=TOPIC, await_s=1,
                        credentials=credentials)
            reader.call(op="receive", max=16, invisible_s=20)
        assert "40100" in str(refused.value)
