"""Strict config loading: unknown keys and bad values stop startup with the file, key and closest valid key."""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path

import pytest

from broker.config import BrokerRole, load_broker_settings
from common import conf
from common.errors import ConfigError


class Color(enum.Enum):
    RED = "RED"
    BLUE = "BLUE"


@dataclasses.dataclass(frozen=True)
class Sample:
    listen_port: int = 1
    slave_read_enable: bool = False
    broker_ip1: str = dataclasses.field(default="x", metadata={"key": "brokerIP1"})
    ratio: float = 0.5
    color: Color = Color.RED


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "broker.conf"
    path.write_text(text)
    return path


def test_keys_are_camel_case_with_explicit_overrides():
    assert set(conf.conf_keys(Sample)) == {"listenPort", "slaveReadEnable", "brokerIP1", "ratio", "color"}


def test_values_are_converted_by_type_and_comments_are_skipped(tmp_path):
    path = write(tmp_path, "# comment\n! also\nlistenPort = 10911\nslaveReadEnable=TRUE\nbrokerIP1: 10.0.0.1\n"
                           "ratio=0.25\ncolor=blue\n")
    (sample,) = conf.load((Sample,), path)
    assert sample == Sample(listen_port=10911, slave_read_enable=True, broker_ip1="10.0.0.1", ratio=0.25,
                            color=Color.BLUE)


def test_unknown_key_names_file_line_key_and_closest_valid_key(tmp_path):
    path = write(tmp_path, "listenPrt=1\n")
    with pytest.raises(ConfigError) as err:
        conf.load((Sample,), path)
    text = str(err.value)
    assert str(path) in text and "listenPrt" in text and "did you mean listenPort?" in text


def test_a_wrong_case_key_suggests_the_right_spelling(tmp_path):
    with pytest.raises(ConfigError, match="did you mean brokerIP1"):
        conf.load((Sample,), write(tmp_path, "brokerip1=1.2.3.4\n"))


@pytest.mark.parametrize(
    ("line", "problem"),
    [("listenPort=ten", "not an integer"), ("slaveReadEnable=yes", "not a boolean"), ("color=GREEN", "RED, BLUE"),
     ("ratio=much", "not a number")],
)
def test_bad_values_are_refused_with_what_to_write(tmp_path, line, problem):
    with pytest.raises(ConfigError, match=problem):
        conf.load((Sample,), write(tmp_path, line + "\n"))


def test_a_key_given_twice_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="given twice"):
        conf.load((Sample,), write(tmp_path, "listenPort=1\nlistenPort=2\n"))


def test_a_line_without_separator_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="not 'key=value'"):
        conf.load((Sample,), write(tmp_path, "listenPort\n"))


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        conf.load((Sample,), tmp_path / "nope.conf")


def test_render_gives_every_key_in_declaration_order():
    keys = [k for k, _ in conf.render(Sample())]
    assert keys == ["listenPort", "slaveReadEnable", "brokerIP1", "ratio", "color"]
    assert dict(conf.render(Sample()))["color"] == "RED"


def test_broker_conf_feeds_both_config_classes(tmp_path):
    path = write(tmp_path, "brokerName=broker-a\nbrokerId=1\nbrokerRole=SLAVE\nmappedFileSizeCommitLog=65536\n"
                           "haMasterAddress=10.0.0.1:10912\n")
    settings = load_broker_settings(path, environ={})
    assert settings.broker.broker_name == "broker-a" and settings.role is BrokerRole.SLAVE
    assert settings.store.mapped_file_size_commit_log == 65536
    assert settings.ha_port == settings.broker.listen_port + 1


def test_a_master_with_a_slave_id_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="needs brokerId=0"):
        load_broker_settings(write(tmp_path, "brokerRole=SYNC_MASTER\nbrokerId=1\n"), environ={})


def test_a_slave_with_id_zero_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="SLAVE needs brokerId >= 1"):
        load_broker_settings(write(tmp_path, "brokerRole=SLAVE\nbrokerId=0\n"), environ={})


def test_environment_overrides_deployment_keys(tmp_path):
    settings = load_broker_settings(write(tmp_path, "brokerIP1=10.0.0.1\n"),
                                    environ={"NAMESRV_ADDR": "ns1:9876;ns2:9876", "BROKER_IP1": "192.0.2.7"})
    assert settings.broker.namesrv_list == ["ns1:9876", "ns2:9876"]
    assert settings.broker.broker_ip1 == "192.0.2.7"


def test_the_controller_list_comes_from_the_environment_over_the_file(tmp_path):
    """docker-compose.controller.yml names the controllers by the addresses the host reaches too, so the list the
    brokers report (clusterList's controller footer) works from outside the compose network."""
    path = write(tmp_path, "enableControllerMode=true\ncontrollerAddr=ns1:9876\nhaAuthSecret=0123456789abcdef0123\n")
    assert load_broker_settings(path, environ={}).controller.controller_addrs == ["ns1:9876"]
    env = {"CONTROLLER_ADDR": "10.157.0.11:9876;10.157.0.12:9876"}
    assert load_broker_settings(path, environ=env).controller.controller_addrs == ["10.157.0.11:9876",
                                                                                 "10.157.0.12:9876"]


def test_a_malformed_nameserver_list_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="not host:port"):
        load_broker_settings(write(tmp_path, "namesrvAddr=ns1:9876;ns2\n"), environ={})


