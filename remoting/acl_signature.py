"""RocketMQ's request signatures: remoting's (ACL 1.0 and 2.0 share it; spec controller-and-features.md §2.3) and,
below, the gRPC v2 one. Pure.

A signed request carries extFields ``AccessKey`` and ``Signature`` and, for temporary credentials,
``SecurityToken``. The signature is Base64(HmacSHA1(secretKey, content)) where content is the UTF-8 text of the
values of every extField except ``Signature``, taken in key order (Java's ``TreeMap``: code-point order of the
keys) and concatenated, followed by the body's bytes. ``AccessKey`` and ``SecurityToken`` are extFields
themselves, so they are signed too: a signer adds them before computing the signature.
"""

from __future__ import annotations

import base64
import datetime
import hmac
import time

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
# Clients up to 4.9.3 (MQVersion ordinal 403) add this extField after signing a QUERY_MESSAGE; RocketMQ's
# DefaultAuthenticationContextBuilder leaves it out of the signed content for them, and so does ``verify``.
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
V4_9_3 = 403


def signed_content(ext: dict[str, str], body: bytes = b"") -> bytes:
    """The bytes RocketMQ signs: the values of ``ext`` but ``Signature``, sorted by key, then ``body``."""
    text = "".join([value for key, value in sorted(ext.items()) if key != SIGNATURE])
    return text.encode("utf-8") + bytes(body)


def signature(secret_key: str, ext: dict[str, str], body: bytes = b"") -> str:
    digest = hmac.digest(secret_key.encode("utf-8"), signed_content(ext, body), "sha1")  # OpenSSL one-shot path
    return base64.b64encode(digest).decode("ascii")


def sign(ext: dict[str, str], body: bytes, access_key: str, secret_key: str,
         security_token: str | None = None) -> dict[str, str]:
    """Add ``AccessKey`` (and ``SecurityToken``) and the ``Signature`` over them to ``ext`` in place; returns it."""
    ext.pop(SIGNATURE, None)
    ext[ACCESS_KEY] = access_key
    if security_token:
        ext[SECURITY_TOKEN] = security_token
    ext[SIGNATURE] = signature(secret_key, ext, body)
    return ext


def verify(secret_key: str, ext: dict[str, str], body: bytes = b"", version: int | None = None) -> bool:
    """Whether ``ext``'s ``Signature`` is the one ``secret_key`` gives (compared in constant time); ``version`` is
    the request's (MQVersion ordinal), which says whether ``_UNIQUE_KEY_QUERY`` was signed."""
    given = ext.get(SIGNATURE)
    if not given:
        return False
    if version is not None and version <= V4_9_3 and UNIQUE_KEY_QUERY in ext:
        ext = {k: v for k, v in ext.items() if k != UNIQUE_KEY_QUERY}
    return hmac.compare_digest(given.encode("utf-8", "replace"), signature(secret_key, ext, body).encode("ascii"))


def signer(access_key: str, secret_key: str, security_token: str | None = None):
    """A ``RemotingClient.signer``: signs a request in place (its extFields, over its body) just before sending."""

    def sign_request(cmd) -> None:
        # the values as the frame will carry them (the encoder writes booleans as true/false, numbers in decimal)
        ext = {k: ("true" if v is True else "false" if v is False else str(v)) for k, v in (cmd.ext or {}).items()}
        cmd.ext = sign(ext, cmd.body_bytes(), access_key, secret_key, security_token)

    return sign_request


# RocketMQ 5's gRPC (apache.rocketmq.v2) signature (spec official-client.md §2): two metadata headers,
#   authorization: MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time, Signature=<hex>
#   x-mq-date-time: yyyyMMdd'T'HHmmss'Z'
# where Signature is the hex HmacSHA1 of the date-time text with the secret key. Only the date-time is signed, so a
# header may be reused while the server accepts its date-time; the official Python client writes its *local* time
# with a literal Z (spec official-client.md), which is why a server compares it with both clocks.
V2_SCHEME = "MQv2-HMAC-SHA1"
V2_AUTHORIZATION = "authorization"
V2_DATE_TIME = "x-mq-date-time"
V2_MAX_HEADER = 1024  # a longer authorization header is refused unread


def v2_signature(secret_key: str, date_time: str) -> str:
    return hmac.digest(secret_key.encode("utf-8"), date_time.encode("utf-8"), "sha1").hex()


def v2_date_time(epoch_s: float) -> str:
    """The date-time text of ``epoch_s`` in UTC (what a client with a UTC clock sends)."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(epoch_s))


def v2_metadata(access_key: str, secret_key: str, epoch_s: float | None = None,
                date_time: str | None = None) -> list[tuple[str, str]]:
    """The two headers a RocketMQ 5 client sends (for tests and benchmarks: pyrmq's SDK speaks remoting)."""
    date_time = date_time or v2_date_time(time.time() if epoch_s is None else epoch_s)
    value = (f"{V2_SCHEME} Credential={access_key}, SignedHeaders={V2_DATE_TIME}, "
             f"Signature={v2_signature(secret_key, date_time)}")
    return [(V2_AUTHORIZATION, value), (V2_DATE_TIME, date_time)]


class V2HeaderError(ValueError):
    """A malformed v2 authorization or date-time header; the message says which part (never quoting a secret)."""


def parse_v2_authorization(header: str) -> tuple[str, str]:
    """(access key, signature hex) of an ``authorization`` header."""
    if len(header) > V2_MAX_HEADER:
        raise V2HeaderError(f"the authorization header is longer than {V2_MAX_HEADER} characters")
    scheme, _, rest = header.strip().partition(" ")
    if scheme != V2_SCHEME:
        raise V2HeaderError(f"the authorization header does not start with {V2_SCHEME}")
    access_key = signature_hex = None
    for item in rest.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep:
            raise V2HeaderError("the authorization header is not a list of Name=value items")
        if key == "Credential":
            access_key = value.split("/", 1)[0]
        elif key == "Signature":
            signature_hex = value
    if not access_key:
        raise V2HeaderError("the authorization header has no Credential (the access key): give the client credentials")
    if not signature_hex:
        raise V2HeaderError("the authorization header has no Signature")
    if len(signature_hex) != 40 or any(c not in "0123456789abcdefABCDEF" for c in signature_hex):
        raise V2HeaderError("the Signature is not 40 hex digits (an HmacSHA1)")
    return access_key, signature_hex.lower()


def parse_v2_date_time(text: str) -> float:
    """The epoch seconds of a ``x-mq-date-time`` value, its fields read as UTC."""
    if len(text) != 16 or text[8] != "T" or text[15] != "Z" or not (text[:8] + text[9:15]).isdigit() \
            or not text.isascii():
        raise V2HeaderError("x-mq-date-time is not yyyyMMddTHHmmssZ")
    try:
        when = datetime.datetime(int(text[0:4]), int(text[4:6]), int(text[6:8]), int(text[9:11]),
                                 int(text[11:13]), int(text[13:15]), tzinfo=datetime.timezone.utc)
    except ValueError:
        raise V2HeaderError("x-mq-date-time is not a valid date and time") from None
    return when.timestamp()


def verify_v2(secret_key: str, date_time: str, signature_hex: str) -> bool:
    return hmac.compare_digest(signature_hex.encode("ascii"), v2_signature(secret_key, date_time).encode("ascii"))
