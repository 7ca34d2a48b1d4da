"""TLS on every port of real processes (issue 25 item 4): a nameserver, a SYNC_MASTER and its slave with
``tls.server.mode=enforcing`` and mutual TLS on the nameserver, the broker's listen and fast ports, the HA port and
the v2 gRPC port; the brokers' own calls (registration, the slave's metadata sync, HA) use ``tls.enable``. The SDK
with ``tls=`` produces and consumes; plaintext, a client certificate from another CA and a handshake that stops
halfway are refused, each with a log line, while the cluster goes on serving. Permissive ports serve both."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import time

import grpc
import pytest

from broker.grpc_v2.pb import service_pb2, service_pb2_grpc
from client import AdminClient, Message, Producer, PullConsumer, SendStatus, tls_context
from client.errors import MQClientError
from harness.procs import REPO_ROOT, Broker, Namesrv, free_port
from harness.tls_certs import CertSet
from harness.waiting import async_wait_until, wait_until
from remoting.codes import RequestCode
from remoting.frame_codec import RemotingCommand, encode
from tests.factories import certs_or_skip

pytestmark = pytest.mark.integration

TOPIC = "TlsTopic"
HANDSHAKE_MS = 1500


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> CertSet:
    return certs_or_skip(tmp_path_factory.mktemp("certs"), ["namesrv", "broker-a", "broker-a-s", "client"])


@pytest.fixture(scope="module")
def foreign(tmp_path_factory) -> CertSet:
    """Another CA and a client certificate it signed: not trusted by the cluster."""
    return certs_or_skip(tmp_path_factory.mktemp("foreign"), ["client"])


def enforcing(certs: CertSet, name: str) -> dict[str, str]:
    return {**certs.server_conf(name, "enforcing", need_client_auth=True),
            "tls.server.handshakeTimeoutMillis": str(HANDSHAKE_MS)}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, certs):
    root = tmp_path_factory.mktemp("tls-cluster")
    with Namesrv(root / "ns", **enforcing(certs, "namesrv")) as ns:
        with Broker(root / "m", name="broker-a", namesrv_addr=ns.addr, role="SYNC_MASTER",
                    fastListenPort=free_port(), **enforcing(certs, "broker-a"),
                    **certs.client_conf("broker-a")) as master:
            with Broker(root / "s", name="broker-a", namesrv_addr=ns.addr, role="SLAVE", broker_id=1,
                        haMasterAddress=master.ha_addr, **enforcing(certs, "broker-a-s"),
                        **certs.client_conf("broker-a-s")) as slave:
                yield ns, master, slave


def client_tls(certs: CertSet) -> ssl.SSLContext:
    ctx = tls_context(True, certs.ca, cert=certs.cert("client"), key=certs.key("client"))
    assert ctx is not None
    return ctx


def fast_port(broker: Broker) -> int:
    return int(broker._values["fastListenPort"])  # noqa: SLF001 - the harness keeps the conf it wrote


async def test_an_enforcing_cluster_registers_replicates_and_serves_the_sdk_over_tls(cluster, certs):
    ns, master, slave = cluster
    tls = client_tls(certs)
    async with AdminClient(ns.addr, tls=tls) as admin:
        # both brokers registered with the nameserver over TLS (their client certificates were accepted)
        async def both_registered() -> bool:
            info = await admin.cluster_info()
            data = info.broker_addr_table.get("broker-a")
            return data is not None and set(data.broker_addrs) == {0, 1}

        await async_wait_until(both_registered, 30, "master and slave registered over TLS")
        await admin.update_topic(master.addr, TOPIC, read_queue_nums=2, write_queue_nums=2)
        async with Producer("tls-producer", ns.addr, tls=tls) as producer:
            results = [await producer.send(Message(TOPIC, f"m{i}".encode())) for i in range(20)]
        # SEND_OK from a SYNC_MASTER: the slave acked over the TLS HA link
        assert {r.status for r in results} == {SendStatus.SEND_OK}
        ha = await admin.ha_status(slave.addr)
        assert ha.connected and ha.replicated_bytes > 0
        # the slave's metadata sync (remoting over TLS to the master) brought the topic
        async def slave_has_topic() -> bool:
            configs = (await admin.all_topic_configs(slave.addr)).topic_configs
            return any(c.topic_name == TOPIC for c in configs)

        await async_wait_until(slave_has_topic, 30, "the slave synced the topic from its master over TLS")
    async with PullConsumer("tls-consumer", ns.addr, tls=tls) as consumer:
        got = 0
        for queue in await consumer.fetch_subscribe_queues(TOPIC):
            result = await consumer.pull(queue, 0, 32)
            got += len(result.messages)
        assert got == 20


async def test_the_fast_port_serves_tls_too(cluster, certs):
    ns, master, _ = cluster
    async with AdminClient("", tls=client_tls(certs)) as admin:
        info = await admin.broker_runtime_info(f"127.0.0.1:{fast_port(master)}")
        assert info  # an answer over TLS


@pytest.mark.parametrize("port_of", ["namesrv", "listen", "fast", "ha"])
def test_plaintext_on_an_enforcing_port_is_closed_with_a_log_line(cluster, port_of):
    ns, master, _ = cluster
    proc, port = {"namesrv": (ns, ns.port), "listen": (master, master.port), "fast": (master, fast_port(master)),
                  "ha": (master, master.ha_port)}[port_of]
    frame = b"".join(encode(RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO)))
    assert read_until_closed(port, frame) == b""  # no answer: closed
    wait_until(lambda: "sent plaintext" in proc.output() and "tls.server.mode=enforcing" in proc.output(), 10,
               f"{port_of}: the log says a plaintext connection was closed")


@pytest.mark.parametrize("port_of", ["namesrv", "listen", "fast", "ha", "v2"])
def test_a_handshake_that_stops_halfway_is_dropped_within_the_deadline(cluster, port_of):
    ns, master, _ = cluster
    port = {"namesrv": ns.port, "listen": master.port, "fast": fast_port(master), "ha": master.ha_port,
            "v2": master.grpc_port}[port_of]
    started = time.monotonic()
    half_hello = bytes([0x16, 0x03, 0x01, 0x02, 0x00]) + b"\x01\x00\x01\xfc" + b"\x03\x03" + bytes(20)
    assert read_until_closed(port, half_hello, timeout_s=HANDSHAKE_MS / 1000 + 10) == b""
    assert time.monotonic() - started < HANDSHAKE_MS / 1000 + 5


async def test_a_client_certificate_from_another_ca_is_refused_and_the_cluster_still_serves(cluster, certs,
                                                                                           foreign):
    ns, master, _ = cluster
    stranger = tls_context(True, certs.ca, cert=foreign.cert("client"), key=foreign.key("client"))
    async with AdminClient(ns.addr, tls=stranger, timeout_s=3) as admin:
        with pytest.raises(MQClientError):
            await admin.cluster_info()
    wait_until(lambda: "CERTIFICATE_VERIFY_FAILED" in ns.output() or "UNKNOWN_CA" in ns.output(), 10,
               "the nameserver logs the refused client certificate")
    no_cert = tls_context(True, certs.ca)  # none at all, where one is required
    async with AdminClient(ns.addr, tls=no_cert, timeout_s=3) as admin:
        with pytest.raises(MQClientError):
            await admin.cluster_info()
    async with AdminClient(ns.addr, tls=client_tls(certs)) as admin:
        assert "broker-a" in (await admin.cluster_info()).broker_addr_table


async def test_a_plaintext_sdk_on_an_enforcing_cluster_fails_with_a_clear_error(cluster):
    ns, _, _ = cluster
    async with AdminClient(ns.addr, timeout_s=3) as admin:
        with pytest.raises(MQClientError):
            await admin.cluster_info()


async def test_a_client_that_does_not_trust_the_server_refuses_it(cluster, foreign):
    ns, _, _ = cluster
    async with AdminClient(ns.addr, tls=tls_context(True, foreign.ca), timeout_s=3) as admin:
        with pytest.raises(MQClientError, match="TLS handshake failed"):
            await admin.cluster_info()


def test_the_v2_port_enforces_tls_with_client_certificates(cluster, certs, foreign):
    _, master, _ = cluster
    good = grpc.ssl_channel_credentials(read(certs.ca), read(certs.key("client")), read(certs.cert("client")))
    assert query_route(master.grpc_addr, good) is not None
    stranger = grpc.ssl_channel_credentials(read(certs.ca), read(foreign.key("client")), read(foreign.cert("client")))
    assert query_route(master.grpc_addr, stranger) is None
    assert query_route(master.grpc_addr, None) is None  # plaintext


def test_print_config_never_shows_a_key_path(cluster, certs):
    _, master, _ = cluster
    out = subprocess.run([sys.executable, "-m", "broker", "-c", str(master.conf_path), "--print-config"],
                         capture_output=True, text=True, timeout=60, cwd=REPO_ROOT).stdout
    assert "tls.server.keyPath=<set>" in out and "tls.client.keyPath=<set>" in out
    assert certs.key("broker-a") not in out and "tls.server.mode=ENFORCING" in out


# permissive ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def permissive(tmp_path_factory, certs):
    """A nameserver and a master with permissive ports, a slave dialing its HA port with TLS (brokerId 1) and one
    dialing it in plaintext (brokerId 2)."""
    root = tmp_path_factory.mktemp("tls-permissive")
    with Namesrv(root / "ns", **certs.server_conf("namesrv", "permissive")) as ns:
        with Broker(root / "b", name="broker-p", namesrv_addr=ns.addr, fastListenPort=free_port(),
                    **certs.server_conf("broker-a", "permissive")) as broker:
            with Broker(root / "s1", name="broker-p", namesrv_addr=ns.addr, role="SLAVE", broker_id=1,
                        haMasterAddress=broker.ha_addr, **certs.client_conf("broker-a-s")), \
                    Broker(root / "s2", name="broker-p", namesrv_addr=ns.addr, role="SLAVE", broker_id=2,
                           haMasterAddress=broker.ha_addr):
                yield ns, broker


async def test_a_permissive_port_serves_tls_and_plaintext(permissive, certs):
    ns, broker = permissive
    for tls in (False, tls_context(True, certs.ca)):
        async with AdminClient(ns.addr, tls=tls) as admin:
            assert "broker-p" in (await admin.cluster_info()).broker_addr_table
            assert await admin.broker_runtime_info(broker.addr)
            assert await admin.broker_runtime_info(f"127.0.0.1:{fast_port(broker)}")


async def test_a_permissive_ha_port_serves_a_tls_slave_and_a_plaintext_one(permissive):
    ns, broker = permissive
    async with AdminClient(ns.addr) as admin:
        async def both_slaves() -> bool:
            return sorted(s.broker_id for s in (await admin.ha_status(broker.addr)).slaves) == [1, 2]

        await async_wait_until(both_slaves, 30, "both slaves connected to the permissive HA port")
    assert "TLS permissive" in broker.output()


def test_a_permissive_v2_port_serves_tls_and_plaintext(permissive, certs):
    _, broker = permissive
    assert query_route(broker.grpc_addr, grpc.ssl_channel_credentials(read(certs.ca))) is not None
    assert query_route(broker.grpc_addr, None) is not None


async def test_a_tls_client_on_a_disabled_port_is_refused(namesrv, certs):
    async with AdminClient(namesrv.addr, tls=tls_context(True, certs.ca), timeout_s=3) as admin:
        with pytest.raises(MQClientError):
            await admin.cluster_info()


# bad configuration --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("conf", "says"), [
    ({"tls.server.mode": "permisive"}, "tls.server.mode"),
    ({"tls.server.mode": "enforcing"}, "tls.server.certPath"),
    ({"tls.server.mode": "enforcing", "tls.server.certPath": "/nonexistent.pem",
      "tls.server.keyPath": "/secret/dir/k.key"}, "tls.server.certPath"),
    ({"tls.server.need.client.auth": "true"}, "tls.server.trustCertPath"),
])
def test_a_bad_tls_setting_stops_the_nameserver_naming_the_key(tmp_path, conf, says):
    path = tmp_path / "namesrv.conf"
    path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
    done = subprocess.run([sys.executable, "-m", "namesrv", "-c", str(path)], capture_output=True, text=True,
                          timeout=60, cwd=REPO_ROOT)
    assert done.returncode == 2 and says in done.stderr
    assert "/secret/dir" not in done.stderr


def test_a_key_that_is_not_the_certificates_names_the_key_path_setting_but_not_the_path(tmp_path, certs):
    path = tmp_path / "namesrv.conf"
    path.write_text(f"tls.server.mode=enforcing\ntls.server.certPath={certs.cert('namesrv')}\n"
                    f"tls.server.keyPath={certs.key('client')}\n")
    done = subprocess.run([sys.executable, "-m", "namesrv", "-c", str(path)], capture_output=True, text=True,
                          timeout=60, cwd=REPO_ROOT)
    assert done.returncode == 2 and "tls.server.keyPath" in done.stderr
    assert certs.key("client") not in done.stderr


# helpers --------------------------------------------------------------------------------------------------------
def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def read_until_closed(port: int, payload: bytes, timeout_s: float = 10.0) -> bytes:
    """Send ``payload`` and read until the server closes; what it sent back (b"" for nothing). A reset counts as
    closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(payload)
        got = b""
        try:
            while True:
                chunk = sock.recv(4096)
                if not chunk:
                    return got
                got += chunk
        except ConnectionResetError:
            return got


