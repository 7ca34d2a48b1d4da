"""One pull, RocketMQ's PullAPIWrapper: choose the node, send PULL_MESSAGE (11), decode, remember the read advice.

The request (spec §4.1) always carries the SUBSCRIPTION flag with the subscription string, so any node of the
group can serve it whether or not it has this client's heartbeat; SUSPEND with ``suspendTimeoutMillis`` when the
caller long-polls (the call's timeout must be above it); COMMIT_OFFSET with ``commitOffset`` when the caller has an
offset to commit and the target is the master. The response header carries ``nextBeginOffset``, ``minOffset``,
``maxOffset`` and ``suggestWhichBrokerId``; on SUCCESS the body is the stored records back to back.

``pullFromWhichNodeTable`` (spec §5.4): after every pull response, ``table[mq] = suggest_which_broker_id``;
the next pull of that queue goes to ``find_broker_address_in_subscribe(broker_name, table.get(mq, 0))``.
When the target is a slave the COMMIT_OFFSET bit is cleared (commit-on-pull is master only, spec §6.3).
A transport failure marks the address unhealthy; when the group has another healthy node the pull is
retried there at once (a dead master's consumers move to its slave without waiting for the nameserver).

A body stored compressed (sysFlag 0x1: RocketMQ clients zlib bodies over 4 KiB, spec §3.4) is inflated before
the application sees it, as RocketMQ's consumer does; pyrmq's producer never compresses. Records are decoded in
one pass by ``remoting.message_codec.decode_records`` (the store codec's checks, about half its CPU); with a tag
subscription the client re-checks the tag string (the broker filters by the tag's hash code only), like
RocketMQ's processPullResult; a SQL92 selector (``client.selector``) is sent as ``expressionType=SQL92`` and
filtered by the broker alone.
"""

from __future__ import annotations

import enum
import logging
import zlib
from dataclasses import dataclass, field

from client.errors import BrokerError, BrokerNotFoundError, MQClientError
from client.message import MessageExt, MessageQueue
from client.route_cache import RouteCache
from client.rpc import ClientRemoting, command
from client.selector import Selector, as_selector
from remoting.codes import RequestCode, ResponseCode
from remoting.headers import parse_int
from remoting.message_codec import MessageCodecError, TagFilter, decode_records
from remoting.message_headers import PULL_COMMIT_OFFSET, PULL_SUBSCRIPTION, PULL_SUSPEND, PullHeader

log = logging.getLogger(__name__)

# MessageSysFlag (spec §3.7): bit 0 = compressed; bits 8-10 = the compression type (0 or 0x300 ZLIB, 0x100 LZ4,
# 0x200 ZSTD).
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_COMPRESSION_TYPE = 0x700
SYSFLAG_ZLIB_TYPES = (0, 0x300)


def _decompress(m: MessageExt, what: str) -> None:
    """Inflate a zlib body in place and clear the flag; leave others (LZ4, ZSTD) as they are, with a warning."""
    kind = m.sys_flag & SYSFLAG_COMPRESSION_TYPE
    if kind not in SYSFLAG_ZLIB_TYPES:
        log.warning(
            "%s: message %s is compressed with type %#x, which pyrmq cannot inflate; delivered as stored",
            what,
            m.msg_id,
            kind,
        )
        return
    try:
        m.body = zlib.decompress(m.body)
    except zlib.error as exc:
        log.warning(
            "%s: message %s says it is zlib-compressed but does not inflate (%s); delivered as stored",
            what,
            m.msg_id,
            exc,
        )
        return
    m.sys_flag &= ~(SYSFLAG_COMPRESSED | SYSFLAG_COMPRESSION_TYPE)


class PullStatus(enum.Enum):
    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_STATUS_BY_CODE = {
    ResponseCode.SUCCESS: PullStatus.FOUND,
    ResponseCode.PULL_NOT_FOUND: PullStatus.NO_NEW_MSG,
    ResponseCode.PULL_RETRY_IMMEDIATELY: PullStatus.NO_MATCHED_MSG,
    ResponseCode.PULL_OFFSET_MOVED: PullStatus.OFFSET_ILLEGAL,
}


@dataclass(slots=True)
class PullResult:
    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[MessageExt] = field(default_factory=list)
    suggest_which_broker_id: int = 0
    broker_addr: str = ""  # the node that served this pull
    from_slave: bool = False


