"""A SIGKILL while a store file is being sized (RocketMQ preallocates the next commitlog file ahead of the writes)
must leave a store that starts: the file gets its own name only once it has its full size."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from broker.store.mapped_file import CREATING_SUFFIX, MappedFile, file_name
from broker.store.mapped_file_queue import MappedFileQueue

SIZE = 1 << 20

# the child sizes file 1 of the queue and stops inside the allocation, where the parent kills it
CHILD = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    from broker.store.mapped_file import MappedFile

    real = os.posix_fallocate
    def stalled(fd, offset, length):
        real(fd, offset, length // 2)  # part of the blocks, as a kill in the middle of a large allocation leaves
        print("allocating", flush=True)
        sys.stdin.read()  # until killed
    os.posix_fallocate = stalled
    MappedFile.create(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
""")


@pytest.mark.parametrize("sparse_first", [False, True])
def test_a_kill_while_a_file_is_sized_leaves_no_short_store_file_and_the_queue_loads(tmp_path, sparse_first):
    first = MappedFile.create(tmp_path, 0, SIZE, sparse=sparse_first)
    first.close()
    with subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), str(SIZE), str(SIZE)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as child:
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "allocating"
        finally:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(10)
    names = sorted(os.listdir(tmp_path))
    assert names == [file_name(0), file_name(SIZE) + CREATING_SUFFIX], names  # never a short file under its name

    queue = MappedFileQueue(tmp_path, SIZE)
    queue.load()  # the old code refused to start here: "... is 0 bytes but the configured file size is ..."
    assert [mf.start_offset for mf in queue.files] == [0]
    assert sorted(os.listdir(tmp_path)) == [file_name(0)]  # the leftover is gone
    again = MappedFile.create(tmp_path, SIZE, SIZE)  # and the file can be made again
    assert os.path.getsize(again.path) == SIZE
    again.close()
    for mf in queue.files:
        mf.close()


def test_creating_a_file_that_exists_is_refused_and_leaves_it_alone(tmp_path):
    first = MappedFile.create(tmp_path, 0, SIZE)
    first.close()
    with pytest.raises(FileExistsError):
        MappedFile.create(tmp_path, 0, SIZE)
    assert sorted(os.listdir(tmp_path)) == [file_name(0)]
