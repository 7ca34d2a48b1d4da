"""The HA secret in the broker config: where it comes from, what is refused at load, and SYNC_MASTER's rule.

A SYNC_MASTER without a secret would let any TCP peer confirm its sends (issue 12), so it does not start unless the
operator opts out with the key whose name says it is unsafe. The process-level exit code is checked at the end.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from broker.__main__ import render
from broker.config import load_broker_settings
from common.errors import ConfigError
from harness.procs import REPO_ROOT

SECRET = "0123456789abcdef0123456789abcdef"


def conf(tmp_path, text: str):
    path = tmp_path / "broker.conf"
    path.write_text(text + f"storePathRootDir={tmp_path / 'store'}\n")
    return path


def test_a_sync_master_without_a_secret_is_refused_and_told_how_to_make_one(tmp_path):
    with pytest.raises(ConfigError, match="SYNC_MASTER needs an HA secret") as err:
        load_broker_settings(conf(tmp_path, "brokerRole=SYNC_MASTER\n"), environ={})
    assert "secrets.token_hex" in err.value.hint and "haUnsafeAllowUnauthenticatedSlaves=true" in err.value.hint


def test_the_unsafe_opt_out_lets_a_sync_master_start_without_a_secret(tmp_path):
    s = load_broker_settings(conf(tmp_path, "brokerRole=SYNC_MASTER\nhaUnsafeAllowUnauthenticatedSlaves=true\n"),
                             environ={})
    assert s.store.read_ha_auth_secret() == b""


@pytest.mark.parametrize("role", ["ASYNC_MASTER", "SLAVE"])
def test_other_roles_start_without_a_secret(tmp_path, role):
    broker_id = 1 if role == "SLAVE" else 0
    s = load_broker_settings(conf(tmp_path, f"brokerRole={role}\nbrokerId={broker_id}\n"), environ={})
    assert s.store.read_ha_auth_secret() == b""


def test_the_secret_comes_from_the_first_line_of_the_secret_file_or_the_env_named_file(tmp_path):
    secret_file = tmp_path / "ha-auth-secret"
    secret_file.write_text(SECRET + "\n")
    s = load_broker_settings(conf(tmp_path, f"brokerRole=SYNC_MASTER\nhaAuthSecretFile={secret_file}\n"), environ={})
    assert s.store.read_ha_auth_secret() == SECRET.encode()
    s = load_broker_settings(conf(tmp_path, "brokerRole=SYNC_MASTER\n"),
                             environ={"HA_AUTH_SECRET_FILE": str(secret_file)})
    assert s.store.read_ha_auth_secret() == SECRET.encode()


@pytest.mark.parametrize(("text", "match"), [
    (f"haAuthSecret={SECRET}\nhaAuthSecretFile=/x\n", "not both"),
    ("haAuthSecret=short\n", "at least 16 bytes"),
    (f"haAuthSecret={SECRET}\nhaUnsafeAllowUnauthenticatedSlaves=true\n", "contradicts"),
    ("haAuthSecretFile=/nonexistent/ha-auth-secret\n", "cannot be read"),
    ("haDisconnectedSlaveKeepInterval=-1\n", "haDisconnectedSlaveKeepInterval"),
])
def test_bad_secret_settings_are_refused_at_load(tmp_path, text, match):
    with pytest.raises(ConfigError, match=match):
        load_broker_settings(conf(tmp_path, text), environ={})


def test_a_secret_file_with_a_short_first_line_is_refused(tmp_path):
    secret_file = tmp_path / "ha-auth-secret"
    secret_file.write_text("tiny\n" + SECRET)
    with pytest.raises(ConfigError, match="holds 4 bytes on its first line"):
        load_broker_settings(conf(tmp_path, f"haAuthSecretFile={secret_file}\n"), environ={})


def test_print_config_hides_an_inline_secret(tmp_path):
    s = load_broker_settings(conf(tmp_path, f"brokerRole=SYNC_MASTER\nhaAuthSecret={SECRET}\n"), environ={})
    pairs = dict(render(s))
    assert pairs["haAuthSecret"] == "<set>" and SECRET not in str(render(s))


def test_the_broker_process_exits_2_with_one_line_for_a_sync_master_without_a_secret(tmp_path):
    path = conf(tmp_path, "brokerRole=SYNC_MASTER\n")
    done = subprocess.run([sys.executable, "-m", "broker", "-c", str(path)], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "haAuthSecretFile" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "store").exists()


def test_mqctl_dev_up_gives_its_cluster_one_private_secret_that_every_broker_conf_names(tmp_path):
    from ctl.dev_layout import MEMBERS, ensure_ha_secret, member_conf, write_conf

    path = ensure_ha_secret(tmp_path)
    first = path.read_text()
    assert path.stat().st_mode & 0o777 == 0o600 and len(first.strip()) == 64
    assert ensure_ha_secret(tmp_path) == path and path.read_text() == first  # a later `up` keeps it (and the stores)
    for member in MEMBERS[1:]:
        values, _ = member_conf(member, tmp_path / member.name, "127.0.0.1:9876", 4, path)
        assert values["haAuthSecretFile"] == str(path)
        conf_path = tmp_path / f"{member.name}.conf"
        write_conf(conf_path, values)
        settings = load_broker_settings(conf_path, environ={})  # broker-a is a SYNC_MASTER: it needs the secret
        assert settings.store.read_ha_auth_secret() == first.strip().encode()
