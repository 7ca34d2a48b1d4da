"""Drives the official RocketMQ 5 Python client (``rocketmq-python-client``) for tests/compat/test_rocketmq5_client.py.

Runs in its own venv (``.venv/rocketmq5-client``, see rocketmq5.py): its top-level ``rocketmq`` package clashes
with the C++ client's, and its protos with the broker's stubs, so it never shares a process with pyrmq. One JSON
command per stdin line, one JSON answer per stdout line (``{"ok": ...}`` or ``{"error": "..."}``). Commands:
``producer`` {endpoint, topics}, ``send`` {topic, body, tag?, keys?, props?, group?, delay_s?, async?},
``send_many`` {topic, count, prefix, inflight?} (message ids; with ``inflight`` that many ``send_async`` calls
are kept in flight), ``simple_consumer`` {endpoint, group, topic, expression?, await_s},
``receive`` {max, invisible_s}, ``ack`` {id}, ``change`` {id, invisible_s}, ``drain`` {invisible_s, idle_receives,
total_s} (receive and ack until ``idle_receives`` receives in a row came back empty; every message received, with
the monotonic time of its receive and of its ack), ``push_consumer`` {endpoint, group, topic, fail_once?} (its
listener answers FAILURE the first time it sees a body in ``fail_once``, SUCCESS otherwise), ``pushed`` (what the
push listener saw so far, in order), ``tx_producer`` {endpoint, topics, check} (a Producer whose TransactionChecker
answers ``check``, COMMIT or ROLLBACK), ``tx_send`` {topic, body, end} (a half message in a new transaction, then
``end``: commit, rollback, or none), ``checked`` (the bodies the checker was asked about), ``shutdown``.
Received messages are kept by message id for ack/change. The commands that make a client take ``credentials``
[access key, secret key] (ACL 2.0), none by default.
"""

from __future__ import annotations

import json
import sys
import time
import traceback


