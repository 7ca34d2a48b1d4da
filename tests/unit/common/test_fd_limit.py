"""The descriptor limit a server starts with, and the consume-queue files a broker keeps open by default."""

from __future__ import annotations

import resource
import subprocess
import sys

from common.fd_limit import MIN_FILES, RESERVED_FDS, consume_queue_file_budget, max_map_count


def test_the_budget_is_a_quarter_of_the_descriptors_above_the_reserve_within_the_mapping_limit():
    assert consume_queue_file_budget(20_000, 65_530) == (20_000 - RESERVED_FDS) // 4
    assert consume_queue_file_budget(1 << 20, 65_530) == 65_530 // 4  # each file is a mapping too
    assert consume_queue_file_budget(1024, 65_530) == MIN_FILES  # a small limit keeps the old fixed bound
    assert consume_queue_file_budget(resource.RLIM_INFINITY, 1 << 30) == ((1 << 20) - RESERVED_FDS) // 4


def test_max_map_count_falls_back_to_linux_default_where_proc_does_not_say(tmp_path):
    assert max_map_count(tmp_path / "missing") == 65530
    (tmp_path / "count").write_text("262144\n")
    assert max_map_count(tmp_path / "count") == 262144


def test_a_server_process_raises_its_soft_descriptor_limit_to_the_hard_one():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = min(soft, hard, 512)
    code = ("import resource; from common.fd_limit import raise_nofile_limit; "
            "print(*raise_nofile_limit(), *resource.getrlimit(resource.RLIMIT_NOFILE))")

    def lower() -> None:  # as a shell's `ulimit -Sn 512` would, before the interpreter starts
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         preexec_fn=lower).stdout.split()
    assert [int(x) for x in out] == [hard, hard, hard, hard]
