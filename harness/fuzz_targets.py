"""Fuzz targets: every decoder that reads bytes from the network or the disk, fed arbitrary input.

A target takes one input (``bytes``) and runs it through its decoders the way the product does. The decoders'
contract (spec/reliability.md §7) is that bad input ends in the *documented* error type of that decoder and in
nothing else: no other exception, no hang, no unbounded allocation. ``run_one`` returns None when the input was
decoded or refused with a documented error, and a ``Finding`` otherwise. The Hypothesis tests
(``tests/unit/remoting/test_fuzz_targets.py``) and the long run (``bench/fuzz.py``, libFuzzer through atheris
when it is installed) drive the same targets, so a finding of one reproduces in the other.

| target  | decoders                                                                 | documented error       |
|---------|--------------------------------------------------------------------------|------------------------|
| frame   | remoting.frame_codec: FrameDecoder (stream split), decode (JSON/binary)   | FrameError             |
| headers | remoting.headers: Fields getters, parse_int, parse_host_port; SendHeader/PullHeader | HeaderError, NumberError |
| json    | remoting.fastjson.loads (standard JSON and fastjson's dialect)           | JsonBodyError          |
| ha      | remoting.ha_handshake: hello, challenge; ha_codec: reports, frames (whole, incremental) | ProtocolError |
| records | remoting.message_codec check_record/decode_records/iter_records, the store's dispatch scan | RecordError |
| batch   | message_codec.decode_batch, properties, offset msgIds                    | MessageCodecError      |
| config  | common.conf via broker.config / namesrv.config loaders (a real file)     | ConfigError            |
"""

from __future__ import annotations

import os
import tempfile
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from broker.config import load_broker_settings
from broker.store.dispatch_scan import scan
from common.errors import ConfigError
from namesrv.config import load_namesrv_config
from remoting import fastjson, frame_codec, ha_codec, ha_handshake, message_codec
from remoting.codes import RequestCode
from remoting.frame_codec import FrameError, RemotingCommand
from remoting.headers import Fields, HeaderError, NumberError, parse_host_port, parse_int
from remoting.message_codec import MessageCodecError, decode_records
from remoting.message_headers import PullHeader, SendHeader

REPO_ROOT = Path(__file__).resolve().parents[1]
MAX_FRAME = 64 * 1024  # the frame target's cap: large enough for every seed, small enough to stay fast
HA_BATCH = 32 * 1024  # haTransferBatchSize
MAX_BATCH_MESSAGES = 1024
MAX_BODY = 4 * 1024 * 1024
DELAY_MS = [1000 * (i + 1) for i in range(18)]


@dataclass(frozen=True, slots=True)
class Finding:
    """An input that escaped its decoder's contract: the exception and where it was raised."""

    target: str
    error: str  # exception type name
    message: str
    where: str  # innermost file:line inside this repository
    data: bytes

    @property
    def signature(self) -> tuple[str, str, str]:
        return (self.target, self.error, self.where)


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    modules: tuple[str, ...]  # what the target exercises (atheris instruments these)
    allowed: tuple[type[BaseException], ...]  # the documented error types
    run: Callable[[bytes], None]
    seeds: Callable[[], list[bytes]]
    max_len: int = 4096  # longest input the long run tries (libFuzzer -max_len)


def _where(exc: BaseException) -> str:
    """The innermost stack frame of ``exc`` that is in this repository (not the standard library)."""
    best = "?"
    for frame in traceback.extract_tb(exc.__traceback__):
        path = Path(frame.filename)
        if REPO_ROOT in path.parents and ".venv" not in path.parts:
            best = f"{path.relative_to(REPO_ROOT)}:{frame.lineno}"
    return best


def run_one(target: Target, data: bytes) -> Finding | None:
    try:
        target.run(data)
    except target.allowed:
        return None
    except RecursionError as exc:  # a RecursionError is a finding too, but keep its traceback short
        return Finding(target.name, "RecursionError", str(exc)[:200], _where(exc), data)
    except Exception as exc:  # noqa: BLE001 - anything else is exactly what the fuzzer looks for
        return Finding(target.name, type(exc).__name__, str(exc)[:200], _where(exc), data)
    return None


