"""``read()`` of one queue range: pull [start, until) exactly, from the master or a slave, as Arrow batches.

Node choice per pull (``choose_node``, pure):
- ``never``: the master; a slave only while the master is unreachable;
- ``prefer``: the lowest slave id when the group has a slave, else the master;
- ``auto``: where the broker's last answer for this queue in this process pointed (``suggest_which_broker_id``,
  RocketMQ's pullFromWhichNodeTable), starting at the master.
An unhealthy choice falls back to a healthy sibling. A slave that does not have the offsets yet (PULL_NOT_FOUND,
PULL_RETRY_IMMEDIATELY or OFFSET_MOVED above its max) sends that pull to the master.

Exactness: records outside [start, until) are dropped, the loop follows ``next_begin_offset`` (not message
counts), and it ends exactly at ``until``. Deleted offsets (below the queue's min) raise DataLossError, or
with failOnDataLoss=false are skipped with a warning. Waiting for a node that is down or behind is bounded by
``readTimeoutSeconds``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from common.broker_id import MASTER_ID
from connectors.spark.broker_client import SyncClient, TransportError, client_for, header_long
from connectors.spark.decode import RowsBuilder
from connectors.spark.errors import BrokerRefusal, DataLossError, Unavailable
from connectors.spark.offsets import Range
from connectors.spark.options import ReadSettings
from remoting.codes import RequestCode, ResponseCode
from remoting.frame_codec import RemotingCommand
from remoting.message_headers import PULL_SUBSCRIPTION, PullHeader

log = logging.getLogger("pyrmq.spark")

ARROW_BATCH_ROWS = 8192
RETRY_PAUSE_S = 0.2

# (namesrv, topic, brokerName, queueId) -> broker id advised by the last pull answer (auto mode), per process.
_ADVICE: dict[tuple[str, str, str, int], int] = {}


class PullAnswer(NamedTuple):
    """A PULL_MESSAGE response: its code, the four offsets of PullMessageResponseHeader, and the records."""

    code: int
    remark: str
    next_begin_offset: int
    min_offset: int
    max_offset: int
    suggest_which_broker_id: int
    records: bytes

    @classmethod
    def of(cls, resp: RemotingCommand) -> PullAnswer:
        return cls(
            resp.code,
            resp.remark or "",
            header_long(resp, "nextBeginOffset"),
            header_long(resp, "minOffset"),
            header_long(resp, "maxOffset"),
            header_long(resp, "suggestWhichBrokerId"),
            resp.body_bytes() if resp.code == ResponseCode.SUCCESS else b"",
        )


def choose_node(mode: str, ids: list[int], advised: int, healthy: set[int]) -> int | None:
    """Pure: the broker id to pull from. ``ids`` are the group's known ids, ``healthy`` those not failing."""
    if not ids:
        return None
    slaves = sorted(i for i in ids if i != MASTER_ID)
    if mode == "prefer" and slaves:
        wanted = slaves[0]
    elif mode == "auto" and advised in ids:
        wanted = advised
    else:
        wanted = MASTER_ID if MASTER_ID in ids else min(ids)
    if wanted in healthy:
        return wanted
    for i in sorted(ids, key=lambda b: (b != MASTER_ID, b)):
        if i in healthy:
            return i
    return wanted  # nobody looks healthy: try the wanted one anyway


@dataclass(slots=True)
class ReadStats:
    pulls: int = 0
    from_slave: int = 0  # messages served by a slave
    from_master: int = 0
    skipped_lost: int = 0  # offsets skipped as deleted (failOnDataLoss=false)


def read_range(rng: Range, settings: ReadSettings, schema, stats: ReadStats | None = None) -> Iterator:
    """Yield pyarrow RecordBatches with exactly the messages of ``rng``."""
    client = client_for(settings.namesrv, settings.request_timeout_s, settings.tls)
    builder = RowsBuilder(schema, rng.topic, rng.broker_name, rng.queue_id)
    stats = stats if stats is not None else ReadStats()
    advice_key = (settings.namesrv, rng.topic, rng.broker_name, rng.queue_id)
    offset = rng.start
    force_master = False
    stalled_since: float | None = None
    last_problem = ""
    prefetched = None  # (addr, offset, future) of a pull started before the previous answer was decoded
    while offset < rng.until:
        addrs = client.route(rng.topic).broker_addrs.get(rng.broker_name, {})
        healthy = {i for i, a in addrs.items() if client.healthy(a)}
        mode = "never" if force_master else settings.read_from_slave
        node = choose_node(mode, sorted(addrs), _ADVICE.get(advice_key, MASTER_ID), healthy)
        force_master = False
        problem = ""
        if node is None:
            problem = f"the route names no node of broker group {rng.broker_name}"
            client.route(rng.topic, max_age_s=1.0)
        else:
            addr = addrs[node]
            try:
                if prefetched is not None and prefetched[:2] == (addr, offset):
                    resp = PullAnswer.of(client.wait(addr, prefetched[2]))
                else:
                    if prefetched is not None:
                        prefetched[2].cancel()
                    resp = PullAnswer.of(client.wait(addr, _pull(client, addr, settings, rng, offset)))
            except TransportError as exc:
                problem = str(exc)
                client.route(rng.topic, max_age_s=1.0)
                resp = None
            prefetched = None
            if resp is not None:
                stats.pulls += 1
                if settings.read_from_slave == "auto" and resp.suggest_which_broker_id in addrs:
                    _ADVICE[advice_key] = int(resp.suggest_which_broker_id)
                nxt = resp.next_begin_offset
                if (
                    resp.code == ResponseCode.SUCCESS
                    and offset < nxt < rng.until
                    and (settings.read_from_slave != "auto" or resp.suggest_which_broker_id == node)
                ):
                    # Ask for the next chunk now, so the broker works while this one is decoded.
                    prefetched = (addr, nxt, _pull(client, addr, settings, rng, nxt))
                new_offset, problem, force_master = _apply(resp, rng, offset, node, addr, settings, builder, stats)
                if new_offset > offset:
                    offset = new_offset
                    stalled_since = None
                    if len(builder) >= ARROW_BATCH_ROWS:
                        yield builder.flush()
                    continue
                master = addrs.get(MASTER_ID)
                if force_master and master is not None and client.healthy(master):
                    continue  # the slave is behind: this offset goes to the master at once
        # No progress this round.
        if problem:
            last_problem = problem
        now = time.monotonic()
        stalled_since = stalled_since or now
        if now - stalled_since > settings.read_timeout_s:
            raise Unavailable(
                f"reading {rng.name}", f"stuck at offset {offset}: {last_problem or 'no data'}", settings.read_timeout_s
            )
        time.sleep(RETRY_PAUSE_S)
    if prefetched is not None:
        prefetched[2].cancel()
    if len(builder):
        yield builder.flush()


