"""Who is in a consumer group, as the brokers see it (GET_CONSUMER_LIST_BY_GROUP, 38).

Why a module of its own: clustering consumers split queues over this list (``process_queue.allocate_averagely``),
so every member must read the same list the same way: sorted, from the first node of the topic's broker groups
that answers. The query has nothing to do with pulling or offsets, so it lives apart from ``push_consumer.py``'s
rebalance loop that calls it.

The list is the group's, whatever the topic: a broker answers the same for every topic it serves. A consumer of
1,000 topics asking once per topic spent a round trip per topic on every rebalance and membership poll, so a caller
passes a ``memo`` for one round and each broker group is asked at most once in it.
"""

from __future__ import annotations

from client.errors import MQClientError
from client.namesrv import parse_body
from client.route_cache import RouteCache
from client.rpc import ClientRemoting
from remoting.codes import RequestCode


async def consumer_ids(routes: RouteCache, remoting: ClientRemoting, group: str, topic: str,
                       timeout_s: float, memo: dict[str, list[str]] | None = None) -> list[str] | None:
    """The sorted client ids of ``group``, or None when no broker of ``topic``'s cached route answered. ``memo``
    (broker group name -> its answer) is read before asking and filled with each answer."""
    route = routes.cached(topic)
    if route is None:
        return None
    for name in sorted(route.broker_addrs):
        if memo is not None and name in memo:
            return memo[name]
        addr = routes.find_any_address(name)
        if addr is None:
            continue
        try:
            resp = await remoting.call(addr, RequestCode.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": group},
                                       timeout_s=timeout_s)
            body = parse_body(resp, f"consumer list of {group}")
        except MQClientError:
            continue
        ids = body.get("consumerIdList") if isinstance(body, dict) else None
        if isinstance(ids, list):
            answer = sorted(str(i) for i in ids)
            if memo is not None:
                memo[name] = answer
            return answer
    return None
