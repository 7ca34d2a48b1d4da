"""Pull-response records -> Arrow columns, without building a message object per record.

A pull response carries concatenated records in RocketMQ's v1 layout (``remoting/message_codec/records.py`` has
the byte table). The fields the schema needs are read straight from the header with the codec's ``HEADER`` struct, one
unpack per record; properties are split once by the codec's rules (§3.3: pairs with an empty name or value are
dropped, later names win); bodies are sliced. Records are checked the way ``check_record`` does (magic, sizes,
length fields) so torn or foreign bytes raise the codec's ``RecordError`` instead of producing garbage rows.

``RowsBuilder`` collects the rows of one queue range and emits ``pyarrow.RecordBatch``es whose schema equals
the one Spark expects (yielding RecordBatches from ``read()`` is ~1.5-2x faster than yielding tuples).
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING

from remoting.message_codec import (
    HEADER,
    HEADER_SIZE,
    MESSAGE_MAGIC,
    MIN_RECORD_SIZE,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    RecordError,
    offset_msg_id,
    parse_host,
)

if TYPE_CHECKING:
    import pyarrow as pa

_COLUMN_PROPS = (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ_KEY)


class RowsBuilder:
    """Rows of one queue, column by column. Not thread-safe; one per read()."""

    def __init__(self, schema: pa.Schema, topic: str, broker_name: str, queue_id: int) -> None:
        self.schema = schema
        self.topic = topic
        self.broker_name = broker_name
        self.queue_id = queue_id
        self._hosts: dict[bytes, str] = {}  # store host bytes -> the offsetMsgId prefix (16 hex characters)
        self._reset()

    def _reset(self) -> None:
        self.offsets: list[int] = []
        self.msg_ids: list[str] = []
        self.keys: list[str | None] = []
        self.tags: list[str | None] = []
        self.body_data = bytearray()  # every body back to back: one copy per body, no bytes object per row
        self.body_ends: array = array("i", [0])
        self.map_offsets: list[int] = [0]
        self.map_keys: list[str] = []
        self.map_values: list[str] = []
        self.born: list[int] = []
        self.stored: list[int] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add_records(self, buf: bytes, lo: int, hi: int) -> int:
        """Append the records of ``buf`` whose queue offset is in [lo, hi); returns the highest offset seen + 1
        (or ``lo`` when there was none). RecordError on bytes that are not whole records."""
        unpack = HEADER.unpack_from
        end = len(buf)
        pos = 0
        last = lo - 1
        offsets, msg_ids, keys_col, tags_col = self.offsets, self.msg_ids, self.keys, self.tags
        body_data, body_ends = self.body_data, self.body_ends
        map_keys, map_values, map_offsets = self.map_keys, self.map_values, self.map_offsets
        view = memoryview(buf)
        born, stored = self.born, self.stored
        hosts = self._hosts
        while pos < end:
            if end - pos < MIN_RECORD_SIZE:
                raise RecordError(pos, f"{end - pos} trailing bytes are not a record")
            (
                total,
                magic,
                _crc,
                _qid,
                _flag,
                qoff,
                phy,
                _sys,
                born_ts,
                _bh,
                store_ts,
                store_host,
                _rc,
                _prep,
                body_len,
            ) = unpack(buf, pos)
            if (
                magic != MESSAGE_MAGIC
                or total < MIN_RECORD_SIZE
                or pos + total > end
                or body_len < 0
                or HEADER_SIZE + body_len + 3 > total
            ):
                raise RecordError(pos, f"magic {magic & 0xFFFFFFFF:#010x}, size {total}, body {body_len}")
            p = pos + HEADER_SIZE + body_len
            props_at = p + 1 + buf[p]
            if props_at + 2 > pos + total:
                raise RecordError(pos, f"topic length {buf[p]} does not fit in {total}")
            props_len = (buf[props_at] << 8) | buf[props_at + 1]
            if props_len >= 0x8000 or props_at + 2 + props_len != pos + total:
                raise RecordError(pos, f"total size {total} disagrees with the length fields")
            if lo <= qoff < hi:
                tag = key = uniq = None
                if props_len:
                    text = buf[props_at + 2 : props_at + 2 + props_len].decode("utf-8", "replace")
                    for item in text.split("\x02"):
                        name, _, value = item.partition("\x01")
                        if not name or not value:
                            continue  # as string_to_properties: Java drops these pairs
                        if name == PROPERTY_TAGS:
                            tag = value
                        elif name == PROPERTY_KEYS:
                            key = value
                        elif name == PROPERTY_UNIQ_KEY:
                            uniq = value
                        else:
                            map_keys.append(name)
                            map_values.append(value)
                map_offsets.append(len(map_keys))
                offsets.append(qoff)
                if uniq is None:
                    host = hosts.get(store_host)
                    if host is None:
                        host = hosts[store_host] = offset_msg_id(parse_host(store_host), 0)[:16]
                    uniq = f"{host}{phy:016X}"
                msg_ids.append(uniq)
                keys_col.append(key)
                tags_col.append(tag)
                body_data += view[pos + HEADER_SIZE : pos + HEADER_SIZE + body_len]
                body_ends.append(len(body_data))
                born.append(born_ts * 1000)
                stored.append(store_ts * 1000)
            last = max(last, qoff)
            pos += total
        return last + 1

    def flush(self) -> pa.RecordBatch:
        import pyarrow as pa

        n = len(self.offsets)
        fields = self.schema
        ts_type = fields.field("storeTimestamp").type
        columns = [
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.broker_name, pa.string()), n),
            pa.repeat(pa.scalar(self.queue_id, pa.int32()), n),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.msg_ids, pa.string()),
            pa.array(self.keys, pa.string()),
            pa.array(self.tags, pa.string()),
            pa.Array.from_buffers(
                pa.binary(), n, [None, pa.py_buffer(self.body_ends), pa.py_buffer(self.body_data)]
            ),
            pa.MapArray.from_arrays(
                pa.array(self.map_offsets, pa.int32()),
                pa.array(self.map_keys, pa.string()),
                pa.array(self.map_values, pa.string()),
                type=fields.field("properties").type,
            ),
            pa.array(self.born, ts_type),
            pa.array(self.stored, ts_type),
        ]
        self._reset()
        return pa.RecordBatch.from_arrays(columns, schema=fields)
