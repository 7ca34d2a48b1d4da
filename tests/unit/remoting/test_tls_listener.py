"""A TLS remoting port over real loopback sockets (remoting.tls_listener): permissive serves TLS and plaintext on
one port, enforcing closes plaintext; a silent socket, a handshake that stops halfway and a client certificate
from another CA are closed and counted in the process's closes; silent sockets cannot keep a real client out; and a
bad file stops the config check naming the key, never a key's path."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from common.errors import ConfigError
from harness.waiting import async_wait_until
from remoting.client import RemotingClient
from remoting.errors import RemotingError
from remoting.frame_codec import RemotingCommand, encode_bytes, response_to
from remoting.server import RemotingServer
from remoting.tls import TlsConfig, TlsMode, client_context
from tests.factories import certs_or_skip

ECHO = 1


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return certs_or_skip(tmp_path_factory.mktemp("certs"), ["server", "client"])


@pytest.fixture(scope="module")
def foreign(tmp_path_factory):
    return certs_or_skip(tmp_path_factory.mktemp("foreign"), ["client"])


def tls_config(certs, mode: TlsMode, *, need_client_auth: bool = False, handshake_ms: int = 5000) -> TlsConfig:
    cfg = TlsConfig(tls_server_mode=mode, tls_server_cert_path=certs.cert("server"),
                    tls_server_key_path=certs.key("server"), tls_server_trust_cert_path=certs.ca,
                    tls_server_need_client_auth=need_client_auth, tls_server_handshake_timeout_millis=handshake_ms)
    cfg.check("test")
    return cfg


async def serve(cfg: TlsConfig) -> RemotingServer:
    srv = RemotingServer("tls-test", "127.0.0.1", 0, tls=cfg)
    srv.register(ECHO, lambda conn, req: response_to(
        req, 0, "tls" if conn.transport.get_extra_info("ssl_object") is not None else "plain"))
    await srv.start()
    return srv


async def echo(port: int, context) -> str:
    client = RemotingClient(ssl=context, connect_timeout_s=3)
    try:
        return (await client.invoke(f"127.0.0.1:{port}", RemotingCommand(ECHO), 3)).remark
    finally:
        await client.close()


async def closed_without_answer(port: int, payload: bytes, timeout_s: float) -> bool:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    try:
        return await asyncio.wait_for(reader.read(), timeout_s) == b""
    except ConnectionResetError:
        return True
    finally:
        writer.close()


async def test_permissive_serves_tls_and_plaintext_on_one_port(certs):
    srv = await serve(tls_config(certs, TlsMode.PERMISSIVE))
    try:
        assert await echo(srv.port, client_context(trust=certs.ca)) == "tls"
        assert await echo(srv.port, None) == "plain"
    finally:
        await srv.stop()


async def test_enforcing_closes_plaintext_and_counts_it(certs, caplog):
    srv = await serve(tls_config(certs, TlsMode.ENFORCING))
    try:
        assert await echo(srv.port, client_context(trust=certs.ca)) == "tls"
        assert await closed_without_answer(srv.port, encode_bytes(RemotingCommand(ECHO)), 5)
        assert srv.held_bytes.closes["plaintext_on_tls_port"] == 1
        assert "tls.server.mode=enforcing" in caplog.text
    finally:
        await srv.stop()


async def test_a_silent_socket_and_a_half_handshake_are_closed_within_the_deadline(certs):
    srv = await serve(tls_config(certs, TlsMode.ENFORCING, handshake_ms=300))
    try:
        started = time.monotonic()
        assert await closed_without_answer(srv.port, b"", 5)
        assert await closed_without_answer(srv.port, bytes([0x16, 0x03, 0x01, 0x02, 0x00, 0x01]), 5)
        assert time.monotonic() - started < 3
        assert srv.held_bytes.closes["tls_handshake_timeout"] == 2
        assert srv.tls is not None and srv._server.pending == 0  # noqa: SLF001 - the listener's own count
    finally:
        await srv.stop()


async def test_a_client_certificate_from_another_ca_is_refused(certs, foreign):
    srv = await serve(tls_config(certs, TlsMode.ENFORCING, need_client_auth=True))
    try:
        ours = client_context(trust=certs.ca, cert=certs.cert("client"), key=certs.key("client"))
        assert await echo(srv.port, ours) == "tls"
        for stranger in (client_context(trust=certs.ca, cert=foreign.cert("client"), key=foreign.key("client")),
                         client_context(trust=certs.ca)):
            with pytest.raises(RemotingError):
                await echo(srv.port, stranger)
        await async_wait_until(lambda: srv.held_bytes.closes["tls_handshake_failed"] == 2, 5,
                               lambda: f"closes: {srv.held_bytes.closes}")
        # the refused ones were never listed (a protocol whose handshake failed is never made, nor lost)
        await async_wait_until(lambda: not srv.connections, 5, lambda: f"still listed: {len(srv.connections)}")
    finally:
        await srv.stop()


async def test_silent_sockets_cannot_keep_a_real_client_out(certs):
    srv = RemotingServer("tls-test", "127.0.0.1", 0, tls=tls_config(certs, TlsMode.ENFORCING))
    srv.register(ECHO, lambda conn, req: response_to(req, 0, "ok"))
    await srv.start()
    listener = srv._server  # noqa: SLF001 - the bound is the listener's
    listener.places.total, listener.places.per_host = 8, 4
    silent = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(4)]
    try:
        await async_wait_until(lambda: listener.pending == 4, 5, "four silent connections pending")
        # the address holds its four places: a real client takes the oldest silent one's at once
        assert await echo(srv.port, client_context(trust=certs.ca)) == "ok"
        assert srv.held_bytes.closes["tls_handshake_timeout"] == 1
        silent[0].settimeout(5)
        assert silent[0].recv(1) == b"", "the oldest silent connection was closed"
    finally:
        for sock in silent:
            sock.close()
        await srv.stop()


async def test_connections_halfway_through_their_handshake_keep_their_places(certs):
    srv = RemotingServer("tls-test", "127.0.0.1", 0, tls=tls_config(certs, TlsMode.ENFORCING))
    await srv.start()
    listener = srv._server  # noqa: SLF001 - the bound is the listener's
    listener.places.total, listener.places.per_host = 8, 4
    halfway = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(4)]
    try:
        for sock in halfway:
            sock.sendall(bytes([0x16, 0x03, 0x01]))  # the start of a TLS record, then nothing
        await async_wait_until(lambda: listener.pending == 4 and all(p.spoke for p in listener.places.active), 5,
                               "four connections in their handshake")
        assert await closed_without_answer(srv.port, b"", 5)  # none of them gives way: the newcomer is closed
        assert srv.held_bytes.closes["tls_pending_full"] == 1
        assert listener.pending == 4
    finally:
        for sock in halfway:
            sock.close()
        await srv.stop()


@pytest.mark.parametrize(("fields", "key"), [
    ({"tls_server_mode": TlsMode.ENFORCING}, "tls.server.certPath"),
    ({"tls_server_need_client_auth": True}, "tls.server.trustCertPath"),
    ({"tls_enable": True, "tls_client_cert_path": "/x/c.pem"}, "tls.client.keyPath"),
])
def test_a_setting_that_cannot_work_names_its_key(fields, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        TlsConfig(**fields).check("test.conf")


def test_a_key_file_error_names_the_setting_but_never_the_path(certs, tmp_path):
    hidden = tmp_path / "very-secret-dir" / "server.key"
    cfg = TlsConfig(tls_server_mode=TlsMode.ENFORCING, tls_server_cert_path=certs.cert("server"),
                    tls_server_key_path=str(hidden))
    with pytest.raises(ConfigError) as exc:
        cfg.check("test.conf")
    assert "tls.server.keyPath" in str(exc.value) and "very-secret-dir" not in str(exc.value)
    mismatched = TlsConfig(tls_server_mode=TlsMode.ENFORCING, tls_server_cert_path=certs.cert("server"),
                           tls_server_key_path=certs.key("client"))
    with pytest.raises(ConfigError) as exc:
        mismatched.check("test.conf")
    assert "do not load together" in str(exc.value) and certs.key("client") not in str(exc.value)
    assert "very-secret-dir" not in repr(cfg)
