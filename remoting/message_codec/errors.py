"""The codec's errors: one base, so a caller that reads bytes from the wire or the disk catches any bad input with
one ``except MessageCodecError``, and each error says where and why.
"""

from __future__ import annotations

from common.errors import PyrmqError


class MessageCodecError(PyrmqError):
    """Bytes or values that this codec cannot turn into a message (or back)."""


class RecordError(MessageCodecError):
    """Bytes that are not a valid stored record; says where and why."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(f"bad commitlog record at byte {offset}: {reason}")
        self.offset = offset
        self.reason = reason


class BatchError(MessageCodecError):
    """A SEND_BATCH_MESSAGE body that is not a valid batch; names the message, its byte offset and why."""

    def __init__(self, index: int, offset: int, reason: str) -> None:
        super().__init__(
            f"bad batch body: message {index} at byte {offset}: {reason}",
            hint="each entry is TOTALSIZE=22+BODYLEN+PROPLEN, MAGICCODE 0, BODYCRC, FLAG, BODYLEN+body, PROPLEN+props",
        )
        self.index = index
        self.offset = offset
        self.reason = reason
