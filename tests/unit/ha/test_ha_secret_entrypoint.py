"""deploy/images/ha_secret.py, the broker image's entrypoint: one secret per cluster, created once, then exec.

The compose brokers start together on one shared volume; every one of them must end up with the same secret.
"""

from __future__ import annotations

import os
import subprocess
import sys

from harness.procs import REPO_ROOT

SCRIPT = REPO_ROOT / "deploy" / "images" / "ha_secret.py"
READ = "import os, sys; sys.stdout.write(open(os.environ['HA_AUTH_SECRET_FILE']).read()); print(os.getpid())"


def start(path, *command: str) -> subprocess.Popen:
    env = dict(os.environ, HA_AUTH_SECRET_FILE=str(path))
    return subprocess.Popen([sys.executable, str(SCRIPT), *command], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_brokers_starting_together_all_read_the_one_secret_that_won(tmp_path):
    path = tmp_path / "ha-secret" / "ha-auth-secret"
    path.parent.mkdir(mode=0o700)
    procs = [start(path, sys.executable, "-c", READ) for _ in range(8)]
    outs = [p.communicate(timeout=60) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    secrets_read = {out.splitlines()[0] for out, _ in outs}
    assert len(secrets_read) == 1 and len(secrets_read.pop()) == 64
    assert sum("generated this cluster's HA secret" in err for _, err in outs) == 1
    assert path.stat().st_mode & 0o777 == 0o600
    assert os.listdir(path.parent) == ["ha-auth-secret"]  # no temporary file left behind
    # exec, not a child: the command runs as the entrypoint's own process (the broker stays PID 1)
    assert all(int(out.splitlines()[1]) == p.pid for p, (out, _) in zip(procs, outs, strict=True))


def test_an_existing_secret_is_never_replaced_and_no_variable_means_nothing_to_do(tmp_path):
    path = tmp_path / "provided"
    path.write_text("operator-provided-secret-0123456789\n")
    p = start(path, sys.executable, "-c", READ)
    out, err = p.communicate(timeout=60)
    assert out.startswith("operator-provided-secret-0123456789") and "generated" not in err
    env = {k: v for k, v in os.environ.items() if k != "HA_AUTH_SECRET_FILE"}
    done = subprocess.run([sys.executable, str(SCRIPT), sys.executable, "-c", "print('ran')"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout == "ran\n"


def test_a_secret_that_cannot_be_created_exits_2_with_one_line_saying_what_to_mount(tmp_path):
    p = start(tmp_path / "missing-dir" / "ha-auth-secret", sys.executable, "-c", "print('must not run')")
    out, err = p.communicate(timeout=60)
    assert p.returncode == 2 and out == ""
    assert err.count("\n") == 1 and "mount a writable volume" in err