# frame ------------------------------------------------------------------------------------------------------
def _frame(data: bytes) -> None:
    """The server's path: a stream split into frames (cut in two reads at a point the input chooses), each
    frame decoded; and the decoder alone on the whole input as one frame."""
    cut = data[0] % (len(data) + 1) if data else 0
    decoder = frame_codec.FrameDecoder(MAX_FRAME)
    try:
        frames = decoder.feed(data[:cut]) + decoder.feed(data[cut:])
    except FrameError:
        frames = []
    for raw in frames:
        cmd = frame_codec.decode(raw)
        cmd.body_bytes()
        repr(cmd)
    frame_codec.decode(data)


def _frame_seeds() -> list[bytes]:
    cmds = [
        RemotingCommand(RequestCode.PULL_MESSAGE, opaque=7, ext={"topic": "T", "queueId": "1"}, remark="r"),
        RemotingCommand(RequestCode.SEND_MESSAGE_V2, opaque=8, flag=2, ext={"a": "g", "b": "T"}, body=b"hello"),
        RemotingCommand(0, opaque=9, flag=1, body=b"x" * 40, serialize_type=frame_codec.SERIALIZE_ROCKETMQ,
                        ext={"k": "v", "queueOffset": "12"}, remark="ok"),
        RemotingCommand(RequestCode.HEART_BEAT, serialize_type=frame_codec.SERIALIZE_ROCKETMQ),
    ]
    seeds = [frame_codec.encode_bytes(c) for c in cmds]
    cpp = b'{"code":11,"extFields":{"queueId":1,"sysFlag":true,"n":null},"flag":0,"language":"CPP","opaque":3,"version":1}'
    seeds.append((4 + len(cpp)).to_bytes(4, "big") + len(cpp).to_bytes(4, "big") + cpp)
    return [b"".join(seeds)] + seeds


# headers ----------------------------------------------------------------------------------------------------
_HEADER_KEYS = sorted(
    {"producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp",
     "flag", "properties", "reconsumeTimes", "maxReconsumeTimes", "batch", "bname", "dedup", "consumerGroup",
     "queueOffset", "maxMsgNums", "commitOffset", "suspendTimeoutMillis", "subscription", "subVersion",
     "expressionType", "maxMsgBytes", *"abcdefghijklmn"}
)


def ext_from_bytes(data: bytes) -> dict[str, str]:
    """An extFields map from fuzz bytes: NUL-separated ``key, value`` tokens (UTF-8, bad bytes replaced, as
    the frame decoder never yields them). A key token of one byte below 0x20 names a real header field, so
    the fuzzer reaches the typed getters without having to guess their names."""
    tokens = data.split(b"\0")
    ext: dict[str, str] = {}
    for i in range(0, len(tokens) - 1, 2):
        raw_key = tokens[i]
        if len(raw_key) == 1 and raw_key[0] < 0x20:
            key = _HEADER_KEYS[raw_key[0] % len(_HEADER_KEYS)]
        else:
            key = raw_key.decode("utf-8", "replace")
        ext[key] = tokens[i + 1].decode("utf-8", "replace")
    return ext


def ext_to_bytes(ext: dict[str, str]) -> bytes:
    return b"\0".join(b"%s\0%s" % (k.encode(), v.encode()) for k, v in ext.items())


def _headers(data: bytes) -> None:
    ext = ext_from_bytes(data)
    fields = Fields(ext, "fuzz")
    for key in ext:
        for getter in (fields.str, fields.int, fields.long, fields.bool):
            try:
                getter(key)
            except HeaderError:
                pass
        for required in (fields.req_str, fields.req_int, fields.req_long):
            try:
                required(key)
            except HeaderError:
                pass
    for value in ext.values():  # the strict number parser every other outside number goes through
        for parse in (parse_int, parse_host_port):
            try:
                parse(value)
            except NumberError:
                pass
    for code in (RequestCode.SEND_MESSAGE, RequestCode.SEND_MESSAGE_V2, RequestCode.SEND_BATCH_MESSAGE):
        try:
            SendHeader.parse(code, ext).to_v2()
        except HeaderError:
            pass
    PullHeader.parse(ext).to_ext()


