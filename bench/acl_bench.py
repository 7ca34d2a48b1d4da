"""ACL 2.0's per-request cost on the broker's event loop: ``AuthGate`` on a decoded SEND_MESSAGE_V2 and
PULL_MESSAGE (signature check with HmacSHA1 over the extFields and a 1 KiB body, then the decision against a
policy of ten entries), against the same requests with no gate. In one process, no sockets: the figure is the
CPU a request pays for the check, in µs. ``python -m bench.acl_bench [--requests N] [--runs N]``.
"""

from __future__ import annotations

import argparse
import time

from bench.report import median_of, print_table, write_json


class _Conn:
    peer = "127.0.0.1:50000"


def _setup():
    from broker.auth.gate import AuthGate
    from broker.auth.model import Acl, User
    from broker.auth.store import AuthStore
    from remoting.acl_signature import sign
    from remoting.codes import RequestCode
    from remoting.frame_codec import RemotingCommand

    store = AuthStore(None)
    store.users["bench"] = User("bench", "bench-secret")
    entries = [{"resource": f"Topic:other{i}*", "actions": ["Pub"], "decision": "Allow"} for i in range(8)]
    entries += [{"resource": "Topic:BenchTopic", "actions": ["Pub", "Sub"], "decision": "Allow"},
                {"resource": "Group:bench-group", "actions": ["Sub"], "decision": "Allow"}]
    store.acls["bench"] = Acl.from_json({"subject": "User:bench", "policies": [{"entries": entries}]})
    gate = AuthGate(store, authentication=True, authorization=True)
    body = b"x" * 1024
    send_ext = {"a": "bench-producer", "b": "BenchTopic", "c": "TBW102", "d": "4", "e": "0", "f": "0",
                "g": str(int(time.time() * 1000)), "h": "0", "i": "UNIQ_KEY\x01abc\x02WAIT\x01true\x02", "j": "0",
                "k": "false", "m": "false"}
    pull_ext = {"consumerGroup": "bench-group", "topic": "BenchTopic", "queueId": "0", "queueOffset": "0",
                "maxMsgNums": "32", "sysFlag": "2", "commitOffset": "0", "suspendTimeoutMillis": "15000",
                "subscription": "*", "subVersion": "0"}
    send = RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext=sign(dict(send_ext), body, "bench", "bench-secret"),
                           body=body)
    pull = RemotingCommand(RequestCode.PULL_MESSAGE, ext=sign(dict(pull_ext), b"", "bench", "bench-secret"))
    return gate, [("send 1 KiB", send), ("pull", pull)]


def _cpu_us(gate, cmd, n: int) -> float:
    conn = _Conn()
    start = time.process_time()
    for _ in range(n):
        if gate(conn, cmd) is not None:
            raise AssertionError("the bench request was refused")
    return (time.process_time() - start) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    gate, requests = _setup()
    rows, results = [], {}
    for name, cmd in requests:
        us = median_of([_cpu_us(gate, cmd, args.requests) for _ in range(args.runs)])
        rows.append([name, f"{us:.1f}"])
        results[name] = {"gate_cpu_us_per_request": round(us, 2)}
    print_table("ACL 2.0 check per request (authentication + authorization)", ["request", "µs CPU"], rows)
    write_json("acl_bench", {"requests": args.requests, "runs": args.runs, "results": results})


if __name__ == "__main__":
    main()
