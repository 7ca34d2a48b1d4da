"""mqcontroller's configuration: RocketMQ's keys and defaults, strict parsing, clear errors."""

from __future__ import annotations

import pytest

from common.errors import ConfigError
from controller.__main__ import main
from controller.config import ControllerConfig, load_controller_config
from controller.state import GroupState, StateError


def test_defaults_are_rocketmqs():
    config = ControllerConfig()
    assert config.listen_port == 9878
    assert config.scan_not_active_broker_interval == 5000
    assert config.controller_heart_beat_timeout_mills == 10_000
    assert config.enable_elect_unclean_master is False
    assert config.notify_broker_role_changed is True
    assert config.etcd_endpoints == [("127.0.0.1", 2379)]


def test_endpoints_and_keys_are_checked(tmp_path):
    path = tmp_path / "controller.conf"
    path.write_text("controllerStoreEtcdEndpoints=10.0.0.1:2379;10.0.0.2:2379, http://10.0.0.3:2379\n")
    assert len(load_controller_config(path).etcd_endpoints) == 3
    for text, needle in (
        ("controllerStoreEtcdEndpoints=10.0.0.1\n", "controllerStoreEtcdEndpoints"),
        ("enableElectUncleanMastr=true\n", "did you mean enableElectUncleanMaster"),
        ("controllerLeaseTtlSeconds=1\n", "etcd refuses leases under 2 s"),
        ("controllerStorePathPrefix=pyrmq\n", "must start with '/'"),
    ):
        path.write_text(text)
        with pytest.raises(ConfigError, match=needle):
            load_controller_config(path)


def test_print_config_lists_every_key(capsys):
    assert main(["--print-config"]) == 0
    out = capsys.readouterr().out
    assert "controllerStoreEtcdEndpoints=127.0.0.1:2379" in out and "listenPort=9878" in out


@pytest.mark.parametrize("name", ["", "a/b", "x" * 128, "broker a", "ü"])
def test_group_names_must_be_safe_inside_an_etcd_key(name):
    with pytest.raises(StateError):
        GroupState("c", name).check()
