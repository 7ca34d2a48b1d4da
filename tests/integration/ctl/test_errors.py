"""Failures a user meets first: one line on stderr with what to do, exit 1; bad usage exits 2."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.integration.ctl.cli import mqctl
from harness.procs import REPO_ROOT, free_port

pytestmark = pytest.mark.integration


def test_an_unreachable_nameserver_is_one_line_with_a_hint_and_exit_1():
    addr = f"127.0.0.1:{free_port()}"
    result = mqctl("clusterList", "-n", addr)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"error: no nameserver reachable at {addr} (cannot connect); start one or pass -n host:port / set NAMESRV_ADDR"
    ]


def test_the_nameserver_address_comes_from_namesrv_addr_when_n_is_not_given():
    addr = f"127.0.0.1:{free_port()}"
    result = mqctl("topicList", env={"NAMESRV_ADDR": addr})
    assert result.exit_code == 1
    assert f"no nameserver reachable at {addr}" in result.stderr


def test_every_nameserver_of_the_list_is_tried_before_giving_up():
    addrs = f"127.0.0.1:{free_port()};127.0.0.1:{free_port()}"
    result = mqctl("topicList", "-n", addrs)
    assert result.exit_code == 1
    assert f"no nameserver reachable at {addrs}" in result.stderr


def test_an_unreachable_broker_address_is_one_line_with_a_hint():
    addr = f"127.0.0.1:{free_port()}"
    result = mqctl("brokerStatus", "-b", addr)
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        (
            f"error: broker {addr} did not answer GET_BROKER_RUNTIME_INFO (cannot connect); "
            "check that it runs (mqctl clusterList) or pass another -b"
        )
    ]


def test_an_unknown_option_is_a_usage_error_with_exit_2():
    result = mqctl("clusterList", "--no-such-flag")
    assert result.exit_code == 2
    assert "No such option: --no-such-flag" in result.stderr


def test_a_missing_required_option_is_a_usage_error_with_exit_2():
    result = mqctl("topicRoute")
    assert result.exit_code == 2
    assert "Missing option '-t'" in result.stderr


def test_an_unknown_command_is_a_usage_error_with_exit_2():
    result = mqctl("clusterlist")
    assert result.exit_code == 2
    assert "No such command 'clusterlist'" in result.stderr


def test_help_lists_the_mqadmin_command_names():
    result = mqctl("--help")
    assert result.exit_code == 0
    for name in (
        "clusterList",
        "brokerStatus",
        "haStatus",
        "wipeWritePerm",
        "addWritePerm",
        "topicList",
        "topicRoute",
        "topicStatus",
        "updateTopic",
        "deleteTopic",
        "updateSubGroup",
        "deleteSubGroup",
        "consumerProgress",
        "consumerConnection",
        "sendMessage",
        "queryMsgById",
        "queryMsgByKey",
        "queryMsgByUniqueKey",
        "consumeMessage",
        "kill",
        "partition",
        "heal",
        "dev",
    ):
        assert name in result.stdout


def test_chaos_on_a_compose_project_that_does_not_exist_says_so_in_one_line():
    project = f"nosuchproject{int(time.time())}"
    result = mqctl("kill", "master", "-b", "broker-a", "--project", project)
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    if "no Docker engine reachable" in lines[0]:
        assert lines[0].endswith("start dockerd or use `mqctl dev up`")
    else:
        assert lines[0].startswith(f"error: no such compose project {project}: ")
        assert lines[0].endswith("start it with `docker compose up -d`, or pass --project / set COMPOSE_PROJECT_NAME")


def test_chaos_takes_the_project_from_compose_project_name():
    project = f"nosuchenvproject{int(time.time())}"
    result = mqctl("pause", "namesrv", env={"COMPOSE_PROJECT_NAME": project})
    assert result.exit_code == 1
    assert project in result.stderr or "no Docker engine reachable" in result.stderr


def test_partition_and_heal_on_a_missing_project_fail_the_same_way():
    for args in (["partition", "broker-a", "broker-a-s"], ["heal"]):
        result = mqctl(*args, "--project", "nosuchproject_partition")
        assert result.exit_code == 1
        assert len(result.stderr.splitlines()) == 1


def test_importing_the_cli_loads_neither_the_sdk_nor_grpc_nor_docker_so_help_stays_fast():
    code = "import sys, ctl.app; print(sorted(m for m in ('grpc', 'docker', 'client') if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=30, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
