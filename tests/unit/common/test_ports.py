"""common.ports and the servers' port lists: a default nameserver and a default broker bind no common port, and a
taken or repeated port fails with the conf key to change."""

from __future__ import annotations

import pytest

from broker.config import load_broker_settings
from common.errors import ConfigError
from common.ports import ListenPort, PortInUseError, check_ports
from controller.config import load_controller_config
from namesrv.config import load_namesrv_config
from tests.ports import taken_port


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_default_nameserver_and_broker_confs_bind_disjoint_ports(tmp_path):
    namesrv = load_namesrv_config(None)
    broker = load_broker_settings(write(tmp_path, "broker.conf", "namesrvAddr=127.0.0.1:9876\nbrokerName=broker-a\n"),
                                  environ={})
    ns_ports = {p.key: p.port for p in namesrv.listen_ports()}
    broker_ports = {p.key: p.port for p in broker.listen_ports()}
    # RocketMQ's defaults; the metrics exporter is off on both, as in RocketMQ 5
    assert ns_ports == {"listenPort": 9876}
    assert broker_ports == {"listenPort": 10911, "fastListenPort": 10909, "haListenPort": 10912, "grpcServerPort": 8081}
    assert not set(ns_ports.values()) & set(broker_ports.values())


def test_the_metrics_port_is_bound_only_when_the_exporter_is_on(tmp_path):
    on = load_broker_settings(write(tmp_path, "b.conf", "brokerName=a\nmetricsExporterType=PROM\n"), environ={})
    assert ("metricsPromExporterPort", 5557) in [(p.key, p.port) for p in on.listen_ports()]
    ns = load_namesrv_config(write(tmp_path, "n.conf", "metricsExporterType=PROM\nmetricsPromExporterPort=5558\n"))
    assert [(p.key, p.port) for p in ns.listen_ports()] == [("listenPort", 9876), ("metricsPromExporterPort", 5558)]
    ctl = load_controller_config(write(tmp_path, "c.conf", "metricsExporterType=PROM\nmetricsPromExporterHost=::1\n"))
    assert [(p.key, p.port, p.host) for p in ctl.listen_ports()] == [
        ("listenPort", 9878, "0.0.0.0"), ("metricsPromExporterPort", 5558, "::1")]
    off = load_controller_config(write(tmp_path, "c.conf", "metricsPromExporterPort=5559\n"))
    assert [p.key for p in off.listen_ports()] == ["listenPort"]


@pytest.mark.parametrize("load", [load_namesrv_config, load_controller_config, load_broker_settings])
def test_every_server_refuses_an_exporter_type_that_is_not_rocketmqs_with_the_key_first(tmp_path, load):
    path = write(tmp_path, "x.conf", "metricsExporterType=OTLP\n")
    with pytest.raises(ConfigError) as info:
        load(path)
    assert str(info.value).startswith(f"{path}: metricsExporterType: 'OTLP' is not one of DISABLE, PROM")


def test_a_second_broker_moving_listen_port_moves_the_derived_ports_but_not_grpc(tmp_path):
    b = load_broker_settings(write(tmp_path, "b.conf", "brokerName=broker-b\nlistenPort=11911\n"), environ={})
    ports = {p.key: p for p in b.listen_ports()}
    assert (ports["fastListenPort"].port, ports["haListenPort"].port) == (11909, 11912)
    assert ports["fastListenPort"].derived == "listenPort - 2" and ports["haListenPort"].derived == "listenPort + 1"
    assert ports["grpcServerPort"].port == 8081  # the one key a second broker of a host must set itself


def test_a_slave_does_not_listen_for_slaves(tmp_path):
    slave = load_broker_settings(write(tmp_path, "s.conf", "brokerName=a\nbrokerRole=SLAVE\nbrokerId=1\n"), environ={})
    assert "haListenPort" not in {p.key for p in slave.listen_ports()}


def test_a_taken_port_names_its_key_and_the_conf_file():
    with taken_port() as port, pytest.raises(PortInUseError) as info:
        check_ports([ListenPort("listenPort", 0), ListenPort("grpcServerPort", port, hint="0 turns it off")],
                    server="broker b", source="/etc/b.conf")
    text = str(info.value)
    assert info.value.keys == ["grpcServerPort"]
    assert f"grpcServerPort {port} is in use" in text and "set grpcServerPort to a free port in /etc/b.conf" in text
    assert "(0 turns it off)" in text and text.startswith("broker b cannot listen")


def test_every_clash_is_reported_at_once_and_a_repeated_port_is_one():
    with taken_port() as port, pytest.raises(PortInUseError) as info:
        check_ports([ListenPort("listenPort", port), ListenPort("fastListenPort", port - 2, derived="listenPort - 2"),
                     ListenPort("haListenPort", port - 2)], server="broker b")
    assert set(info.value.keys) >= {"listenPort", "haListenPort"}
    assert "haListenPort" in str(info.value) and "is also fastListenPort" in str(info.value)


def test_port_zero_is_resolved_to_the_port_picked():
    bound = check_ports([ListenPort("listenPort", 0)], server="x")
    assert 0 < bound["listenPort"] < 65536
