"""A standalone controller with its own ACL 2.0 and TLS (RocketMQ's controller has its own auth switch): with
``tls.server.mode=enforcing`` and authentication on, its port answers only signed requests over TLS from the
inner credentials (the brokers') or a Super user; unsigned, Normal-user and plaintext requests are refused, and
--print-config shows no secret."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

import pytest

from client import AdminClient, tls_context
from client import acl_admin
from harness.controller import FAST, Controller
from harness.procs import REPO_ROOT
from remoting.acl_signature import signer
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.frame_codec import RemotingCommand, encode
from tests.brokers import acl_conf
from tests.factories import certs_or_skip

pytestmark = pytest.mark.integration

ROOT_PW, INNER_PW = "ctl-root-pw-9", "ctl-inner-pw-10"


async def metadata(addr: str, ca: str, credentials: tuple[str, str] | None) -> RemotingCommand:
    client = RemotingClient(name="acl-test", ssl=tls_context(True, ca))
    if credentials is not None:
        client.signer = signer(*credentials)
    try:
        return await client.invoke(addr, RemotingCommand(int(RequestCode.CONTROLLER_GET_METADATA_INFO)), 5.0)
    finally:
        await client.close()


def test_a_standalone_controller_answers_only_the_inner_credentials_and_super_users(tmp_path, etcd):
    certs = certs_or_skip(tmp_path / "certs", ["controller"])
    conf = {**FAST, **certs.server_conf("controller", "enforcing"),
            **acl_conf("root", ROOT_PW, inner=("inner", INNER_PW)),
            "authConfigPath": str(tmp_path / "auth" / "auth.json")}
    controller = Controller(tmp_path / "ctl", etcd.endpoint, **conf)
    with controller:
        for who in (("inner", INNER_PW), ("root", ROOT_PW)):
            answer = asyncio.run(metadata(controller.addr, certs.ca, who))
            assert answer.code == ResponseCode.SUCCESS, (who[0], answer.remark)
        unsigned = asyncio.run(metadata(controller.addr, certs.ca, None))
        assert unsigned.code == ResponseCode.NO_PERMISSION and "not signed" in unsigned.remark

        async def create_normal_user() -> None:
            async with AdminClient("", credentials=("root", ROOT_PW), tls=tls_context(True, certs.ca)) as admin:
                await acl_admin.create_user(admin, controller.addr,
                                            acl_admin.user_info("norm", "norm-pw-11", "Normal"))
        asyncio.run(create_normal_user())
        normal = asyncio.run(metadata(controller.addr, certs.ca, ("norm", "norm-pw-11")))
        assert normal.code == ResponseCode.NO_PERMISSION and "Super users only" in normal.remark, normal.remark

        with socket.create_connection(("127.0.0.1", controller.port), timeout=10) as sock:  # plaintext: closed
            sock.sendall(b"".join(encode(RemotingCommand(int(RequestCode.CONTROLLER_GET_METADATA_INFO)))))
            try:
                assert sock.recv(4096) == b""
            except ConnectionResetError:
                pass
        printed = subprocess.run([sys.executable, "-m", "controller", "-c", str(controller.conf_path),
                                  "--print-config"], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
        assert "tls.server.mode=ENFORCING" in printed.stdout, printed.stdout[-2000:]
        output = controller.output() + printed.stdout + printed.stderr
        for secret in (ROOT_PW, INNER_PW, "norm-pw-11", certs.key("controller")):
            assert secret not in output
