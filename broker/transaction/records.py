"""Transactional messages as commitlog records (RocketMQ TransactionalMessageBridge / TransactionalMessageUtil).

All transaction state is ordinary records, so it replicates to the slaves, survives restarts and a promoted
master carries on where the old one stopped:

- a **half** message: the producer's message stored in ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 instead of its topic,
  which it keeps in ``REAL_TOPIC`` / ``REAL_QID``, with ``__transactionId__`` = its UNIQ_KEY, ``TRAN_MSG=true`` and
  ``PGROUP`` (the producer group to ask), sysFlag PREPARED; no consumer subscribes to that topic;
- the **committed** message: the half's body and properties back in the real topic and queue, without
  ``REAL_TOPIC``, ``REAL_QID`` and ``TRAN_MSG``, sysFlag COMMIT;
- an **op** record in ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0, tag ``d``, body the half queue offsets it closes
  (decimal, comma-separated, RocketMQ's format), and pyrmq's ``__transactionId__`` naming the transactions whose
  outcome it records with ``TRAN_RESOLUTION`` (``commit``, ``rollback``, or ``renewed`` when a check re-put the
  half as a newer copy, ``discarded`` after ``transactionCheckMax`` checks).
"""

from __future__ import annotations

from remoting.message_codec import PROPERTY_TAGS, PROPERTY_UNIQ_KEY, StoredMessage

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SYSTEM_GROUP = "CID_RMQ_SYS_TRANS"  # the internal group whose offsets on the half and op queues mark progress
REMOVE_TAG = "d"

PROPERTY_REAL_TOPIC = "REAL_TOPIC"
PROPERTY_REAL_QID = "REAL_QID"
PROPERTY_TRAN_MSG = "TRAN_MSG"
PROPERTY_PRODUCER_GROUP = "PGROUP"
PROPERTY_TRANSACTION_ID = "__transactionId__"
PROPERTY_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROPERTY_CHECK_IMMUNITY_S = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROPERTY_RESOLUTION = "TRAN_RESOLUTION"

# MessageSysFlag transaction type bits
TRANSACTION_MASK = 0x3 << 2
TRANSACTION_NOT_TYPE = 0
TRANSACTION_PREPARED_TYPE = 0x1 << 2
TRANSACTION_COMMIT_TYPE = 0x2 << 2
TRANSACTION_ROLLBACK_TYPE = 0x3 << 2

MAX_OP_OFFSETS = 4096  # half offsets one op body may list (RocketMQ batches up to transactionOpMsgMaxSize bytes)


def is_half_send(properties: dict[str, str], sys_flag: int) -> bool:
    flag = properties.get(PROPERTY_TRAN_MSG)
    return (flag is not None and flag.lower() == "true") or sys_flag & TRANSACTION_MASK == TRANSACTION_PREPARED_TYPE


def half_properties(properties: dict[str, str], topic: str, queue_id: int, producer_group: str) -> dict[str, str]:
    """What a half message stores: the producer's properties plus where it goes once committed."""
    props = dict(properties)
    props[PROPERTY_REAL_TOPIC] = topic
    props[PROPERTY_REAL_QID] = str(queue_id)
    props[PROPERTY_TRAN_MSG] = "true"
    props[PROPERTY_PRODUCER_GROUP] = producer_group
    tx_id = props.get(PROPERTY_UNIQ_KEY)
    if tx_id:
        props[PROPERTY_TRANSACTION_ID] = tx_id
    return props


def transaction_id(half: StoredMessage) -> str:
    return half.properties.get(PROPERTY_TRANSACTION_ID) or half.properties.get(PROPERTY_UNIQ_KEY, "")


def committed_target(half: StoredMessage) -> tuple[str, int, dict[str, str]]:
    """(real topic, real queue id, properties) of the message a commit stores; ValueError for a record that is
    not a half message (the caller answers the producer)."""
    props = dict(half.properties)
    topic = props.pop(PROPERTY_REAL_TOPIC, "")
    qid_text = props.pop(PROPERTY_REAL_QID, "")
    props.pop(PROPERTY_TRAN_MSG, None)
    props.pop(PROPERTY_CHECK_TIMES, None)
    if half.topic != HALF_TOPIC or not topic or not qid_text.isascii() or not qid_text.isdigit():
        raise ValueError("not a half message (no REAL_TOPIC / REAL_QID, or not in the half topic)")
    return topic, int(qid_text), props


def renewed_properties(half: StoredMessage) -> dict[str, str]:
    """The properties of a half re-put by the check service: its check count one higher."""
    props = dict(half.properties)
    props[PROPERTY_CHECK_TIMES] = str(check_times(half) + 1)
    return props


def check_times(half: StoredMessage) -> int:
    text = half.properties.get(PROPERTY_CHECK_TIMES, "0")
    return int(text) if text.isascii() and text.isdigit() and len(text) < 10 else 0


def immunity_ms(half: StoredMessage, default_ms: int) -> int:
    """How long after its store time a half is left alone (RocketMQ's CHECK_IMMUNITY_TIME_IN_SECONDS)."""
    text = half.properties.get(PROPERTY_CHECK_IMMUNITY_S, "")
    if text.isascii() and text.isdigit() and len(text) < 10:
        return max(default_ms, int(text) * 1000)
    return default_ms


def op_properties(tx_ids: list[str], resolution: str) -> dict[str, str]:
    return {PROPERTY_TAGS: REMOVE_TAG, PROPERTY_TRANSACTION_ID: ",".join(tx_ids), PROPERTY_RESOLUTION: resolution}


def op_body(half_offsets: list[int]) -> bytes:
    return ",".join(str(o) for o in half_offsets).encode("ascii")


def parse_op(body: bytes, properties: dict[str, str]) -> tuple[list[int], list[str], str]:
    """(half queue offsets, transaction ids, resolution) of an op record; offsets that are not decimal are
    skipped, as RocketMQ skips them (a record written by another tool)."""
    offsets = []
    for part in body.split(b",")[:MAX_OP_OFFSETS]:
        part = part.strip()
        if part.isdigit():
            offsets.append(int(part))
    ids = [t for t in properties.get(PROPERTY_TRANSACTION_ID, "").split(",") if t]
    return offsets, ids, properties.get(PROPERTY_RESOLUTION, "")
