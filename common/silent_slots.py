"""Places for connections that have not said a word yet, so silent sockets never lock a real peer out.

A listener that must read a peer's first bytes before it knows what the peer is (the HA port's hello,
``broker/ha/master.py``; the TLS-or-plaintext first byte, ``remoting/tls_listener.py``) bounds the connections
in that state:

- a source address (host) holds at most ``per_host`` places;
- hosts a real peer authenticated from (``learn``; the last ``known_max``) draw from ``reserved`` places of their
  own, every other host shares ``total``: a flood from other addresses never touches a known peer's places;
- when the host's or the pool's places are taken, the newcomer takes the place of the **oldest occupant that has
  not spoken** (the caller closes that one); occupants that spoke keep their places, until their own deadline.

Why the oldest silent occupant, whatever its age: a real peer sends its first bytes with its connect, so it speaks
within one read of its accept and is the newest occupant while it does; it can only lose its place to ``per_host``
newer connects from its own address (``total`` from any) arriving before that read. The earlier rule let only an
occupant silent for 0.25 s give way. A flood that reopens each closed socket at once then kept every occupant
younger than that, and a real slave's connect was refused, again and again, while the flood lasted.

Pure: the caller passes the clock (used for ordering and for the age it logs) and closes what is evicted.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class SlotVerdict(enum.Enum):
    ADMIT = "ADMIT"  # a free place
    EVICT = "EVICT"  # the place of the oldest silent occupant (returned as the victim)
    HOST_FULL = "HOST_FULL"  # this source address has ``per_host`` occupants, all of them talking
    POOL_FULL = "POOL_FULL"  # every place of the pool is held by an occupant that talks


@dataclass(slots=True, eq=False)
class Place:
    """One connection before its first bytes were judged: where from, since when, whether it spoke."""

    host: str
    started: float
    known: bool  # drawn from the reserved pool of hosts a real peer authenticated from
    spoke: bool = False  # its first bytes arrived: it is no longer evicted by newcomers


class SilentSlots:
    def __init__(self, *, total: int, per_host: int, reserved: int = 0, known_max: int = 64) -> None:
        self.total = total
        self.per_host = per_host
        self.reserved = reserved
        self.known_max = known_max
        self.known: dict[str, None] = {}  # insertion-ordered: the oldest learned host is forgotten first
        self.active: list[Place] = []

    def learn(self, host: str) -> None:
        """A real peer authenticated from ``host``: its later connections use the reserved pool."""
        self.known.pop(host, None)
        self.known[host] = None
        while len(self.known) > self.known_max:
            del self.known[next(iter(self.known))]

    def claim(self, host: str, now: float) -> tuple[SlotVerdict, Place | None, Place | None]:
        """(verdict, the newcomer's place or None, the evicted place or None); the caller closes the evicted
        connection and later ``release``s every place it was given."""
        known = host in self.known and self.reserved > 0
        same_host = [p for p in self.active if p.host == host]
        pool = [p for p in self.active if p.known == known]
        cap = self.reserved if known else self.total
        victim = None
        verdict = SlotVerdict.ADMIT
        if len(same_host) >= self.per_host or len(pool) >= cap:
            full = same_host if len(same_host) >= self.per_host else pool
            victim = min((p for p in full if not p.spoke), key=lambda p: p.started, default=None)
            if victim is None:
                return (SlotVerdict.HOST_FULL if full is same_host else SlotVerdict.POOL_FULL), None, None
            self.active.remove(victim)
            verdict = SlotVerdict.EVICT
        mine = Place(host=host, started=now, known=known)
        self.active.append(mine)
        return verdict, mine, victim

    def release(self, place: Place) -> None:
        if place in self.active:
            self.active.remove(place)

    def from_host(self, host: str) -> int:
        return sum(1 for p in self.active if p.host == host)

    def __len__(self) -> int:
        return len(self.active)
