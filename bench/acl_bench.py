"""ACL 2.0's cost, two ways, in one run.

1. Per request, on the broker's event loop (one process, no sockets): ``AuthGate`` on a decoded SEND_MESSAGE_V2 and
   PULL_MESSAGE (HmacSHA1 over the extFields and a 1 KiB body, then the decision against a policy of ten entries),
   and ``V2Auth`` on a v2 SendMessage (header parse, date-time skew, HmacSHA1 of the date-time, the decision): CPU µs
   per check.
2. End to end with the SDK: a nameserver and a broker with authentication and authorization off, and another pair
   with both on (the client a Normal user with Pub/Sub grants, so every request is signed, verified and decided);
   ``--senders`` tasks of one Producer send ``--messages`` 1 KiB messages (closed loop), then a PushConsumer reads
   them all from the first offset (timed from its first delivery to its last). Runs alternate off/on ``--rounds``
   times after a warm-up round; medians and the on/off ratio of msg/s.

``python -m bench.acl_bench [--requests N] [--messages N] [--senders N] [--rounds N] [--skip-sdk]``
The machine is shared (2 cores, other work running): figures are noisy; the ratio of runs interleaved in one process
is the number to read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

from bench.closed_loop import send_closed_loop
from bench.cpu import cpu_s, settle
from bench.report import median_of, print_table, write_json
from bench.topics import create_routed_topic

BENCH_USER, BENCH_PW = "bench", "bench-secret"
ROOT, ROOT_PW = "root", "root-secret-bench"
TOPIC, GROUP = "BenchAcl", "bench-acl-group"


class _Conn:
    peer = "127.0.0.1:50000"


class _V2Context:
    """What ``V2Auth.check`` reads of a grpc.aio servicer context: the metadata and the peer."""

    def __init__(self, metadata: list[tuple[str, str]]) -> None:
        self._metadata = tuple(metadata)

    def invocation_metadata(self):
        return self._metadata

    def peer(self) -> str:
        return "ipv4:127.0.0.1:50000"


def _store():
    from broker.auth.model import Acl, User
    from broker.auth.store import AuthStore

    store = AuthStore(None)
    store.users[BENCH_USER] = User(BENCH_USER, BENCH_PW)
    entries = [{"resource": f"Topic:other{i}*", "actions": ["Pub"], "decision": "Allow"} for i in range(8)]
    entries += [{"resource": "Topic:BenchTopic", "actions": ["Pub", "Sub"], "decision": "Allow"},
                {"resource": "Group:bench-group", "actions": ["Sub"], "decision": "Allow"}]
    store.acls[BENCH_USER] = Acl.from_json({"subject": f"User:{BENCH_USER}", "policies": [{"entries": entries}]})
    return store


def _remoting_checks(gate):
    from remoting.acl_signature import sign
    from remoting.codes import RequestCode
    from remoting.frame_codec import RemotingCommand

    body = b"x" * 1024
    send_ext = {"a": "bench-producer", "b": "BenchTopic", "c": "TBW102", "d": "4", "e": "0", "f": "0",
                "g": str(int(time.time() * 1000)), "h": "0", "i": "UNIQ_KEY\x01abc\x02WAIT\x01true\x02", "j": "0",
                "k": "false", "m": "false"}
    pull_ext = {"consumerGroup": "bench-group", "topic": "BenchTopic", "queueId": "0", "queueOffset": "0",
                "maxMsgNums": "32", "sysFlag": "2", "commitOffset": "0", "suspendTimeoutMillis": "15000",
                "subscription": "*", "subVersion": "0"}
    send = RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext=sign(dict(send_ext), body, BENCH_USER, BENCH_PW),
                           body=body)
    pull = RemotingCommand(RequestCode.PULL_MESSAGE, ext=sign(dict(pull_ext), b"", BENCH_USER, BENCH_PW))
    conn = _Conn()
    return [("remoting send 1 KiB", lambda: gate(conn, send)), ("remoting pull", lambda: gate(conn, pull))]


def _v2_check(gate):
    from broker.grpc_v2.auth import V2Auth
    from broker.grpc_v2.pb import definition_pb2 as pb
    from broker.grpc_v2.pb import service_pb2 as spb
    from remoting.acl_signature import v2_metadata

    auth = V2Auth(gate, 300_000)
    request = spb.SendMessageRequest(messages=[pb.Message(topic=pb.Resource(name="BenchTopic"), body=b"x" * 1024)])
    context = _V2Context([("x-mq-client-id", "bench@1"), *v2_metadata(BENCH_USER, BENCH_PW)])
    return [("v2 SendMessage", lambda: auth.check(request, context, "127.0.0.1:50000"))]


def _cpu_us(check, n: int) -> float:
    start = time.process_time()
    for _ in range(n):
        if check() is not None:
            raise AssertionError("the bench request was refused")
    return (time.process_time() - start) / n * 1e6


def per_request(requests: int, runs: int) -> tuple[list, dict]:
    from broker.auth.gate import AuthGate

    gate = AuthGate(_store(), authentication=True, authorization=True)
    rows, results = [], {}
    for name, check in _remoting_checks(gate) + _v2_check(gate):
        us = median_of([_cpu_us(check, requests) for _ in range(runs)])
        rows.append([name, f"{us:.1f}"])
        results[name] = {"gate_cpu_us_per_request": round(us, 2)}
    return rows, results


# ----------------------------------------------------------------------------------------------- SDK, end to end


def _auth_conf() -> dict:
    return {"authenticationEnabled": "true", "authorizationEnabled": "true",
            "initAuthenticationUser": json.dumps({"username": ROOT, "password": ROOT_PW}),
            "innerClientAuthenticationCredentials": json.dumps({"accessKey": "inner", "secretKey": "inner-bench-1"})}


async def _prepare(ns_addr: str, broker_addr: str, acl: bool) -> None:
    from client import AdminClient, acl_admin

    async with AdminClient(ns_addr, credentials=(ROOT, ROOT_PW) if acl else None) as admin:
        await create_routed_topic(admin, broker_addr, TOPIC, 4, timeout_s=10.0)
        if acl:
            for addr in (broker_addr, ns_addr):
                await acl_admin.create_user(admin, addr, acl_admin.user_info(BENCH_USER, BENCH_PW, "Normal"))
                await acl_admin.create_acl(admin, addr, acl_admin.acl_info(
                    f"User:{BENCH_USER}", [f"Topic:{TOPIC}", "Group:bench-*"], ["Pub", "Sub"]))


async def _produce_consume(ns_addr: str, broker_pid: int, acl: bool, messages: int, senders: int, round_no: int):
    from client import ConsumeFromWhere, ConsumeStatus, Message, Producer, PushConsumer

    credentials = (BENCH_USER, BENCH_PW) if acl else None
    producer = await Producer(f"bench-acl-p{round_no}", ns_addr, credentials=credentials).start()
    body = b"x" * 1024
    await producer.send(Message(TOPIC, body))
    await settle(broker_pid)
    b0, c0, t0 = cpu_s(broker_pid), cpu_s(), time.perf_counter()
    await send_closed_loop(producer, lambda: Message(TOPIC, body), messages, senders)
    produce_s = time.perf_counter() - t0
    produce_broker_us = (cpu_s(broker_pid) - b0) / messages * 1e6
    produce_client_us = (cpu_s() - c0) / messages * 1e6
    await producer.stop()

    expect = messages + 1
    received = 0
    first_at = 0.0
    first_batch = 0
    done = asyncio.Event()

    def listener(msgs):
        nonlocal received, first_at, first_batch
        if not received:  # the clock starts at the first delivery: start-up and rebalance are not the check's cost
            first_at, first_batch = time.perf_counter(), len(msgs)
        received += len(msgs)
        if received >= expect:
            done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(f"bench-acl-c{round_no}-{int(acl)}", ns_addr, credentials=credentials,
                            consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET, consume_batch_max_size=32,
                            pull_batch_size=32, max_inflight_messages=4096)
    consumer.subscribe(TOPIC)
    consumer.register_message_listener(listener)
    await settle(broker_pid)
    b1, c1 = cpu_s(broker_pid), cpu_s()
    await consumer.start()
    await asyncio.wait_for(done.wait(), 120)
    consume_s = time.perf_counter() - first_at
    consume_broker_us = (cpu_s(broker_pid) - b1) / expect * 1e6
    consume_client_us = (cpu_s() - c1) / expect * 1e6
    await consumer.stop()
    return {"produce_msg_s": messages / produce_s, "consume_msg_s": (expect - first_batch) / consume_s,
            "produce_broker_cpu_us": produce_broker_us, "consume_broker_cpu_us": consume_broker_us,
            "produce_client_cpu_us": produce_client_us, "consume_client_cpu_us": consume_client_us}


def sdk(messages: int, senders: int, rounds: int) -> tuple[list, dict]:
    from harness.procs import Broker, Namesrv

    results: dict[bool, list[dict]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="pyrmq-acl-bench-", ignore_cleanup_errors=True) as tmp:
        work = Path(tmp)
        with (Namesrv(work / "ns-off") as ns_off, Namesrv(work / "ns-on", **_auth_conf()) as ns_on,
              Broker(work / "b-off", name="broker-acl-off", namesrv_addr=ns_off.addr) as b_off,
              Broker(work / "b-on", name="broker-acl-on", namesrv_addr=ns_on.addr, **_auth_conf()) as b_on):
            asyncio.run(_prepare(ns_off.addr, b_off.addr, False))
            asyncio.run(_prepare(ns_on.addr, b_on.addr, True))
            for r in range(rounds + 1):  # round 0 warms both pairs up (connections, routes, page cache): not kept
                for acl in (False, True) if r % 2 == 0 else (True, False):
                    ns, broker = (ns_on, b_on) if acl else (ns_off, b_off)
                    run = asyncio.run(_produce_consume(ns.addr, broker.pid, acl, messages, senders, r))
                    if r:
                        results[acl].append(run)

    def med(acl: bool, key: str) -> float:
        return median_of([x[key] for x in results[acl]])

    def ratio(on: float, off: float) -> float:
        return on / off if off else float("nan")  # a CPU figure below the clock's tick in a tiny run

    def per_round(key: str) -> float:
        """The median of each round's on/off ratio: the two runs of a round met the same machine load."""
        return median_of([ratio(on[key], off[key]) for off, on in zip(results[False], results[True], strict=True)])

    keys = (("produce msg/s", "produce_msg_s"), ("consume msg/s", "consume_msg_s"),
            ("broker CPU µs per sent msg", "produce_broker_cpu_us"),
            ("client CPU µs per sent msg", "produce_client_cpu_us"),
            ("broker CPU µs per consumed msg", "consume_broker_cpu_us"),
            ("client CPU µs per consumed msg", "consume_client_cpu_us"))
    rows = [[name, med(False, key), med(True, key), ratio(med(True, key), med(False, key)), per_round(key)]
            for name, key in keys]
    return rows, {"runs_off": results[False], "runs_on": results[True],
                  "ratio_produce": round(med(True, "produce_msg_s") / med(False, "produce_msg_s"), 3),
                  "ratio_consume": round(med(True, "consume_msg_s") / med(False, "consume_msg_s"), 3),
                  "ratio_produce_per_round": round(per_round("produce_msg_s"), 3),
                  "ratio_consume_per_round": round(per_round("consume_msg_s"), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--messages", type=int, default=40_000)
    parser.add_argument("--senders", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-sdk", action="store_true")
    args = parser.parse_args()
    rows, results = per_request(args.requests, args.runs)
    print_table("ACL 2.0 check per request (authentication + authorization)", ["request", "µs CPU"], rows)
    out = {"requests": args.requests, "runs": args.runs, "results": results}
    if not args.skip_sdk:
        sdk_rows, sdk_results = sdk(args.messages, args.senders, args.rounds)
        print_table(f"SDK with ACL 2.0 off and on: {args.senders} senders, 1 KiB, {args.messages:,} messages per run "
                    f"(medians of {args.rounds}, interleaved)",
                    ["", "off", "on", "on/off", "median of rounds' on/off"], sdk_rows)
        out.update(messages=args.messages, senders=args.senders, rounds=args.rounds, sdk=sdk_results)
    write_json("acl_bench", out)


if __name__ == "__main__":
    main()
