"""A slave's HA client stops at once while its connect hangs. A controller-mode role switch stops the client of a
broker that is becoming master while it may be connecting to the old master, whose address no longer answers at all
when its container was killed (the SYN goes nowhere); waiting out the 5 s connect timeout held the new master's
switch, and so its route, for that long (seen on docker-compose.controller.yml)."""

from __future__ import annotations

import asyncio

import pytest

from broker.config import MessageStoreConfig
from broker.ha.slave import CONNECT_TIMEOUT_S, HASlave
from harness.hanging_port import hanging_port, syn_sent_to
from harness.waiting import async_wait_until

pytestmark = pytest.mark.timeout(60)


async def test_stop_cuts_a_connect_to_a_master_that_does_not_answer_short():
    with hanging_port() as port:
        slave = HASlave(store=None, store_config=MessageStoreConfig(), cluster="c", broker_name="b", broker_id=1,
                        master_addr=f"127.0.0.1:{port}")
        try:
            await async_wait_until(lambda: syn_sent_to(port) >= 1, 10, "a filler connect hangs (accept queue full)",
                                   0.02)
            fillers = syn_sent_to(port)
            await slave.start()
            await async_wait_until(lambda: syn_sent_to(port) > fillers, 10, "the HA client's connect is pending",
                                   0.02)
            await asyncio.wait_for(slave.stop(), timeout=CONNECT_TIMEOUT_S / 2)
            assert slave.counters.connects == 0 and not slave.connected
        finally:
            await slave.stop()
