"""The system tests' workload and checker, in the shape of kafkatest (STYLE §6, reliability.md §8).

- ``mqctl`` runs the operator CLI in-process (typer's CliRunner). It is synchronous and owns an event loop of
  its own, so async tests call it through ``amqctl`` (a worker thread) while their traffic keeps running.
- ``BackgroundProducer`` sends unique, counter-tagged bodies at a steady rate from an SDK Producer and records
  every id with its outcome and the times it was invoked and answered.
- ``RecordingConsumer`` is an SDK PushConsumer that records every delivery (id, queue, offset, time); it can
  be throttled so a backlog builds up.
- ``check`` classifies the history (acked = SEND_OK; weak = stored on the master only; info = no answer) and
  computes lost / duplicated / unexpected, as reliability.md §8 defines them.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from typer.testing import CliRunner

from client import ConsumeFromWhere, ConsumeStatus, Message, Producer, PushConsumer, SendStatus
from ctl.app import app
from harness.waiting import async_wait_until
from tests.system.cluster import BROKERS, NAMESRV_ADDR

log = logging.getLogger(__name__)

# A message's store host is its master's advertised address: its port names the broker group.
BROKER_BY_PORT = {listen: name for name, broker_id, listen, _ in BROKERS.values() if broker_id == 0}
WEAK = frozenset({SendStatus.FLUSH_SLAVE_TIMEOUT, SendStatus.SLAVE_NOT_AVAILABLE, SendStatus.FLUSH_DISK_TIMEOUT})


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


# -- mqctl --------------------------------------------------------------------------------------------------
def mqctl(*args: str, project: str | None = None, env: dict[str, str] | None = None):
    """Run ``mqctl args...`` in-process; chaos commands get ``--project`` and ``--settle 0``."""
    argv = list(args)
    if project is not None:
        argv += ["--project", project, "--settle", "0"]
    return CliRunner().invoke(app, argv, env=env)


def ok(*args: str, project: str | None = None, env: dict[str, str] | None = None):
    result = mqctl(*args, project=project, env=env)
    assert result.exit_code == 0, (
        f"mqctl {' '.join(args)} exited {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        f"\nexception: {result.exception!r}"
    )
    return result


def ok_json(*args: str, project: str | None = None, env: dict[str, str] | None = None):
    return json.loads(ok(*args, "--json", project=project, env=env).stdout)


async def amqctl(*args: str, project: str | None = None, env: dict[str, str] | None = None):
    """``ok`` from a worker thread: mqctl runs its own event loop, which cannot nest in the test's."""
    return await asyncio.to_thread(ok, *args, project=project, env=env)


# -- history ------------------------------------------------------------------------------------------------
@dataclass(slots=True)
class Send:
    id: str
    invoked: float  # time.monotonic()
    answered: float = 0.0
    status: SendStatus | None = None  # None: no answer (error) or still pending
    error: str = ""
    broker_name: str = ""
    queue_id: int = -1
    queue_offset: int = -1

    @property
    def pending(self) -> bool:
        return self.answered == 0.0


@dataclass(slots=True)
class Delivery:
    id: str
    broker_name: str
    queue_id: int
    queue_offset: int
    at: float  # time.monotonic()
    consumer: str