def test_consume_queue_file_size_is_rounded_up_to_whole_units(tmp_path):
    settings = load_broker_settings(write(tmp_path, "mappedFileSizeConsumeQueue=1001\n"), environ={})
    assert settings.store.mapped_file_size_consume_queue == 1020


def test_bad_delay_levels_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="messageDelayLevel"):
        load_broker_settings(write(tmp_path, "messageDelayLevel=1s 5x\n"), environ={})


# ranges, ASCII numbers and encoding (issue 12 item 6) ------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("haListenPort=99999", "haListenPort"),
        ("haListenPort=-5", "haListenPort"),  # was silently listenPort + 1
        ("metricsPromExporterPort=70000", "metricsPromExporterPort"),
        ("listenPort=65536", "listenPort"),
        ("fastListenPort=-2", "fastListenPort"),
        ("mappedFileSizeCommitLog=100000000000000000000", "mappedFileSizeCommitLog"),  # 1e20: booted, sends failed
        ("mappedFileSizeCommitLog=1024", "mappedFileSizeCommitLog"),
        ("mappedFileSizeConsumeQueue=0", "mappedFileSizeConsumeQueue"),
        ("flushIntervalCommitLog=0", "flushIntervalCommitLog"),
        ("slaveTimeout=-1", "slaveTimeout"),
        ("diskSpaceWarningLevelRatio=101", "diskSpaceWarningLevelRatio"),
        ("defaultTopicQueueNums=0", "defaultTopicQueueNums"),
        ("brokerId=-1", "brokerId"),
    ],
)
def test_broker_values_out_of_range_are_refused_naming_key_range_and_reason(tmp_path, line, key):
    with pytest.raises(ConfigError) as err:
        load_broker_settings(write(tmp_path, line + "\n"), environ={})
    text = str(err.value)
    assert f": {key}: " in text and "out of range" in text
    assert "\n" not in text


def test_a_range_error_says_what_the_special_value_means(tmp_path):
    with pytest.raises(ConfigError, match=r"between 0 and 65535; a TCP port; 0 means listenPort \+ 1"):
        load_broker_settings(write(tmp_path, "haListenPort=99999\n"), environ={})


def test_values_at_the_range_edges_are_accepted(tmp_path):
    settings = load_broker_settings(
        write(tmp_path, "haListenPort=65535\nmetricsPromExporterPort=0\nfastListenPort=-1\n"
                        f"mappedFileSizeCommitLog={2**31 - 1}\nmappedFileSizeConsumeQueue=20\n"),
        environ={},
    )
    assert settings.ha_port == 65535 and settings.broker.metrics_prom_exporter_port == 0
    assert settings.store.mapped_file_size_commit_log == 2**31 - 1


@pytest.mark.parametrize(
    ("line", "key"),
    [("listenPort=70000", "listenPort"), ("metricsPromExporterPort=-1", "metricsPromExporterPort"),
     ("scanNotActiveBrokerInterval=0", "scanNotActiveBrokerInterval")],
)
def test_namesrv_values_out_of_range_are_refused(tmp_path, line, key):
    from namesrv.config import load_namesrv_config

    with pytest.raises(ConfigError, match=f": {key}: .*out of range"):
        load_namesrv_config(write(tmp_path, line + "\n"))


def test_every_default_is_within_its_declared_range():
    from broker.config import BrokerConfig, MessageStoreConfig
    from namesrv.config import NamesrvConfig

    for cls in (BrokerConfig, MessageStoreConfig, NamesrvConfig):
        obj = cls()
        for field in dataclasses.fields(cls):
            assert conf.range_problem(field, getattr(obj, field.name)) is None, (cls.__name__, field.name)


def test_config_objects_built_in_code_are_range_checked_too():
    from broker.config import MessageStoreConfig

    with pytest.raises(ValueError, match="haListenPort: 99999 is out of range"):
        MessageStoreConfig(ha_listen_port=99999)


@pytest.mark.parametrize("value", ["²", "٣", "1_000", "0x10", "1e3", " ", "+-1"])
def test_integers_are_ascii_decimal_only(tmp_path, value):
    with pytest.raises(ConfigError, match="not an integer"):
        conf.load((Sample,), write(tmp_path, f"listenPort={value}\n"))


@pytest.mark.parametrize("value", ["٣.5", "nan", "inf", "1_0.5"])
def test_floats_are_ascii_only(tmp_path, value):
    with pytest.raises(ConfigError, match="not a number"):
        conf.load((Sample,), write(tmp_path, f"ratio={value}\n"))


def test_signed_and_padded_integers_still_parse(tmp_path):
    (sample,) = conf.load((Sample,), write(tmp_path, "listenPort = +0042\nratio=-1.5e-1\n"))
    assert sample.listen_port == 42 and sample.ratio == -0.15


def test_a_byte_that_is_not_utf8_is_a_config_error_naming_line_and_column(tmp_path):
    path = tmp_path / "broker.conf"
    path.write_bytes(b"listenPort=1\nbrokerIP1=10.0.\xff.1\n")
    with pytest.raises(ConfigError) as err:
        conf.load((Sample,), path)
    text = str(err.value)
    assert str(path) in text and "line 2, column 16" in text and "0xff" in text and "UTF-8" in text
