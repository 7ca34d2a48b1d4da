"""What the message store takes and returns: statuses (never exceptions) on the put and get paths.

The store's hot paths answer with ``PutStatus`` / ``GetStatus`` like RocketMQ's PutMessageStatus and
GetMessageStatus; the gRPC layer maps them to ResponseCodes in one place. Exceptions are kept for programmer
errors and for the replication path (``StoreOffsetMismatch``), where the HA client must close its connection.
What a message is (records, properties, StoredMessage, msgIds, TagFilter) lives in ``remoting.message_codec``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from common.errors import PyrmqError

if TYPE_CHECKING:
    from remoting.message_codec import StoredMessage

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"


class PutStatus(enum.Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    OS_PAGE_CACHE_BUSY = "OS_PAGE_CACHE_BUSY"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"

    @property
    def stored(self) -> bool:
        """True when the message is in the commitlog (RocketMQ's "sendOK" statuses)."""
        return self in _STORED


_STORED = {PutStatus.PUT_OK, PutStatus.FLUSH_DISK_TIMEOUT, PutStatus.FLUSH_SLAVE_TIMEOUT, PutStatus.SLAVE_NOT_AVAILABLE}


class GetStatus(enum.Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class MessageDraft:
    """One message to append. ``properties`` holds TAGS, KEYS, UNIQ_KEY, ... as RocketMQ strings."""

    body: bytes
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    born_timestamp: int = 0  # epoch ms, producer clock
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    sys_flag: int = 0

    @classmethod
    def stored_again(cls, msg: StoredMessage, properties: dict[str, str], reconsume_times: int) -> MessageDraft:
        """``msg`` put anew (a retry, the DLQ, a delay level's redelivery): its body, flags and birth kept, with
        these properties and reconsume count."""
        return cls(
            body=msg.body,
            properties=properties,
            flag=msg.flag,
            born_timestamp=msg.born_timestamp,
            born_host=msg.born_host,
            reconsume_times=reconsume_times,
            sys_flag=msg.sys_flag,
        )


@dataclass(slots=True)
class RawBatch:
    """A batch as SEND_BATCH_MESSAGE carries it (spec remoting.md §3.5): per message only ``(flag, body,
    properties bytes)`` (``remoting.message_codec.decode_batch``), everything else shared. ``suffix`` is the
    batch's own properties in stored form (``encode_properties``: each pair ends with \\x02), appended to every
    message's; ``wait`` says whether the put waits for the flush and the replica (the batch's ``WAIT``)."""

    entries: list[tuple[int, bytes, bytes]]
    suffix: bytes = b""
    sys_flag: int = 0
    born_timestamp: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    wait: bool = True


@dataclass(slots=True)
class PutResult:
    status: PutStatus
    remark: str = ""  # for non-OK statuses: what went wrong and what to do
    wrote_offset: int = -1  # physical offset of the first record
    wrote_bytes: int = 0  # bytes of all records of the batch
    queue_offset: int = -1  # queue offset of the first message
    msg_count: int = 0
    store_timestamp: int = 0
    physical_offsets: list[int] = field(default_factory=list)  # one per message

    @property
    def next_offset(self) -> int:
        """The commitlog offset a replica or flush must reach for this batch to be covered."""
        return self.wrote_offset + self.wrote_bytes


@dataclass(slots=True)
class GetResult:
    """What a read found. ``buffers`` are the found records exactly as stored, as zero-copy memoryviews of the
    commitlog mapping, one per contiguous run (a pull answer's body is their concatenation, spec §4.3); a view
    keeps its mapping alive, so a file deleted or closed meanwhile stays readable until the view is dropped."""

    status: GetStatus
    next_begin_offset: int = 0
    min_offset: int = 0
    max_offset: int = 0
    buffers: list[memoryview] = field(default_factory=list)
    suggest_pulling_from_slave: bool = False
    total_bytes: int = 0
    message_count: int = 0

    @property
    def records(self) -> list[bytes]:
        """The records one by one, copied (for callers that decode each; the pull path sends ``buffers``)."""
        out: list[bytes] = []
        for buf in self.buffers:
            pos, end = 0, len(buf)
            while pos < end:
                size = int.from_bytes(buf[pos : pos + 4], "big")
                if size <= 0:
                    break
                out.append(bytes(buf[pos : pos + size]))
                pos += size
        return out


class StoreOffsetMismatch(PyrmqError):
    """Replicated bytes offered at an offset other than the local commitlog end; the HA client reconnects."""

    retriable = True

    def __init__(self, expected: int, got: int, *, path: str = "") -> None:
        where = f" ({path})" if path else ""
        super().__init__(
            f"replicated bytes at offset {got} but the local commitlog ends at {expected}{where}",
            hint="the slave reconnects and asks the master for its own end offset",
        )
        self.expected = expected
        self.got = got


@dataclass(slots=True)
class CommitlogSlice:
    """Commitlog bytes [phy_offset, phy_offset + length) inside one file, for the HA master.

    ``fd`` + ``file_position`` serve ``os.sendfile``; ``view`` is a zero-copy memoryview of the same bytes.
    Valid until the file is deleted by cleanup (the view keeps the mapping alive; the fd may be closed).
    """

    fd: int
    file_position: int
    length: int
    phy_offset: int
    view: memoryview

    @property
    def next_offset(self) -> int:
        return self.phy_offset + self.length
