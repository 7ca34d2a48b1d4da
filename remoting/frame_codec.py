"""RocketMQ remoting frames and command headers (spec remoting.md §1). Pure: no sockets, no clocks.

Frame, big-endian::

    offset  size  field
    0       4     length        i32 = 4 + header_len + body_len (excludes itself)
    4       4     type|hlen     high byte: serialize type (0 JSON, 1 ROCKETMQ); low 24 bits: header_len
    8       h     header        JSON text (type 0) or the binary layout below (type 1)
    8+h     rest  body          length - 4 - header_len raw bytes (may be empty)

JSON header (type 0): one object with ``code``, ``opaque``, ``flag`` (ints), ``language`` (a name),
``version`` (int), optional ``remark`` (string) and ``extFields`` (a flat map). We write the keys in
fastjson's alphabetical order, always with ``serializeTypeCurrentRPC`` (Rust requires it) and extFields values
as strings (Go requires them); we read any order, extra keys, and scalar extFields values of any JSON type
(the C++ client sends numbers), turning each into its decimal or ``true``/``false`` text.

ROCKETMQ binary header (type 1)::

    0    2   code        i16
    2    1   language    u8 (LanguageCode)
    3    2   version     i16
    5    4   opaque      i32
    9    4   flag        i32
    13   4+r remark      i32 length, UTF-8 bytes (0 = none)
    17+r 4+e extFields   i32 length, then entries {i16 key_len, key, i32 val_len, value} filling e bytes

``flag`` bit 0 marks a response, bit 1 a oneway request. Everything that cannot be decoded raises
``FrameError``: the caller closes that connection (RocketMQ's NettyDecoder does the same), because after a
bad length nothing later on the stream can be trusted.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import orjson

from common.errors import PyrmqError
from remoting.codes import CURRENT_VERSION, LanguageCode

FLAG_RESPONSE = 0x1
FLAG_ONEWAY = 0x2
SERIALIZE_JSON = 0
SERIALIZE_ROCKETMQ = 1
# RocketMQ's com.rocketmq.remoting.frameMaxLength: the largest value of the length field.
DEFAULT_MAX_FRAME = 16 * 1024 * 1024 - 4
MAX_HEADER = (1 << 24) - 1
_LENGTH = struct.Struct(">i")
_PREFIX = struct.Struct(">ii")
_BIN_FIXED = struct.Struct(">hBhii")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_LANGUAGE_NAMES = {lc.name: lc for lc in LanguageCode}
_LANGUAGE_BY_CODE = {int(lc): lc.name for lc in LanguageCode}  # LanguageCode(n) per answer costs more than its write
_TYPE_NAMES = {SERIALIZE_JSON: "JSON", SERIALIZE_ROCKETMQ: "ROCKETMQ"}


class FrameError(PyrmqError):
    """Bytes that are not a remoting frame; the connection they came on must be closed."""


class RemotingCommand:
    """One request or response. ``ext`` maps header field names to their text; ``body`` is bytes or, for a
    response written from the store's mapping, a sequence of buffers sent one after another."""

    __slots__ = (
        "body",
        "code",
        "ext",
        "flag",
        "language",
        "opaque",
        "problem",
        "remark",
        "serialize_type",
        "version",
    )

    def __init__(
        self,
        code: int,
        *,
        opaque: int = 0,
        flag: int = 0,
        remark: str | None = None,
        ext: dict[str, str] | None = None,
        body: bytes | memoryview | Sequence[bytes | memoryview] = b"",
        language: int = LanguageCode.PYTHON,
        version: int = CURRENT_VERSION,
        serialize_type: int = SERIALIZE_JSON,
    ) -> None:
        self.code = code
        self.opaque = opaque
        self.flag = flag
        self.remark = remark
        self.ext = ext
        self.body = body
        self.language = language
        self.version = version
        self.serialize_type = serialize_type
        # Set by the decoder when the frame is sound but its header is not usable (extFields that are not a flat
        # map of scalars): the request is answered with this text instead of being served.
        self.problem: str | None = None

    @property
    def is_response(self) -> bool:
        return bool(self.flag & FLAG_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & FLAG_ONEWAY)

    def body_bytes(self) -> bytes:
        body = self.body
        if isinstance(body, bytes):
            return body
        if isinstance(body, memoryview):
            return body.tobytes()
        return b"".join(body)

    def body_len(self) -> int:
        body = self.body
        if isinstance(body, (bytes, memoryview)):
            return len(body)
        return sum(len(b) for b in body)

    def __repr__(self) -> str:
        kind = "response" if self.is_response else "request"
        return (
            f"RemotingCommand({kind} code={self.code} opaque={self.opaque} flag={self.flag}"
            f" remark={self.remark!r} ext={self.ext!r} body={self.body_len()}B)"
        )


