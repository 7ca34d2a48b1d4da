"""A PushConsumer of the PyPI ``rocketmq`` package (Apache rocketmq-client-cpp) in its own process.

The tests run it as ``python -m tests.compat.cpp_consumer`` so that they can SIGSTOP/SIGCONT it (the client
itself has no pause) and so that its C++ log lands under the HOME they give it. It appends one JSON line per
event to ``--out``: ``started`` once the consumer is started, one ``message`` per delivered message, and
``stopped`` after a clean shutdown (SIGTERM or SIGINT). Message callbacks arrive on the library's own threads;
writes are serialised by a lock and flushed line by line, so the reader sees whole lines only. Its first stdin line
is ``null`` or ``[access key, secret key]``: ACL session credentials, kept out of the command line.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--namesrv", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--expression", default="*")
    parser.add_argument("--instance", required=True)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    credentials = json.loads(sys.stdin.readline() or "null")  # [access key, secret key] or null, from a pipe

    from rocketmq.client import PushConsumer

    lock = threading.Lock()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    with open(args.out, "a", encoding="utf-8") as out:

        def emit(event: dict) -> None:
            line = json.dumps(event, sort_keys=True)
            with lock:
                out.write(line + "\n")
                out.flush()

        def on_message(msg) -> None:
            emit(
                {
                    "event": "message",
                    "topic": msg.topic,
                    "tags": (msg.tags or b"").decode("utf-8", "replace"),
                    "keys": (msg.keys or b"").decode("utf-8", "replace"),
                    "body": (msg.body or b"").decode("utf-8", "replace"),
                    "queueId": msg.queue_id,
                    "queueOffset": msg.queue_offset,
                    "msgId": msg.id,
                    "reconsumeTimes": msg.reconsume_times,
                    "thread": threading.current_thread().name,
                    "t": time.time(),
                }
            )

        consumer = PushConsumer(args.group)
        consumer.set_namesrv_addr(args.namesrv)
        consumer.set_instance_name(args.instance)
        if credentials:
            consumer.set_session_credentials(credentials[0], credentials[1], "ALIYUN")
        consumer.set_thread_count(args.threads)
        consumer.subscribe(args.topic, on_message, args.expression)  # CONSUME_SUCCESS unless the callback raises
        consumer.start()
        emit({"event": "started", "group": args.group, "topic": args.topic, "expression": args.expression})
        while not stop.wait(0.2):
            pass
        consumer.shutdown()  # persists offsets (UPDATE_CONSUMER_OFFSET), then UNREGISTER_CLIENT
        emit({"event": "stopped"})


if __name__ == "__main__":
    main()
