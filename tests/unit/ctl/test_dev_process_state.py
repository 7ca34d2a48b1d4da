"""`mqctl dev up` reads /proc to tell a member that died during boot from one that is still starting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ctl.dev_processes import process_state, read_process_state
from harness.waiting import wait_until

CONF = Path("/tmp/dev/broker-a/broker-a.conf")
STAT = "4242 (python3) S 1 4242 4242 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0"


def test_a_process_between_exec_and_its_argument_setup_is_still_starting_not_dead():
    # The launcher's Popen returns once the child's exec closed its error pipe, before the kernel has set up the
    # new program's arguments: /proc/<pid>/cmdline reads empty for that moment.
    assert process_state(STAT, b"", CONF) == "exec"


def test_the_member_runs_while_its_command_line_names_its_conf():
    cmdline = b"\0".join([b"/usr/bin/python3", b"-m", b"broker", b"-c", str(CONF).encode(), b""])
    assert process_state(STAT, cmdline, CONF) == "running"


def test_a_zombie_a_missing_process_and_another_program_are_gone():
    assert process_state(STAT.replace(") S ", ") Z "), b"python3\0-m\0broker\0", CONF) == "gone"
    assert process_state(None, b"", CONF) == "gone"
    assert process_state(STAT, b"/usr/sbin/sshd\0-D\0", CONF) == "gone"  # the pid was given to another program


def test_read_process_state_on_real_processes(tmp_path):
    conf = tmp_path / "x.conf"
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", str(conf)], stdin=subprocess.PIPE)
    try:
        wait_until(lambda: read_process_state(proc.pid, conf) == "running", 10, "the child never showed its conf")
        assert read_process_state(proc.pid, tmp_path / "other.conf") == "gone"
    finally:
        proc.communicate(b"")
    assert read_process_state(proc.pid, conf) == "gone"  # reaped
