"""What applications send and receive: Message, MessageQueue, SendResult, and the client message id.

``Message.to_pb()`` is on the producer's hot path: it builds one ``broker_pb2.Message`` with the RocketMQ
properties (TAGS, KEYS space-joined, UNIQ_KEY, DELAY, WAIT=false only when asked) and nothing else.

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
    uniq_id_prefix,
)
from remoting.pb import broker_pb2

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
    msg_id: str = ""  # UNIQ_KEY; set by to_pb() when empty

    def fill_pb(self, m: broker_pb2.Message, now_ms: int) -> str:
        """Fill a wire message in place (the cheapest way to build one with upb); returns the client id.

        Assigns ``msg_id`` (UNIQ_KEY) on first use, so a message sent again keeps its id.
        """
        m.body = self.body
        m.born_timestamp = now_ms
        if self.flag:
            m.flag = self.flag
        p = m.properties
        if self.properties:
            for k, v in self.properties.items():
                p[k] = v
        if self.tags:
            p[PROPERTY_TAGS] = self.tags
        if self.keys:
            p[PROPERTY_KEYS] = self.keys if isinstance(self.keys, str) else " ".join(self.keys)
        if self.delay_level > 0:
            p[PROPERTY_DELAY_TIME_LEVEL] = str(self.delay_level)
        if not self.wait_store_msg_ok:
            p[PROPERTY_WAIT_STORE_MSG_OK] = "false"
        msg_id = self.msg_id
        if not msg_id:
            msg_id = self.msg_id = _ID_GEN.next_id(now_ms)
        p[PROPERTY_UNIQ_KEY] = msg_id
        return msg_id

    def to_pb(self, now_ms: int) -> broker_pb2.Message:
        m = broker_pb2.Message()
        self.fill_pb(m, now_ms)
        return m


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
