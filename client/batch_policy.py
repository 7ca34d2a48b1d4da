"""How large the producer's batches grow and when a partial batch waits: pipelining synchronous senders.

Why: senders that each wait for their result form a closed loop. When all N of them join one batch, the client
and the broker take turns, each idle while the other works; on a machine where both share the cores about
40% of the CPU idled (``bench.e2e_bench``, 64 senders: 1.2 of 2 cores busy). Spread over ``depth`` batches,
the requests overlap: while the broker stores one, the client completes the other's senders and builds the
next batch.

Two rules, both decided here without I/O so they can be tested on their own:

- **cap**: a new batch holds at most ``ceil(concurrency / depth)`` messages, never fewer than ``min_batch`` and
  never more than ``max_batch``. ``concurrency`` is the largest number of messages outstanding in the producer
  (sealed and not yet answered, plus the batch being sealed) seen in the current or the previous window of
  ``window_s``. Without any sample yet the cap is ``max_batch``: the first burst goes out whole and is measured.
- **hold**: a batch that is due (end of the event-loop iteration, or its linger) but below its cap waits while
  its lane (its topic on its broker) already has ``depth`` requests in flight, and goes when one of them is
  answered or when it fills. This merges the fragments that a burst or a change of load leaves behind, so the
  senders settle into ``depth`` groups of full batches rather than drifting into many small ones; it delays only
  a batch that would have queued behind ``depth`` requests of its own topic anyway. Full batches never wait here.
  The lane is the topic, not the broker: batches of different topics never merge, so a broker-wide count let
  64 senders over 100 topics have two one-message requests in flight at a time (5k msg/s at 12 ms a send,
  ``bench.scaling --sweep topics``).

``depth=1`` turns both rules off: every batch may take up to ``max_batch`` messages and nothing is held.
Not thread-safe: the producer calls it from its event loop.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable


class BatchPolicy:
    __slots__ = (
        "_clock",
        "_in_flight",
        "_peak",
        "_prev_peak",
        "_window_end",
        "depth",
        "max_batch",
        "min_batch",
        "outstanding",
        "window_s",
    )

    def __init__(
        self,
        *,
        depth: int = 2,
        max_batch: int = 512,
        min_batch: int = 16,
        window_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if depth < 1 or max_batch < 1 or min_batch < 1 or window_s <= 0:
            raise ValueError("depth, max_batch, min_batch and window_s must be positive")
        self.depth = depth
        self.max_batch = max_batch
        self.min_batch = min(min_batch, max_batch)
        self.window_s = window_s
        self.outstanding = 0  # messages in sealed batches not yet answered
        self._peak = 0  # largest outstanding sample in the current window
        self._prev_peak = 0  # ... in the previous window
        self._window_end = 0.0
        self._in_flight: dict[Hashable, int] = {}  # lane (broker, topic) -> requests sent and not yet answered
        self._clock = clock

    def _roll(self) -> None:
        now = self._clock()
        if now >= self._window_end:
            # A gap longer than a whole window leaves nothing worth remembering.
            self._prev_peak = self._peak if now < self._window_end + self.window_s else 0
            self._peak = 0
            self._window_end = now + self.window_s

    def cap(self) -> int:
        """The most messages a batch opened now may take."""
        if self.depth == 1:
            return self.max_batch
        self._roll()
        concurrency = max(self._peak, self._prev_peak)
        if concurrency == 0:
            return self.max_batch
        return min(self.max_batch, max(self.min_batch, -(-concurrency // self.depth)))

    def hold(self, lane: Hashable, size: int, cap: int) -> bool:
        """Whether a due batch of ``size`` messages (opened with ``cap``) for ``lane`` should wait."""
        return self.depth > 1 and size < cap and self._in_flight.get(lane, 0) >= self.depth

    def sealed(self, size: int) -> None:
        """A batch of ``size`` messages was sealed: it is outstanding until ``answered``."""
        self._roll()
        self.outstanding += size
        self._peak = max(self._peak, self.outstanding)

    def sent(self, lane: Hashable) -> None:
        """A sealed batch's request left on ``lane`` (its retries, wherever they go, hold this same slot)."""
        self._in_flight[lane] = self._in_flight.get(lane, 0) + 1

    def answered(self, lane: Hashable) -> None:
        """The request ``sent`` on ``lane`` ended, answered or failed."""
        left = self._in_flight.get(lane, 0) - 1
        if left > 0:
            self._in_flight[lane] = left
        else:
            self._in_flight.pop(lane, None)

    def finished(self, size: int) -> None:
        """A sealed batch of ``size`` messages ended (every future resolved)."""
        self.outstanding = max(0, self.outstanding - size)

    def in_flight(self, lane: Hashable) -> int:
        return self._in_flight.get(lane, 0)
