"""One stored (commitlog) record for tests that care about a few of its fields: the rest get plain defaults."""

from __future__ import annotations

from remoting.message_codec import encode_record, host_bytes

DEFAULT_HOST = host_bytes("127.0.0.1", 10911)


def stored_record(**fields: object) -> bytes:
    """``encode_record`` with every field defaulted (topic b"T", queue 0, zero offsets and times, empty body and
    properties); ``fields`` override any of them."""
    values: dict[str, object] = {
        "topic_bytes": b"T", "queue_id": 0, "flag": 0, "queue_offset": 0, "physical_offset": 0, "sys_flag": 0,
        "born_timestamp": 0, "born_host": DEFAULT_HOST, "store_timestamp": 0, "store_host": DEFAULT_HOST,
        "reconsume_times": 0, "body": b"", "properties": b"",
    }
    values.update(fields)
    return encode_record(**values)
