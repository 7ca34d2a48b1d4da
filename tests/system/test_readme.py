"""README.md "A first session", run as written against the session's compose cluster.

The commands come from the README itself, so an edit there that the test does not know fails here. What the
fixtures already did is checked, not repeated: ``make images`` (the ``images`` fixture runs the script behind it)
and ``docker compose up -d`` (the ``cluster`` fixture runs exactly that, with this session's project name). The
venv line is the one this test runs in. Every mqctl line runs as a process of the venv's ``mqctl``, with the
exported NAMESRV_ADDR and the session's project (what ``COMPOSE_PROJECT_NAME`` says for a checkout's own
project); then the Python example runs as a script and must print what its comment says.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.system.cluster import REPO_ROOT
from tests.system.harness import await_whole, run_async

README = REPO_ROOT / "README.md"
MQCTL = Path(sys.executable).with_name("mqctl")


def section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


def commands(block: str) -> list[str]:
    """Each line without its trailing comment (two spaces or more, then #)."""
    return [re.split(r"\s{2,}#", line)[0].strip() for line in block.splitlines() if line.strip()]


def run_mqctl(line: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    argv = shlex.split(line)
    assert argv[0] == ".venv/bin/mqctl", line
    done = subprocess.run(
        [str(MQCTL), *argv[1:]], capture_output=True, text=True, timeout=180, cwd=REPO_ROOT, env=env, check=False
    )
    assert done.returncode == 0, f"{line} exited {done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    return done


# What each mqctl line of the session must show besides exiting 0.
EXPECT = {
    "clusterList": ("broker-a", "broker-b", "127.0.0.1:10911", "127.0.0.1:10921"),
    "sendMessage": ("SEND_OK",),
    "consumeMessage": ("hello", "TOOLS_CONSUMER"),
    "haStatus": ("127.0.0.1:10911", "127.0.0.1:10931", "OK"),
}


def test_first_session_as_written(cluster, whole):
    lines = commands(blocks(section("A first session"), "sh")[0])
    env = {**os.environ, "COMPOSE_PROJECT_NAME": cluster.project}
    ran = []
    for line in lines:
        if line == "make images":
            assert "deploy/images/build.sh" in (REPO_ROOT / "Makefile").read_text()  # the images fixture ran it
        elif line == "docker compose up -d":
            assert cluster.has_service("prometheus")  # the cluster fixture's `up -d`: every service, Prometheus too
        elif line.startswith("python3 -m venv .venv && .venv/bin/pip install -e ."):
            assert MQCTL.exists(), f"{MQCTL}: this test runs in the venv that line makes"
        elif line.startswith("export "):
            key, _, value = line.removeprefix("export ").partition("=")
            env[key] = value
        elif line.startswith(".venv/bin/mqctl "):
            done = run_mqctl(line, env)
            command = shlex.split(line)[1]
            for text in EXPECT.get(command, ()):
                assert text in done.stdout, f"{line}: no {text!r} in\n{done.stdout}"
            ran.append(command)
        else:
            raise AssertionError(f"README 'A first session' has a line this test cannot run: {line!r}")
    assert env.get("NAMESRV_ADDR") == "127.0.0.1:9876"
    assert ran[-2:] == ["kill", "start"], ran
    # The restarted master is back with its slave in sync before the Python example (and the next test) runs.
    run_async(await_whole, 90)

    example = blocks(section("A first session"), "python")[0]
    printed_as = re.search(r"print\(result\.status[^)]*\).*#\s*(\w+)", example)
    assert printed_as, "the example's print line says what it prints"
    done = subprocess.run(
        [sys.executable, "-c", example], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    status, msg_id = done.stdout.split()
    assert status == printed_as.group(1), f"the README says it prints {printed_as.group(1)}; it printed {done.stdout!r}"
    assert re.fullmatch(r"[0-9A-F]{32}", msg_id), msg_id
