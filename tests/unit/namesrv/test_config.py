"""NamesrvConfig: RocketMQ's keys and defaults, strict parsing, --print-config rendering."""

from __future__ import annotations

import pytest

from common import conf
from common.errors import ConfigError
from namesrv.config import NamesrvConfig, load_namesrv_config


def test_no_file_gives_rocketmq_defaults():
    config = load_namesrv_config(None)
    assert config == NamesrvConfig()
    assert config.listen_port == 9876
    assert config.scan_not_active_broker_interval == 10_000
    assert config.broker_channel_expired_time == 120_000
    assert config.order_message_enable is False
    # RocketMQ 5's exporter default: off, so a default nameserver and a default broker never both want 5557
    assert not config.metrics_enabled and config.metrics_prom_exporter_port == 5557
    assert config.listen_host == "0.0.0.0"


def test_file_keys_are_rocketmq_camel_case(tmp_path):
    path = tmp_path / "namesrv.conf"
    path.write_text(
        "# comment\nlistenPort=19876\nbrokerChannelExpiredTime = 1500\nscanNotActiveBrokerInterval: 300\n"
        "metricsExporterType=PROM\nlistenHost=127.0.0.1\norderMessageEnable=TRUE\n"
    )
    config = load_namesrv_config(path)
    assert (config.listen_port, config.broker_channel_expired_time, config.scan_not_active_broker_interval) == (
        19876,
        1500,
        300,
    )
    assert config.metrics_enabled
    assert config.listen_host == "127.0.0.1" and config.order_message_enable


def test_unknown_key_names_the_file_and_the_closest_key(tmp_path):
    path = tmp_path / "namesrv.conf"
    path.write_text("listenPrt=9876\n")
    with pytest.raises(ConfigError) as err:
        load_namesrv_config(path)
    assert str(err.value) == f"{path}: listenPrt: unknown key; did you mean listenPort?"


@pytest.mark.parametrize(
    "line, key",
    [
        ("listenPort=70000", "listenPort"),
        ("brokerChannelExpiredTime=0", "brokerChannelExpiredTime"),
        ("scanNotActiveBrokerInterval=-5", "scanNotActiveBrokerInterval"),
        ("metricsExporterType=OTLP", "metricsExporterType"),
        ("listenPort=abc", "listenPort"),
        ("serverChannelMaxIdleTimeSeconds=0", "serverChannelMaxIdleTimeSeconds"),
        ("serverMaxHeldBytes=1000", "serverMaxHeldBytes"),
        ("serverFrameTimeoutMillis=0", "serverFrameTimeoutMillis"),
    ],
)
def test_bad_value_names_the_file_and_the_key(tmp_path, line, key):
    path = tmp_path / "namesrv.conf"
    path.write_text(line + "\n")
    with pytest.raises(ConfigError) as err:
        load_namesrv_config(path)
    assert str(err.value).startswith(f"{path}: {key}: ")


def test_print_config_renders_every_key_in_a_form_the_loader_reads_back(tmp_path):
    config = NamesrvConfig(listen_port=1234, metrics_exporter_type="DISABLE")
    text = "".join(f"{k}={v}\n" for k, v in conf.render(config))
    path = tmp_path / "printed.conf"
    path.write_text(text)
    assert load_namesrv_config(path) == config
    assert [k for k, _ in conf.render(config)] == [
        "listenPort",
        "listenHost",
        "scanNotActiveBrokerInterval",
        "brokerChannelExpiredTime",
        "orderMessageEnable",
        "kvConfigPath",
        "serverChannelMaxIdleTimeSeconds",
        "serverMaxHeldBytes",
        "serverFrameTimeoutMillis",
        "metricsExporterType",
        "metricsPromExporterPort",
        "metricsPromExporterHost",
        "maxKvConfigEntries",
        "maxKvConfigEntriesPerNamespace",
        "enableControllerInNamesrv",
    ]


def test_the_embedded_controller_reads_its_keys_from_the_nameservers_file(tmp_path):
    path = tmp_path / "namesrv.conf"
    path.write_text("controllerStoreEtcdEndpoints=10.0.0.1:2379\n")
    assert load_namesrv_config(path).controller is None  # off unless enableControllerInNamesrv=true
    path.write_text("enableControllerInNamesrv=true\ncontrollerStoreEtcdEndpoints=10.0.0.1:2379\n")
    assert load_namesrv_config(path).controller.etcd_endpoints == [("10.0.0.1", 2379)]
    path.write_text("enableControllerInNamesrv=true\ncontrollerStoreEtcdEndpoints=nope\n")
    with pytest.raises(ConfigError, match="controllerStoreEtcdEndpoints"):
        load_namesrv_config(path)


def test_controller_advertised_addr_comes_from_the_environment_over_the_file(tmp_path):
    """One conf for every nameserver of a compose file: each is told its own address by CONTROLLER_ADVERTISED_ADDR."""
    path = tmp_path / "namesrv.conf"
    path.write_text("enableControllerInNamesrv=true\ncontrollerAdvertisedAddr=ns:9876\n")
    assert load_namesrv_config(path, environ={}).controller.controller_advertised_addr == "ns:9876"
    env = {"CONTROLLER_ADVERTISED_ADDR": "10.157.0.12:9876"}
    assert load_namesrv_config(path, environ=env).controller.controller_advertised_addr == "10.157.0.12:9876"