def _pull(client: SyncClient, addr: str, settings: ReadSettings, rng: Range, offset: int):
    """Start PULL_MESSAGE (11) for [offset, until): no long polling, the subscription "*" sent with the request
    (this reader never heartbeats, so the broker has no registered subscription for it), no offset commit."""
    header = PullHeader(
        consumer_group=settings.consumer_group,
        topic=rng.topic,
        queue_id=rng.queue_id,
        queue_offset=offset,
        max_msg_nums=min(settings.pull_batch_size, rng.until - offset),
        sys_flag=PULL_SUBSCRIPTION,
        subscription="*",
        expression_type="TAG",
    )
    return client.submit(addr, RequestCode.PULL_MESSAGE, header.to_ext(), timeout_s=settings.request_timeout_s)


def _apply(
    resp: PullAnswer,
    rng: Range,
    offset: int,
    node: int,
    addr: str,
    settings: ReadSettings,
    builder: RowsBuilder,
    stats: ReadStats,
) -> tuple[int, str, bool]:
    """(new offset, problem text, retry on the master) for one pull answer."""
    code = resp.code
    on_slave = node != MASTER_ID
    if code == ResponseCode.SUCCESS:
        before = len(builder)
        seen_until = builder.add_records(resp.records, offset, rng.until) if resp.records else offset
        got = len(builder) - before
        if on_slave:
            stats.from_slave += got
        else:
            stats.from_master += got
        nxt = max(resp.next_begin_offset, seen_until)
        return min(nxt, rng.until), "", False
    if code == ResponseCode.PULL_OFFSET_MOVED and offset < resp.min_offset and on_slave:
        return offset, f"{addr} (broker id {node}) starts the queue at {resp.min_offset}", True
    if code == ResponseCode.PULL_OFFSET_MOVED and offset < resp.min_offset:
        if settings.fail_on_data_loss:
            raise DataLossError(f"{rng.topic}@{rng.broker_name}:{rng.queue_id}", offset, resp.min_offset)
        skip_to = min(resp.min_offset, rng.until)
        log.warning(
            "%s: offsets [%d, %d) were deleted; skipping them (failOnDataLoss=false)", rng.name, offset, skip_to
        )
        stats.skipped_lost += skip_to - offset
        return skip_to, "", False
    if code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY, ResponseCode.PULL_OFFSET_MOVED):
        if code == ResponseCode.PULL_RETRY_IMMEDIATELY and resp.next_begin_offset > offset:
            # No tag filter is used, so skipped units mean their records were removed (MESSAGE_WAS_REMOVING).
            skip_to = min(resp.next_begin_offset, rng.until)
            if on_slave:  # the slave's retention may differ: ask the master
                return offset, f"{addr} (broker id {node}) no longer has [{offset}, {skip_to})", True
            if settings.fail_on_data_loss:
                raise DataLossError(f"{rng.topic}@{rng.broker_name}:{rng.queue_id}", offset, skip_to)
            log.warning(
                "%s: records [%d, %d) were being deleted; skipped (failOnDataLoss=false)", rng.name, offset, skip_to
            )
            stats.skipped_lost += skip_to - offset
            return skip_to, "", False
        behind = f"{addr} (broker id {node}) has the queue only up to {resp.max_offset}"
        # A slave behind the range: this pull goes to the master. The master behind: wait and retry.
        return offset, behind, on_slave
    if on_slave:
        # A slave that cannot serve this yet (e.g. its metadata sync has not brought the topic): use the master.
        return offset, f"{addr} (broker id {node}) answered code {code}: {resp.remark}", True
    raise BrokerRefusal(f"PULL_MESSAGE {rng.name} at {offset}", addr, code, resp.remark)
