"""Offset model and range planning of the source. Pure: dicts in, dicts out, no I/O.

An offset (Spark's checkpointed JSON) is ``{"<topic>": {"<brokerName>:<queueId>": nextOffset}}``: the next
queue offset to read, exclusive of everything already delivered. Keys are strings (JSON gives them back as
strings after a restart) and always in canonical order, topics sorted, then queues by (brokerName, queueId as a
number): Spark compares offsets as JSON *strings*, so another order would look like new data.

``Live`` is what the brokers report now: ``{topic: {qkey: (min_offset, max_offset)}}``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from connectors.spark.errors import OptionError
from remoting.headers import INT_MAX, INT_MIN, parse_int

EARLIEST = -2
LATEST = -1

Offsets = dict[str, dict[str, int]]
Live = dict[str, dict[str, tuple[int, int]]]


def qkey(broker_name: str, queue_id: int) -> str:
    return f"{broker_name}:{queue_id}"


def parse_qkey(key: str) -> tuple[str, int]:
    broker, sep, qid = key.rpartition(":")
    try:
        if not sep or not broker:
            raise ValueError("no ':'")
        return broker, parse_int(qid, INT_MIN, INT_MAX, what="queueId")
    except ValueError as exc:
        raise ValueError(f"queue key {key!r} is not brokerName:queueId ({exc})") from None


def _qsort(key: str) -> tuple[str, int]:
    return parse_qkey(key)


def canonical(offsets: Offsets) -> Offsets:
    """The same offsets in canonical key order (plain ints, string keys)."""
    return {t: {q: parse_int(offsets[t][q]) for q in sorted(offsets[t], key=_qsort)} for t in sorted(offsets)}


def parse_spec(text: str | None, option: str, topics: tuple[str, ...], *, allow_earliest: bool = True) -> str | Offsets:
    """``earliest`` / ``latest`` / a JSON offsets dict (values may be -2 earliest, -1 latest)."""
    if text is None:
        raise ValueError("no spec")
    lowered = text.strip().lower()
    if lowered == "latest" or (lowered == "earliest" and allow_earliest):
        return lowered
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        choices = "earliest, latest" if allow_earliest else "latest"
        raise OptionError(
            option, f"{text!r} is neither {choices} nor JSON", 'use e.g. {"TopicA": {"broker-a:0": 42}}'
        ) from None
    if not isinstance(data, dict):
        raise OptionError(option, "JSON must be an object of topics", 'use e.g. {"TopicA": {"broker-a:0": 42}}')
    out: Offsets = {}
    for topic, queues in data.items():
        if topic not in topics:
            raise OptionError(
                option,
                f"names topic {topic!r}, which is not in option topic={','.join(topics)}",
                "add the topic to the topic option or remove it from the JSON",
            )
        if not isinstance(queues, dict):
            raise OptionError(option, f"topic {topic!r} must map to an object of queues", 'use e.g. {"broker-a:0": 42}')
        out[topic] = {}
        for key, value in queues.items():
            try:
                parse_qkey(key)
            except ValueError as exc:
                raise OptionError(option, str(exc), 'queues are "brokerName:queueId", e.g. "broker-a:3"') from None
            if not isinstance(value, int) or isinstance(value, bool) or value < EARLIEST:
                raise OptionError(
                    option,
                    f"{topic} {key}: {value!r} is not an offset",
                    "give an offset >= 0, or -2 (earliest) / -1 (latest)",
                )
            if value == EARLIEST and not allow_earliest:
                raise OptionError(
                    option, f"{topic} {key}: -2 (earliest) makes no sense as an end", "use -1 or an offset"
                )
            out[topic][key] = value
    return out


def resolve(spec: str | Offsets, live: Live) -> Offsets:
    """Concrete offsets for every live queue: earliest = min, latest = max; queues a JSON omits start at min."""
    out: Offsets = {}
    for topic, queues in live.items():
        given = spec.get(topic, {}) if isinstance(spec, dict) else {}
        out[topic] = {}
        for key, (lo, hi) in queues.items():
            if spec == "latest":
                value = hi
            elif spec == "earliest":
                value = lo
            else:
                value = given.get(key, EARLIEST)
                value = lo if value == EARLIEST else hi if value == LATEST else value
            out[topic][key] = value
    if isinstance(spec, dict):  # queues named in the JSON that no broker reports (yet): keep them as given
        for topic, queues in spec.items():
            for key, value in queues.items():
                if key not in out.setdefault(topic, {}) and value >= 0:
                    out[topic][key] = value
    return canonical(out)


def with_new_queues(start: Offsets, live: Live) -> tuple[Offsets, list[str]]:
    """``start`` plus queues that appeared since (at their min offset); returns the names of the added ones."""
    out = {t: dict(q) for t, q in start.items()}
    added = []
    for topic, queues in live.items():
        have = out.setdefault(topic, {})
        for key, (lo, _hi) in queues.items():
            if key not in have:
                have[key] = lo
                added.append(f"{topic}@{key}")
    return canonical(out), added


def cap_by_rows(start: Offsets, target: Offsets, max_rows: int) -> Offsets:
    """Admission control: at most ``max_rows`` messages in total, spread over queues in proportion to their lag.

    Each queue gets floor(max_rows * lag / total_lag); the rounding remainder goes one by one to queues in
    canonical order that still have lag. Deterministic, and always makes progress while there is lag.
    """
    lags = {(t, q): max(0, target[t][q] - start.get(t, {}).get(q, target[t][q])) for t in target for q in target[t]}
    total = sum(lags.values())
    end = {t: dict(q) for t, q in target.items()}
    if total <= max_rows:
        return canonical(end)
    shares = {k: max_rows * lag // total for k, lag in lags.items()}
    left = max_rows - sum(shares.values())
    for t in sorted(target):
        for q in sorted(target[t], key=_qsort):
            if left and shares[(t, q)] < lags[(t, q)]:
                shares[(t, q)] += 1
                left -= 1
            end[t][q] = start.get(t, {}).get(q, target[t][q]) + shares[(t, q)]
    return canonical(end)


@dataclass(frozen=True, slots=True)
class Range:
    """Queue offsets [start, until) of one queue: one partition's worth."""

    topic: str
    broker_name: str
    queue_id: int
    start: int
    until: int

    @property
    def name(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}[{self.start},{self.until})"


def plan_ranges(start: Offsets, end: Offsets, max_per_partition: int) -> list[Range]:
    """The ranges between two offsets, each at most ``max_per_partition`` long. A pure function of its inputs,
    so a replayed micro-batch gets the same partitions. A queue absent from ``start`` has no range (it enters
    the offsets with an empty batch first)."""
    out: list[Range] = []
    for topic in sorted(end):
        for key in sorted(end[topic], key=_qsort):
            broker, qid = parse_qkey(key)
            hi = end[topic][key]
            lo = start.get(topic, {}).get(key, hi)
            while lo < hi:
                step = min(hi, lo + max_per_partition)
                out.append(Range(topic, broker, qid, lo, step))
                lo = step
    return out
