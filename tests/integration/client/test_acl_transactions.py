"""A TransactionProducer with ACL 2.0 credentials on a checking broker: its halves, its END_TRANSACTION and its
answer to the broker's check (sent on the broker's own connection) are all signed, so an orphaned half is
committed by the check."""

from __future__ import annotations

import json

import pytest

from client import AdminClient, Message
from client import acl_admin
from client.transaction_producer import LocalTransactionState, TransactionProducer
from remoting.acl_signature import signer
from tests.brokers import broker_fixture
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
        authenticationEnabled="true", authorizationEnabled="true",
        initAuthenticationUser=json.dumps({"username": ROOT, "password": ROOT_PW}),
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
        reader = BrokerClient(broker.addr)
        reader.remoting.signer = signer(ROOT, ROOT_PW)
        async with reader:
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
