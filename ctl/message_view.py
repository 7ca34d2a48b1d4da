"""One stored message as mqadmin's queryMsgById prints it (shared by queryMsgById and the index lookups)."""

from __future__ import annotations

from ctl.output import human_time


def message_lines(msg, msg_id: str) -> tuple[dict, list[str]]:
    """mqadmin queryMsgById's ``%-20s %s`` block for one stored message, and the same as a JSON object."""
    props = msg.properties
    data = {
        "offsetMsgId": msg_id,
        "topic": msg.topic,
        "tags": props.get("TAGS", ""),
        "keys": props.get("KEYS", ""),
        "queueId": msg.queue_id,
        "queueOffset": msg.queue_offset,
        "commitLogOffset": msg.physical_offset,
        "reconsumeTimes": msg.reconsume_times,
        "bornTimestamp": human_time(msg.born_timestamp),
        "storeTimestamp": human_time(msg.store_timestamp),
        "bornHost": "{}:{}".format(*msg.born_host),
        "storeHost": "{}:{}".format(*msg.store_host),
        "sysFlag": msg.sys_flag,
        "properties": props,
        "body": msg.body.decode("utf-8", "replace"),
    }
    labels = [
        ("OffsetID:", "offsetMsgId"),
        ("Topic:", "topic"),
        ("Tags:", "tags"),
        ("Keys:", "keys"),
        ("Queue ID:", "queueId"),
        ("Queue Offset:", "queueOffset"),
        ("CommitLog Offset:", "commitLogOffset"),
        ("Reconsume Times:", "reconsumeTimes"),
        ("Born Timestamp:", "bornTimestamp"),
        ("Store Timestamp:", "storeTimestamp"),
        ("Born Host:", "bornHost"),
        ("Store Host:", "storeHost"),
        ("System Flag:", "sysFlag"),
        ("Properties:", "properties"),
        ("Message Body:", "body"),
    ]
    lines = []
    for label, key in labels:
        value = data[key]
        if key == "tags" or key == "keys":
            value = f"[{value}]"
        elif key == "properties":
            value = "{" + ", ".join(f"{k}={v}" for k, v in sorted(value.items())) + "}"
        lines.append(f"{label:<20} {value}")
    return data, lines
