"""What applications send and receive: Message, MessageQueue, SendResult, and the client message id.

``Message.wire_properties()`` is on the producer's hot path: it writes the message's properties string (spec §3.3:
``name\x01value`` pairs joined by ``\x02``, no trailing separator, as Java 4.9.7 writes it) with TAGS, KEYS
(space-joined), DELAY and UNIQ_KEY. A message with none of those but its UNIQ_KEY takes a one-concatenation path.
WAIT is not a message property here: it belongs to the request (a batch has one, spec §3.5), so the producer
adds it to the send header and keeps messages that differ in it in different requests.

UNIQ_KEY (RocketMQ's MessageClientIDSetter) is 32 hex characters: 20 fixed per process (IPv4 address, pid,
4 random bytes), then 8 for milliseconds since the process's id epoch (mod 2**32) and 4 for a counter
(mod 2**16); ``remoting.message_codec.UniqIdGenerator`` makes them, this module owns the process's one.
"""

from __future__ import annotations

import enum
import os
import socket
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from remoting.codes import ResponseCode
from remoting.message_codec import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_KEY,
    PROPERTY_WAIT_STORE_MSG_OK,
    StoredMessage,
    UniqIdGenerator,
    properties_to_string,
    uniq_id_prefix,
)

# A message as delivered to consumers: the decoded commitlog record (RocketMQ MessageExt).
MessageExt = StoredMessage


def local_ip() -> str:
    """The IPv4 address this host uses for outgoing traffic (no packet is sent), else 127.0.0.1."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def _new_id_generator() -> UniqIdGenerator:
    """This process's UNIQ_KEY generator (the layout and the generator are ``remoting.message_codec``'s)."""
    return UniqIdGenerator(uniq_id_prefix(local_ip(), os.getpid(), os.urandom(4)), int(time.time() * 1000))


_ID_GEN = _new_id_generator()


def new_msg_id(now_ms: int | None = None) -> str:
    """A fresh client message id (UNIQ_KEY)."""
    return _ID_GEN.next_id(int(time.time() * 1000) if now_ms is None else now_ms)


@dataclass(slots=True)
class Message:
    """One message to send. ``keys`` may be a string or a list (joined with spaces, RocketMQ's KEYS)."""

    topic: str
    body: bytes
    tags: str = ""
    keys: str | list[str] = ""
    properties: dict[str, str] = field(default_factory=dict)
    delay_level: int = 0
    wait_store_msg_ok: bool = True
    flag: int = 0
    msg_id: str = ""  # UNIQ_KEY; set by wire_properties() when empty

    def wire_properties(self, now_ms: int) -> str:
        """The properties string this message travels with (UNIQ_KEY included).

        Assigns ``msg_id`` (UNIQ_KEY) on first use, so a message sent again keeps its id. Raises
        ``remoting.message_codec.MessageCodecError`` for a name or value that contains \\x01 or \\x02."""
        msg_id = self.msg_id
        if not msg_id:
            msg_id = self.msg_id = _ID_GEN.next_id(now_ms)
        if not (self.properties or self.tags or self.keys or self.delay_level > 0):
            return "UNIQ_KEY\x01" + msg_id
        props = dict(self.properties) if self.properties else {}
        if self.tags:
            props[PROPERTY_TAGS] = self.tags
        if self.keys:
            props[PROPERTY_KEYS] = self.keys if isinstance(self.keys, str) else " ".join(self.keys)
        if self.delay_level > 0:
            props[PROPERTY_DELAY_TIME_LEVEL] = str(self.delay_level)
        props.pop(PROPERTY_WAIT_STORE_MSG_OK, None)  # a request-level property (see the module docstring)
        props[PROPERTY_UNIQ_KEY] = msg_id
        return properties_to_string(props)


class MessageQueue(NamedTuple):
    """One queue of a topic on one broker group. Hashable and ordered (topic, broker_name, queue_id)."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return f"{self.topic}@{self.broker_name}:{self.queue_id}"


class SendStatus(enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"  # stored on the master, not flushed in time (SYNC_FLUSH)
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"  # stored on the master, the slave did not ack in time
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"  # stored on the master, no slave in sync

    @property
    def replicated_as_asked(self) -> bool:
        return self is SendStatus.SEND_OK


SEND_STATUS_BY_CODE: dict[int, SendStatus] = {
    ResponseCode.SUCCESS: SendStatus.SEND_OK,
    ResponseCode.FLUSH_DISK_TIMEOUT: SendStatus.FLUSH_DISK_TIMEOUT,
    ResponseCode.FLUSH_SLAVE_TIMEOUT: SendStatus.FLUSH_SLAVE_TIMEOUT,
    ResponseCode.SLAVE_NOT_AVAILABLE: SendStatus.SLAVE_NOT_AVAILABLE,
}


class SendResult(NamedTuple):
    """What a send returns. Any status here means the message is stored on the master."""

    status: SendStatus
    msg_id: str  # client id (UNIQ_KEY)
    offset_msg_id: str  # store host + commitlog offset
    message_queue: MessageQueue
    queue_offset: int
