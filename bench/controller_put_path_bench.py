"""What controller mode adds to a SYNC put on the master, in CPU (and optionally instructions), robust to a busy machine.

The process bench (``controller_throughput_bench``) measures the whole path, but its wall-clock rates move by 10x
when other work shares the two cores. The parts that differ between the modes are all in the master's process and
on its put path: classic SYNC_MASTER waits in ``GroupTransfer`` (any one slave); controller mode waits in
``SyncStateSetWaiter`` (every SyncStateSet member, a role lease) and runs the confirm gate on every dispatch and ack.
So: one real store per mode, ``--senders`` tasks putting one message each in a loop, and an in-process "slave" that
acks every append at once (on the next loop turn, as an HA ack frame would arrive), driving the same observers the
HA master drives. Reported: CPU microseconds per message (``time.process_time``, this process only), interleaved
rounds, medians, and the ratio controller / classic; with ``--instructions``, also instruction counts per message
under callgrind (``valgrind``), which other processes on the machine do not move at all.

Usage: ``python -m bench.controller_put_path_bench [--rounds 5] [--messages 20000] [--instructions]``; writes
``bench/results/controller_put_path_bench.json``. ``--tree DIR`` measures another checkout (a subprocess with DIR on
its path), to compare a change against its base in one run. Never passes or fails.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MODES = ("classic", "controller")
BODY = 1024


async def _sample(root: Path, mode: str, messages: int, senders: int) -> float:
    """CPU seconds per message of ``messages`` puts in ``mode`` (imports inside: ``--tree`` runs another checkout)."""
    from broker.config import BrokerRole, MessageStoreConfig
    from broker.controller_mode.ack_waiter import SyncStateSetWaiter
    from broker.controller_mode.fence import RoleLease
    from broker.controller_mode.sync_state_set import SyncStateSetView
    from broker.ha.group_transfer import GroupTransfer
    from broker.store.message_store import MessageStore
    from broker.store.types import MessageDraft, PutStatus

    store = MessageStore(MessageStoreConfig(store_path_root_dir=str(root), broker_role=BrokerRole.SYNC_MASTER,
                                            mapped_file_size_commit_log=256 * 1024 * 1024))
    await store.start()
    loop = asyncio.get_running_loop()
    acks: dict[int, int] = {2: 0}
    if mode == "classic":
        transfer = GroupTransfer(broker_name="b", ha_port=0, slave_timeout_ms=3000, fallbehind_max=1 << 40,
                                 connected_slaves=lambda: 1)
        store.set_replica_waiter(transfer.wait)
        observers = [transfer.on_ack]

        def ack() -> None:
            acks[2] = store.max_phy_offset
            for observer in observers:
                observer(acks[2])
    else:
        view = SyncStateSetView(master_id=1, members=frozenset({1, 2}), epoch=1, epoch_start=0)
        lease = RoleLease(10_000, 1000)
        lease.renew(time.monotonic() + 3600)
        waiter = SyncStateSetWaiter(view=lambda: view, acks=lambda: acks, master_max=lambda: store.max_phy_offset,
                                    lease=lease, slave_timeout_ms=3000, all_ack=True)
        gate = store.enable_confirm_gate(0)
        gate.confirm = waiter.covered
        store.set_replica_waiter(waiter.wait)
        # the order replicas_manager installs them in (the waiter first; older checkouts had the gate first)
        order = getattr(waiter, "_read_acks", None)
        observers = [waiter.on_ack, gate.refresh] if order is not None else [gate.refresh, waiter.on_ack]

        def ack() -> None:
            acks[2] = store.max_phy_offset
            for observer in observers:
                observer()
    store.add_dispatch_listener(lambda t, q, m: None, confirmed=True)  # a consumer wakeup listener, as the broker's
    scheduled = False

    def on_append(_max: int) -> None:
        nonlocal scheduled
        if not scheduled:
            scheduled = True
            loop.call_soon(acked)

    def acked() -> None:
        nonlocal scheduled
        scheduled = False
        ack()

    store.add_append_listener(on_append)
    drafts = [MessageDraft(body=b"b" * BODY, properties={"UNIQ_KEY": "0" * 32})]
    left = messages

    async def sender(i: int) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            res = await store.put_messages("BenchTopic", i % 8, drafts)
            assert res.status is PutStatus.PUT_OK, res

    for _ in range(2):  # warm: first files, caches
        await store.put_messages("BenchTopic", 0, drafts)
    c0 = time.process_time()
    await asyncio.gather(*(sender(i) for i in range(senders)))
    spent = time.process_time() - c0
    await store.stop()
    return spent / messages


def run_one(mode: str, messages: int, senders: int) -> float:
    root = Path(tempfile.mkdtemp(prefix="put-path-bench-"))
    try:
        return asyncio.run(_sample(root, mode, messages, senders))
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _child(tree: str | None, mode: str, messages: int, senders: int, instructions: bool) -> float:
    """One sample in a fresh interpreter (``tree`` first on its path): CPU seconds per message, or with
    ``instructions`` the whole process's instruction count under callgrind (``_instructions_per_msg`` subtracts
    the interpreter's start and the store's setup by running two sizes)."""
    env = dict(os.environ)
    if tree:
        env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "bench.controller_put_path_bench", "--child", mode, "--messages", str(messages),
           "--senders", str(senders)]
    out_file = None
    if instructions:
        out_file = tempfile.mktemp(prefix="put-path-cg-")
        cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}", *cmd]
    cwd = tree or str(Path(__file__).resolve().parent.parent)
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"sample failed: {proc.stderr[-2000:]}")
    if not instructions:
        return float(proc.stdout.strip().splitlines()[-1])
    assert out_file is not None
    try:
        for line in Path(out_file).read_text().splitlines():
            if line.startswith("summary:") or line.startswith("totals:"):
                return float(line.split()[1])
    finally:
        Path(out_file).unlink(missing_ok=True)
    raise RuntimeError("no instruction total in the callgrind output")


def _instructions_per_msg(tree: str | None, mode: str, messages: int, senders: int) -> float:
    small = max(1, messages // 5)
    big_total = _child(tree, mode, messages, senders, True)
    small_total = _child(tree, mode, small, senders, True)
    return (big_total - small_total) / (messages - small)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.controller_put_path_bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--senders", type=int, default=32)
    ap.add_argument("--instructions", action="store_true", help="also count instructions under callgrind")
    ap.add_argument("--instruction-messages", type=int, default=3000)
    ap.add_argument("--tree", action="append", default=[], metavar="NAME=DIR",
                    help="measure another checkout too (e.g. base=/tmp/pyrmq-base)")
    ap.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(_measured(args.child, args.messages, args.senders))
        return 0
    from bench.report import median_of, print_table, write_json

    trees = {"this": None, **dict(t.split("=", 1) for t in args.tree)}
    cpu: dict[str, dict[str, list[float]]] = {t: {m: [] for m in MODES} for t in trees}
    for r in range(args.rounds):
        for tree, path in (trees.items() if r % 2 == 0 else reversed(trees.items())):
            for mode in (MODES if r % 2 == 0 else reversed(MODES)):
                cpu[tree][mode].append(_child(path, mode, args.messages, args.senders, False) * 1e6)
    rows, summary = [], {}
    for tree in trees:
        med = {m: median_of(cpu[tree][m]) for m in MODES}
        entry = {"cpu_us_per_msg": med, "cpu_ratio": med["controller"] / med["classic"], "samples": cpu[tree]}
        if args.instructions:
            ins = {m: _instructions_per_msg(trees[tree], m, args.instruction_messages, args.senders) for m in MODES}
            entry["instructions_per_msg"] = ins
            entry["instruction_ratio"] = ins["controller"] / ins["classic"]
        summary[tree] = entry
        rows.append([tree, round(med["classic"], 1), round(med["controller"], 1), f"{entry['cpu_ratio']:.2f}",
                     *((round(entry["instructions_per_msg"]["classic"]), round(entry["instructions_per_msg"][
                         "controller"]), f"{entry['instruction_ratio']:.2f}") if args.instructions else ())])
    cols = ["tree", "classic CPU us/msg", "controller CPU us/msg", "ratio"]
    if args.instructions:
        cols += ["classic instr/msg", "controller instr/msg", "instr ratio"]
    print_table(f"SYNC put path in one process, {args.senders} senders, 1 message a put, {BODY} B, median of "
                f"{args.rounds} rounds x {args.messages}", cols, rows)
    write_json("controller_put_path_bench", {"params": vars(args), "trees": summary})
    return 0


def _measured(mode: str, messages: int, senders: int) -> float:
    return run_one(mode, messages, senders)


if __name__ == "__main__":
    raise SystemExit(main())