def query_route(addr: str, creds: grpc.ChannelCredentials | None) -> object | None:
    """A QueryRoute answer from the v2 endpoint, or None when the channel cannot be used."""
    channel = grpc.secure_channel(addr, creds) if creds is not None else grpc.insecure_channel(addr)
    with channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        try:
            return stub.QueryRoute(service_pb2.QueryRouteRequest(), timeout=5,
                                   metadata=(("x-mq-client-id", "tls-test"),))
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return None
            return exc  # an answer from the service (an error status is still an answer over this channel)



def test_the_spark_connectors_client_reads_routes_over_mutual_tls(cluster, certs):
    from connectors.spark.broker_client import client_for
    from connectors.spark.errors import Unavailable
    from connectors.spark.options import source_options

    ns, _, _ = cluster
    opts = source_options({"namesrv": ns.addr, "topic": TOPIC, "tls": "true", "tlsCa": certs.ca,
                           "tlsCert": certs.cert("client"), "tlsKey": certs.key("client")})
    client = client_for(opts.read.namesrv, opts.read.request_timeout_s, opts.read.tls)
    wait_until(lambda: client.route(TOPIC).subscribe_queues, 30, "the connector's client got the route over TLS")
    plain = source_options({"namesrv": ns.addr, "topic": TOPIC})
    with pytest.raises(Unavailable):  # the enforcing port closed the plaintext connection
        client_for(plain.read.namesrv, 3, plain.read.tls).route(TOPIC)


def test_the_nameservers_print_config_shows_the_tls_keys_but_no_key_path(certs, tmp_path):
    path = tmp_path / "namesrv.conf"
    path.write_text("".join(f"{k}={v}\n" for k, v in certs.server_conf("namesrv", "permissive").items()))
    out = subprocess.run([sys.executable, "-m", "namesrv", "-c", str(path), "--print-config"], capture_output=True,
                         text=True, timeout=60, cwd=REPO_ROOT).stdout
    assert "tls.server.mode=PERMISSIVE" in out and "tls.server.keyPath=<set>" in out
    assert certs.key("namesrv") not in out
