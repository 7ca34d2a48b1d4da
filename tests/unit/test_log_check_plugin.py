"""harness.pytest_log_check in a pytest run of its own: a test whose server logged a programming error fails with the
excerpt, an expected error or an opted-out test passes, and in-process servers' captured records count too."""

from __future__ import annotations

import os

import pytest

from harness.procs import REPO_ROOT

pytest_plugins = ["pytester"]

INNER_TESTS = '''
import logging

import pytest

from harness.procs import NAMESRV_READY, ServerProcess, write_conf


def run_server(tmp_path, error):
    conf = write_conf(tmp_path / "s.conf", {"raise": error})
    with ServerProcess("tests.unit.log_check_server", conf, tmp_path / "s.log", NAMESRV_READY):
        pass


def test_attribute_error(tmp_path):
    run_server(tmp_path, "AttributeError")


def test_connection_reset(tmp_path):
    run_server(tmp_path, "ConnectionResetError")


@pytest.mark.allow_server_errors("the stand-in raises it on purpose")
def test_allowed(tmp_path):
    run_server(tmp_path, "TypeError")


def test_in_process():
    try:
        len(None)
    except TypeError:
        logging.getLogger("remoting.connection").exception("in-process: request code 10 failed")
'''


@pytest.fixture
def inner(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    pytester.makepyfile(test_inner=INNER_TESTS)
    return pytester


def test_a_server_that_logged_a_programming_error_fails_the_test_with_the_excerpt(inner):
    result = inner.runpytest_subprocess("-p", "harness.pytest_log_check", "-p", "no:cacheprovider", "-rf")
    result.assert_outcomes(passed=2, failed=2)
    outcomes = {line.split(" ", 1)[0] + " " + line.split("::")[1].split()[0]
                for line in result.outlines if line.startswith(("FAILED", "PASSED"))}
    assert outcomes >= {"FAILED test_attribute_error", "FAILED test_in_process"}
    text = result.stdout.str()
    assert "AttributeError: raised by the stand-in server" in text
    assert "s.log: AttributeError" in text
    assert "stand-in: request code 9101 from 127.0.0.1:1 failed" in text
    assert "captured log: TypeError" in text
    assert "ConnectionResetError" not in text


def test_the_opt_out_marker_needs_a_reason(inner):
    inner.makepyfile(test_bare='''
import pytest

@pytest.mark.allow_server_errors
def test_bare():
    pass
''')
    result = inner.runpytest_subprocess("-p", "harness.pytest_log_check", "-p", "no:cacheprovider", "test_bare.py")
    assert "needs the reason the errors are expected" in result.stdout.str() + result.stderr.str()
    assert result.ret != 0