def response_to(request: RemotingCommand, code: int, remark: str | None = None, **kwargs) -> RemotingCommand:
    """A response to ``request``: same opaque, RESPONSE flag set, replying in the request's serialize type."""
    return RemotingCommand(
        code,
        opaque=request.opaque,
        flag=FLAG_RESPONSE,
        remark=remark,
        serialize_type=request.serialize_type,
        **kwargs,
    )


# encoding ---------------------------------------------------------------------------------------------------
def _text(value: object) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    return value if isinstance(value, str) else str(value)


_dumps = orjson.dumps


def _ext_texts(ext: dict) -> dict:
    """``ext`` as the wire's map of strings: itself when every value is one already (every processor's answer)."""
    for v in ext.values():
        if type(v) is not str:
            return {k: _text(v) for k, v in ext.items() if v is not None}
    return ext


def encode_json_header(cmd: RemotingCommand) -> bytes:
    header: dict[str, object] = {"code": cmd.code}
    if cmd.ext:
        header["extFields"] = _ext_texts(cmd.ext)
    header["flag"] = cmd.flag
    header["language"] = _LANGUAGE_BY_CODE.get(cmd.language) or _language_name(cmd.language)
    header["opaque"] = cmd.opaque
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = cmd.version
    return _dumps(header)


def encode_binary_header(cmd: RemotingCommand) -> bytes:
    remark = cmd.remark.encode() if cmd.remark else b""
    parts = [
        _BIN_FIXED.pack(_int16(cmd.code), int(cmd.language) & 0xFF, _int16(cmd.version), cmd.opaque, cmd.flag),
        _I32.pack(len(remark)),
        remark,
    ]
    entries = []
    for key, value in _ext_texts(cmd.ext).items() if cmd.ext else ():
        k = key.encode()
        v = value.encode()
        entries.append(b"".join((_I16.pack(len(k)), k, _I32.pack(len(v)), v)))
    ext = b"".join(entries)
    parts.append(_I32.pack(len(ext)))
    parts.append(ext)
    return b"".join(parts)


def encode(cmd: RemotingCommand) -> list[bytes | memoryview]:
    """The frame as buffers to write in order: prefix+header first, then the body's buffers (not copied)."""
    if cmd.serialize_type == SERIALIZE_ROCKETMQ:
        header = encode_binary_header(cmd)
    else:
        header = encode_json_header(cmd)
    body = cmd.body
    if isinstance(body, (bytes, bytearray, memoryview)):
        parts = [body] if len(body) else []
    else:
        parts = [b for b in body if len(b)]
    body_len = sum(len(p) for p in parts)
    head = _PREFIX.pack(4 + len(header) + body_len, (cmd.serialize_type << 24) | len(header)) + header
    if len(parts) == 1 and body_len < 4096:  # one small write beats two syscalls' worth of buffers
        return [head + bytes(parts[0])]
    return [head, *parts]


def encode_bytes(cmd: RemotingCommand) -> bytes:
    return b"".join(bytes(p) if isinstance(p, memoryview) else p for p in encode(cmd))


# decoding ---------------------------------------------------------------------------------------------------
def decode(frame: bytes | memoryview) -> RemotingCommand:
    """One frame without its 4-byte length field (what ``FrameDecoder`` yields) -> a command."""
    if len(frame) < 4:
        raise FrameError(f"frame of {len(frame)} bytes is shorter than its 4-byte header-length field")
    (word,) = _I32.unpack_from(frame, 0)
    serialize_type = (word >> 24) & 0xFF
    header_len = word & 0xFFFFFF
    if header_len > len(frame) - 4:
        raise FrameError(f"header length {header_len} runs past the frame ({len(frame) - 4} bytes after it)")
    header = frame[4 : 4 + header_len]
    if serialize_type == SERIALIZE_JSON:
        cmd = _decode_json_header(bytes(header))
    elif serialize_type == SERIALIZE_ROCKETMQ:
        cmd = _decode_binary_header(bytes(header))
    else:
        raise FrameError(f"unknown serialize type {serialize_type}; expected 0 (JSON) or 1 (ROCKETMQ)")
    cmd.serialize_type = serialize_type
    body = frame[4 + header_len :]
    cmd.body = body.tobytes() if isinstance(body, memoryview) else body
    return cmd


def _strict_int(value: object, name: str) -> int:
    if type(value) is not int:
        raise FrameError(f"header field {name} is {value!r}, not an integer")
    return value


