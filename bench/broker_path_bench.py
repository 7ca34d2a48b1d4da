"""The broker's data path in one process, without sockets: CPU per message of SEND_BATCH_MESSAGE and PULL_MESSAGE
as the broker's event loop spends it (request frame decode, processor, store, response frame encode; the socket
calls are ``bench.remoting_bench``'s subject).

Why (issue 16 item 4): a send batch should reach the store without a Python object per message, and a pull
should do no per-message Python work, its body being the stored records as memoryviews of the mapping.

- send: 128 x 1 KiB messages per SEND_BATCH_MESSAGE. ``raw`` is what the processor does (``decode_batch`` ->
  ``RawBatch`` -> ``MessageStore.put_batch``); ``drafts`` stores the same decoded batch the way a straight port of
  the gRPC path would (a properties dict and a ``MessageDraft`` per message -> ``put_messages``); ``processor`` is
  the whole request through ``broker.processors.send``; ``processor single`` is SEND_MESSAGE_V2 with one 1 KiB
  message (UNIQ_KEY, TAGS, KEYS, WAIT), the common producer's request. Interleaved, one run.
- validation (issue 22 items 5 and 8): what ``broker.processors.validate`` adds per message on those requests
  (the properties scan of a single send and of a 128-message batch, the header check), measured alone.
- pull: 128-message pulls (``maxTransferCountOnMessageInMemory=128``) from a single-queue topic and from a topic
  whose records interleave with another queue's (every record its own run), through ``broker.processors.pull``.

CPU is the event-loop thread's (``time.thread_time``): the periodic flush runs on another thread either way.
``python -m bench.broker_path_bench [--requests N] [--runs N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from bench.report import median_of, print_table, write_json

BATCH = 128
BODY = 1024
PULL = 128


async def broker_context(root: Path, *, broker_conf: dict | None = None, metrics: bool = True, **store_conf):
    """A broker context on a real store under ``root`` (no sockets): what the in-process benches drive;
    ``broker_conf`` overrides BrokerConfig fields and ``store_conf`` MessageStoreConfig fields; ``metrics=False``
    leaves ``ctx.metrics`` None, so the handlers record nothing (a bench that measures the path without them)."""
    from broker.client_manager import ClientManager
    from broker.config import BrokerConfig, BrokerSettings, MessageStoreConfig
    from broker.context import BrokerContext
    from broker.long_polling import PullRequestHoldService
    from broker.metadata.consumer_offsets import ConsumerOffsetManager
    from broker.metadata.delay_offsets import DelayOffsetManager
    from broker.metadata.subscription_groups import SubscriptionGroupManager
    from broker.metadata.topics import TopicConfigManager
    from broker.metrics import BrokerMetrics
    from broker.store.message_store import MessageStore
    from common.metrics import new_registry

    store_cfg = MessageStoreConfig(
        store_path_root_dir=str(root),
        mapped_file_size_commit_log=256 * 1024 * 1024,
        max_transfer_count_on_message_in_memory=PULL,
        max_transfer_bytes_on_message_in_memory=1024 * 1024,
        **store_conf,
    )
    broker_cfg = BrokerConfig(broker_name="bench", broker_ip1="127.0.0.1", listen_port=10911, **(broker_conf or {}))
    settings = BrokerSettings(broker=broker_cfg, store=store_cfg)
    store = MessageStore(store_cfg, store_host=("127.0.0.1", 10911))
    await store.start()
    config_dir = store_cfg.config_dir
    recorder = None
    if metrics:
        recorder = BrokerMetrics(new_registry(), cluster="c", broker_name="bench", broker_id=0, role=settings.role,
                                 broker_addr="127.0.0.1:10911", store_dir=root)
    ctx = BrokerContext(
        settings=settings,
        store=store,
        topics=TopicConfigManager(config_dir),
        groups=SubscriptionGroupManager(config_dir),
        offsets=ConsumerOffsetManager(config_dir),
        delay_offsets=DelayOffsetManager(config_dir),
        clients=ClientManager(),
        hold=PullRequestHoldService(store.max_offset_in_queue),
        metrics=recorder,
    )
    for topic, queues in (("SendRaw", 1), ("SendDrafts", 1), ("SendProc", 1), ("Solo", 1), ("Mixed", 2)):
        ctx.topics.create_if_absent(topic, queues)
    return ctx


def _conn():
    from remoting.connection import Connection

    conn = Connection(None)
    conn.peer = "127.0.0.1:50000"
    return conn


def _batch_frame(topic: str, seq: int) -> bytes:
    from remoting.codes import RequestCode
    from remoting.frame_codec import RemotingCommand, encode_bytes
    from remoting.message_codec import encode_batch

    body = encode_batch(
        [(0, b"x" * BODY, {"UNIQ_KEY": f"{seq:016X}{i:016X}", "TAGS": "t", "KEYS": f"k{i}"}) for i in range(BATCH)]
    )
    ext = {"a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1", "h": "0",
           "i": "WAIT\x01true", "j": "0", "k": "false", "m": "true"}
    return encode_bytes(RemotingCommand(RequestCode.SEND_BATCH_MESSAGE, ext=ext, body=body))[4:]


SINGLE_PROPS = "UNIQ_KEY\x01{seq:032X}\x02TAGS\x01t\x02KEYS\x01k{seq}\x02WAIT\x01true"


def _single_frame(topic: str, seq: int) -> bytes:
    from remoting.codes import RequestCode
    from remoting.frame_codec import RemotingCommand, encode_bytes

    ext = {"a": "pg", "b": topic, "c": "TBW102", "d": "4", "e": "0", "f": "0", "g": "1", "h": "0",
           "i": SINGLE_PROPS.format(seq=seq), "j": "0", "k": "false"}
    return encode_bytes(RemotingCommand(RequestCode.SEND_MESSAGE_V2, ext=ext, body=b"x" * BODY))[4:]


def _validation_us(rounds: int) -> dict[str, float] | None:
    """CPU per message of the send checks alone; None on a tree without them."""
    from broker.processors import validate
    from remoting.message_codec import decode_batch

    if not hasattr(validate, "properties_text"):
        return None
    text = SINGLE_PROPS.format(seq=7)
    ext = {"a": "pg", "b": "T", "e": "0", "f": "0", "g": "1", "h": "0", "i": text, "j": "0"}
    frame = _batch_frame("T", 1)
    from remoting.frame_codec import decode

    parts = [e[2] for e in decode_batch(decode(frame).body, 65536, 4 << 20)]
    out = {}
    cpu0 = time.thread_time()
    for _ in range(rounds):
        validate.send_header(ext, True, 0, 1)
        validate.properties_text(text)
    out["single: header + properties"] = (time.thread_time() - cpu0) / rounds * 1e6
    cpu0 = time.thread_time()
    for _ in range(rounds // 10):
        validate.properties_bytes(b"\x02".join(parts), parts)
    out[f"batch of {BATCH}: properties scan"] = (time.thread_time() - cpu0) / (rounds // 10) / BATCH * 1e6
    return out


async def _send_sample(ctx, variant: str, frames: list[bytes]) -> float:
    from broker.processors import send
    from broker.store.types import MessageDraft, RawBatch
    from remoting.frame_codec import decode, encode
    from remoting.message_codec import decode_batch, decode_properties

    store = ctx.store
    conn = _conn()
    born = ("127.0.0.1", 50000)
    suffix = b"CLUSTER\x01DefaultCluster\x02"
    cpu0 = time.thread_time()
    if variant == "processor single":
        for frame in frames:
            reply = await send.serve_send(ctx, conn, decode(frame))
            assert reply.code == 0, reply.remark
            encode(reply)
        return (time.thread_time() - cpu0) / len(frames) * 1e6
    for frame in frames:
        request = decode(frame)
        if variant == "processor":
            encode(await send.serve_send(ctx, conn, request))
            continue
        entries = decode_batch(request.body, 65536, 4 << 20)
        if variant == "raw":
            result = await store.put_batch("SendRaw", 0, RawBatch(entries, suffix, 0, 1, born, 0, True))
        else:
            drafts = []
            for flag, body, own in entries:
                props = decode_properties(own)
                props["CLUSTER"] = "DefaultCluster"
                drafts.append(MessageDraft(body, props, flag, 1, born, 0, 0))
            result = await store.put_messages("SendDrafts", 0, drafts, wait=True)
        assert result.status.stored, result
    return (time.thread_time() - cpu0) / (len(frames) * BATCH) * 1e6


async def _fill(ctx, topic: str, queues: int, messages: int) -> None:
    from broker.store.types import MessageDraft

    for i in range(messages // queues):
        for q in range(queues):
            draft = MessageDraft(b"y" * BODY, {"TAGS": "t", "UNIQ_KEY": f"{i:032X}"})
            await ctx.store.put_messages(topic, q, [draft])


def _pull_frames(topic: str, count: int) -> list[bytes]:
    from remoting.codes import RequestCode
    from remoting.frame_codec import RemotingCommand, encode_bytes
    from remoting.message_headers import PULL_SUBSCRIPTION, PullHeader

    frames = []
    for n in range(count):
        header = PullHeader(
            consumer_group="g-bench",
            topic=topic,
            queue_id=0,
            queue_offset=n * PULL,
            max_msg_nums=PULL,
            sys_flag=PULL_SUBSCRIPTION,
            subscription="*",
            expression_type="TAG",
        )
        frames.append(encode_bytes(RemotingCommand(RequestCode.PULL_MESSAGE, ext=header.to_ext()))[4:])
    return frames


def _pull_sample(ctx, frames: list[bytes]) -> tuple[float, int]:
    from broker.processors import pull
    from remoting.frame_codec import decode, encode

    conn = _conn()
    pulled = 0
    cpu0 = time.thread_time()
    for frame in frames:
        response = pull.serve_pull(ctx, conn, decode(frame))
        parts = encode(response)
        assert response.code == 0, response.remark
        pulled += PULL
        del parts
    return (time.thread_time() - cpu0) / pulled * 1e6, pulled


async def run(requests: int, runs: int) -> dict:
    root = Path(tempfile.mkdtemp(prefix="broker-path-"))
    try:
        ctx = await broker_context(root)
        send_us: dict[str, list[float]] = {"drafts": [], "raw": [], "processor": [], "processor single": []}
        seq = 0
        for _ in range(runs):
            for variant, samples in send_us.items():
                if variant == "processor single":
                    frames = [_single_frame("SendProc", seq + i) for i in range(requests * BATCH)]
                    seq += requests * BATCH
                    samples.append(await _send_sample(ctx, variant, frames))
                    continue
                frames = [_batch_frame("SendProc", seq + i) for i in range(requests)]
                seq += requests
                samples.append(await _send_sample(ctx, variant, frames))
        pulls = requests
        await _fill(ctx, "Solo", 1, pulls * PULL)
        await _fill(ctx, "Mixed", 2, 2 * pulls * PULL)
        pull_us: dict[str, list[float]] = {"single queue": [], "interleaved queues": []}
        for _ in range(runs):
            pull_us["single queue"].append(_pull_sample(ctx, _pull_frames("Solo", pulls))[0])
            pull_us["interleaved queues"].append(_pull_sample(ctx, _pull_frames("Mixed", pulls))[0])
        await ctx.store.stop()
        validation = [_validation_us(20_000) for _ in range(runs)]
        return {
            "validation_us_per_message": None if validation[0] is None else {
                k: median_of([v[k] for v in validation]) for k in validation[0]},
            "send_us_per_message": {k: median_of(v) for k, v in send_us.items()},
            "pull_us_per_message": {k: median_of(v) for k, v in pull_us.items()},
            "samples": {"send": send_us, "pull": pull_us},
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.broker_path_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=100, help="requests per sample")
    ap.add_argument("--runs", type=int, default=3, help="samples per variant (median reported)")
    args = ap.parse_args(argv)
    result = asyncio.run(run(args.requests, args.runs))
    print_table(
        f"SEND_BATCH_MESSAGE, {BATCH} x {BODY} B per request (processor single: one per request): loop-thread CPU"
        " per message",
        ["path", "µs/message"],
        [[k, v] for k, v in result["send_us_per_message"].items()],
    )
    if result["validation_us_per_message"]:
        print_table("send checks alone (broker.processors.validate): CPU per message", ["check", "µs/message"],
                    [[k, v] for k, v in result["validation_us_per_message"].items()])
    print_table(
        f"PULL_MESSAGE, {PULL} messages per pull: loop-thread CPU per message",
        ["topic", "µs/message"],
        [[k, v] for k, v in result["pull_us_per_message"].items()],
    )
    write_json("broker_path_bench", result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