class PullAPI:
    def __init__(self, group: str, routes: RouteCache, remoting: ClientRemoting, *, sub_version: int = 0) -> None:
        self.group = group
        self.routes = routes
        self.remoting = remoting
        self.sub_version = sub_version  # SubscriptionData.subVersion, as in the heartbeat
        self.pull_from_which_node: dict[MessageQueue, int] = {}
        self.pulls = 0  # pulls answered
        self.pulled = 0  # messages they returned (before the client-side tag check)
        self._filters: dict[str, TagFilter] = {}

    async def target(self, mq: MessageQueue) -> tuple[str, bool]:
        """(address, is_slave) the next pull of ``mq`` goes to."""
        broker_id = self.pull_from_which_node.get(mq, 0)
        found = self.routes.find_broker_address_in_subscribe(mq.broker_name, broker_id, False)
        if found is None:
            await self.routes.refresh(mq.topic)
            found = self.routes.find_broker_address_in_subscribe(mq.broker_name, broker_id, False)
            if found is None:
                raise BrokerNotFoundError(mq.broker_name)
        return found

    async def pull(
        self,
        mq: MessageQueue,
        offset: int,
        *,
        max_nums: int = 32,
        subscription: Selector = "*",
        timeout_s: float = 10.0,
        suspend_ms: int = 0,
        commit_offset: int = 0,
    ) -> PullResult:
        addr, is_slave = await self.target(mq)
        try:
            return await self._pull_once(
                addr, is_slave, mq, offset, max_nums, subscription, timeout_s, suspend_ms, commit_offset
            )
        except MQClientError as exc:
            if not exc.retriable or isinstance(exc, BrokerError):
                raise
            # The node failed at transport level (now marked): try a healthy sibling at once, if any.
            self.routes.refresh_soon(mq.topic)
            other = self.routes.find_broker_address_in_subscribe(mq.broker_name, self.pull_from_which_node.get(mq, 0))
            if other is None or other[0] == addr:
                raise
            return await self._pull_once(
                other[0], other[1], mq, offset, max_nums, subscription, timeout_s, suspend_ms, commit_offset
            )

    async def _pull_once(
        self,
        addr: str,
        is_slave: bool,
        mq: MessageQueue,
        offset: int,
        max_nums: int,
        subscription: Selector,
        timeout_s: float,
        suspend_ms: int,
        commit_offset: int,
    ) -> PullResult:
        sys_flag = PULL_SUBSCRIPTION
        if suspend_ms > 0:
            sys_flag |= PULL_SUSPEND
        if commit_offset > 0 and not is_slave:
            sys_flag |= PULL_COMMIT_OFFSET
        selector = as_selector(subscription)
        header = PullHeader(
            consumer_group=self.group,
            topic=mq.topic,
            queue_id=mq.queue_id,
            queue_offset=offset,
            max_msg_nums=max_nums,
            sys_flag=sys_flag,
            commit_offset=commit_offset if sys_flag & PULL_COMMIT_OFFSET else 0,
            suspend_timeout_millis=suspend_ms,
            subscription=selector.expression,
            sub_version=self.sub_version,
            expression_type=selector.type,
        )
        what = f"PULL_MESSAGE {mq}@{offset}"
        resp = await self.remoting.invoke(addr, command(RequestCode.PULL_MESSAGE, header.to_ext()), timeout_s, what)
        status = _STATUS_BY_CODE.get(resp.code)
        if status is None:
            raise BrokerError(resp.code, resp.remark or "", addr, request=what, request_code=RequestCode.PULL_MESSAGE)
        ext = resp.ext or {}
        try:
            suggest = parse_int(ext.get("suggestWhichBrokerId", 0), what="suggestWhichBrokerId")
            next_begin = parse_int(ext["nextBeginOffset"], what="nextBeginOffset")
            min_offset = parse_int(ext.get("minOffset", 0), what="minOffset")
            max_offset = parse_int(ext.get("maxOffset", 0), what="maxOffset")
        except (KeyError, ValueError) as exc:
            raise MQClientError(
                f"{what}: {addr} answered without a usable {exc} in the pull response header",
                hint="the broker must send nextBeginOffset, minOffset, maxOffset and suggestWhichBrokerId",
            ) from None
        self.pulls += 1
        self.pull_from_which_node[mq] = suggest
        messages: list[MessageExt] = []
        if status is PullStatus.FOUND and resp.body:
            try:
                messages = decode_records(resp.body_bytes())
            except MessageCodecError as exc:
                raise MQClientError(f"{what}: {addr} answered records that do not decode: {exc.message}") from None
            self.pulled += len(messages)
            for m in messages:
                if m.sys_flag & SYSFLAG_COMPRESSED:
                    _decompress(m, what)
            tag_filter = self._filter(selector.expression) if selector.is_tag else None
            if tag_filter is not None and not tag_filter.match_all:
                messages = [m for m in messages if tag_filter.match_tags(m.tags)]
        return PullResult(status, next_begin, min_offset, max_offset, messages, suggest, addr, is_slave)

    def _filter(self, subscription: str) -> TagFilter:
        f = self._filters.get(subscription)
        if f is None:
            f = self._filters[subscription] = TagFilter(subscription)
        return f
