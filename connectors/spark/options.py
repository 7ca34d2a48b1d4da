"""The options of ``format("pyrmq")``, parsed once on the driver into frozen, picklable settings.

Spark hands options over as a case-insensitive ``str -> str`` mapping. Unknown options are errors (a typo such
as ``startingOffset`` would otherwise silently read from the default position); the message names the closest
known option.

Reading:

| option | default | meaning |
| --- | --- | --- |
| ``namesrv`` | required | nameserver(s), ``host:port`` separated by ``;`` |
| ``topic`` | required | one topic or several, comma-separated |
| ``startingOffsets`` | ``latest`` (stream), ``earliest`` (batch) | ``earliest``, ``latest`` or JSON ``{"topic": {"brokerName:queueId": offset}}``; -2 = earliest, -1 = latest; queues missing from the JSON start at earliest |
| ``endingOffsets`` | ``latest`` | batch only: ``latest`` or JSON (exclusive ends) |
| ``maxMessagesPerTrigger`` | none | streaming admission control, spread over queues by lag |
| ``maxMessagesPerPartition`` | 50000 | a queue range longer than this is split into several partitions |
| ``readFromSlave`` | ``auto`` | ``auto``: follow the broker's suggestWhichBrokerId; ``never``: master only (slave only while the master is down); ``prefer``: a slave when the group has one |
| ``failOnDataLoss`` | ``true`` | fail when requested offsets were deleted; ``false`` skips ahead and logs |
| ``consumerGroup`` | ``pyrmq-spark`` | group named in pulls (auto-created by brokers that allow it) |
| ``commitOffsetsToBroker`` | ``false`` | ``true``: commit each finished micro-batch's end offsets under ``consumerGroup`` (for lag dashboards only; the checkpoint stays the source of truth). Spark hands a batch's end to the source when it plans the next batch, so the group lags by one batch |
| ``pullBatchSize`` | 1024 | messages asked for per pull (the broker's maxTransferCount* caps may cut it) |
| ``requestTimeoutSeconds`` | 10 | per RPC |
| ``readTimeoutSeconds`` | 60 | how long ``read()`` keeps retrying a group whose nodes are down or behind |
| ``tls`` | ``false`` | ``true``: connect to nameservers and brokers with TLS (servers with ``tls.server.mode`` enforcing) |
| ``tlsCa`` | system CAs | with ``tls``: the CA certificate (PEM) the servers' certificates chain to, a path on every executor |
| ``tlsCert``, ``tlsKey`` | none | with ``tls``: a client certificate and its key (PEM paths on every executor), for servers with ``tls.server.need.client.auth=true`` |

Writing: ``namesrv``; ``topic`` (unless the DataFrame has a ``topic`` column); ``sinkId`` (default: the
streaming query id, or a fresh id per batch write); ``producerGroup`` (``pyrmq-spark-sink``); ``sendBatchSize``
(256 messages per SendMessage); ``sendTimeoutSeconds`` (60: total time a batch of messages may spend retrying);
``tls``, ``tlsCa``, ``tlsCert`` and ``tlsKey`` as for reading.
"""

from __future__ import annotations

import difflib
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from common.ports import DEFAULT_NAMESRV_ADDR
from connectors.spark.errors import OptionError
from remoting.headers import parse_host_port, parse_int
from remoting.tls import TlsFileError, client_context

READ_MODES = ("auto", "never", "prefer")

