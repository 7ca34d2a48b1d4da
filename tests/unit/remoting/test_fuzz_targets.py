"""Every decoder that reads the network or the disk, fed arbitrary and mutated input through the fuzz targets of
``harness.fuzz_targets`` (the ones ``bench/fuzz.py`` runs for a million executions each): nothing escapes but the
decoder's documented error type. The decoders' own test files check what valid input decodes to; this file
checks only the contract on bad input (the regressions the long run found sit next to each decoder's tests)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzz import INSTRUMENT
from harness.fuzz_targets import TARGETS, ext_from_bytes, ext_to_bytes, run_one

INTERESTING = [0, 1, 8, 12, 22, 91, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0xFFFFFF, 0x7FFFFFFF, 0x80000000,
               0xFFFFFFFF, 0xDAA320A7, 0xCBD43194]
SEEDS = {name: target.seeds() for name, target in TARGETS.items()}


@st.composite
def mutated(draw, seeds: list[bytes]) -> bytes:
    """A seed with a few edits: a byte set, bytes inserted or deleted, a big-endian interesting int, a cut."""
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.integers(0, 4))
        pos = draw(st.integers(0, len(data)))
        if op == 0 and data:
            data[min(pos, len(data) - 1)] = draw(st.integers(0, 255))
        elif op == 1:
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif op == 2:
            del data[pos:pos + draw(st.integers(1, 16))]
        elif op == 3:
            data[pos:pos + 4] = draw(st.sampled_from(INTERESTING)).to_bytes(4, "big")
        else:
            del data[pos:]
    return bytes(data)


def assert_contract(name: str, data: bytes) -> None:
    finding = run_one(TARGETS[name], data)
    assert finding is None, f"{name}: {finding.error} at {finding.where}: {finding.message}; input {data[:200]!r}"


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_every_seed_decodes_or_is_refused_with_the_documented_error(name):
    assert SEEDS[name], f"target {name} has no seeds"
    for seed in SEEDS[name]:
        assert_contract(name, seed)


@pytest.mark.parametrize("name", sorted(TARGETS))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_seeds_end_in_the_documented_error_or_decode(name, data):
    assert_contract(name, data.draw(mutated(SEEDS[name])))


@pytest.mark.parametrize("name", sorted(TARGETS))
@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=300))
def test_arbitrary_bytes_end_in_the_documented_error_or_decode(name, raw):
    assert_contract(name, raw)


@settings(max_examples=300, deadline=None)
@given(ext=st.dictionaries(st.sampled_from(["queueId", "queueOffset", "sysFlag", "batch", "topic", "b", "e", "x"]),
                           st.text(alphabet="0123456789+-_ .e²٣truefalsTRUE", max_size=25), max_size=8))
def test_header_fields_of_any_text_end_in_header_error_or_parse(ext):
    assert ext_from_bytes(ext_to_bytes(ext)) == ext
    assert_contract("headers", ext_to_bytes(ext))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lines=st.lists(st.tuples(st.sampled_from(["listenPort", "brokerRole", "brokerId", "haListenPort",
                                                 "mappedFileSizeCommitLog", "flushDiskType", "slaveReadEnable",
                                                 "brokerIP1", "brokerClusterName", "listenPrt", "namesrvAddr"]),
                                st.sampled_from(["=", ":", " = "]),
                                st.text(alphabet="0123456789-+.eESLAVEtrue_x²٣ \t", max_size=12)), max_size=8))
def test_config_files_with_known_keys_and_odd_values_end_in_config_error_or_load(lines):
    text = "\n".join(f"{k}{sep}{v}" for k, sep, v in lines)
    assert_contract("config", text.encode())


def test_the_long_run_instruments_every_module_a_target_decodes_with():
    for target in TARGETS.values():
        for module in target.modules:
            assert any(module == p or module.startswith(p + ".") for p in INSTRUMENT), (target.name, module)
