"""The failed-authentication budget's two keys: read from broker.conf, refused below 1 with the key named."""

from __future__ import annotations

import pytest

from broker.auth.setup import install
from broker.config import load_broker_settings
from common.errors import ConfigError


def conf(tmp_path, text: str):
    path = tmp_path / "broker.conf"
    path.write_text(text + f"storePathRootDir={tmp_path / 'store'}\n")
    return path


def test_the_budget_keys_reach_the_gate(tmp_path):
    settings = load_broker_settings(conf(tmp_path, "authenticationEnabled=true\nauthenticationFailureBurst=5\n"
                                                   "authenticationFailureRefillMillis=60000\n"), environ={})
    gate = install(settings.auth, tmp_path / "config", [])
    assert (gate.throttle.burst, gate.throttle.per_s) == (5.0, 1000 / 60000)
    defaults = install(load_broker_settings(conf(tmp_path, "authenticationEnabled=true\n"), environ={}).auth,
                       tmp_path / "config2", [])
    assert (defaults.throttle.burst, defaults.throttle.per_s) == (20.0, 2.0)


@pytest.mark.parametrize("key", ["authenticationFailureBurst", "authenticationFailureRefillMillis"])
def test_a_budget_below_one_is_refused_naming_its_key(tmp_path, key):
    with pytest.raises(ConfigError, match=key):
        load_broker_settings(conf(tmp_path, f"authenticationEnabled=true\n{key}=0\n"), environ={})
