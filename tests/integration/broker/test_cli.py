"""``python -m broker``: a bad config exits 2 with one line naming the key; --print-config lists every key."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.procs import REPO_ROOT

pytestmark = pytest.mark.integration


def run_broker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker", *args], cwd=REPO_ROOT, check=False, capture_output=True, text=True, timeout=30
    )


def test_an_unknown_key_exits_2_with_one_line_naming_the_closest_key(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerRol=SLAVE\n")
    done = run_broker("-c", str(conf))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "brokerRol" in done.stderr and "brokerRole" in done.stderr


def test_a_master_with_a_nonzero_broker_id_exits_2(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerRole=SYNC_MASTER\nbrokerId=1\n")
    done = run_broker("-c", str(conf))
    assert done.returncode == 2 and "brokerId" in done.stderr


def test_print_config_lists_the_effective_keys_of_both_config_classes(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=broker-x\nflushDiskType=SYNC_FLUSH\n")
    done = run_broker("-c", str(conf), "--print-config")
    assert done.returncode == 0
    lines = dict(line.split("=", 1) for line in done.stdout.splitlines())
    assert lines["brokerName"] == "broker-x" and lines["flushDiskType"] == "SYNC_FLUSH"
    assert lines["registerNameServerPeriod"] == "30000" and lines["messageDelayLevel"].startswith("1s 5s")


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (b"brokerName=broker-a\nbrokerIP1=10.0.\xff.1\n", "line 2, column 16"),  # was a UnicodeDecodeError traceback
        (b"haListenPort=99999\n", "haListenPort"),  # booted on a wrapped port and advertised the wrong one
        (b"haListenPort=-5\n", "haListenPort"),  # silently became listenPort + 1
        (b"metricsPromExporterPort=70000\n", "metricsPromExporterPort"),
        (b"mappedFileSizeCommitLog=100000000000000000000\n", "mappedFileSizeCommitLog"),  # booted, every send failed
    ],
)
def test_a_bad_value_exits_2_with_one_line_before_anything_starts(tmp_path, content, named):
    conf = tmp_path / "broker.conf"
    conf.write_bytes(content + f"storePathRootDir={tmp_path / 'store'}\n".encode())
    done = run_broker("-c", str(conf))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and named in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize(
    ("content", "named"),
    [
        ("brokerRole=ASYNC_MASTER\nlistenPort=23911\nhaListenPort=23911\n", ("haListenPort", "listenPort")),
        ("listenPort=23911\nfastListenPort=23911\n", ("fastListenPort", "listenPort")),
        ("listenPort=23911\ngrpcServerPort=23909\n", ("grpcServerPort", "fastListenPort 23909 (listenPort - 2)")),
        ("listenPort=23911\nmetricsExporterType=PROM\nmetricsPromExporterPort=23911\n",
         ("metricsPromExporterPort", "listenPort")),
        ("grpcServerPort=23931\nmetricsExporterType=PROM\nmetricsPromExporterPort=23931\n",
         ("metricsPromExporterPort", "grpcServerPort")),
    ],
)
def test_two_keys_naming_one_port_exit_2_at_load_with_one_line_naming_both(tmp_path, content, named):
    """Issue 22 item 9: a clash was found only when binding (exit 1, after the store was locked)."""
    conf = tmp_path / "broker.conf"
    conf.write_text(content + f"storePathRootDir={tmp_path / 'store'}\n")
    done = run_broker("-c", str(conf))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert all(key in done.stderr for key in named), done.stderr
    assert not (tmp_path / "store").exists()


@pytest.mark.parametrize("path", ["/proc/pyrmq-store", "/proc/self/fdinfo", "/sys/pyrmq"])
def test_a_store_under_a_kernel_pseudo_filesystem_exits_2_with_one_line(tmp_path, path):
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={path}\nlistenPort=23941\ngrpcServerPort=0\n")
    done = run_broker("-c", str(conf))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "storePathRootDir" in done.stderr and path in done.stderr