SOURCE_OPTIONS = {
    "namesrv",
    "topic",
    "startingoffsets",
    "endingoffsets",
    "maxmessagespertrigger",
    "maxmessagesperpartition",
    "readfromslave",
    "failondataloss",
    "consumergroup",
    "commitoffsetstobroker",
    "pullbatchsize",
    "requesttimeoutseconds",
    "readtimeoutseconds",
    "tls",
    "tlsca",
    "tlscert",
    "tlskey",
}
SINK_OPTIONS = {
    "namesrv",
    "topic",
    "sinkid",
    "producergroup",
    "sendbatchsize",
    "sendtimeoutseconds",
    "requesttimeoutseconds",
    "tls",
    "tlsca",
    "tlscert",
    "tlskey",
}
# Spark itself passes these through the same mapping.
_SPARK_OWNED = {"path", "checkpointlocation", "queryname"}
CAMEL = {
    name.lower(): name
    for name in (
        "namesrv",
        "topic",
        "startingOffsets",
        "endingOffsets",
        "maxMessagesPerTrigger",
        "maxMessagesPerPartition",
        "readFromSlave",
        "failOnDataLoss",
        "consumerGroup",
        "commitOffsetsToBroker",
        "pullBatchSize",
        "requestTimeoutSeconds",
        "readTimeoutSeconds",
        "sinkId",
        "producerGroup",
        "sendBatchSize",
        "sendTimeoutSeconds",
        "tls",
        "tlsCa",
        "tlsCert",
        "tlsKey",
    )
}


@dataclass(frozen=True, slots=True)
class Tls:
    """How to connect: plain TCP, or TLS trusting ``ca`` (empty: the system's CAs). Picklable: it travels to the
    executors, which build their own context from it."""

    enabled: bool = False
    ca: str = ""
    cert: str = ""
    key: str = field(default="", repr=False)  # a path, but the path of a private key: kept out of reprs and logs

    def context(self) -> ssl.SSLContext | None:
        return client_context(trust=self.ca, cert=self.cert, key=self.key) if self.enabled else None


@dataclass(frozen=True, slots=True)
class ReadSettings:
    """What every read() needs; travels inside each partition."""

    namesrv: str
    consumer_group: str
    read_from_slave: str
    fail_on_data_loss: bool
    pull_batch_size: int
    request_timeout_s: float
    read_timeout_s: float
    tls: Tls


@dataclass(frozen=True, slots=True)
class SourceOptions:
    read: ReadSettings
    topics: tuple[str, ...]
    starting_offsets: str | None  # None: the mode's default
    ending_offsets: str
    max_messages_per_trigger: int | None
    max_messages_per_partition: int
    commit_offsets_to_broker: bool


@dataclass(frozen=True, slots=True)
class SinkOptions:
    namesrv: str
    topic: str | None
    sink_id: str | None
    producer_group: str
    send_batch_size: int
    send_timeout_s: float
    request_timeout_s: float
    tls: Tls


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


def _check_known(opts: dict[str, str], known: set[str], what: str) -> None:
    for key in opts:
        if key in known or key in _SPARK_OWNED:
            continue
        close = difflib.get_close_matches(key, sorted(known), n=1)
        hint = f"did you mean {CAMEL.get(close[0], close[0])!r}?" if close else f"known options: {_names(known)}"
        raise OptionError(key, f"is not an option of the pyrmq {what}", hint)


def _names(keys: set[str]) -> str:
    return ", ".join(sorted(CAMEL.get(k, k) for k in keys))


def _required(opts: dict[str, str], key: str, example: str) -> str:
    value = opts.get(key, "").strip()
    if not value:
        raise OptionError(CAMEL[key], "is required", f'add .option("{CAMEL[key]}", "{example}")')
    return value


def _int(opts: dict[str, str], key: str, default: int | None, *, minimum: int = 1) -> int | None:
    raw = opts.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = parse_int(raw.strip())
    except ValueError:
        raise OptionError(CAMEL[key], f"{raw!r} is not a whole number", f"give an integer >= {minimum}") from None
    if value < minimum:
        raise OptionError(CAMEL[key], f"{value} is below {minimum}", f"give an integer >= {minimum}")
    return value


def _float(opts: dict[str, str], key: str, default: float) -> float:
    raw = opts.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise OptionError(CAMEL[key], f"{raw!r} is not a number", "give seconds, e.g. 30") from None
    if value <= 0:
        raise OptionError(CAMEL[key], f"{value} is not positive", "give seconds, e.g. 30")
    return value


def _bool(opts: dict[str, str], key: str, default: bool) -> bool:
    raw = opts.get(key)
    if raw is None or raw.strip() == "":
        return default
    text = raw.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise OptionError(CAMEL[key], f"{raw!r} is not true or false", "use true or false")


