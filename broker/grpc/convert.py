"""Proto <-> domain conversions for the broker's servicers (RocketMQ proxy's GrpcConverter).

Kept free of logic so handlers stay thin. ``checked_drafts`` is the send hot path: one pass over the batch
builds one small object per message, screens the whole batch with a few batch-level checks (the exact,
per-message ``validate.messages`` runs only when the screen flags something), and hands back the body sizes for
metrics, so nothing iterates the proto messages twice. The born host is parsed once per batch.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from itertools import chain
from typing import NamedTuple

from broker.metadata.data_version import DataVersion
from broker.metadata.subscription_groups import SubscriptionGroupConfig
from broker.metadata.topics import TopicConfig
from broker.store.types import MessageDraft
from remoting.message_codec import MAX_PROPERTIES_LEN, PROPERTY_DELAY_TIME_LEVEL
from remoting.pb import admin_pb2, common_pb2


def parse_host(text: str) -> tuple[str, int]:
    """``"ip:port"`` -> (ip, port); anything unparsable becomes ("127.0.0.1", 0) (the field is informational)."""
    host, _, port = text.rpartition(":")
    if host and port.isdigit() and host.count(".") == 3 and all(p.isdigit() and int(p) < 256 for p in host.split(".")):
        return host, int(port) & 0x7FFFFFFF
    return "127.0.0.1", 0


_parse_host_cached = functools.lru_cache(maxsize=1024)(parse_host)  # a producer sends the same born_host each time


class Checked(NamedTuple):
    """A screened batch: the drafts to store and each body's size (for metrics)."""

    drafts: list[MessageDraft]
    sizes: list[int]


def checked_drafts(
    messages: Sequence, born_host: str, reconsume_times: int, max_body_bytes: int, max_delay_level: int
) -> Checked | None:
    """Drafts for a batch of proto ``Message``s when the batch certainly passes ``validate.messages``, else None
    (the caller then runs ``validate.messages`` for the exact refusal and, should it pass after all, ``drafts``).

    Why: per-message Python work must stay ~1 µs (spec/performance.md B4): a protobuf map goes through the
    Python ``MutableMapping`` mixins for ``items()``/``dict()`` (~0.9 µs), so each map is read once with
    ``{k: p[k] for k in p}`` (~0.4 µs) and every check after that runs on plain dicts and strings, mostly once
    per batch: separators are looked for in one string of all keys and one of all values, and the 32767-byte
    property limit is checked on the batch total (a batch under it cannot have a message over it).
    """
    if not messages:
        return None
    host = _parse_host_cached(born_host)
    out: list[MessageDraft] = []
    add = out.append
    sizes: list[int] = []
    size_of = sizes.append
    dicts: list[dict[str, str]] = []
    keep = dicts.append
    draft = MessageDraft
    for m in messages:
        body = m.body
        size_of(len(body))
        p = m.properties
        if p:
            d = {k: p[k] for k in p}
            if "" in d:
                return None
            if PROPERTY_DELAY_TIME_LEVEL in d:
                level = d[PROPERTY_DELAY_TIME_LEVEL]
                if not level.isdigit() or int(level) > max_delay_level:
                    return None
            keep(d)
        else:
            d = {}
        # Positional for speed (0.17 µs vs 0.39 µs with keywords); field order is pinned by a unit test.
        add(draft(body, d, m.flag, m.born_timestamp, host, reconsume_times))
    if min(sizes) == 0 or max(sizes) > max_body_bytes:
        return None
    if dicts:
        keys = "".join(chain.from_iterable(dicts))
        values = "".join(chain.from_iterable(map(dict.values, dicts)))
        if "\x01" in keys or "\x02" in keys or "\x01" in values or "\x02" in values:
            return None
        if len(keys) + len(values) + 2 * sum(map(len, dicts)) > MAX_PROPERTIES_LEN:
            return None  # some message may be over the limit: let the exact check decide
    return Checked(out, sizes)


def drafts(messages: Sequence, born_host: str, reconsume_times: int = 0) -> list[MessageDraft]:
    """Drafts without checks (the caller validated the batch)."""
    host = _parse_host_cached(born_host)
    out: list[MessageDraft] = []
    for m in messages:
        p = m.properties
        out.append(
            MessageDraft(
                body=m.body,
                properties={k: p[k] for k in p},
                flag=m.flag,
                born_timestamp=m.born_timestamp,
                born_host=host,
                reconsume_times=reconsume_times,
            )
        )
    return out


def data_version_pb(dv: DataVersion) -> common_pb2.DataVersion:
    return common_pb2.DataVersion(timestamp=dv.timestamp, counter=dv.counter)


def data_version_from_pb(pb: common_pb2.DataVersion) -> DataVersion:
    return DataVersion(timestamp=pb.timestamp, counter=pb.counter)


def topic_config_pb(cfg: TopicConfig, perm: int | None = None) -> common_pb2.TopicConfig:
    return common_pb2.TopicConfig(
        topic_name=cfg.topic_name,
        read_queue_nums=cfg.read_queue_nums,
        write_queue_nums=cfg.write_queue_nums,
        perm=cfg.perm if perm is None else perm,
        topic_sys_flag=cfg.topic_sys_flag,
        order=cfg.order,
    )


def topic_config_from_pb(pb: common_pb2.TopicConfig) -> TopicConfig:
    return TopicConfig(
        topic_name=pb.topic_name,
        read_queue_nums=pb.read_queue_nums,
        write_queue_nums=pb.write_queue_nums,
        perm=pb.perm,
        topic_sys_flag=pb.topic_sys_flag,
        order=pb.order,
    )


def group_config_pb(cfg: SubscriptionGroupConfig) -> admin_pb2.SubscriptionGroupConfig:
    return admin_pb2.SubscriptionGroupConfig(**cfg.as_dict())


def group_config_from_pb(pb: admin_pb2.SubscriptionGroupConfig) -> SubscriptionGroupConfig:
    return SubscriptionGroupConfig(
        group_name=pb.group_name,
        consume_enable=pb.consume_enable,
        consume_from_min_enable=pb.consume_from_min_enable,
        consume_broadcast_enable=pb.consume_broadcast_enable,
        retry_queue_nums=pb.retry_queue_nums,
        retry_max_times=pb.retry_max_times,
        broker_id=pb.broker_id,
        which_broker_when_consume_slowly=pb.which_broker_when_consume_slowly,
        notify_consumer_ids_changed_enable=pb.notify_consumer_ids_changed_enable,
    )
