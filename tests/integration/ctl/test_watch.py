"""Repeat mode (-i SECONDS, bounded by --count) of clusterList, brokerStatus and consumerProgress."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys

import pytest

from tests.integration.ctl.cli import CLUSTER, flat, mqctl, ok, ok_json, routed_topic, unique
from harness.procs import REPO_ROOT

pytestmark = pytest.mark.integration

INTERVAL = "0.2"
CLEAR_SCREEN = "\x1b[2J"


def json_documents(text: str) -> list:
    """The JSON documents printed one after another."""
    decoder, docs, pos = json.JSONDecoder(), [], 0
    while pos < len(text):
        if text[pos].isspace():
            pos += 1
            continue
        doc, pos = decoder.raw_decode(text, pos)
        docs.append(doc)
    return docs


def test_cluster_list_with_count_2_prints_two_whole_tables_separated_by_a_blank_line(cluster):
    out = ok("clusterList", "-n", cluster.namesrv_addr, "-i", INTERVAL, "--count", "2").stdout
    blocks = out.rstrip("\n").split("\n\n")
    assert len(blocks) == 2, out
    for block in blocks:
        lines = block.splitlines()
        assert lines[0].startswith("#Cluster Name")
        assert sorted((line.split()[1], line.split()[2]) for line in lines[1:]) == [
            ("broker-a", "0"), ("broker-a", "1"), ("broker-b", "0"), ("broker-b", "1")
        ]
    assert "\x1b" not in out  # no terminal codes on a pipe


def test_broker_status_repeated_as_json_prints_one_document_per_report(cluster):
    out = ok("brokerStatus", "-n", cluster.namesrv_addr, "-c", CLUSTER, "-i", INTERVAL, "--count", "2", "--json")
    docs = json_documents(out.stdout)
    assert len(docs) == 2
    for doc in docs:
        assert set(doc) == {cluster.addr(n) for n in ("broker-a", "broker-a-s", "broker-b", "broker-b-s")}
        assert all("commitLogMaxOffset" in table for table in doc.values())


def test_consumer_progress_repeated_shows_the_group_catching_up_between_reports(cluster):
    topic = routed_topic(cluster)
    group = unique("g_watch")
    ok("sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", "one", "-b", "broker-a", "-i", "0")
    ok_json("consumeMessage", "-n", cluster.namesrv_addr, "-t", topic, "-g", group, "--timeout", "0.5")
    ok("sendMessage", "-n", cluster.namesrv_addr, "-t", topic, "-p", "two", "-b", "broker-a", "-i", "0")
    args = ("consumerProgress", "-n", cluster.namesrv_addr, "-g", group, "-t", topic, "-i", INTERVAL, "--count", "3")
    docs = json_documents(ok(*args, "--json").stdout)
    assert [d["diffTotal"] for d in docs] == [1, 1, 1]
    text = ok(*args).stdout
    assert text.count("#Topic") == 3 and text.count("Diff Total: 1") == 3


def test_a_failing_report_is_shown_and_the_loop_goes_on_exit_code_from_the_last_one(cluster):
    group = unique("g_never")
    result = mqctl("consumerProgress", "-n", cluster.namesrv_addr, "-g", group, "-i", INTERVAL, "--count", "2")
    assert result.exit_code == 1
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: no consume progress for group {group}; the group has committed no offset yet; "
                      "consume first (mqctl consumeMessage -g ...) or check the name"] * 2


def test_count_without_an_interval_is_a_usage_error(cluster):
    result = mqctl("clusterList", "-n", cluster.namesrv_addr, "--count", "2")
    assert result.exit_code == 2
    assert "--count repeats a report: pass -i SECONDS with it" in flat(result.stderr)


def test_on_a_terminal_each_report_redraws_the_screen_under_a_header(cluster):
    """The real console script on a pseudo-terminal: the screen is cleared once, each report starts at the
    top-left corner with an 'Every 0.2s' header, and the process ends on its own after --count reports."""
    leader, follower = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "COLUMNS": "200"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctl.app", "clusterList", "-n", cluster.namesrv_addr, "-i", INTERVAL, "--count", "2"],
        stdin=subprocess.DEVNULL, stdout=follower, stderr=subprocess.PIPE, env=env, cwd=REPO_ROOT,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the process closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    with proc.stderr:
        assert proc.wait(timeout=60) == 0, proc.stderr.read().decode()
    screen = b"".join(chunks).decode()
    assert screen.count(CLEAR_SCREEN) == 1
    frames = screen.split("\x1b[H")[1:]
    assert len(frames) == 2
    for frame in frames:
        assert frame.startswith("Every 0.2s: mqctl clusterList")
        assert frame.count("#Cluster Name") == 1
