"""TLS bad inputs on real processes (issue 25): a nameserver presenting an expired certificate, and one whose
certificate names another host, are refused by the SDK (which verifies host names unless told not to, as
``tls.client.verifyHostname``) with an error that says what to do; a silent connection to a broker's permissive v2
port (the TLS front) is closed at the handshake deadline and counted in ``rocketmq_remoting_connections_closed_total``
like the remoting ports' refusals."""

from __future__ import annotations

import socket

import pytest

from client import AdminClient, tls_context
from client.errors import MQClientError
from harness.metrics_page import sample_value
from harness.procs import Broker, Namesrv
from harness.tls_certs import CertsUnavailable, make_certs
from harness.waiting import wait_until

pytestmark = pytest.mark.integration

HANDSHAKE_MS = 1500


def certs_or_skip(root, **kwargs):
    try:
        return make_certs(root, ["namesrv", "broker"], **kwargs)
    except CertsUnavailable as exc:
        pytest.skip(str(exc))


async def test_an_expired_server_certificate_is_refused_saying_to_renew_it(tmp_path):
    certs = certs_or_skip(tmp_path / "certs", service_days=-1)
    with Namesrv(tmp_path / "ns", **certs.server_conf("namesrv", "enforcing")) as ns:
        async with AdminClient(ns.addr, tls=tls_context(True, certs.ca), timeout_s=3) as admin:
            with pytest.raises(MQClientError) as refused:
                await admin.cluster_info()
    assert "certificate has expired: renew it" in str(refused.value), str(refused.value)
    assert certs.key("namesrv") not in str(refused.value)


async def test_a_certificate_for_another_host_is_refused_unless_host_names_are_not_verified(tmp_path):
    certs = certs_or_skip(tmp_path / "certs", local_sans=False)  # names "namesrv" only, not 127.0.0.1
    with Namesrv(tmp_path / "ns", **certs.server_conf("namesrv", "enforcing")) as ns:
        async with AdminClient(ns.addr, tls=tls_context(True, certs.ca), timeout_s=3) as admin:
            with pytest.raises(MQClientError) as refused:
                await admin.cluster_info()
        message = str(refused.value)
        assert "does not name 127.0.0.1: reissue it with 127.0.0.1 in its subjectAltName" in message, message
        assert "verifyHostname=false" in message
        # the same CA's certificate is otherwise good: with host names not verified the SDK connects
        lax = tls_context(True, certs.ca, verify_hostname=False)
        async with AdminClient(ns.addr, tls=lax, timeout_s=3) as admin:
            assert (await admin.cluster_info()).broker_addr_table == {}


def test_a_silent_connection_to_the_permissive_v2_port_is_closed_and_counted(tmp_path):
    certs = certs_or_skip(tmp_path / "certs")
    with Namesrv(tmp_path / "ns") as ns, \
            Broker(tmp_path / "b", name="broker-v2", namesrv_addr=ns.addr, **certs.server_conf("broker", "permissive"),
                   **{"tls.server.handshakeTimeoutMillis": str(HANDSHAKE_MS)}) as broker:
        def closed(reason: str) -> float:
            return sample_value(broker.metrics_port, "rocketmq_remoting_connections_closed_total", reason=reason)

        before = closed("tls_handshake_timeout")
        with socket.create_connection(("127.0.0.1", broker.grpc_port), timeout=HANDSHAKE_MS / 1000 + 10) as sock:
            try:
                assert sock.recv(1) == b""  # sends nothing: the front closes it at the deadline
            except ConnectionResetError:
                pass
        wait_until(lambda: closed("tls_handshake_timeout") >= before + 1, 10,
                   "the v2 front's refusal to be counted in rocketmq_remoting_connections_closed_total")
        assert "v2-tls-front" in broker.output()
