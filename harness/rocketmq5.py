"""The official RocketMQ 5 Python client (PyPI ``rocketmq-python-client``) as a subprocess, for the compatibility
tests of the broker's apache.rocketmq.v2 endpoint (spec/official-client.md).

The client lives in its own venv, ``.venv/rocketmq5-client`` (made on first use with ``pip install
rocketmq-python-client==5.1.2``, or ``PYRMQ_RMQ5_PYTHON`` naming an interpreter that has it): it cannot share the
test venv, because its top-level package ``rocketmq`` is also the C++ client's (``rocketmq==0.4.4``), and it cannot
share a process with the broker's stubs (one protobuf pool cannot hold two copies of apache.rocketmq.v2).

``Rmq5Client`` runs ``rocketmq5_driver.py`` there and sends it one JSON command per line; every answer is awaited
with a bound (``call(..., timeout_s)``). HOME points into the test's tmp dir: the client logs to
``$HOME/logs/rocketmq_python/rocketmq_client.log``, shown when a call fails.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

from harness.procs import REPO_ROOT

CLIENT_REQUIREMENT = "rocketmq-python-client==5.1.2"
VENV = REPO_ROOT / ".venv" / "rocketmq5-client"
DRIVER = Path(__file__).with_name("rocketmq5_driver.py")
INSTALL_TIMEOUT_S = 600


def client_python() -> str:
    """An interpreter with the official client; the dedicated venv is created the first time."""
    override = os.environ.get("PYRMQ_RMQ5_PYTHON")
    if override:
        return override
    python = VENV / "bin" / "python"
    marker = VENV / ".installed"
    if not marker.exists() or marker.read_text() != CLIENT_REQUIREMENT:
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True, timeout=INSTALL_TIMEOUT_S)
        subprocess.run([str(python), "-m", "pip", "install", "-q", CLIENT_REQUIREMENT], check=True,
                       timeout=INSTALL_TIMEOUT_S)
        marker.write_text(CLIENT_REQUIREMENT)
    return str(python)


class ClientError(AssertionError):
    """A failed command. ``error`` is what the driver reported (empty when the client gave no answer); the message
    adds the trace and the tail of the client's log, which may quote earlier errors."""

    def __init__(self, message: str, error: str = "") -> None:
        super().__init__(message)
        self.error = error


class Rmq5Client:
    def __init__(self, python: str, home: Path, env: dict[str, str] | None = None) -> None:
        """``env`` adds variables for the client process (``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``: the CA its TLS
        channels trust, since the client's ``tls_enable=True`` takes gRPC's default roots)."""
        home.mkdir(parents=True, exist_ok=True)
        self.home = home
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"HOME": str(home)} | (env or {})
        self.proc = subprocess.Popen(
            [python, str(DRIVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, env=env, cwd=str(home),
        )
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.proc.stdout, selectors.EVENT_READ)

    def log_tail(self, lines: int = 40) -> str:
        path = self.home / "logs" / "rocketmq_python" / "rocketmq_client.log"
        if not path.exists():
            return f"(no client log at {path})"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def call(self, timeout_s: float = 30.0, **cmd):
        """Send one command; return its ``ok`` value, or raise ClientError with the client's error and log."""
        self.begin(**cmd)
        return self.result(cmd, timeout_s)

    def begin(self, **cmd) -> dict:
        """Send one command without waiting (``result`` collects the answer): several clients work at once."""
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return cmd

    def result(self, cmd: dict, timeout_s: float = 30.0):
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self._sel.select(left):
                raise ClientError(f"no answer to {cmd['op']} within {timeout_s} s\n{self.log_tail()}")
            line = self.proc.stdout.readline()
            if not line:
                raise ClientError(
                    f"the client process exited ({self.proc.poll()}) during {cmd['op']}\n{self.log_tail()}")
            if line.startswith("{"):
                answer = json.loads(line)
                break
        if "error" in answer:
            raise ClientError(f"{cmd['op']} failed: {answer['error']}\n{answer.get('trace', '')}\n{self.log_tail()}",
                              answer["error"])
        return answer["ok"]

    def close(self) -> None:
        """Shut the client down (killed after 10 s) and close both pipes and the selector, whatever state the
        process is in: a pipe left open is a leaked file the next garbage collection reports."""
        try:
            if self.proc.poll() is None:
                try:
                    self.call(timeout_s=20, op="shutdown")
                except ClientError:
                    pass
                self._close_stdin()  # the driver exits at the end of its input
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(5)
        finally:
            self._sel.close()
            self._close_stdin()
            self.proc.stdout.close()

    def _close_stdin(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:  # BrokenPipeError flushing the input of a process that died
            pass
