"""RocketMQ's remoting request signature (ACL 1.0 and 2.0 share it; spec controller-and-features.md §2.3). Pure.

A signed request carries extFields ``AccessKey`` and ``Signature`` and, for temporary credentials,
``SecurityToken``. The signature is Base64(HmacSHA1(secretKey, content)) where content is the UTF-8 text of the
values of every extField except ``Signature``, taken in key order (Java's ``TreeMap``: code-point order of the
keys) and concatenated, followed by the body's bytes. ``AccessKey`` and ``SecurityToken`` are extFields
themselves, so they are signed too: a signer adds them before computing the signature.
"""

from __future__ import annotations

import base64
import hmac

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"


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


def verify(secret_key: str, ext: dict[str, str], body: bytes = b"") -> bool:
    """Whether ``ext``'s ``Signature`` is the one ``secret_key`` gives (compared in constant time)."""
    given = ext.get(SIGNATURE)
    if not given:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), signature(secret_key, ext, body).encode("ascii"))


def signer(access_key: str, secret_key: str, security_token: str | None = None):
    """A ``RemotingClient.signer``: signs a request in place (its extFields, over its body) just before sending."""

    def sign_request(cmd) -> None:
        # the values as the frame will carry them (the encoder writes booleans as true/false, numbers in decimal)
        ext = {k: ("true" if v is True else "false" if v is False else str(v)) for k, v in (cmd.ext or {}).items()}
        cmd.ext = sign(ext, cmd.body_bytes(), access_key, secret_key, security_token)

    return sign_request