def _namesrv(opts: dict[str, str]) -> str:
    value = _required(opts, "namesrv", DEFAULT_NAMESRV_ADDR)
    for part in filter(None, (p.strip() for p in value.replace(",", ";").split(";"))):
        try:
            parse_host_port(part)
        except ValueError as exc:
            raise OptionError("namesrv", str(exc), "separate several nameservers with ';'") from None
    return value


def _tls(opts: dict[str, str]) -> Tls:
    enabled = _bool(opts, "tls", False)
    ca, cert, key = (opts.get(k, "").strip() for k in ("tlsca", "tlscert", "tlskey"))
    for name, value in (("tlsCa", ca), ("tlsCert", cert), ("tlsKey", key)):
        if value and not enabled:
            raise OptionError(name, "is set but tls is not", 'add .option("tls", "true")')
    tls = Tls(enabled, ca, cert, key)
    try:
        tls.context()  # a file that does not load fails on the driver, not in every task
    except TlsFileError as exc:
        option = {"tls.trustCertPath": "tlsCa", "tls.certPath": "tlsCert", "tls.keyPath": "tlsKey"}.get(exc.key, "tls")
        raise OptionError(option, exc.problem, exc.hint.replace("tls.", "")) from None
    return tls


def parse_topics(value: str) -> tuple[str, ...]:
    topics = tuple(dict.fromkeys(t.strip() for t in value.split(",") if t.strip()))
    if not topics:
        raise OptionError("topic", f"{value!r} names no topic", "give one topic or several separated by commas")
    return topics


def source_options(options: Mapping[str, str]) -> SourceOptions:
    opts = _lower(options)
    _check_known(opts, SOURCE_OPTIONS, "source")
    mode = opts.get("readfromslave", "auto").strip().lower()
    if mode not in READ_MODES:
        raise OptionError(
            "readFromSlave",
            f"{mode!r} is not one of {', '.join(READ_MODES)}",
            "auto follows the broker's advice; never reads the master; prefer reads a slave",
        )
    read = ReadSettings(
        namesrv=_namesrv(opts),
        consumer_group=opts.get("consumergroup", "").strip() or "pyrmq-spark",
        read_from_slave=mode,
        fail_on_data_loss=_bool(opts, "failondataloss", True),
        pull_batch_size=min(_int(opts, "pullbatchsize", 1024) or 1024, 1024),
        request_timeout_s=_float(opts, "requesttimeoutseconds", 10.0),
        read_timeout_s=_float(opts, "readtimeoutseconds", 60.0),
        tls=_tls(opts),
    )
    return SourceOptions(
        read=read,
        topics=parse_topics(_required(opts, "topic", "TopicA,TopicB")),
        starting_offsets=opts.get("startingoffsets", "").strip() or None,
        ending_offsets=opts.get("endingoffsets", "").strip() or "latest",
        max_messages_per_trigger=_int(opts, "maxmessagespertrigger", None),
        max_messages_per_partition=_int(opts, "maxmessagesperpartition", 50_000) or 50_000,
        commit_offsets_to_broker=_bool(opts, "commitoffsetstobroker", False),
    )


def sink_options(options: Mapping[str, str]) -> SinkOptions:
    opts = _lower(options)
    _check_known(opts, SINK_OPTIONS, "sink")
    topic = opts.get("topic", "").strip() or None
    if topic is not None and "," in topic:
        raise OptionError(
            "topic", f"{topic!r} names several topics", "a sink writes to one topic, or use a topic column"
        )
    return SinkOptions(
        namesrv=_namesrv(opts),
        topic=topic,
        sink_id=opts.get("sinkid", "").strip() or None,
        producer_group=opts.get("producergroup", "").strip() or "pyrmq-spark-sink",
        send_batch_size=_int(opts, "sendbatchsize", 256) or 256,
        send_timeout_s=_float(opts, "sendtimeoutseconds", 60.0),
        request_timeout_s=_float(opts, "requesttimeoutseconds", 10.0),
        tls=_tls(opts),
    )
