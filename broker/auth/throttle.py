"""FailureThrottle: a per-address budget of failed authentications, so that one address cannot guess secrets at
wire speed. Pure (the clock is passed in), event loop only.

Each source address has a token bucket of ``burst`` failures refilled at ``per_s`` a second. A failed
authentication takes a token; an address whose bucket is empty is *blocked*: every request from it is refused at
once, without looking at its signature, until a token has come back (so a correct guess made while blocked gains
nothing). A success takes nothing. Memory is bounded: at most ``max_addresses`` buckets; when full, the bucket of
the address that failed longest ago is dropped (it has most likely refilled; if not, that address starts again
with a full bucket: a flood from many addresses weakens the throttle, it never grows the memory).
"""

from __future__ import annotations

from collections import OrderedDict

BURST = 20  # failures an address may make at once (a client started with a wrong key retries a few times)
PER_S = 2.0  # failures per second an address may keep making
MAX_ADDRESSES = 4096


class FailureThrottle:
    def __init__(self, burst: int = BURST, per_s: float = PER_S, max_addresses: int = MAX_ADDRESSES) -> None:
        assert burst >= 1 and per_s > 0 and max_addresses >= 1
        self.burst = float(burst)
        self.per_s = per_s
        self.max_addresses = max_addresses
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # addr -> (tokens, at_s)
        self.blocked_total = 0  # requests refused because their address was blocked

    def __len__(self) -> int:
        return len(self._buckets)

    def _tokens(self, addr: str, now_s: float) -> float:
        entry = self._buckets.get(addr)
        if entry is None:
            return self.burst
        tokens, at_s = entry
        return min(self.burst, tokens + (now_s - at_s) * self.per_s)

    def blocked(self, addr: str, now_s: float) -> float:
        """Seconds until ``addr`` may try again (0.0: not blocked). A blocked request counts in ``blocked_total``."""
        tokens = self._tokens(addr, now_s)
        if tokens >= 1.0:
            return 0.0
        self.blocked_total += 1
        return (1.0 - tokens) / self.per_s

    def failed(self, addr: str, now_s: float) -> bool:
        """Record one failed authentication of ``addr``; True when this failure used its last token."""
        tokens = max(0.0, self._tokens(addr, now_s) - 1.0)
        if addr in self._buckets:
            self._buckets.move_to_end(addr)
        elif len(self._buckets) >= self.max_addresses:
            self._buckets.popitem(last=False)  # the address that failed longest ago: O(1), whatever the flood
        self._buckets[addr] = (tokens, now_s)
        return tokens < 1.0
