"""Helpers for driving mqctl in-process with typer.testing.CliRunner."""

from __future__ import annotations

import json
import uuid

from typer.testing import CliRunner

from ctl.app import app

CLUSTER = "DefaultCluster"


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


def ok_json(*args: str):
    return json.loads(ok(*args, "--json").stdout)


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def flat(text: str) -> str:
    """Typer's error box as one line of words: usage errors wrap inside │ ... │ at the terminal width."""
    return " ".join(text.replace("│", " ").split())
