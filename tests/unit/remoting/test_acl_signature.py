"""RocketMQ's remoting signature: the vector below is computed here with the stdlib, independently of the codec."""

from __future__ import annotations

import base64
import hashlib
import hmac

from remoting.acl_signature import sign, signature, signed_content, verify


def test_signed_content_is_sorted_values_then_body():
    ext = {"topic": "T", "AccessKey": "ak", "Signature": "ignored", "queueId": "3"}
    assert signed_content(ext, b"BODY") == b"ak" + b"3" + b"T" + b"BODY"


def test_vector_matches_an_independent_hmac():
    ext = {"topic": "orders", "producerGroup": "pg", "queueId": "1"}
    body = b"hello"
    sign(ext, body, "rocketmq2", "12345678")
    content = "".join(ext[k] for k in sorted(ext) if k != "Signature").encode() + body
    assert content == b"rocketmq2" + b"pg" + b"1" + b"orders" + b"hello"
    expected = base64.b64encode(hmac.new(b"12345678", content, hashlib.sha1).digest()).decode()
    assert ext["Signature"] == expected
    assert verify("12345678", ext, body)


def test_security_token_is_signed():
    ext = sign({"a": "1"}, b"", "ak", "sk", security_token="tok")
    assert ext["SecurityToken"] == "tok"
    assert verify("sk", ext)
    ext["SecurityToken"] = "other"
    assert not verify("sk", ext)


def test_verify_refuses_wrong_secret_changed_field_body_or_missing_signature():
    ext = sign({"topic": "T"}, b"b", "ak", "sk")
    assert not verify("wrong", ext, b"b")
    assert not verify("sk", ext, b"c")
    assert not verify("sk", {**ext, "topic": "U"}, b"b")
    assert not verify("sk", {k: v for k, v in ext.items() if k != "Signature"}, b"b")
    assert not verify("sk", {**ext, "Signature": "ünï"}, b"b")


def test_resigning_replaces_the_old_signature():
    ext = sign({"topic": "T"}, b"", "ak", "sk")
    sign(ext, b"", "ak", "sk")
    assert ext["Signature"] == signature("sk", ext)


def test_old_clients_unique_key_query_flag_is_left_out_of_the_signed_content_as_rocketmq_does():
    ext = sign({"topic": "t", "key": "k"}, b"", "ak", "sk")
    late = {**ext, "_UNIQUE_KEY_QUERY": "true"}  # added after signing, as clients up to 4.9.3 do
    assert verify("sk", late, b"", version=403)
    assert not verify("sk", late, b"", version=404), "a newer client signs the flag: it must be in the content"
    assert not verify("sk", late, b""), "no version known: everything is signed content"
    signed_with_flag = sign({"topic": "t", "_UNIQUE_KEY_QUERY": "true"}, b"", "ak", "sk")
    assert verify("sk", signed_with_flag, b"", version=407)
