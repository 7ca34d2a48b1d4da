"""Drives the official RocketMQ 5 Python client (``rocketmq-python-client``) for tests/compat/test_rocketmq5_client.py.

Runs in its own venv (``.venv/rocketmq5-client``, see rocketmq5.py): its top-level ``rocketmq`` package clashes
with the C++ client's, and its protos with the broker's stubs, so it never shares a process with pyrmq. One JSON
command per stdin line, one JSON answer per stdout line (``{"ok": ...}`` or ``{"error": "..."}``). Commands:
``producer`` {endpoint, topics}, ``send`` {topic, body, tag?, keys?, props?, group?, delay_s?, async?},
``simple_consumer`` {endpoint, group, topic, expression?, await_s}, ``receive`` {max, invisible_s},
``ack`` {id}, ``change`` {id, invisible_s}, ``shutdown``. Received messages are kept by message id for ack/change.
"""

from __future__ import annotations

import json
import sys
import time
import traceback


def main() -> None:
    from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer

    producer = consumer = None
    received: dict[str, object] = {}

    def config(endpoint: str) -> ClientConfiguration:
        return ClientConfiguration(endpoint, Credentials(), request_timeout=3)

    def do(cmd: dict):
        nonlocal producer, consumer
        op = cmd["op"]
        if op == "producer":
            producer = Producer(config(cmd["endpoint"]), tuple(cmd["topics"]))
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
                msg.delivery_timestamp = int(time.time()) + int(cmd["delay_s"])
            receipt = producer.send_async(msg).result() if cmd.get("async") else producer.send(msg)
            return {"message_id": receipt.message_id, "offset": receipt.offset}
        if op == "simple_consumer":
            expression = FilterExpression(cmd.get("expression") or "*")
            consumer = SimpleConsumer(config(cmd["endpoint"]), cmd["group"], {cmd["topic"]: expression},
                                      await_duration=cmd["await_s"])
            consumer.startup()
            return True
        if op == "receive":
            started = time.monotonic()
            messages = consumer.receive(cmd["max"], cmd["invisible_s"]) or []
            out = []
            for m in messages:
                received[m.message_id] = m
                out.append({
                    "id": m.message_id, "body": m.body.decode(), "tag": m.tag, "keys": list(m.keys or []),
                    "props": dict(m.properties or {}), "attempt": m.delivery_attempt, "topic": m.topic,
                    "group": m.message_group, "corrupted": bool(getattr(m, "corrupted", False)),
                })
            return {"messages": out, "elapsed_s": time.monotonic() - started}
        if op == "ack":
            consumer.ack(received.pop(cmd["id"]))
            return True
        if op == "change":
            consumer.change_invisible_duration(received[cmd["id"]], cmd["invisible_s"])
            return True
        if op == "shutdown":
            for client in (producer, consumer):
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