class BackgroundProducer:
    """Sends ``rate`` messages a second to ``topic`` until stopped; every send ends in ``self.sends``."""

    def __init__(
        self,
        topic: str,
        *,
        rate: float = 200.0,
        send_timeout_s: float = 10.0,
        tag: str = "",
        max_inflight: int = 4000,
        namesrv_addr: str = NAMESRV_ADDR,
        **producer_kwargs,
    ) -> None:
        self.topic = topic
        self.rate = rate
        self.max_inflight = max_inflight
        self.prefix = tag or uuid.uuid4().hex[:6]
        self.producer = Producer(
            unique("sys_producer"),
            namesrv_addr,
            send_timeout_s=send_timeout_s,
            poll_name_server_interval_s=5.0,
            **producer_kwargs,
        )
        self.sends: dict[str, Send] = {}
        self._seq = itertools.count()
        self._task: asyncio.Task | None = None
        self._futures: set[asyncio.Future] = set()
        self._stop = asyncio.Event()

    async def start(self) -> BackgroundProducer:
        await self.producer.start()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"producer.{self.topic}")
        return self

    def send_one(self) -> Send:
        mid = f"{self.prefix}-{next(self._seq):07d}"
        rec = self.sends[mid] = Send(mid, time.monotonic())
        fut = self.producer.send_async(Message(self.topic, mid.encode(), keys=mid))
        self._futures.add(fut)
        fut.add_done_callback(lambda f, rec=rec: self._done(rec, f))
        return rec

    def _done(self, rec: Send, fut: asyncio.Future) -> None:
        self._futures.discard(fut)
        rec.answered = time.monotonic()
        if fut.cancelled():
            rec.error = "cancelled"
            return
        exc = fut.exception()
        if exc is not None:
            rec.error = f"{type(exc).__name__}: {exc}"
            return
        result = fut.result()
        rec.status = result.status
        rec.broker_name = result.message_queue.broker_name
        rec.queue_id = result.message_queue.queue_id
        rec.queue_offset = result.queue_offset

    async def _run(self) -> None:
        period = 1.0 / self.rate
        next_at = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            while next_at <= now and len(self._futures) < self.max_inflight:
                self.send_one()
                next_at += period
            if next_at <= now:  # at the in-flight cap: do not build up a burst to catch up later
                next_at = now + period
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=max(0.005, next_at - time.monotonic()))
            except TimeoutError:
                pass

    async def wait_started(self, count: int, timeout_s: float = 20.0) -> None:
        """Until ``count`` sends have started (answered or not)."""
        await async_wait_until(lambda: len(self.sends) >= count, timeout_s,
                               lambda: f"{count} sends started (so far {self.status_counts()})", 0.05)

    async def stop(self, answer_timeout_s: float = 30.0) -> None:
        """Stop sending, wait (bounded) for every answer, close the producer."""
        self._stop.set()
        if self._task is not None:
            await self._task
        if self._futures:
            await asyncio.wait(list(self._futures), timeout=answer_timeout_s)
        await self.producer.stop(timeout_s=5.0)

    # views ------------------------------------------------------------------------------------------------
    def with_status(self, *statuses: SendStatus) -> dict[str, Send]:
        return {k: s for k, s in self.sends.items() if s.status in statuses}

    def status_counts(self, sends=None) -> dict[str, int]:
        sends = self.sends.values() if sends is None else sends
        return dict(Counter(s.status.value if s.status else ("pending" if s.pending else "error") for s in sends))


class RecordingConsumer:
    """A PushConsumer of ``group`` on ``topic`` that records every delivery; ``delay_s`` throttles it.

    A delivery's broker is named from its store host: by ``broker_by_host`` (IP -> brokerName, for clusters whose
    brokers share ports, as controller mode's compose file) when given, else by port (docker-compose.yml)."""

    def __init__(
        self,
        group: str,
        topic: str,
        *,
        name: str = "c",
        delay_s: float = 0.0,
        deliveries: list[Delivery] | None = None,
        namesrv_addr: str = NAMESRV_ADDR,
        broker_by_host: dict[str, str] | None = None,
        **kwargs,
    ) -> None:
        kwargs.setdefault("consume_from_where", ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET)
        kwargs.setdefault("poll_name_server_interval_s", 5.0)
        kwargs.setdefault("persist_interval_s", 1.0)
        kwargs.setdefault("suspend_ms", 2000)
        kwargs.setdefault("pull_retry_delay_s", 0.5)
        kwargs.setdefault("avoid_failed_broker_s", 3.0)
        self.name = name
        self.delay_s = delay_s
        self.deliveries = [] if deliveries is None else deliveries
        self.broker_by_host = broker_by_host
        self.consumer = PushConsumer(group, namesrv_addr, instance_name=unique(name), **kwargs)
        self.consumer.subscribe(topic, "*")
        self.consumer.register_message_listener(self._listen)

    async def _listen(self, msgs) -> ConsumeStatus:
        now = time.monotonic()
        for m in msgs:
            if self.broker_by_host is not None:
                broker = self.broker_by_host.get(m.store_host[0], f"?{m.store_host[0]}")
            else:
                broker = BROKER_BY_PORT.get(m.store_host[1], f"?{m.store_host[1]}")
            self.deliveries.append(Delivery(m.body.decode(), broker, m.queue_id, m.queue_offset, now, self.name))
        if self.delay_s:
            await asyncio.sleep(self.delay_s * len(msgs))  # throttles the consumer (a paced load, not a wait)
        return ConsumeStatus.CONSUME_SUCCESS

    async def start(self) -> RecordingConsumer:
        await self.consumer.start()
        return self

    async def stop(self) -> None:
        await self.consumer.stop()