def _headers_seeds() -> list[bytes]:
    send = SendHeader.parse(RequestCode.SEND_MESSAGE, {
        "producerGroup": "g", "topic": "T", "queueId": "3", "sysFlag": "0", "bornTimestamp": "1700000000000",
        "flag": "0", "properties": "UNIQ_KEY\x01ABC\x02TAGS\x01t", "reconsumeTimes": "0", "batch": "false"})
    pull = {"consumerGroup": "g", "topic": "T", "queueId": "0", "queueOffset": "42", "maxMsgNums": "32",
            "sysFlag": "6", "commitOffset": "0", "suspendTimeoutMillis": "15000", "subscription": "*",
            "subVersion": "1", "expressionType": "TAG", "maxMsgBytes": "1048576"}
    odd = {"queueId": "-2147483648", "queueOffset": "9223372036854775807", "brokerAddr": "10.0.0.1:10911",
           "masterAddr": "[::1]:9876"}
    return [ext_to_bytes(send.to_v2()), ext_to_bytes(pull), ext_to_bytes(odd)]


# json -------------------------------------------------------------------------------------------------------
def _json(data: bytes) -> None:
    fastjson.loads(data)


def _json_seeds() -> list[bytes]:
    return [
        b'{"offsetTable":{"T@G":{0:15,1:16}}}',
        b'{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"brokerOffset":5,"consumerOffset":3}}}',
        (b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"b","cluster":"C"}],'
         b'"queueDatas":[{"brokerName":"b","perm":6,"readQueueNums":4,"writeQueueNums":4}]}'),
        (b'{"clientID":"c","consumerDataSet":[{"groupName":"G","subscriptionDataSet":[{"topic":"T",'
         b'"subString":"*","tagsSet":[],"codeSet":[],"subVersion":1}]}],"producerDataSet":[]}'),
        b'[1.5e3,-0,true,false,null,"\\u00e9\\n"]',
    ]


# ha ---------------------------------------------------------------------------------------------------------
def _ha(data: bytes) -> None:
    """The master's side (hello, the slave's 32-byte proof, then reports in any chunking) and the slave's
    (challenge, data, heartbeat and error frames: whole, incremental and zero-copy)."""
    try:
        _, used = ha_handshake.decode_hello(data)
        used += ha_handshake.PROOF_BYTES
        reports = ha_codec.ReportDecoder()
        reports.feed(data[used:used + 5])
        reports.feed(data[used + 5:])
    except ha_codec.ProtocolError:
        pass
    cut = data[0] % (len(data) + 1) if data else 0
    decoder = ha_codec.FrameDecoder(HA_BATCH)
    try:
        decoder.feed(data[:cut])
        decoder.peek_header()
        decoder.frames()
        decoder.feed(data[cut:])
        decoder.frames()
    except ha_codec.ProtocolError:
        pass
    if len(data) >= ha_codec.REPORT_SIZE:
        try:
            ha_codec.decode_report(data[:ha_codec.REPORT_SIZE])
        except ha_codec.ProtocolError:
            pass
    ha_codec.decode_frame(data, HA_BATCH)


def _ha_seeds() -> list[bytes]:
    hello = ha_handshake.encode_hello(broker_id=1, cluster="DefaultCluster", broker_name="broker-a", nonce=b"n" * 16)
    proof = ha_handshake.slave_proof(b"s3cret", hello, b"c" * 32)
    challenge = ha_handshake.encode_challenge(b"c" * 32, ha_handshake.master_proof(b"s3cret", hello, b"c" * 32))
    frames = ha_codec.encode_frame(1024, b"r" * 100) + ha_codec.encode_heartbeat(1124)
    error = ha_codec.encode_error(ha_codec.ErrorCode.SLAVE_AHEAD_OF_MASTER_MAX, "slave ahead", phy_offset=9,
                                  master_min=0, master_max=5)
    return [hello + proof + ha_codec.encode_report(0) + ha_codec.encode_report(4096),
            ha_handshake.encode_hello(broker_id=2, cluster="C", broker_name="b", nonce=bytes(16)),
            ha_handshake.encode_hello(broker_id=1, cluster="C", broker_name="b", nonce=bytes(16),
                                      broker_addr="10.0.0.7:10911"),  # the ADDR flag
            challenge + frames, ha_handshake.encode_challenge(bytes(32), None), frames + error]


