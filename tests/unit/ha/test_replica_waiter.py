"""A SYNC_MASTER's replica waiter is installed once, by HAService.start(), wrapped by the broker's ``wrap_waiter``
(issue 22 item 13): every SYNC put goes through the wrapped GroupTransfer wait, and nobody installs a second one."""

from __future__ import annotations

from broker.config import BrokerRole
from broker.ha.service import HAService
from broker.store.types import PutStatus
from tests.unit.ha.harness import Node, drafts, settings


async def test_the_wrapped_waiter_is_installed_once_and_sees_every_sync_put(tmp_path):
    wrapped: list[object] = []
    waits: list[int] = []

    def wrap(waiter):
        wrapped.append(waiter)

        async def counting(next_offset, deadline=None):
            waits.append(next_offset)
            return await (waiter(next_offset) if deadline is None else waiter(next_offset, deadline))

        return counting

    s = settings(tmp_path, BrokerRole.SYNC_MASTER)
    node = Node(s)
    node.ha = HAService(s, node.store, listen_host="127.0.0.1", wrap_waiter=wrap)
    await node.start()
    assert wrapped == [node.ha.group_transfer.wait]
    result = await node.store.put_messages("T", 0, drafts(1))
    assert result.status is PutStatus.SLAVE_NOT_AVAILABLE  # no slave: the GroupTransfer answered, through the wrap
    assert waits == [result.next_offset]


async def test_an_async_master_installs_no_waiter(tmp_path):
    wrapped: list[object] = []
    s = settings(tmp_path, BrokerRole.ASYNC_MASTER)
    node = Node(s)
    node.ha = HAService(s, node.store, listen_host="127.0.0.1", wrap_waiter=lambda w: wrapped.append(w) or w)
    await node.start()
    assert wrapped == [] and node.ha.group_transfer is None
    assert (await node.store.put_messages("T", 0, drafts(1))).status is PutStatus.PUT_OK