# -- checker ------------------------------------------------------------------------------------------------
@dataclass
class Verdict:
    attempted: int
    acked: int
    weak: int
    info: int
    consumed: int
    lost: list[str] = field(default_factory=list)  # SEND_OK and never consumed
    weak_lost: list[str] = field(default_factory=list)
    recovered: int = 0  # weak or unanswered, consumed all the same
    unexpected: list[str] = field(default_factory=list)  # consumed, never sent
    duplicated: dict[str, int] = field(default_factory=dict)  # id -> deliveries beyond the first

    @property
    def duplicates(self) -> int:
        return sum(self.duplicated.values())

    def summary(self) -> str:
        return (
            f"attempted={self.attempted} acked={self.acked} weak={self.weak} info={self.info} "
            f"consumed={self.consumed} lost={len(self.lost)} weak_lost={len(self.weak_lost)} "
            f"recovered={self.recovered} unexpected={len(self.unexpected)} duplicated={self.duplicates}"
            + (f" lost e.g. {sorted(self.lost)[:10]}" if self.lost else "")
            + (f" unexpected e.g. {sorted(self.unexpected)[:10]}" if self.unexpected else "")
        )


def check(sends: dict[str, Send], deliveries: list[Delivery], prefix: str | None = None) -> Verdict:
    """reliability.md §8: lost = acked − consumed; weak and unanswered sends are indeterminate."""
    counts = Counter(d.id for d in deliveries if prefix is None or d.id.startswith(prefix))
    consumed = set(counts)
    acked = {k for k, s in sends.items() if s.status is SendStatus.SEND_OK}
    weak = {k for k, s in sends.items() if s.status in WEAK}
    info = set(sends) - acked - weak
    return Verdict(
        attempted=len(sends),
        acked=len(acked),
        weak=len(weak),
        info=len(info),
        consumed=len(consumed),
        lost=sorted(acked - consumed),
        weak_lost=sorted(weak - consumed),
        recovered=len((weak | info) & consumed),
        unexpected=sorted(consumed - set(sends)),
        duplicated={k: n - 1 for k, n in counts.items() if n > 1},
    )


async def drain(
    producer: BackgroundProducer, deliveries: list[Delivery], timeout_s: float, *, quiet_s: float = 2.0, what: str = ""
) -> None:
    """Wait until every acked id was consumed, then until no delivery arrived for ``quiet_s``."""

    def missing() -> set[str]:
        seen = {d.id for d in deliveries}
        return {k for k, s in producer.sends.items() if s.status is SendStatus.SEND_OK and k not in seen}

    await async_wait_until(
        lambda: not missing(),
        timeout_s,
        lambda: f"{what}every SEND_OK message consumed; still missing {len(missing())}: {sorted(missing())[:10]}",
        interval_s=0.25,
    )
    # Then a quiet window, deliberately timed: a late redelivery or duplicate has no event to wait for, so the
    # check sees what arrives within quiet_s of the last delivery (a lower bound on listening; load only lengthens it).
    last = len(deliveries)
    quiet_since = time.monotonic()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() - quiet_since < quiet_s and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
        if len(deliveries) != last:
            last = len(deliveries)
            quiet_since = time.monotonic()


# -- broker metrics, read inside the containers (port 5557 is not published) -------------------------------
_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