def main() -> None:
    import threading

    from rocketmq import (
        ClientConfiguration,
        ConsumeResult,
        Credentials,
        FilterExpression,
        Message,
        MessageListener,
        Producer,
        PushConsumer,
        SimpleConsumer,
        TransactionChecker,
        TransactionResolution,
    )

    producer = consumer = pusher = txp = None
    checked: list[str] = []
    received: dict[str, object] = {}
    pushed: list[dict] = []
    pushed_lock = threading.Lock()

    class Listener(MessageListener):
        def __init__(self, fail_once: set[str]) -> None:
            self.fail_once = fail_once

        def consume(self, message) -> ConsumeResult:
            body = message.body.decode()
            with pushed_lock:
                failing = body in self.fail_once
                self.fail_once.discard(body)
                pushed.append({"id": message.message_id, "body": body, "attempt": message.delivery_attempt,
                               "result": "FAILURE" if failing else "SUCCESS"})
            return ConsumeResult.FAILURE if failing else ConsumeResult.SUCCESS

    class Checker(TransactionChecker):
        def __init__(self, answer: str) -> None:
            self.answer = answer

        def check(self, message) -> TransactionResolution:
            with pushed_lock:
                checked.append(message.body.decode())
            return TransactionResolution.COMMIT if self.answer == "COMMIT" else TransactionResolution.ROLLBACK

    def view(m) -> dict:
        return {
            "id": m.message_id, "body": m.body.decode(), "tag": m.tag, "keys": list(m.keys or []),
            "props": dict(m.properties or {}), "attempt": m.delivery_attempt, "topic": m.topic,
            "group": m.message_group, "corrupted": bool(getattr(m, "corrupted", False)),
            "delivery_ms": m.delivery_timestamp,  # epoch ms a delayed message was due (None for others)
        }

    def config(endpoint: str, credentials: list | None = None) -> ClientConfiguration:
        return ClientConfiguration(endpoint, Credentials(*credentials) if credentials else Credentials(),
                                   request_timeout=3)

    def do(cmd: dict):
        nonlocal producer, consumer, pusher, txp
        op = cmd["op"]
        if op == "tx_producer":
            txp = Producer(config(cmd["endpoint"], cmd.get("credentials")), tuple(cmd["topics"]),
                           checker=Checker(cmd["check"]))
            txp.startup()
            return True
        if op == "tx_send":
            msg = Message()
            msg.topic = cmd["topic"]
            msg.body = cmd["body"].encode()
            transaction = txp.begin_transaction()
            receipt = txp.send(msg, transaction)
            if cmd["end"] == "commit":
                transaction.commit()
            elif cmd["end"] == "rollback":
                transaction.rollback()
            return {"message_id": receipt.message_id}
        if op == "checked":
            with pushed_lock:
                return list(checked)
        if op == "producer":
            producer = Producer(config(cmd["endpoint"], cmd.get("credentials")), tuple(cmd["topics"]),
                                tls_enable=bool(cmd.get("tls")))
            producer.startup()
            return True
        if op == "send":
            msg = Message()
            msg.topic = cmd["topic"]
            msg.body = cmd["body"].encode()
            if cmd.get("tag"):
                msg.tag = cmd["tag"]
            for key in cmd.get("keys") or ():
                msg.keys = key  # the setter adds one key per assignment
            for k, v in (cmd.get("props") or {}).items():
                msg.add_property(k, v)
            if cmd.get("group"):
                msg.message_group = cmd["group"]
            if cmd.get("delay_s"):
                msg.delivery_timestamp = int(time.time()) + int(cmd["delay_s"])  # the client's unit: seconds
            receipt = producer.send_async(msg).result() if cmd.get("async") else producer.send(msg)
            return {"message_id": receipt.message_id, "offset": receipt.offset, "due_s": msg.delivery_timestamp}
        if op == "send_many" and cmd.get("inflight", 1) > 1:
            slots = threading.BoundedSemaphore(cmd["inflight"])
            pending = []
            for i in range(cmd["count"]):
                msg = Message()
                msg.topic = cmd["topic"]
                msg.body = f"{cmd['prefix']}{i}".encode()
                slots.acquire()
                fut = producer.send_async(msg)
                fut.add_done_callback(lambda _f: slots.release())
                pending.append(fut)
            return [f.result(timeout=60).message_id for f in pending]
        if op == "send_many":
            ids = []
            for i in range(cmd["count"]):
                msg = Message()
                msg.topic = cmd["topic"]
                msg.body = f"{cmd['prefix']}{i}".encode()
                ids.append(producer.send(msg).message_id)
            return ids
        if op == "simple_consumer":
            if cmd.get("sql"):  # RocketMQ 5's FilterExpression{type: SQL}
                from rocketmq.grpc_protocol import FilterType

                expression = FilterExpression(cmd["sql"], FilterType.SQL)
            else:
                expression = FilterExpression(cmd.get("expression") or "*")
            consumer = SimpleConsumer(config(cmd["endpoint"], cmd.get("credentials")), cmd["group"],
                                      {cmd["topic"]: expression}, await_duration=cmd["await_s"],
                                      tls_enable=bool(cmd.get("tls")))
            consumer.startup()
            return True
        if op == "receive":
            started = time.monotonic()
            messages = consumer.receive(cmd["max"], cmd["invisible_s"]) or []
            out = []
            for m in messages:
                received[m.message_id] = m
                out.append(view(m))
            return {"messages": out, "elapsed_s": time.monotonic() - started, "returned_ms": int(time.time() * 1000)}
        if op == "drain":
            out, empty, deadline = [], 0, time.monotonic() + cmd["total_s"]
            while empty < cmd["idle_receives"] and time.monotonic() < deadline:
                messages = consumer.receive(32, cmd["invisible_s"]) or []
                empty = 0 if messages else empty + 1
                for m in messages:
                    got = time.monotonic()
                    consumer.ack(m)
                    out.append({**view(m), "received": got, "acked": time.monotonic()})
            return out
        if op == "push_consumer":
            listener = Listener(set(cmd.get("fail_once") or ()))
            pusher = PushConsumer(config(cmd["endpoint"], cmd.get("credentials")), cmd["group"], listener,
                                  {cmd["topic"]: FilterExpression("*")})
            pusher.startup()
            return True
        if op == "pushed":
            with pushed_lock:
                return list(pushed)
        if op == "ack":
            consumer.ack(received[cmd["id"]])
            del received[cmd["id"]]  # only once acked: an ack refused with UNAVAILABLE is retried with the same message
            return True
        if op == "change":
            consumer.change_invisible_duration(received[cmd["id"]], cmd["invisible_s"])
            return True
        if op == "shutdown":
            for client in (producer, consumer, pusher, txp):
                if client is not None:
                    client.shutdown()
            return True
        raise ValueError(f"unknown op {op!r}")

    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = {"ok": do(json.loads(line))}
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the test
            answer = {"error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
