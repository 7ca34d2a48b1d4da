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


def test_a_malformed_nameserver_list_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="not host:port"):
        load_broker_settings(write(tmp_path, "namesrvAddr=ns1:9876;ns2\n"), environ={})


def test_consume_queue_file_size_is_rounded_up_to_whole_units(tmp_path):
    settings = load_broker_settings(write(tmp_path, "mappedFileSizeConsumeQueue=1001\n"), environ={})
    assert settings.store.mapped_file_size_consume_queue == 1020


def test_bad_delay_levels_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="messageDelayLevel"):
        load_broker_settings(write(tmp_path, "messageDelayLevel=1s 5x\n"), environ={})
