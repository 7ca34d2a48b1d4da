"""Per-second rates the admin answers carry (ConsumeStats' ``consumeTps``, TopicStatsTable's ``topicPutTps``),
sampled at the admin requests themselves: pyrmq keeps no clock-driven stats history (RocketMQ's BrokerStatsManager)
for them, and an admin request is rare enough to be the sampler."""

from __future__ import annotations

from collections import deque


class ConsumeRate:
    """Messages pulled per second per (topic, group), from ``BrokerMetrics.pulled_messages`` (counted since the
    broker started) sampled at each GET_CONSUME_STATS (at most one sample a second): the rate since the newest
    sample at least ``window_s`` old, or since boot when there is none (RocketMQ reports the last minute's rate)."""

    def __init__(self, boot_s: float, window_s: float = 60.0) -> None:
        self.boot_s = boot_s
        self.window_s = window_s
        self._samples: dict[tuple[str, str], deque[tuple[float, int]]] = {}

    def rate(self, key: tuple[str, str], total: int, now_s: float) -> float:
        samples = self._samples.setdefault(key, deque(maxlen=2 * int(self.window_s) + 2))
        while len(samples) > 1 and now_s - samples[1][0] >= self.window_s:
            samples.popleft()  # samples[0] stays the newest one at least window_s old
        t0, n0 = samples[0] if samples and now_s - samples[0][0] >= self.window_s else (self.boot_s, 0)
        if not samples or now_s - samples[-1][0] >= 1.0:
            samples.append((now_s, total))
        elapsed = now_s - t0
        return max(0.0, (total - n0) / elapsed) if elapsed > 0 else 0.0


class PutRate:
    """Messages stored per second per topic, from a counter that includes what was stored before the first request
    (the sum of the topic's queue max offsets): the first request for a topic sets its baseline and answers 0, later
    ones answer ``ConsumeRate``'s rate since then. A counter that went down (the topic was deleted and created
    again) starts a new baseline."""

    def __init__(self, window_s: float = 60.0) -> None:
        self.window_s = window_s
        self._topics: dict[str, tuple[ConsumeRate, int]] = {}

    def rate(self, topic: str, total: int, now_s: float) -> float:
        entry = self._topics.get(topic)
        if entry is None or total < entry[1]:
            entry = self._topics[topic] = (ConsumeRate(boot_s=now_s, window_s=self.window_s), total)
        rates, baseline = entry
        return rates.rate((topic, ""), total - baseline, now_s)

    def forget(self, topic: str) -> None:
        self._topics.pop(topic, None)
