"""Counts the requests an SDK client sends, by code, and how many of each were in flight at once.

Why: a consumer's start on many queues is slow or fast depending on how its requests overlap (one offset lookup at
a time, or many), and the broker's metrics do not count requests by code. The tap wraps the client's own
``RemotingClient.invoke`` and ``invoke_oneway`` and calls through: every request still goes to the real server
over the real connection and the answer comes back unchanged; the tap only records what passed. Each PULL_MESSAGE
also records when its queue was first pulled, and from which offset, so a bench or a test can tell when every
queue had a pull in flight and where it started. Queues are keyed (topic, queue id): one broker group.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

from remoting.codes import RequestCode


@dataclass
class RequestTap:
    sent: Counter[int] = field(default_factory=Counter)  # requests sent, by code
    in_flight: Counter[int] = field(default_factory=Counter)  # requests awaiting their answer now, by code
    max_in_flight: Counter[int] = field(default_factory=Counter)  # the most in flight at once, by code
    first_pull_at: dict[tuple[str, int], float] = field(default_factory=dict)  # (topic, queue id) -> clock
    first_pull_offset: dict[tuple[str, int], int] = field(default_factory=dict)  # (topic, queue id) -> queueOffset

    def attach(self, client) -> RequestTap:
        """Wrap ``client`` (a ``remoting.client.RemotingClient``, e.g. ``consumer.remoting.client``)."""
        invoke, oneway = client.invoke, client.invoke_oneway

        async def counted_invoke(addr, cmd, timeout_s):
            self._sent(cmd)
            code = cmd.code
            self.in_flight[code] += 1
            self.max_in_flight[code] = max(self.max_in_flight[code], self.in_flight[code])
            try:
                return await invoke(addr, cmd, timeout_s)
            finally:
                self.in_flight[code] -= 1

        async def counted_oneway(addr, cmd):
            self._sent(cmd)
            return await oneway(addr, cmd)

        client.invoke, client.invoke_oneway = counted_invoke, counted_oneway
        return self

    def _sent(self, cmd) -> None:
        self.sent[cmd.code] += 1
        if cmd.code == RequestCode.PULL_MESSAGE:
            ext = cmd.ext or {}
            key = (ext.get("topic", ""), int(ext.get("queueId", -1)))  # one broker group: the queue id names it
            if key not in self.first_pull_at:
                self.first_pull_at[key] = time.monotonic()
                self.first_pull_offset[key] = int(ext.get("queueOffset", -1))

    def pulled_queues(self, topic_prefix: str = "") -> int:
        """Queues (of topics starting with ``topic_prefix``) that had at least one PULL_MESSAGE sent."""
        return sum(1 for topic, _ in self.first_pull_at if topic.startswith(topic_prefix))

    def by_name(self, counts: Counter[int]) -> dict[str, int]:
        out = {}
        for code, n in sorted(counts.items()):
            try:
                out[RequestCode(code).name] = n
            except ValueError:
                out[str(code)] = n
        return out
