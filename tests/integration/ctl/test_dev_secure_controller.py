"""`mqctl dev up --secure --controller` for real: TLS enforcing and ACL 2.0 on etcd's controller-mode cluster. The
brokers reach the controller (embedded in the nameserver, on its port) over TLS with their inner credentials, so
every group gets a master and its whole SyncStateSet; the controller's port answers the admin (a Super user) and
refuses an unsigned request, a Normal user and plaintext."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.etcd import ensure_etcd
from tests.integration.ctl.cli import mqctl, ok_json

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]


def test_dev_up_secure_controller_elects_over_tls_and_the_controller_answers_only_super_users(tmp_path: Path):
    binary, why = ensure_etcd()
    if binary is None:
        pytest.skip(why)
    root = (tmp_path / "dev").resolve()
    try:
        up = ok_json("dev", "up", "--controller", "--secure", "--dir", str(root), "--commitlog-mb", "4")
        namesrv = up["namesrvAddr"]
        assert up["syncStateSets"] == {"broker-a": [1, 2, 3], "broker-b": [1, 2, 3]}, up  # elected over TLS
        ca = str(root / "tls" / "ca.pem")
        secret = (root / "admin-secret").read_text().strip()
        admin = {"MQCTL_TLS": "true", "MQCTL_TLS_CA": ca, "MQCTL_ACCESS_KEY": "admin", "MQCTL_SECRET_KEY": secret}
        listed = mqctl("getSyncStateSet", "-n", namesrv, "-b", "broker-a", "--json", env=admin)
        assert listed.exit_code == 0, listed.stderr
        [state] = json.loads(listed.stdout)
        assert sorted(state["syncStateSet"]) == [1, 2, 3]

        unsigned = mqctl("getSyncStateSet", "-n", namesrv, "-a", namesrv, "-b", "broker-a",
                         env={"MQCTL_TLS": "true", "MQCTL_TLS_CA": ca})
        assert unsigned.exit_code == 1 and "not signed" in unsigned.stderr, unsigned.stderr
        assert mqctl("createUser", "-n", namesrv, "-c", "DefaultCluster", "-u", "nora", "-p", "nora-pw-8",
                     env=admin).exit_code == 0
        normal = mqctl("getSyncStateSet", "-n", namesrv, "-a", namesrv, "-b", "broker-a",
                       env={**admin, "MQCTL_ACCESS_KEY": "nora", "MQCTL_SECRET_KEY": "nora-pw-8"})
        assert normal.exit_code == 1 and "Super users only" in normal.stderr, normal.stderr
        plain = mqctl("getSyncStateSet", "-n", namesrv, "-a", namesrv, "-b", "broker-a")
        assert plain.exit_code == 1 and "connect with --tls" in plain.stderr, plain.stderr
        for out in (unsigned, normal, plain):
            assert secret not in out.stdout + out.stderr and "nora-pw-8" not in out.stdout + out.stderr
    finally:
        down = mqctl("dev", "down", "--dir", str(root))
    assert down.exit_code == 0, down.stderr
    logs = "".join(p.read_text(errors="replace") for p in root.glob("*/*.log"))
    assert secret not in logs and "nora-pw-8" not in logs
