"""The chaos tier's controller-mode schedule (harness/chaos/controller_schedule.py): a three-broker group on a
3-member etcd under a killed master, a frozen master, a killed slave and the loss of etcd's majority, with load on
throughout, judged by the checker: no SEND_OK lost, no two brokers answering SEND_OK in the same period."""

from __future__ import annotations

import asyncio

import pytest

from harness.chaos.controller_schedule import ControllerChaos, ControllerFault
from harness.etcd import ensure_etcd

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(400)]


async def test_controller_mode_failovers_and_etcd_majority_loss_lose_no_send_ok_and_never_split_brain(tmp_path):
    binary, why = ensure_etcd()
    if binary is None:
        pytest.skip(why)
    chaos = ControllerChaos(tmp_path, binary)
    await asyncio.to_thread(chaos.start)
    try:
        faults = [ControllerFault("kill-master", 2), ControllerFault("pause-master", 4),
                  ControllerFault("etcd-majority", 4), ControllerFault("kill-slave", 2)]
        result = await chaos.run(faults)
    finally:
        await asyncio.to_thread(chaos.stop)
    print(result.summary())
    assert not result.problems, result.summary()
    figures = result.report.figures()
    assert figures["lost"] == 0 and figures["overlapping_send_ok"] == 0 and figures["acked"] > 0, result.summary()
    assert len(set(result.masters)) >= 2, result.summary()  # the kills and the pause moved the master
    assert all(r.whole_after_s is not None for r in result.faults), result.summary()
    etcd_fault = next(r for r in result.faults if r.kind == "etcd-majority")
    assert etcd_fault.acked_during > 0, result.summary()  # SYNC sends kept their SEND_OK without etcd's majority
