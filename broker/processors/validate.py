"""Request checks that need no store access: names, queue ids, message bodies and properties.

Each check returns ``None`` or a ``Rejection`` (code + a remark that says what to fix), so servicers read as
"validate -> domain call -> response". Clients may be hostile (reliability.md §7 B-MSG / B-CONS): every field
is checked here even when the SDK checks it too. Message bodies and properties are checked by the send processor
and the store, which see them in their wire form.
"""

from __future__ import annotations

import re
import zlib
from typing import NamedTuple

from broker.metadata.topics import TRACE_TOPIC, is_system_topic
from remoting.codes import ResponseCode
from remoting.headers import INT_MAX, LONG_MAX
from remoting.message_codec import (
    DLQ_GROUP_TOPIC_PREFIX,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_UNIQ_KEY,
    RETRY_GROUP_TOPIC_PREFIX,
    validate_topic,
)

MAX_GROUP_LEN = 120
MAX_QUEUE_NUMS = 1024
_GROUP_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")


class Rejection(NamedTuple):
    code: ResponseCode
    remark: str


def topic_name(topic: str, code: ResponseCode = ResponseCode.INVALID_PARAMETER) -> Rejection | None:
    error = validate_topic(topic)
    if error:
        return Rejection(code, f"{error}; rename the topic")
    return None


_sendable: set[str] = set()  # names send_topic accepted (a pure check of the name; bounded)


def send_topic(topic: str) -> Rejection | None:
    """A producer's target topic: a valid name that is neither a system topic nor a retry/DLQ topic. An accepted
    name is remembered, so a stream of sends checks its topic once."""
    if topic in _sendable:
        return None
    bad = _send_topic(topic)
    if bad is None:
        if len(_sendable) > 100_000:
            _sendable.clear()
        _sendable.add(topic)
    return bad


def _send_topic(topic: str) -> Rejection | None:
    bad = topic_name(topic, ResponseCode.MESSAGE_ILLEGAL)
    if bad:
        return bad
    if is_system_topic(topic) and topic != TRACE_TOPIC:
        return Rejection(
            ResponseCode.NO_PERMISSION, f"sending to system topic {topic} is forbidden; use your own topic"
        )
    if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
        return Rejection(
            ResponseCode.NO_PERMISSION,
            f"{topic} is a retry/dead-letter topic; return messages with ConsumerSendMsgBack instead of SendMessage",
        )
    return None


def admin_topic(topic: str) -> Rejection | None:
    bad = topic_name(topic)
    if bad:
        return bad
    if is_system_topic(topic):
        return Rejection(ResponseCode.NO_PERMISSION, f"{topic} is a system topic; it cannot be changed or deleted")
    return None


def group_name(group: str) -> Rejection | None:
    if not group:
        return Rejection(ResponseCode.INVALID_PARAMETER, "the consumer group is empty; set a group name")
    if len(group) > MAX_GROUP_LEN:
        return Rejection(
            ResponseCode.INVALID_PARAMETER, f"group name is {len(group)} characters, the limit is {MAX_GROUP_LEN}"
        )
    if not _GROUP_RE.match(group):
        return Rejection(
            ResponseCode.INVALID_PARAMETER, f"group {group!r} may only use letters, digits, '%', '|', '-' and '_'"
        )
    return None


def queue_id(qid: int, queue_nums: int, topic: str, kind: str) -> Rejection | None:
    if 0 <= qid < queue_nums:
        return None
    return Rejection(
        ResponseCode.INVALID_PARAMETER,
        f"queue_id {qid} is out of range: topic {topic} has {queue_nums} {kind} queues (0..{queue_nums - 1})",
    )


def queue_nums(read: int, write: int) -> Rejection | None:
    for name, value in (("read_queue_nums", read), ("write_queue_nums", write)):
        if not 1 <= value <= MAX_QUEUE_NUMS:
            return Rejection(ResponseCode.INVALID_PARAMETER, f"{name}={value} must be between 1 and {MAX_QUEUE_NUMS}")
    return None


