"""GET_BROKER_EPOCH_CACHE (1007): a broker's epoch history and max offset, asked by a slave of its master before it
streams (spec rocketmq-replication.md §9.5: the truncation point is computed from both histories).

Body (RocketMQ's EpochEntryCache, JSON): clusterName, brokerName, brokerId, maxOffset and ``epochList`` of
``{"epoch", "startOffset", "endOffset"}``; the header carries ``haServerAddr``, where the slave's HA client connects.
Only a master answers SUCCESS: a slave's history may be behind its master's, so asking one is a mistake the caller
must see. A tool that wants a slave's own history (``mqctl getBrokerEpoch``) says so with ``anyRole=true``.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from broker.store.epoch_file import EpochEntry, end_of
from remoting.client import RemotingClient
from remoting.codes import RequestCode, ResponseCode
from remoting.frame_codec import RemotingCommand, response_to
from remoting.headers import LONG_MAX, NumberError, parse_int


@dataclass(frozen=True)
class EpochCache:
    entries: tuple[EpochEntry, ...]
    max_offset: int
    ha_server_addr: str


def body(cluster: str, broker_name: str, broker_id: int, entries: list[EpochEntry], max_offset: int) -> bytes:
    return orjson.dumps({
        "clusterName": cluster, "brokerName": broker_name, "brokerId": broker_id, "maxOffset": max_offset,
        "epochList": [{"epoch": e.epoch, "startOffset": e.start_offset, "endOffset": end_of(entries, i, max_offset)}
                      for i, e in enumerate(entries)],
    })


def answer(request: RemotingCommand, *, is_master: bool, cluster: str, broker_name: str, broker_id: int,
           entries: list[EpochEntry], max_offset: int, ha_server_addr: str) -> RemotingCommand:
    if not is_master and (request.ext or {}).get("anyRole") != "true":
        return response_to(request, ResponseCode.SYSTEM_ERROR,
                           f"broker {broker_name} id {broker_id} is not the master of its group; ask the master the "
                           "controller names")
    return response_to(request, ResponseCode.SUCCESS, None, ext={"haServerAddr": ha_server_addr},
                       body=body(cluster, broker_name, broker_id, entries, max_offset))


def parse(resp: RemotingCommand) -> EpochCache:
    try:
        obj = orjson.loads(resp.body_bytes() or b"{}")
        entries = tuple(EpochEntry(parse_int(e["epoch"], 0, LONG_MAX, what="epoch"),
                                   parse_int(e["startOffset"], 0, LONG_MAX, what="startOffset"))
                        for e in obj.get("epochList", ()))
        max_offset = parse_int(obj.get("maxOffset", 0), 0, LONG_MAX, what="maxOffset")
    except (orjson.JSONDecodeError, NumberError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"GET_BROKER_EPOCH_CACHE answer does not parse: {exc}") from None
    return EpochCache(entries, max_offset, (resp.ext or {}).get("haServerAddr", ""))


async def fetch(client: RemotingClient, addr: str, timeout_s: float = 3.0) -> tuple[int, str, EpochCache | None]:
    """(code, remark, cache) of one request to ``addr``."""
    resp = await client.invoke(addr, RemotingCommand(RequestCode.GET_BROKER_EPOCH_CACHE), timeout_s)
    if resp.code != ResponseCode.SUCCESS:
        return resp.code, resp.remark or "", None
    return resp.code, "", parse(resp)