METRICS_SCRIPT = (
    "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:5557/metrics',timeout=5).read().decode())"
)


def metric_sum(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m or m.group("name") != name:
            continue
        have = dict(_LABEL.findall(m.group("labels") or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group("value"))
    return total


def broker_metrics(cluster, service: str) -> str:
    return cluster.run("exec", "-T", service, "python", "-c", METRICS_SCRIPT, timeout=30).stdout


# -- cluster state ------------------------------------------------------------------------------------------
MASTERS = {name: f"127.0.0.1:{listen}" for name, broker_id, listen, _ in BROKERS.values() if broker_id == 0}
SLAVES = {name: f"127.0.0.1:{listen}" for name, broker_id, listen, _ in BROKERS.values() if broker_id == 1}


def run_async(fn, *args, **kwargs):
    """Run ``fn(*args)`` (a coroutine function) to completion on a private loop in a worker thread."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, fn(*args, **kwargs)).result()


async def _whole_state(admin) -> str | None:
    """None when every broker is registered and both slaves replicate; else what is missing."""
    info = await admin.cluster_info()
    table = {name: dict(data.broker_addrs) for name, data in info.broker_addr_table.items()}
    for name, master in MASTERS.items():
        want = {0: master, 1: SLAVES[name]}
        if table.get(name) != want:
            return f"nameserver lists {name} as {table.get(name)}, want {want}"
    for name, addr in MASTERS.items():
        status = await admin.ha_status(addr)
        states = [s.state for s in status.slaves]
        if "OK" not in states:
            return f"master {name} ({addr}) sees slaves {states or 'none'}, want one OK"
    for name, addr in SLAVES.items():
        status = await admin.ha_status(addr)
        if not status.connected:
            return f"slave of {name} ({addr}) is not connected to its master"
    return None


async def await_whole(timeout_s: float = 60.0) -> None:
    """Wait until every broker is registered and both master/slave pairs replicate (HA status OK)."""
    from client import AdminClient

    last = ["not asked yet"]

    async def whole() -> bool:
        try:
            last[0] = await _whole_state(admin) or ""
        except Exception as exc:  # noqa: BLE001 - a broker still starting: ask again
            last[0] = f"{type(exc).__name__}: {exc}"
        return last[0] == ""

    async with AdminClient(NAMESRV_ADDR, timeout_s=3.0) as admin:
        await async_wait_until(whole, timeout_s, lambda: f"cluster whole and replicating; last: {last[0]}", 0.5)


async def await_slaves_know(topics=(), groups=(), timeout_s: float = 30.0, brokers=tuple(SLAVES)) -> None:
    """Wait until the slaves of ``brokers`` took these topics and groups from their masters (slave sync)."""
    from client import AdminClient

    async with AdminClient(NAMESRV_ADDR, timeout_s=3.0) as admin:

        async def known() -> bool:
            for addr in (SLAVES[b] for b in brokers):
                have_topics = {c.topic_name for c in (await admin.all_topic_configs(addr)).topic_configs}
                have_groups = {g.group_name for g in (await admin.all_subscription_groups(addr)).groups}
                if not set(topics) <= have_topics or not set(groups) <= have_groups:
                    return False
            return True

        await async_wait_until(
            known,
            timeout_s,
            f"slaves of {list(brokers)} synced topics {list(topics)} and groups {list(groups)} from their masters",
            0.5,
        )


async def await_caught_up(broker: str, timeout_s: float = 30.0) -> int:
    """Wait until ``broker``'s slave holds its master's whole commitlog; returns that end offset."""
    from client import AdminClient

    last = ["not asked yet"]
    async with AdminClient(NAMESRV_ADDR, timeout_s=3.0) as admin:

        async def equal() -> int:
            m = (await admin.ha_status(MASTERS[broker])).commitlog_max_offset
            s = (await admin.ha_status(SLAVES[broker])).commitlog_max_offset
            last[0] = f"master {m}, slave {s}"
            return m if m == s else 0

        return await async_wait_until(
            equal, timeout_s, lambda: f"{broker}'s slave caught up with its master; last: {last[0]}", 0.2
        )