def _decode_json_header(raw: bytes) -> RemotingCommand:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise FrameError(f"JSON header does not parse: {exc}") from None
    if not isinstance(obj, dict):
        raise FrameError(f"JSON header is a {type(obj).__name__}, not an object")
    try:
        code = _strict_int(obj["code"], "code")
    except KeyError:
        raise FrameError("JSON header has no code") from None
    opaque = _strict_int(obj.get("opaque", 0), "opaque")
    flag = _strict_int(obj.get("flag", 0), "flag")
    version = obj.get("version", 0)
    version = _strict_int(version, "version") if version is not None else 0
    remark = obj.get("remark")
    if remark is not None and not isinstance(remark, str):
        raise FrameError(f"header field remark is {type(remark).__name__}, not a string")
    language = obj.get("language", "JAVA")
    lang = _LANGUAGE_NAMES.get(language, LanguageCode.OTHER) if isinstance(language, str) else LanguageCode.OTHER
    raw_ext = obj.get("extFields")
    ext: dict[str, str] | None = None
    problem = None
    if raw_ext is not None:
        if not isinstance(raw_ext, dict):
            problem = f"extFields is a {type(raw_ext).__name__}; send an object of header fields with scalar values"
        else:
            for v in raw_ext.values():  # a loop, not all() over a generator: this runs for every request
                if type(v) is not str:  # the C++ client sends numbers; nested values are refused
                    ext, problem = _scalar_texts(raw_ext)
                    break
            else:
                ext = raw_ext
    cmd = RemotingCommand(code, opaque=opaque, flag=flag, remark=remark, ext=ext, language=lang, version=version)
    cmd.problem = problem
    return cmd


def _scalar_texts(raw_ext: dict) -> tuple[dict[str, str] | None, str | None]:
    ext = {}
    for key, value in raw_ext.items():
        if value is None:
            continue
        if isinstance(value, (dict, list)):
            return None, f"extFields[{key!r}] is a {type(value).__name__}; header fields must be strings or numbers"
        ext[key] = _text(value)
    return ext, None


def _decode_binary_header(raw: bytes) -> RemotingCommand:
    if len(raw) < _BIN_FIXED.size + 8:
        raise FrameError(f"binary header of {len(raw)} bytes is shorter than its fixed 21 bytes")
    code, lang, version, opaque, flag = _BIN_FIXED.unpack_from(raw, 0)
    pos = _BIN_FIXED.size
    (remark_len,) = _I32.unpack_from(raw, pos)
    pos += 4
    if remark_len < 0 or pos + remark_len + 4 > len(raw):
        raise FrameError(f"binary header remark length {remark_len} runs past the header")
    try:
        remark = raw[pos : pos + remark_len].decode() if remark_len else None
        pos += remark_len
        (ext_len,) = _I32.unpack_from(raw, pos)
        pos += 4
        if ext_len < 0 or pos + ext_len > len(raw):
            raise FrameError(f"binary header extFields length {ext_len} runs past the header")
        end = pos + ext_len
        ext: dict[str, str] | None = {} if ext_len else None
        while pos < end:
            if pos + 2 > end:
                raise FrameError("binary header extFields entry cut inside its key length")
            (klen,) = _I16.unpack_from(raw, pos)
            pos += 2
            if klen <= 0 or pos + klen + 4 > end:
                raise FrameError(f"binary header extFields key length {klen} is not inside the map")
            key = raw[pos : pos + klen].decode()
            pos += klen
            (vlen,) = _I32.unpack_from(raw, pos)
            pos += 4
            if vlen < 0 or pos + vlen > end:
                raise FrameError(f"binary header extFields value length {vlen} is not inside the map")
            if vlen:
                ext[key] = raw[pos : pos + vlen].decode()  # type: ignore[index]
            pos += vlen
    except UnicodeDecodeError as exc:
        raise FrameError(f"binary header text is not UTF-8: {exc}") from None
    try:
        language = LanguageCode(lang)
    except ValueError:
        language = LanguageCode.OTHER
    return RemotingCommand(code, opaque=opaque, flag=flag, remark=remark, ext=ext, language=language, version=version)


def _int16(value: int) -> int:
    return ((int(value) + 0x8000) & 0xFFFF) - 0x8000


def _language_name(language: int) -> str:
    try:
        return LanguageCode(language).name
    except ValueError:
        return "OTHER"


class FrameDecoder:
    """Splits a byte stream into frames (each without its length field). Holds at most one partial frame, so
    memory stays under ``max_frame`` plus one read; a length outside [4, max_frame] raises ``FrameError``."""

    __slots__ = ("_buf", "max_frame")

    def __init__(self, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        return len(self._buf)

    @property
    def wanted(self) -> int:
        """Bytes the buffered partial frame occupies once whole (its length field included); 0 while its length
        is not known yet (nothing or fewer than 4 bytes buffered). What a caller must be ready to hold for it."""
        buf = self._buf
        return 4 + _LENGTH.unpack_from(buf)[0] if len(buf) >= 4 else 0

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        if buf:
            buf += data
            view: bytes | bytearray = buf
        else:
            view = data
        frames: list[bytes] = []
        pos = 0
        end = len(view)
        max_frame = self.max_frame
        while end - pos >= 4:
            (length,) = _LENGTH.unpack_from(view, pos)
            if length < 4 or length > max_frame:
                raise FrameError(f"frame length {length} is outside 4..{max_frame}; the peer is not speaking remoting")
            if end - pos - 4 < length:
                break
            frames.append(bytes(view[pos + 4 : pos + 4 + length]))
            pos += 4 + length
        if buf:
            del buf[:pos]
        elif pos < end:
            buf += view[pos:]
        return frames