# -- messages (issue 22 items 5 and 8) ------------------------------------------------------------------------------
# What every sender is held to before anything is stored: remoting SEND_MESSAGE / SEND_MESSAGE_V2 /
# SEND_BATCH_MESSAGE (each element) and the v2 SendMessage. A value RocketMQ's broker or its clients parse later
# (Java's Integer/Long.parseLong, a protobuf Timestamp, pyrmq's v2 converter) is checked here, where the sender can
# still be told: stored, it would fail every consumer of its queue instead.

MAX_TIMESTAMP_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z, the end of protobuf's Timestamp range
MAX_UNIQ_KEY_LEN = 128  # RocketMQ's ids are 32 (remoting) or 34 (v2) characters; an index and the dedup window hold it
MAX_INFLATED_FACTOR = 8  # a compressed body may inflate to this many times maxMessageSize
_INFLATE_CHUNK = 1 << 20

# Properties read as numbers by RocketMQ (broker, proxy, clients) or pyrmq: name -> allowed range. Text must be
# ASCII decimal digits with no sign (a "-" only where the range is negative), as Java writes them.
NUMERIC_PROPERTIES: dict[str, tuple[int, int]] = {
    "DELAY": (0, INT_MAX),  # above the highest level: clamped to it, as RocketMQ does
    "TIMER_DELIVER_MS": (0, MAX_TIMESTAMP_MS),
    "TIMER_DELAY_SEC": (0, MAX_TIMESTAMP_MS // 1000),
    "TIMER_DELAY_MS": (0, MAX_TIMESTAMP_MS),
    "TIMER_OUT_MS": (0, MAX_TIMESTAMP_MS),
    "TIMER_ENQUEUE_MS": (0, MAX_TIMESTAMP_MS),
    "TIMER_DEQUEUE_MS": (0, MAX_TIMESTAMP_MS),
    "TIMER_ROLL_TIMES": (0, INT_MAX),
    "__STARTDELIVERTIME": (0, MAX_TIMESTAMP_MS),
    "1ST_POP_TIME": (0, MAX_TIMESTAMP_MS),
    "REAL_QID": (0, INT_MAX),
    "MIN_OFFSET": (0, LONG_MAX),
    "MAX_OFFSET": (0, LONG_MAX),
    "RECONSUME_TIME": (0, INT_MAX),
    "MAX_RECONSUME_TIMES": (-1, INT_MAX),
    "TRANSACTION_CHECK_TIMES": (0, INT_MAX),
    "CHECK_IMMUNITY_TIME_IN_SECONDS": (0, INT_MAX),
    "INNER_NUM": (0, INT_MAX),
    "INNER_BASE": (0, LONG_MAX),
}
TOPIC_PROPERTIES = ("RETRY_TOPIC", "REAL_TOPIC")  # a consumer turns a retry copy's topic back into this name
PROPERTY_TRAN_MSG = "TRAN_MSG"
CHECKED_VALUES = frozenset({*NUMERIC_PROPERTIES, *TOPIC_PROPERTIES, PROPERTY_TRAN_MSG})  # every value is checked
CHECKED_PROPERTIES = CHECKED_VALUES | {PROPERTY_UNIQ_KEY}  # UNIQ_KEY only for its length



def _trie(words: list[str]) -> str:
    """A regex matching exactly one of ``words``, factored by common prefixes: re tries an alternation's branches
    in turn, and a branch that starts with a literal is skipped on its first character, so a factored pattern
    rejects "TAGS" after one comparison instead of one per name."""
    if words == [""]:
        return ""
    groups: dict[str, list[str]] = {}
    for w in words:
        groups.setdefault(w[:1], []).append(w[1:])
    alts = [re.escape(c) + _trie(rest) if c else "" for c, rest in sorted(groups.items())]
    if "" in alts:
        return "(?:" + "|".join(a for a in alts if a) + ")?"
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


# One scan of a properties text finds every checked name at the start of a pair; the leading "\x02" is a literal,
# so the scan jumps from separator to separator in C (scanned text gets a "\x02" in front, for a pair at the very
# start). Most sends match nothing and cost one search. UNIQ_KEY is on every message: it is looked for only when a
# message's properties are long enough to hold one over the limit.
_SCAN_PATTERN = f"\x02({_trie(sorted(CHECKED_VALUES))})\x01([^\x02]*)"
_SCAN_TEXT = re.compile(_SCAN_PATTERN)
_SCAN_BYTES = re.compile(_SCAN_PATTERN.encode())
_LONG_UNIQ_PATTERN = f"\x02(UNIQ_KEY)\x01([^\x02]{{{MAX_UNIQ_KEY_LEN + 1},}})"
_LONG_UNIQ_TEXT = re.compile(_LONG_UNIQ_PATTERN)
_LONG_UNIQ_BYTES = re.compile(_LONG_UNIQ_PATTERN.encode())
_UNIQ_MIN_PAIR = len(PROPERTY_UNIQ_KEY) + 1 + MAX_UNIQ_KEY_LEN + 1  # the shortest pair with a too-long UNIQ_KEY

# MessageSysFlag (RocketMQ 5): the bits a producer may set. Transaction bits are admitted by send_admit; the
# address flags describe the record's layout, which the broker writes (pyrmq: IPv4 only), never the client.
COMPRESSED_FLAG = 0x1
MULTI_TAGS_FLAG = 0x2
TRANSACTION_BITS = 0xC
BORNHOST_V6_FLAG = 0x10
STOREHOSTADDRESS_V6_FLAG = 0x20
NEED_UNWRAP_FLAG = 0x40
INNER_BATCH_FLAG = 0x80
COMPRESSION_TYPE_MASK = 0x700
COMPRESSION_LZ4 = 0x100
COMPRESSION_ZSTD = 0x200
COMPRESSION_ZLIB = 0x300
KNOWN_SYS_FLAG_BITS = 0x7FF
_MAGIC = {COMPRESSION_LZ4: (b"\x04\x22\x4d\x18", "LZ4 frame"), COMPRESSION_ZSTD: (b"\x28\xb5\x2f\xfd", "zstd frame")}


_HINTS = {PROPERTY_DELAY_TIME_LEVEL: "a delay level: 0 (no delay) or 1..N (a level past the highest is the highest)"}


def _decimal_problem(name: str, value: str, lo: int, hi: int) -> str | None:
    hint = _HINTS.get(name) or f"ASCII digits in {lo}..{hi}"
    if not value:
        return f"{name} is empty; leave it out or send {hint}"
    digits = value[1:] if value[0] == "-" and lo < 0 else value
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 19:
        if value[0] == "-" and value[1:].isascii() and value[1:].isdigit():
            return f"{name}={value[:20]} is negative; send {hint}"
        if value[0] == "+":
            return f"{name}={value[:20]!r} has a sign; send {hint}"
        return f"{name}={value[:20]!r} is not a decimal number; send {hint}"
    if not lo <= int(value) <= hi:
        return f"{name}={value[:20]} is out of range; send {hint}"
    return None


def property_problem(name: str, value: str) -> str | None:
    """What is wrong with one checked property (``name`` in CHECKED_PROPERTIES), or None."""
    bounds = NUMERIC_PROPERTIES.get(name)
    if bounds is not None:
        return _decimal_problem(name, value, *bounds)
    if name == PROPERTY_UNIQ_KEY:
        if len(value) > MAX_UNIQ_KEY_LEN:
            return f"UNIQ_KEY is {len(value)} characters, the limit is {MAX_UNIQ_KEY_LEN}; let the client set the id"
        return None
    if name == PROPERTY_TRAN_MSG:
        if value.lower() not in ("false", "true"):  # Java's Boolean.parseBoolean: "TRUE" is a half message too
            return f"TRAN_MSG={value[:20]!r}: send true for a half message, or leave TRAN_MSG out"
        return None
    problem = validate_topic(value)
    return f"{name}: {problem}; leave {name} out (the broker sets it)" if problem else None


def _refusal(index: int | None, problem: str) -> Rejection:
    where = "" if index is None else f"message {index}: "
    return Rejection(ResponseCode.MESSAGE_ILLEGAL, where + problem)


def properties_text(text: str, index: int | None = None) -> Rejection | None:
    """The refusal of a send header's ``properties`` text (pairs as the client wrote them, empty values included:
    the parser would drop ``DELAY=`` silently), or None."""
    scanned = "\x02" + text
    long = len(text) >= _UNIQ_MIN_PAIR
    if not long and _SCAN_TEXT.search(scanned) is None:  # nearly every send
        return None
    found = list(_SCAN_TEXT.finditer(scanned))
    if long:
        found += _LONG_UNIQ_TEXT.finditer(scanned)
    for m in found:
        problem = property_problem(m[1], m[2])
        if problem:
            return _refusal(index, problem)
    return None


def properties_bytes(joined: bytes, parts: list[bytes] | None = None) -> Rejection | None:
    """``properties_text`` for the raw properties of a batch's messages, ``joined`` by ``\\x02``: one scan of the
    whole batch; only when it finds a problem are ``parts`` (each message's bytes) scanned to name the message."""
    scanned = b"\x02" + joined
    long = len(joined) >= _UNIQ_MIN_PAIR and (parts is None or max(map(len, parts)) >= _UNIQ_MIN_PAIR)
    if not long and _SCAN_BYTES.search(scanned) is None:  # nearly every batch
        return None
    found = list(_SCAN_BYTES.finditer(scanned))
    if long:
        found += _LONG_UNIQ_BYTES.finditer(scanned)
    for m in found:
        problem = property_problem(m[1].decode(), m[2].decode("utf-8", "replace"))
        if problem:
            index = None
            if parts is not None:
                index = next((i for i, p in enumerate(parts) if properties_bytes(p) is not None), None)
            return _refusal(index, problem)
    return None


def properties_dict(props: dict[str, str], index: int | None = None) -> Rejection | None:
    """The same rules for properties already parsed (the v2 path); costs one ``isdisjoint`` when none is checked
    (UNIQ_KEY, set on every message, is looked at only for its length)."""
    key = props.get(PROPERTY_UNIQ_KEY)
    if key is not None and len(key) > MAX_UNIQ_KEY_LEN:
        return _refusal(index, property_problem(PROPERTY_UNIQ_KEY, key))
    if CHECKED_VALUES.isdisjoint(props):
        return None
    for name in sorted(CHECKED_VALUES.intersection(props)):
        problem = property_problem(name, props[name])
        if problem:
            return _refusal(index, problem)
    return None


def sys_flag(flag: int) -> Rejection | None:
    """A producer's sysFlag: only MessageSysFlag's bits, no address-layout bits (Java's decoder would read the
    record with IPv6 hosts), no inner-batch bits (pyrmq has no inner batches), a compression type only with
    COMPRESSED_FLAG. Transaction bits are send_admit's."""
    if not flag & ~(COMPRESSED_FLAG | MULTI_TAGS_FLAG | TRANSACTION_BITS):  # nearly every send: 0 or compressed
        return None
    if flag < 0 or flag & ~KNOWN_SYS_FLAG_BITS:
        return Rejection(ResponseCode.MESSAGE_ILLEGAL, f"sysFlag {flag:#x} sets bits RocketMQ does not define (known:"
                         f" {KNOWN_SYS_FLAG_BITS:#x}); send the flags your client computes")
    if flag & (BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG):
        return Rejection(ResponseCode.MESSAGE_ILLEGAL, f"sysFlag {flag:#x} sets BORNHOST_V6_FLAG or"
                         " STOREHOSTADDRESS_V6_FLAG: the broker sets the address flags of the record it writes; clear"
                         " bits 0x10 and 0x20")
    if flag & (NEED_UNWRAP_FLAG | INNER_BATCH_FLAG):
        return Rejection(ResponseCode.MESSAGE_ILLEGAL, f"sysFlag {flag:#x} sets NEED_UNWRAP_FLAG or INNER_BATCH_FLAG:"
                         " pyrmq has no inner batches; send a SEND_BATCH_MESSAGE instead")
    if flag & COMPRESSION_TYPE_MASK and not flag & COMPRESSED_FLAG:
        return Rejection(ResponseCode.MESSAGE_ILLEGAL, f"sysFlag {flag:#x} names a compression type without"
                         " COMPRESSED_FLAG (0x1); set both or neither")
    kind = flag & COMPRESSION_TYPE_MASK
    if kind not in (0, COMPRESSION_LZ4, COMPRESSION_ZSTD, COMPRESSION_ZLIB):
        return Rejection(ResponseCode.MESSAGE_ILLEGAL, f"sysFlag {flag:#x} names compression type {kind >> 8}, which"
                         " RocketMQ does not define (1 LZ4, 2 ZSTD, 3 ZLIB)")
    return None


MORE = object()  # compressed_body's answer when it stopped at ``max_inline``: run it again off the event loop


def compressed_body(body, flag: int, limit: int, index: int | None = None, *,
                    max_inline: int | None = None) -> Rejection | int | object:
    """A body whose sysFlag says COMPRESSED must be what its type says, or every consumer fails on it: zlib (type
    0 or ZLIB) is inflated, in 1 MiB steps that are dropped, up to ``limit`` bytes; LZ4 and zstd (which pyrmq does
    not inflate) need their frame's magic number. The refusal, or the inflated size (0 when there is nothing to
    inflate); ``MORE`` once more than ``max_inline`` bytes came out (a small body can inflate to ``limit``: the
    caller finishes in a thread, zlib lets go of the GIL)."""
    if not flag & COMPRESSED_FLAG:
        return 0
    kind = flag & COMPRESSION_TYPE_MASK
    magic = _MAGIC.get(kind)
    if magic is not None:
        if bytes(body[:4]) != magic[0]:
            return _refusal(index, f"sysFlag {flag:#x} says the body is a {magic[1]} but it does not start with"
                            " one; compress it as the flag says or clear COMPRESSED_FLAG")
        return 0
    inflater = zlib.decompressobj()
    data, total = body, 0
    try:
        while not inflater.eof:
            out = len(inflater.decompress(data, _INFLATE_CHUNK))
            data = inflater.unconsumed_tail
            total += out
            if total > limit:
                return _refusal(index, f"the compressed body inflates past the request's limit of {MAX_INFLATED_FACTOR}"
                                " x maxMessageSize (all its bodies together); split the message or the batch")
            if max_inline is not None and total > max_inline:
                return MORE
            if not out and not data:
                break  # all input read, nothing more comes out: the stream is cut short
    except zlib.error as exc:
        return _refusal(index, f"sysFlag {flag:#x} says the body is zlib-compressed but it does not inflate ({exc});"
                        " send it zlib-compressed or clear COMPRESSED_FLAG")
    if not inflater.eof or inflater.unused_data:
        what = "ends before its zlib stream does" if not inflater.eof else "has bytes after its zlib stream"
        return _refusal(index, f"the compressed body {what}; send one whole zlib stream or clear COMPRESSED_FLAG")
    return total


# send header fields that are numbers: RocketMQ's Integer.parseInt takes "+1"; Java clients never write a sign
_SEND_NUMBER_FIELDS = ("queueId", "sysFlag", "bornTimestamp", "flag", "reconsumeTimes", "maxReconsumeTimes",
                       "defaultTopicQueueNums")
_SEND_SHORT = {"queueId": "e", "sysFlag": "f", "bornTimestamp": "g", "flag": "h", "reconsumeTimes": "j",
               "maxReconsumeTimes": "l", "defaultTopicQueueNums": "d"}  # SEND_MESSAGE_V2's one-letter keys
_SEND_SHORT_KEYS = tuple(_SEND_SHORT[n] for n in _SEND_NUMBER_FIELDS)
_SEND_LONG = {short: name for name, short in _SEND_SHORT.items()}


def send_header(ext: dict[str, str] | None, short_keys: bool, sys_flag_value: int, born_ms: int) -> Rejection | None:
    """A send header's numbers as Java clients write them (no "+" sign), its sysFlag (``sys_flag``) and a
    bornTimestamp a v2 consumer can represent; ``short_keys``: the header uses SEND_MESSAGE_V2's keys."""
    if ext:
        get = ext.get
        for key in _SEND_SHORT_KEYS if short_keys else _SEND_NUMBER_FIELDS:
            value = get(key)
            if value and value[0] == "+":
                name = _SEND_LONG.get(key, key)
                return Rejection(ResponseCode.INVALID_PARAMETER, f"header field {name}={value[:20]!r} has a sign;"
                                 " send plain decimal digits (a negative queueId lets the broker pick the queue)")
    if not 0 <= born_ms <= MAX_TIMESTAMP_MS:
        return Rejection(ResponseCode.INVALID_PARAMETER, f"bornTimestamp {born_ms} is not a time in 1970..9999;"
                         " send the send time in ms since the epoch")
    return sys_flag(sys_flag_value)
