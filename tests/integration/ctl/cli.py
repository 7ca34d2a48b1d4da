"""Helpers for driving mqctl in-process with typer.testing.CliRunner."""

from __future__ import annotations

import json
import uuid

from typer.testing import CliRunner

from ctl.app import app
from harness.waiting import wait_until

CLUSTER = "DefaultCluster"
ROUTE_TIMEOUT_S = 10.0


def mqctl(*args: str, env: dict[str, str] | None = None):
    """Run mqctl in-process with CliRunner; stdout and stderr are kept apart."""
    return CliRunner().invoke(app, list(args), env=env)


def ok(*args: str):
    """Run mqctl and require exit code 0; the failure message shows both streams."""
    result = mqctl(*args)
    assert result.exit_code == 0, (
        f"mqctl {' '.join(args)} exited {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        f"\nexception: {result.exception!r}"
    )
    return result


def fails(*args: str) -> str:
    """Run mqctl and require exit code 1 (a failure it explains); returns its stderr, stripped."""
    result = mqctl(*args)
    assert result.exit_code == 1, (
        f"mqctl {' '.join(args)} exited {result.exit_code}, not 1\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    )
    return result.stderr.strip()


def ok_json(*args: str):
    return json.loads(ok(*args, "--json").stdout)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def routed_topic(cluster, queues: int = 2, prefix: str = "t_msg") -> str:
    """A new topic of ``queues`` queues on every master of ``cluster`` (a LocalCluster), once the nameserver routes
    it."""
    topic = unique(prefix)
    ok("updateTopic", "-n", cluster.namesrv_addr, "-c", CLUSTER, "-t", topic, "-r", str(queues), "-w", str(queues))
    wait_until(
        lambda: mqctl("topicRoute", "-n", cluster.namesrv_addr, "-t", topic).exit_code == 0,
        ROUTE_TIMEOUT_S,
        f"route of {topic} never appeared",
    )
    return topic


def flat(text: str) -> str:
    """Typer's error box as one line of words: usage errors wrap inside │ ... │ at the terminal width."""
    return " ".join(text.replace("│", " ").split())
