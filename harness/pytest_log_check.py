"""pytest plugin: a test fails when a server logged a programming error while it ran.

A processor raising ``AttributeError`` on every request was only logged by the remoting layer, and every test still
passed. So after each test's call and again after its teardown this plugin reads what the harness's servers wrote
(``harness.log_watch``) and what servers running inside the test process logged through pytest's log capture, and
turns a passing phase into a failure that quotes the excerpts (``harness.log_scan`` says what counts). A test that
injects faults which legitimately produce such errors opts out with ``@pytest.mark.allow_server_errors("why")``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.log_scan import Finding, find_programming_errors
from harness.log_watch import WATCH

MARKER = "allow_server_errors"
FINDINGS_SHOWN_MAX = 5


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}(why): the servers may log programming errors in this test "
                                       "(fault injection that provokes them); say why")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    marker = item.get_closest_marker(MARKER)
    if marker is not None and not (marker.args and str(marker.args[0]).strip()):
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.{MARKER} needs the reason the errors are expected")
    WATCH.begin_test()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
    report = yield
    if report.when == "setup":
        return report  # what setup logged is read after the call (or after teardown when setup failed)
    findings = WATCH.take_findings()
    phases = ("setup", "call") if report.when == "call" else ("teardown",)
    for name, text in report.sections:
        if name in {f"Captured log {phase}" for phase in phases}:
            findings.extend((Path("captured log"), f) for f in find_programming_errors(text, WATCH.own_roots))
    if not findings or item.get_closest_marker(MARKER) is not None:
        return report
    message = describe(findings)
    if report.passed or (report.skipped and not hasattr(report, "wasxfail")):
        report.outcome = "failed"
        report.longrepr = message
    else:
        report.sections.append(("programming errors in server logs", message))
    return report


def describe(findings: list[tuple[Path, Finding]]) -> str:
    """The failure text: how many, then the first few excerpts with the log each is from."""
    parts = [f"the servers logged {len(findings)} programming error(s) during this test "
             f"(harness.log_scan; opt out with @pytest.mark.{MARKER}('why') only for injected faults):"]
    for path, finding in findings[:FINDINGS_SHOWN_MAX]:
        parts.append(f"--- {path}: {finding.reason}\n{finding.excerpt}")
    if len(findings) > FINDINGS_SHOWN_MAX:
        parts.append(f"... and {len(findings) - FINDINGS_SHOWN_MAX} more")
    return "\n".join(parts)
