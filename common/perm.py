"""Permission bits of a topic and of a broker (RocketMQ's ``PermName``), one definition for every process.

A topic's ``perm`` (topics.json, route data, UPDATE_AND_CREATE_TOPIC) and a broker's ``brokerPermission`` use the
same bits, so the broker, the nameserver, the SDK and mqctl must agree on them. ``PERM_PRIORITY`` is a bit
RocketMQ reserves and never sets on a topic; a valid perm is below it.
"""

from __future__ import annotations

PERM_PRIORITY = 8
PERM_READ = 4
PERM_WRITE = 2
PERM_INHERIT = 1  # a topic created from this one (TBW102 on auto-creation) may be created
PERM_RW = PERM_READ | PERM_WRITE  # a topic's default, and a broker that takes sends and pulls


def perm_readable(perm: int) -> bool:
    return bool(perm & PERM_READ)


def perm_writeable(perm: int) -> bool:
    return bool(perm & PERM_WRITE)


def perm_inherited(perm: int) -> bool:
    return bool(perm & PERM_INHERIT)


def perm_valid(perm: int) -> bool:
    return 0 <= perm < PERM_PRIORITY


def perm_text(perm: int) -> str:
    """RocketMQ's ``perm2String``: ``R``, ``W`` and ``X`` (inherit) or ``-`` for each bit, e.g. 6 -> ``RW-``."""
    return (
        ("R" if perm_readable(perm) else "-")
        + ("W" if perm_writeable(perm) else "-")
        + ("X" if perm_inherited(perm) else "-")
    )
