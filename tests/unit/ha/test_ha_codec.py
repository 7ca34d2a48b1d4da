"""HA codec: golden bytes, round trips over bytes and over a StreamReader, malformed input -> ProtocolError."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remoting import ha_codec as c
from remoting import ha_handshake as hs
from remoting import ha_wire as w

BATCH = 32 * 1024


def stream(data: bytes) -> asyncio.StreamReader:
    """A StreamReader fed with ``data`` then EOF (call inside a running loop)."""
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    return reader


def parse(read, data: bytes, *args):
    """Run ``read(StreamReader(data), *args)`` in a fresh loop."""

    async def go():
        return await read(stream(data), *args)

    return asyncio.run(go())


# golden bytes --------------------------------------------------------------------------------------------
def test_report_is_eight_big_endian_bytes():
    assert c.encode_report(0x0102030405060708) == bytes([1, 2, 3, 4, 5, 6, 7, 8])


def test_frame_header_is_offset_then_size_then_body():
    assert c.encode_frame(1024, b"abc") == bytes.fromhex("0000000000000400" "00000003") + b"abc"


def test_heartbeat_is_a_header_with_size_zero():
    assert c.encode_heartbeat(7) == bytes.fromhex("0000000000000007" "00000000")


def test_error_frame_golden_bytes():
    got = c.encode_error(c.ErrorCode.SLAVE_BEHIND_MASTER_MIN, "wipe", phy_offset=5, master_min=4096, master_max=8192)
    want = bytes.fromhex(
        "0000000000000005" "ffffffff"  # phy_offset, ERROR_MARKER
        "0001" "0000000000001000" "0000000000002000" "0004"  # code, min, max, msg_len
    ) + b"wipe"
    assert got == want


NONCE = bytes(range(16))


def test_hello_golden_bytes():
    raw = hs.encode_hello(broker_id=1, cluster="C", broker_name="b", nonce=NONCE)
    assert raw == (b"PRHA" + bytes.fromhex("0002" "0000" "0000000000000001") + NONCE + bytes.fromhex("01" "01")
                   + b"Cb")


def test_challenge_golden_bytes_with_and_without_auth():
    nonce, proof = b"n" * 32, b"p" * 32
    assert hs.encode_challenge(nonce, proof) == bytes.fromhex("ffffffffffffffff" "fffffffe" "0001") + nonce + proof
    assert hs.encode_challenge(nonce, None) == bytes.fromhex("ffffffffffffffff" "fffffffe" "0000") + nonce + bytes(32)
    assert len(hs.encode_challenge(nonce, None)) == hs.CHALLENGE_SIZE == 78


def test_proofs_are_hmac_sha256_over_label_hello_and_nonce_and_differ_by_side():
    import hashlib
    import hmac

    hello = hs.encode_hello(broker_id=1, cluster="C", broker_name="b", nonce=NONCE)
    nonce = b"n" * 32
    assert hs.slave_proof(b"k", hello, nonce) == hmac.new(b"k", b"pyrmq-ha-2 slave proof\x00" + hello + nonce,
                                                         hashlib.sha256).digest()
    assert hs.master_proof(b"k", hello, nonce) != hs.slave_proof(b"k", hello, nonce)  # never reflected
    assert hs.slave_proof(b"k", hello, nonce) != hs.slave_proof(b"k", hello, b"m" * 32)  # bound to the nonce


# round trips ---------------------------------------------------------------------------------------------
names = st.text(min_size=1, max_size=40).filter(lambda s: 1 <= len(s.encode()) <= 255)


addrs = st.just("") | st.builds("{}:{}".format, st.from_regex(r"[a-z0-9.\-]{1,40}", fullmatch=True),
                                  st.integers(1, 65535))


@given(broker_id=st.integers(-(2**63), 2**63 - 1), cluster=names, name=names, nonce=st.binary(min_size=16, max_size=16),
       addr=addrs)
def test_hello_round_trips_over_bytes_and_stream(broker_id, cluster, name, nonce, addr):
    raw = hs.encode_hello(broker_id=broker_id, cluster=cluster, broker_name=name, nonce=nonce, broker_addr=addr)
    hello, used = hs.decode_hello(raw + b"tail")
    assert used == len(raw)
    assert (hello.broker_id, hello.cluster, hello.broker_name, hello.nonce, hello.raw,
            hello.broker_addr) == (broker_id, cluster, name, nonce, raw, addr)
    streamed = parse(hs.read_hello, raw)
    assert streamed == hello


@given(nonce=st.binary(min_size=32, max_size=32), proof=st.none() | st.binary(min_size=32, max_size=32),
       cut=st.integers(1, 77))
def test_challenges_round_trip_over_bytes_stream_and_the_incremental_decoder(nonce, proof, cut):
    raw = hs.encode_challenge(nonce, proof)
    want = c.Challenge(proof is not None, nonce, proof or bytes(32))
    assert c.decode_frame(raw, BATCH) == (want, len(raw))
    assert parse(c.read_frame, raw, BATCH) == want
    decoder = c.FrameDecoder(BATCH)
    decoder.feed(raw[:cut])
    assert decoder.frames() == []
    decoder.feed(raw[cut:] + c.encode_frame(0, b"x"))
    assert decoder.frames() == [want, c.Frame(0, b"x")]


@given(offset=st.integers(0, 2**63 - 1))
def test_report_round_trips(offset):
    assert c.decode_report(c.encode_report(offset)) == offset
    assert parse(c.read_report, c.encode_report(offset)) == offset


@given(frames=st.lists(st.tuples(st.integers(0, 2**62), st.binary(max_size=300)), max_size=20),
       cuts=st.lists(st.integers(1, 50), max_size=40))
def test_frames_round_trip_through_the_incremental_decoder_in_any_chunking(frames, cuts):
    raw = b"".join(c.encode_frame(o, b) for o, b in frames)
    decoder = c.FrameDecoder(BATCH)
    out = []
    pos = 0
    for cut in cuts + [len(raw)]:
        decoder.feed(raw[pos:pos + cut])
        pos += cut
        out.extend(decoder.frames())
    assert [(f.phy_offset, f.body) for f in out] == frames
    assert decoder.buffered == 0


@given(frames=st.lists(st.tuples(st.integers(0, 2**62), st.binary(max_size=300)), min_size=1, max_size=5))
def test_frames_round_trip_over_a_stream_reader_and_bytes(frames):
    raw = b"".join(c.encode_frame(o, b) for o, b in frames)

    async def read_all():
        reader = stream(raw)
        return [await c.read_frame(reader, BATCH) for _ in frames]

    got = asyncio.run(read_all())
    assert [(f.phy_offset, f.body) for f in got] == frames
    first, used = c.decode_frame(raw, BATCH)
    assert (first.phy_offset, first.body) == frames[0]
    assert used == w.HEADER_SIZE + len(frames[0][1])


@given(code=st.sampled_from(list(c.ErrorCode)), msg=st.text(max_size=100), off=st.integers(-1, 2**40),
       mn=st.integers(-1, 2**40), mx=st.integers(-1, 2**40))
def test_error_frames_round_trip(code, msg, off, mn, mx):
    raw = c.encode_error(code, msg, phy_offset=off, master_min=mn, master_max=mx)
    frame, used = c.decode_frame(raw, BATCH)
    assert used == len(raw)
    assert frame == c.ErrorFrame(off, code, mn, mx, msg)
    decoder = c.FrameDecoder(BATCH)
    decoder.feed(raw)
    assert decoder.frames() == [frame]
    assert parse(c.read_frame, raw, BATCH) == frame


def test_report_decoder_keeps_only_the_newest_complete_word():
    d = c.ReportDecoder()
    assert d.feed(c.encode_report(1)[:5]) is None
    assert d.feed(c.encode_report(1)[5:] + c.encode_report(2) + c.encode_report(3)[:2]) == 2
    assert d.feed(c.encode_report(3)[2:]) == 3


# malformed -----------------------------------------------------------------------------------------------
def test_body_size_beyond_the_batch_size_is_refused_from_the_header_alone():
    decoder = c.FrameDecoder(BATCH)
    decoder.feed(w.HEADER.pack(0, BATCH + 1))
    with pytest.raises(c.ProtocolError, match="exceeds haTransferBatchSize"):
        decoder.frames()
    with pytest.raises(c.ProtocolError):
        parse(c.read_frame, w.HEADER.pack(0, BATCH + 1), BATCH)


@pytest.mark.parametrize("size", [-3, -100, -(2**31)])
def test_negative_body_size_other_than_the_error_and_challenge_markers_is_refused(size):
    with pytest.raises(c.ProtocolError, match="negative"):
        c.decode_header(w.HEADER.pack(0, size), BATCH)


def test_negative_frame_offset_is_refused():
    with pytest.raises(c.ProtocolError, match="negative"):
        c.decode_header(w.HEADER.pack(-5, 0), BATCH)


def test_truncated_structures_are_protocol_errors():
    frame = c.encode_frame(0, b"abcdef")
    with pytest.raises(c.ProtocolError, match="truncated"):
        c.decode_frame(frame[:-1], BATCH)
    with pytest.raises(c.ProtocolError, match="truncated"):
        parse(c.read_frame, frame[:-1], BATCH)
    with pytest.raises(c.ProtocolError, match="truncated"):
        parse(c.read_frame, frame[:7], BATCH)
    hello = hs.encode_hello(broker_id=1, cluster="C", broker_name="b", nonce=NONCE)
    with pytest.raises(c.ProtocolError, match="truncated"):
        hs.decode_hello(hello[:-1])
    with pytest.raises(c.ProtocolError, match="truncated"):
        parse(hs.read_hello, hello[:-1])
    challenge = hs.encode_challenge(b"n" * 32, None)
    with pytest.raises(c.ProtocolError, match="truncated"):
        c.decode_frame(challenge[:-1], BATCH)
    with pytest.raises(c.ProtocolError, match="truncated"):
        parse(c.read_frame, challenge[:-1], BATCH)
    with pytest.raises(c.ProtocolError, match="proof truncated"):
        parse(hs.read_proof, b"p" * 31)
    with pytest.raises(c.ProtocolError):
        c.decode_report(b"\x00" * 7)


def test_a_rocketmq_style_bare_offset_is_not_a_hello():
    with pytest.raises(c.ProtocolError, match="magic"):
        parse(hs.read_hello, c.encode_report(123) * 5)


def test_unknown_hello_version_and_flags_are_refused():
    raw = bytearray(hs.encode_hello(broker_id=1, cluster="C", broker_name="b", nonce=NONCE))
    raw[5] = 1  # version 1: the timestamp-HMAC hello this build no longer accepts (it could be replayed)
    with pytest.raises(c.ProtocolError, match="version"):
        hs.decode_hello(bytes(raw))
    raw[5] = 2
    raw[7] = 2  # bit 0 is ADDR; bit 1 is reserved
    with pytest.raises(c.ProtocolError, match="flags"):
        hs.decode_hello(bytes(raw))


def test_hello_with_the_slave_broker_address_golden_bytes():
    raw = hs.encode_hello(broker_id=1, cluster="C", broker_name="b", nonce=NONCE, broker_addr="10.0.0.7:10911")
    assert raw == (b"PRHA" + bytes.fromhex("0002" "0001" "0000000000000001") + NONCE + bytes.fromhex("01" "01")
                   + b"Cb" + bytes([14]) + b"10.0.0.7:10911")
    hello, used = hs.decode_hello(raw)
    assert (hello.broker_addr, used, hello.raw) == ("10.0.0.7:10911", len(raw), raw)
    assert parse(hs.read_hello, raw) == hello
    # without an address the hello is byte for byte the one a master always read
    old = hs.encode_hello(broker_id=1, cluster="C", broker_name="b", nonce=NONCE)
    assert hs.decode_hello(old)[0].broker_addr == "" and old[6:8] == b"\x00\x00"


@pytest.mark.parametrize("addr", [b"", b"no-port", b"h:0", b"h:99999", b"h \x00:1", "h\u00e9:1".encode()])
def test_a_hello_with_a_bad_broker_address_is_refused(addr):
    raw = hs.encode_hello(broker_id=1, cluster="C", broker_name="b", nonce=NONCE)
    raw = raw[:6] + b"\x00\x01" + raw[8:] + bytes([len(addr)]) + addr
    with pytest.raises(c.ProtocolError, match="broker_addr"):
        hs.decode_hello(raw)
    with pytest.raises(c.ProtocolError, match="broker_addr"):
        parse(hs.read_hello, raw)


def test_a_hello_truncated_in_its_address_is_refused():
    raw = hs.encode_hello(broker_id=1, cluster="C", broker_name="b", nonce=NONCE, broker_addr="h:1")
    for cut in range(len(raw) - 4, len(raw)):
        with pytest.raises(c.ProtocolError, match="truncated"):
            hs.decode_hello(raw[:cut])
        with pytest.raises(c.ProtocolError, match="truncated"):
            parse(hs.read_hello, raw[:cut])


def test_encode_hello_refuses_a_bad_broker_address():
    with pytest.raises(ValueError, match="broker_addr"):
        hs.encode_hello(broker_id=1, cluster="C", broker_name="b", nonce=NONCE, broker_addr="x" * 300 + ":1")
    with pytest.raises(ValueError, match="broker_addr"):
        hs.encode_hello(broker_id=1, cluster="C", broker_name="b", nonce=NONCE, broker_addr="nohost")


def test_unknown_challenge_flags_are_refused():
    raw = bytearray(hs.encode_challenge(b"n" * 32, None))
    raw[13] = 2
    with pytest.raises(c.ProtocolError, match="challenge has unknown flags"):
        c.decode_frame(bytes(raw), BATCH)


def test_negative_reported_offset_is_refused():
    with pytest.raises(c.ProtocolError, match="negative"):
        c.ReportDecoder().feed(c.REPORT.pack(-1))


def test_unknown_error_code_is_refused():
    raw = w.HEADER.pack(0, w.ERROR_MARKER) + c.ERROR_FIXED.pack(999, 0, 0, 0)
    with pytest.raises(c.ProtocolError, match="unknown error frame code"):
        c.decode_frame(raw, BATCH)


@given(data=st.binary(max_size=200))
def test_random_bytes_never_crash_the_frame_decoder_with_anything_but_protocol_error(data):
    decoder = c.FrameDecoder(BATCH)
    decoder.feed(data)
    try:
        decoder.frames()
    except c.ProtocolError:
        pass
