"""Auto-renew (ReceiveMessage ``auto_renew``, the official PushConsumer's): Reviver.renew_due against PopState,
with the revive-record writes captured instead of stored."""

from __future__ import annotations

from types import SimpleNamespace

from broker.grpc_v2.pop.revive import AUTO_RENEW_AHEAD_MS, AUTO_RENEW_MAX_MS, AUTO_RENEW_STEPS_MS
from broker.grpc_v2.pop.service import PopService
from broker.grpc_v2.pop.state import Checkpoint


def _service(alive: set[str]) -> tuple[PopService, list[Checkpoint]]:
    ctx = SimpleNamespace(settings=SimpleNamespace(broker=SimpleNamespace(broker_cluster_name="C")))
    svc = PopService(ctx, client_alive=lambda cid: cid in alive)
    written: list[Checkpoint] = []

    async def append(tag, record):
        written.append(record)
        return len(written)

    svc.revive_log.append = append  # the record writes, seen instead of stored
    return svc, written


async def test_a_held_batch_is_renewed_in_growing_steps_while_its_client_lives_and_never_past_the_cap():
    svc, written = _service({"c1"})
    ck = Checkpoint("t", "g", 0, 0, 0, 60_000, [0, 1], "b", renew_client="c1")
    svc.state.add_checkpoint(ck)
    assert await svc.reviver.renew_due(60_000 - AUTO_RENEW_AHEAD_MS - 1) == 0  # not due within the look-ahead yet
    now, revive_times = 55_000, []
    while True:
        if not await svc.reviver.renew_due(now):
            break
        revive_times.append(svc.state.get(ck.key).revive_time_ms)
        assert written[-1].key == ck.key and written[-1].invisible_ms == svc.state.get(ck.key).invisible_ms
        now = revive_times[-1] - AUTO_RENEW_AHEAD_MS // 2
    steps = [b - (a - AUTO_RENEW_AHEAD_MS // 2) for a, b in zip([60_000] + revive_times, revive_times)]
    assert steps[:5] == [s for s in AUTO_RENEW_STEPS_MS]  # 1, 3, 5, 10, 30 min
    assert revive_times[-1] == AUTO_RENEW_MAX_MS  # capped at 3 h after the pop, then left to expire
    assert svc.state.get(ck.key).renew_client == ""


async def test_a_gone_client_or_an_acked_batch_is_not_renewed():
    svc, written = _service(set())
    gone = Checkpoint("t", "g", 0, 0, 0, 60_000, [0], "b", renew_client="c-gone")
    svc.state.add_checkpoint(gone)
    assert await svc.reviver.renew_due(55_000) == 0 and written == []
    assert svc.state.get(gone.key).revive_time_ms == 60_000
    svc2, written2 = _service({"c1"})
    plain = Checkpoint("t", "g", 0, 5, 0, 60_000, [0], "b")  # not an auto_renew receive
    svc2.state.add_checkpoint(plain)
    assert await svc2.reviver.renew_due(55_000) == 0 and written2 == []
