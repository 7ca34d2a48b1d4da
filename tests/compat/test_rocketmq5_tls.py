"""The official RocketMQ 5 Python client (``rocketmq-python-client`` 5.1.2, unchanged) with ``tls_enable=True``
against a broker whose v2 port has ``tls.server.mode=enforcing`` and a certificate from a test CA.

The client has no option for a CA of its own: ``tls_enable=True`` builds ``grpc.ssl_channel_credentials()`` with no
arguments, which trusts gRPC's default roots. gRPC reads those from ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` when it is
set, so the client process gets that variable naming the test CA: the client's own code is unchanged. It cannot
present a client certificate (no argument for one), so a v2 port with ``tls.server.need.client.auth=true`` refuses
it; that is tested too. Without the variable (the system's CAs) the handshake fails, and without ``tls_enable`` the
plaintext connection is closed.
"""

from __future__ import annotations

import itertools

import pytest

from harness.procs import Broker, Namesrv
from harness.rocketmq5 import ClientError, Rmq5Client, client_python
from harness.waiting import wait_until
from tests.factories import certs_or_skip, closing_each
from tests.integration.ctl.cli import ok_json

pytestmark = pytest.mark.integration

TOPIC = "TlsV2Topic"
TRUST_ENV = "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return certs_or_skip(tmp_path_factory.mktemp("certs"), ["broker"])


def _broker(root, namesrv, name, certs, *, need_client_auth: bool):
    return Broker(root / name, name=name, namesrv_addr=namesrv.addr, **certs.client_conf("broker"),
                  **certs.server_conf("broker", "enforcing", need_client_auth=need_client_auth))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, certs):
    root = tmp_path_factory.mktemp("v2-tls")
    with Namesrv(root / "namesrv", **certs.server_conf("broker", "enforcing")) as namesrv:
        with _broker(root, namesrv, "broker-tls", certs, need_client_auth=False) as broker:
            with _broker(root, namesrv, "broker-mtls", certs, need_client_auth=True) as mtls:
                tls = ("--tls", "--tls-ca", certs.ca)  # every port of the cluster is enforcing
                ok_json(*tls, "updateTopic", "-n", namesrv.addr, "-b", broker.addr, "-t", TOPIC, "-r", "2", "-w", "2")
                wait_until(lambda: ok_json(*tls, "topicRoute", "-n", namesrv.addr, "-t", TOPIC)["queueDatas"], 30,
                           f"the nameserver routes {TOPIC}")
                yield namesrv, broker, mtls


@pytest.fixture
def client(tmp_path):
    """``client(env)``: an official client process (``env`` added to its environment), closed at teardown."""
    python, homes = client_python(), (tmp_path / f"client-{i}" for i in itertools.count())
    yield from closing_each(lambda env=None: Rmq5Client(python, next(homes), env), Rmq5Client.close)


def test_the_official_client_with_tls_enable_produces_and_consumes_trusting_the_test_ca(cluster, certs, client):
    _, broker, _ = cluster
    trust = {TRUST_ENV: certs.ca}
    producer = client(trust)
    producer.call(op="producer", endpoint=broker.grpc_addr, topics=[TOPIC], tls=True)
    sent = {producer.call(op="send", topic=TOPIC, body=f"tls-{i}")["message_id"] for i in range(10)}
    consumer = client(trust)
    consumer.call(op="simple_consumer", endpoint=broker.grpc_addr, group="tls-v2-group", topic=TOPIC, await_s=2,
                  tls=True)
    got: dict[str, str] = {}

    def received_all() -> bool:
        for m in consumer.call(timeout_s=20, op="receive", max=32, invisible_s=30)["messages"]:
            got[m["id"]] = m["body"]
            consumer.call(op="ack", id=m["id"])
        return set(got) >= sent

    wait_until(received_all, 60, lambda: f"received {len(got)} of {len(sent)} over TLS")
    assert sorted(got.values()) == sorted(f"tls-{i}" for i in range(10))


def test_the_official_client_without_the_ca_or_without_tls_is_refused(cluster, certs, client):
    _, broker, _ = cluster
    for env, tls in ((None, True), ({TRUST_ENV: certs.ca}, False)):
        c = client(env)
        with pytest.raises(ClientError):
            c.call(timeout_s=60, op="producer", endpoint=broker.grpc_addr, topics=[TOPIC], tls=tls)
            c.call(timeout_s=30, op="send", topic=TOPIC, body="never")


def test_the_official_client_cannot_present_a_client_certificate_so_mutual_tls_refuses_it(cluster, certs, client):
    _, _, mtls = cluster
    c = client({TRUST_ENV: certs.ca})
    with pytest.raises(ClientError):
        c.call(timeout_s=60, op="producer", endpoint=mtls.grpc_addr, topics=[TOPIC], tls=True)
        c.call(timeout_s=30, op="send", topic=TOPIC, body="never")
