"""On-demand route refreshes are bounded, against a real nameserver: a storm of failures asking for a topic's route
costs the nameserver at most one GET_ROUTEINFO_BY_TOPIC per ``min_refresh_interval_s`` (plus the one in flight),
counted by the nameserver's own ``rocketmq_namesrv_route_queries_total``."""

from __future__ import annotations

import asyncio
import time

import pytest

from client.namesrv import NamesrvClient
from client.route_cache import RouteCache
from client.rpc import HealthTracker
from harness.metrics_page import sample_value
from harness.procs import Namesrv
from harness.waiting import async_wait_until

pytestmark = pytest.mark.integration

QUERIES = "rocketmq_namesrv_route_queries_total"


async def test_a_storm_of_refresh_requests_costs_the_nameserver_one_query_per_interval(tmp_path):
    with Namesrv(tmp_path / "ns") as namesrv:  # its own: no other client's query in the count
        await storm(namesrv)


async def storm(namesrv: Namesrv) -> None:
    client = NamesrvClient(namesrv.addr)
    cache = RouteCache(client, HealthTracker(), min_refresh_interval_s=0.25)
    before = sample_value(namesrv.metrics_port, QUERIES)
    started = time.monotonic()
    try:
        cache.start()
        for _ in range(2000):  # every failing send or pull of a busy client asks for the route again
            cache.refresh_soon("RefreshStormTopic")
            await asyncio.sleep(0.0005)
        elapsed = time.monotonic() - started
        refreshes = cache.stats.on_demand
        assert cache.stats.coalesced == 2000 - refreshes
        assert 1 <= refreshes <= elapsed / 0.25 + 1, (refreshes, elapsed)
        await async_wait_until(lambda: sample_value(namesrv.metrics_port, QUERIES) - before >= refreshes, 10,
                               "the nameserver to count the refreshes", 0.05)
        assert sample_value(namesrv.metrics_port, QUERIES) - before == refreshes
    finally:
        await cache.stop()
        await client.close()
