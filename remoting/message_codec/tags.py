"""Tags: a consume-queue unit carries the hash of its message's TAGS (Java's String.hashCode, as RocketMQ stores
it), so a tag subscription is checked against the index first and against the exact string only for the messages
whose hash matches.
"""

from __future__ import annotations


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (the consume-queue tags code), as a signed 64-bit value like RocketMQ stores it."""
    data = text.encode("utf-16-be")  # Java hashes UTF-16 code units
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


class TagFilter:
    """A "tagA || tagB" subscription: the consume-queue hash check first, then the exact string."""

    __slots__ = ("codes", "expression", "match_all", "tags")

    def __init__(self, expression: str | None) -> None:
        expr = (expression or "*").strip()
        self.expression = expr
        self.match_all = expr in ("", "*")
        self.tags = frozenset() if self.match_all else frozenset(t.strip() for t in expr.split("||") if t.strip())
        self.codes = frozenset(java_string_hash(t) for t in self.tags)

    def match_code(self, tags_code: int) -> bool:
        return self.match_all or tags_code in self.codes

    def match_tags(self, tags: str) -> bool:
        return self.match_all or tags in self.tags
