"""What the pop service reports to /metrics without a store: how overdue the oldest held checkpoint is, on the
wall clock unless a time is given."""

from __future__ import annotations

from types import SimpleNamespace

from broker.grpc_v2.pop.service import PopService
from broker.grpc_v2.pop.state import Checkpoint


def test_revive_latency_is_how_far_the_oldest_checkpoint_is_past_its_time():
    svc = PopService(SimpleNamespace(settings=SimpleNamespace(broker=SimpleNamespace(broker_cluster_name="C"))))
    assert svc.revive_latency_ms() == 0  # nothing held
    svc.state.add_checkpoint(Checkpoint("t", "g", 0, 0, 1_000, 60_000, [0], "b"))
    assert svc.revive_latency_ms(61_000) == 0 and svc.revive_latency_ms(61_500) == 500
    assert svc.revive_latency_ms() > 1_700_000_000_000 - 61_000  # the wall clock: due since 1970 + 61 s