# records ----------------------------------------------------------------------------------------------------
def _records(data: bytes) -> None:
    """Pull bodies (the decoder on a whole body and record by record) and commitlog bytes (the recovery check and the
    dispatcher's scan, which must stop at the first record that is not valid, never raise)."""
    pos = 0
    while pos < len(data):
        result = message_codec.check_record(data, pos, check_crc=True)
        if result.status is not message_codec.RecordStatus.VALID and result.status is not message_codec.RecordStatus.BLANK:
            break
        pos += max(result.size, 1)
    scan(data, 0, len(data), max_size=message_codec.DEFAULT_MAX_RECORD_SIZE, delay_ms=DELAY_MS)
    try:
        decode_records(data, check_crc=bool(data[-1:] == b"\x01"))
    except message_codec.RecordError:
        pass
    for msg in message_codec.iter_records(data, check_crc=True):
        msg.msg_id  # noqa: B018 - reads the properties and the offset id, as a consumer does
        msg.offset_msg_id  # noqa: B018


def _record(body: bytes, props: dict[str, str], offset: int) -> bytes:
    return message_codec.encode_record(
        topic_bytes=b"TopicTest", queue_id=1, flag=0, queue_offset=offset, physical_offset=offset * 200,
        sys_flag=0, born_timestamp=1_700_000_000_000, born_host=message_codec.host_bytes("10.0.0.1", 5000),
        store_timestamp=1_700_000_000_001, store_host=message_codec.host_bytes("10.0.0.2", 10911),
        reconsume_times=0, body=body, properties=message_codec.encode_properties(props))


def _records_seeds() -> list[bytes]:
    one = _record(b"hello", {"UNIQ_KEY": "AC1100010001", "TAGS": "a"}, 0)
    two = one + _record(b"", {}, 1) + _record(b"b" * 64, {"KEYS": "k1 k2"}, 2)
    return [one, two, two + message_codec.blank_record(64), one[:-3]]


# batch ------------------------------------------------------------------------------------------------------
def _batch(data: bytes) -> None:
    for as_dict in (False, True):
        try:
            message_codec.decode_batch(data, MAX_BATCH_MESSAGES, MAX_BODY, properties_as_dict=as_dict)
        except message_codec.BatchError:
            pass
    message_codec.decode_properties(data)
    message_codec.property_value(data, "UNIQ_KEY")
    message_codec.parse_offset_msg_id(data[:32].decode("latin-1"))


def _batch_seeds() -> list[bytes]:
    batch = message_codec.encode_batch([(0, b"a" * 10, {"UNIQ_KEY": "X1", "WAIT": "true"}), (3, b"", {}),
                                        (1, b"bb", b"KEYS\x01k\x02")])
    return [batch, message_codec.offset_msg_id(("10.1.2.3", 10911), 123456).encode() + batch]


# config -----------------------------------------------------------------------------------------------------
_CONF_DIR: Path | None = None


def _conf_path() -> Path:
    """One scratch file per process, on tmpfs when there is one (a file write per execution)."""
    global _CONF_DIR
    if _CONF_DIR is None:
        base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        _CONF_DIR = Path(tempfile.mkdtemp(prefix="pyrmq-fuzz-conf-", dir=base))
    return _CONF_DIR / "fuzz.conf"


def _config(data: bytes) -> None:
    path = _conf_path()
    path.write_bytes(data)
    try:
        load_broker_settings(path, environ={})
    except ConfigError:
        pass
    load_namesrv_config(path)


def _config_seeds() -> list[bytes]:
    files = sorted((REPO_ROOT / "deploy" / "conf").rglob("*.conf"))
    return [p.read_bytes() for p in files] + [b"listenPort=10911\nbrokerRole=SLAVE\nbrokerId=1\n"]


TARGETS: dict[str, Target] = {
    t.name: t
    for t in (
        Target("frame", ("remoting.frame_codec",), (FrameError,), _frame, _frame_seeds),
        Target("headers", ("remoting.headers", "remoting.message_headers"), (HeaderError, NumberError), _headers,
               _headers_seeds),
        Target("json", ("remoting.fastjson",), (fastjson.JsonBodyError,), _json, _json_seeds,
               max_len=16384),  # long enough for a number of more than 4,300 digits
        Target("ha", ("remoting.ha_wire", "remoting.ha_handshake", "remoting.ha_codec"), (ha_codec.ProtocolError,), _ha,
               _ha_seeds),
        Target("records", ("remoting.message_codec", "broker.store.dispatch_scan"),
               (message_codec.RecordError,), _records, _records_seeds),
        Target("batch", ("remoting.message_codec",), (MessageCodecError,), _batch, _batch_seeds),
        Target("config", ("common.conf", "broker.config", "namesrv.config"), (ConfigError,), _config,
               _config_seeds, max_len=16384),  # a value of more than 4,300 digits fits
    )
}
