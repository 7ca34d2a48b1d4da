"""Fault schedules against a real master and slave (spec/reliability.md §5 F3, F4, F6, F7, N1, C7 and F5 at the
end of every schedule), judged by the checker (§8): SYNC loses no SEND_OK anywhere, ASYNC loses only what lies
beyond the slave's acked offset when the master is destroyed. Each schedule also prints its figures."""

from __future__ import annotations

import pytest

from harness.chaos.cluster import ClusterSpec
from harness.chaos.schedule import Fault
from harness.checker import Mode
from tests.chaos.conftest import summary

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]


async def test_sync_master_and_slave_crashes_pauses_and_restarts_lose_no_send_ok(chaos):
    faults = [Fault("pause-master", 3), Fault("kill-master", 2), Fault("kill-slave", 2),
              Fault("pause-slave", 5),  # longer than the 3 s slave wait: FLUSH_SLAVE_TIMEOUT / SLAVE_NOT_AVAILABLE
              Fault("restart-master", 1), Fault("restart-slave", 1)]
    result = await chaos(ClusterSpec(Mode.SYNC), "sync_process", faults)
    assert not result.problems, summary(result)
    assert result.final.acked > 0 and result.final.slave_checked


async def test_sync_ha_link_partition_loses_no_send_ok(chaos):
    result = await chaos(ClusterSpec(Mode.SYNC), "sync_partition", [Fault("partition-ha", 6)], needs=("partition-ha",))
    assert not result.problems, summary(result)
    assert result.final.acked > 0


async def test_sync_full_slave_disk_without_forced_cleanup_loses_no_send_ok(chaos):
    # diskSpaceCleanForciblyRatio=100: the slave never deletes unexpired files under disk pressure, so this
    # checks the full disk itself: no false SEND_OK while the slave cannot write, and the slave resumes.
    spec = ClusterSpec(Mode.SYNC, slave_conf={"diskSpaceCleanForciblyRatio": 100})
    result = await chaos(spec, "sync_disk_full", [Fault("disk-full-slave", 8)], needs=("disk-full-slave",))
    assert not result.problems, summary(result)


async def test_sync_full_slave_disk_with_default_cleanup_loses_no_send_ok(chaos):
    # The chaos tier found that the slave force-deleted unexpired files above diskSpaceCleanForciblyRatio (85 %),
    # RocketMQ's forced cleanup, and a destroyed master then lost those SEND_OK messages. A slave now deletes only
    # expired files and stops taking replication while its disk is full.
    spec = ClusterSpec(Mode.SYNC, slave_conf={"cleanResourceInterval": 1000})  # the cleanup runs during the fault
    result = await chaos(spec, "sync_disk_full_default", [Fault("disk-full-slave", 8)], needs=("disk-full-slave",))
    assert not result.problems, summary(result)


async def test_async_faults_then_a_destroyed_master_lose_only_the_unreplicated_suffix(chaos):
    faults = [Fault("kill-master", 2), Fault("partition-ha", 4), Fault("pause-slave", 3)]
    result = await chaos(ClusterSpec(Mode.ASYNC), "async_suffix", faults)
    assert not result.problems, summary(result)
    assert result.final.slave_checked and result.final.slave_ack is not None
