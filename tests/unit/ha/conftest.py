"""Every hand-driven HA peer (harness.RawPeer) a test opened is closed when the test ends, also when it failed
half-way or left a peer the master had already closed: an unclosed StreamWriter is a ResourceWarning. Then every
node (harness.Node) still running stops, newest first (a slave before the master it follows), so a test needs no
try/finally for them."""

from __future__ import annotations

import pytest

from tests.unit.ha.harness import Node, RawPeer


@pytest.fixture(autouse=True)
async def close_raw_peers_and_stop_nodes():
    yield
    peers = list(RawPeer.OPEN)
    for peer in peers:
        peer.close()
    for peer in peers:
        try:
            await peer.writer.wait_closed()
        except (ConnectionError, OSError):
            pass  # the master reset it first: closed all the same
    while Node.RUNNING:
        await Node.RUNNING[-1].stop()
