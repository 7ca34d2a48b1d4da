"""How many files a server may hold open, and how many of them the broker's consume queues may take.

A consume-queue file that is open holds two descriptors (the file's and the mapping's duplicate) and one mapping.
A broker with more active queues than it may keep open parks one file on every access to another and reopens it
on the next (``broker/store/open_files.py``): at 100 topics of 8 queues each and the old fixed bound of 256 files,
every single put and every pull reopened a file and parked another (``bench.scaling --sweep topics``: 2.8k msg/s
and 160 µs of master CPU per message, against 6.5k msg/s and 116 µs with the bound above the working set).

So the bound follows the process's descriptor limit, as a JVM's does:

- ``raise_nofile_limit``: at start a server raises its soft RLIMIT_NOFILE to the hard limit (HotSpot's
  ``-XX:+MaxFDLimit``, on by default, does the same for RocketMQ's Java processes); an unprivileged process may.
- ``consume_queue_file_budget``: a quarter of the descriptors above ``RESERVED_FDS`` (two descriptors a file, and
  as many again left for connections, the commitlog and the index), and at most a quarter of the kernel's
  ``vm.max_map_count`` (each file is one mapping); never below ``MIN_FILES``.
Pure apart from the two reads of the system's limits, which the callers pass in where they can.
"""

from __future__ import annotations

import resource
from pathlib import Path

RESERVED_FDS = 2048  # sockets, commitlog and index files, logs, the interpreter's own
MIN_FILES = 256  # the bound even a host with a small descriptor limit gets (pyrmq's earlier fixed default)
MAX_MAP_COUNT_PATH = Path("/proc/sys/vm/max_map_count")
DEFAULT_MAX_MAP_COUNT = 65530  # Linux's default, where /proc does not say


def raise_nofile_limit() -> tuple[int, int]:
    """Raise the soft descriptor limit to the hard one; returns (soft, hard) as they are afterwards. A limit the
    kernel refuses to raise stays as it was (the budget then follows the soft limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return soft, hard


def max_map_count(path: Path = MAX_MAP_COUNT_PATH) -> int:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return DEFAULT_MAX_MAP_COUNT


def consume_queue_file_budget(nofile_soft: int, map_count: int) -> int:
    """Consume-queue files a broker keeps open when ``maxOpenConsumeQueueFiles`` is 0 (auto)."""
    if nofile_soft < 0:  # RLIM_INFINITY (-1)
        nofile_soft = 1 << 20
    by_fds = (nofile_soft - RESERVED_FDS) // 4
    return max(MIN_FILES, min(by_fds, map_count // 4))


def current_budget() -> int:
    """The auto budget for this process as its limits stand now."""
    return consume_queue_file_budget(resource.getrlimit(resource.RLIMIT_NOFILE)[0], max_map_count())
