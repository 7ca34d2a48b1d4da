"""The SDK's clients with ACL 2.0 credentials on a checking broker: a TransactionProducer's halves and its answer to
the broker's check (sent on the broker's own connection) are signed, so an orphaned half is committed by the check;
a PushConsumer with Sub on its topic and group receives, retries (send-back) and commits, and one for a group it
may not read gets nothing."""

from __future__ import annotations

import pytest

from client import AdminClient, Message
from client import acl_admin
from client.transaction_producer import LocalTransactionState, TransactionProducer
from tests.brokers import acl_conf, broker_fixture
from tests.integration.broker.rpc import BrokerClient
from tests.integration.client.conftest import create_topic, unique, wait_for

pytestmark = pytest.mark.integration

ROOT, ROOT_PW = "root", "root-secret-6"
USER, USER_PW = "txuser", "tx-secret-7"


@pytest.fixture(scope="module")
def broker(tmp_path_factory, namesrv):
    yield from broker_fixture(
        tmp_path_factory, namesrv, "broker-acl-tx",
        transactionTimeOut=800, transactionCheckInterval=200, transactionCheckMax=3,
        **acl_conf(ROOT, ROOT_PW),
    )


async def test_an_orphaned_half_is_committed_through_a_signed_check_answer(namesrv, broker):
    topic, group = unique("AclTx"), unique("pg-acl")
    async with AdminClient(namesrv.addr, credentials=(ROOT, ROOT_PW)) as admin:
        await create_topic(admin, broker, topic)
        await acl_admin.create_user(admin, broker.addr, acl_admin.user_info(USER, USER_PW, "Normal"))
        # a send is Pub on the topic; a 4.x END_TRANSACTION names no topic, so Pub on the producer group stands in
        await acl_admin.create_acl(admin, broker.addr, acl_admin.acl_info(f"User:{USER}", [f"Topic:{topic}",
                                                                                          f"Group:{group}"], ["Pub"]))
    creds = (USER, USER_PW)
    crashed = await TransactionProducer(group, namesrv.addr, send_timeout_s=3.0, credentials=creds).start()
    await crashed.send_half(Message(topic, b"orphan"))
    await crashed.remoting.close()

    async def delivered() -> bool:
        async with BrokerClient(broker.addr, credentials=(ROOT, ROOT_PW)) as reader:
            bodies = []
            for q in range(4):
                bodies += [m.body for m in await reader.pull_all("tx-reader", topic, q)]
            return bodies == [b"orphan"]

    async with TransactionProducer(group, namesrv.addr, send_timeout_s=3.0, heartbeat_interval_s=1.0,
                                   checker=lambda m: LocalTransactionState.COMMIT_MESSAGE, topics=(topic,),
                                   credentials=creds) as producer:
        await wait_for(delivered, 20.0, "the signed check answer's commit")
        assert producer.checks_answered >= 1
    assert "refused code 37" not in broker.log_path.read_text(errors="replace")


async def test_a_signed_push_consumer_with_sub_receives_retries_and_commits_and_one_without_is_refused(namesrv,
                                                                                                      broker):
    from client import Producer
    from tests.integration.client.conftest import Recorder, push_consumer

    topic, group, other = unique("AclPush"), unique("cg-acl"), unique("cg-nosub")
    async with AdminClient(namesrv.addr, credentials=(ROOT, ROOT_PW)) as admin:
        await create_topic(admin, broker, topic)
        await acl_admin.create_user(admin, broker.addr, acl_admin.user_info("reader", "reader-pw-8", "Normal"))
        await acl_admin.create_acl(admin, broker.addr, acl_admin.acl_info(
            "User:reader", [f"Topic:{topic}", f"Group:{group}"], ["Sub"]))
        async with Producer(unique("pp"), namesrv.addr, credentials=(ROOT, ROOT_PW)) as producer:
            for i in range(5):
                await producer.send(Message(topic, f"m{i}".encode()))
    recorder = Recorder(fail_first=1)  # each message once RECONSUME_LATER: the send-back to %RETRY% is signed too
    async with push_consumer(namesrv, group, topic, recorder, credentials=("reader", "reader-pw-8"),
                             pull_retry_delay_s=0.2):
        await wait_for(lambda: sorted(recorder.bodies) == [f"m{i}".encode() for i in range(5)], 60,
                       "every message, each after one retry")
    refused = Recorder()
    async with push_consumer(namesrv, other, topic, refused, credentials=("reader", "reader-pw-8"),
                             pull_retry_delay_s=0.2):
        await wait_for(lambda: f"Sub on Group:{other} is not granted" in broker.log_path.read_text(errors="replace"),
                       10, "the broker to refuse the group it may not read")
    assert refused.bodies == []
