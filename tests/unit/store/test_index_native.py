"""The message index's C path (``broker/store/index_native.c``, built by ``make``) against its pure-Python path:
the same keys and hashes from any stored properties, the same index file bytes from any batches."""

from __future__ import annotations

import shlex
import shutil
import sysconfig

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.store import index_keys
from broker.store.index_file import IndexFile
from remoting.message_codec import encode_properties

COMPILER = shutil.which(shlex.split(sysconfig.get_config_var("CC") or "cc")[0])
pytestmark = pytest.mark.skipif(COMPILER is None, reason="no C compiler here to build broker/store/index_native")


def test_the_module_is_built_where_a_compiler_exists():
    """`make` builds it; a build that failed quietly would otherwise leave every test below comparing nothing."""
    assert index_keys.native is not None, "broker/store/index_native is not built: run `make native` and read its error"

T0 = 1_700_000_000_000
_text = st.text(alphabet=st.sampled_from("ab 1é\u4e2d\U0001f600"), max_size=10)
_props = st.one_of(
    st.dictionaries(st.sampled_from(["UNIQ_KEY", "KEYS", "TAGS", "a", "KEYSX", "XUNIQ_KEY"]), _text, max_size=5)
    .map(encode_properties),
    st.binary(max_size=40),  # anything, even what no broker stores
    st.just(b"KEYS\x01a b"), st.just(b"UNIQ_KEY\x01"),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["Orders", "T", "tö"]), _props), max_size=12))
def test_the_c_path_finds_and_hashes_the_keys_the_python_path_does(records):
    topics = [t for t, _ in records]
    props = [p for _, p in records]
    phys = [i * 100 for i in range(len(records))]
    stamps = [T0 + i for i in range(len(records))]
    assert index_keys.record_keys(topics, props, phys, stamps) == \
        index_keys.record_keys(topics, props, phys, stamps, use_native=False)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2**31 - 1), st.integers(0, 3_000)), max_size=50),
       st.integers(1, 7), st.lists(st.integers(1, 12), min_size=1, max_size=6), st.binary(min_size=4, max_size=4))
def test_the_c_path_writes_the_bytes_the_python_path_does(tmp_path_factory, keys, slots, chunks, stale):
    """Any batches (slots shared inside one, a full file) on files whose slots may hold stale numbers (a torn
    file's slots name entries past its count)."""
    root = tmp_path_factory.mktemp("native")
    for name in ("c", "py"):
        IndexFile(root / name, slots=slots, entries=40, create=True).close()
        with open(root / name, "r+b") as raw:  # slot 0 holds whatever a crash left there
            raw.seek(40)
            raw.write(stale)
    files = [IndexFile(root / name, slots=slots, entries=40, create=False) for name in ("c", "py")]
    stamps = [T0 + sum(ms for _, ms in keys[: i + 1]) for i in range(len(keys))]
    at, c = 0, 0
    while at < len(keys):
        part = range(at, min(at + chunks[c % len(chunks)], len(keys)))
        c += 1
        got = [f.put_many([keys[i][0] for i in part], [i * 100 for i in part], [stamps[i] for i in part],
                          use_native=native) for f, native in zip(files, (True, False), strict=True)]
        assert got[0] == got[1]
        at += len(part)
    assert files[0].slot_count == files[1].slot_count and files[0].count == files[1].count
    for f in files:
        f.close()
    assert (root / "c").read_bytes() == (root / "py").read_bytes()


def test_bad_arguments_are_errors_not_crashes(tmp_path):
    native = index_keys.native
    with pytest.raises(ValueError):
        native.keys([0], [b"a", b"b"], [1], [1])
    with pytest.raises(ValueError):
        native.write(bytearray(100), 5, 60, 1, 0, [1, 2, 3], [1, 2, 3], [1, 2, 3])  # past the buffer's end
    with pytest.raises(ValueError):
        native.write(bytearray(1000), 5, 60, 1, 0, [-1], [1], [1])
    with pytest.raises(BufferError):
        native.write(b"read-only" * 100, 5, 60, 1, 0, [1], [1], [1])
