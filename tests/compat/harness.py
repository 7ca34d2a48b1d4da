"""Helpers of the compatibility tier: a pyrmq broker group as processes, and Apache's C++ client driven from Python.

The client is PyPI ``rocketmq`` 0.4.4: ctypes bindings over rocketmq-client-cpp 1.0.1 (``librocketmq.so`` in the
wheel, x86_64 Linux only). ``rocketmq`` is imported lazily, so this module imports everywhere; ``LOAD_ERROR``
says why the client cannot run on this machine.

- The producer runs in the test thread: the library blocks, and must never run inside an event loop.
- Each push consumer runs in its own process (tests/compat/cpp_consumer.py), so a test can SIGSTOP it; its
  callbacks arrive on the library's threads and are written to a JSON-lines file that the test polls.
- The library logs to ``$HOME/logs/rocketmq-cpp/<pid>_rocketmq-cpp.log.0`` and reads HOME once, when the
  process's first client starts (``Set*LogPath`` changes nothing): HOME points into the tests' tmp dirs.
- mqctl is driven in-process like tests/integration/ctl does (``ok_json``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import platform
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from client.admin import AdminClient
from tests.integration.ctl.cli import ok_json
from harness.procs import REPO_ROOT, Broker, Namesrv
from harness.waiting import wait_until

CLUSTER = "DefaultCluster"
BROKER_NAME = "broker-cpp"
BOOT_S = 30.0
READY_S = 30.0  # registration, HA attach, metadata sync (slaveSynchronizeInterval 1 s) on a loaded 2-core box
SUPPORTED = sys.platform == "linux" and platform.machine() == "x86_64"
INSTALL_HINT = "rocketmq==0.4.4 is not installed in this venv; `make test` installs it with the test extras"


def _load_error() -> str | None:
    """Why the C++ client cannot run here, or None. A missing package on a supported platform is no reason to
    skip (``make test`` installs it): ``client_missing()`` makes those tests fail instead."""
    if not SUPPORTED:
        return (
            f"rocketmq==0.4.4 ships librocketmq.so for x86_64 Linux only; this is {sys.platform}/{platform.machine()}"
        )
    try:
        import rocketmq.client  # noqa: F401  (loads librocketmq.so through ctypes)
    except ModuleNotFoundError:
        return None
    except OSError as exc:
        return f"librocketmq.so from rocketmq==0.4.4 does not load here: {exc}"
    return None


def client_missing() -> bool:
    try:
        import rocketmq.client  # noqa: F401
    except ModuleNotFoundError:
        return True
    return False


LOAD_ERROR = _load_error()
_names = itertools.count()


CPP_ONS_CHANNEL = "ALIYUN"  # the channel the C++ client signs with by default (an extField like the others)


def unique(prefix: str) -> str:
    """A topic or group name of this run, in RocketMQ's alphabet [a-zA-Z0-9_-]."""
    return f"{prefix}_{uuid.uuid4().hex[:6]}_{next(_names)}"


# ---------------------------------------------------------------- cluster


@dataclass
class Group:
    """One nameserver and one broker group: a SYNC_MASTER (id 0) and its SLAVE (id 1), both readable."""

    namesrv: Namesrv
    master: Broker
    slave: Broker

    @property
    def namesrv_addr(self) -> str:
        return self.namesrv.addr

    def procs(self) -> list:
        return [self.slave, self.master, self.namesrv]

    def logs(self) -> str:
        return "\n".join(f"--- {p.log_path}:\n{p.log_tail(30)}" for p in self.procs())


def start_group(root: Path, *, namesrv_conf: dict | None = None, **conf: object) -> Group:
    """``conf`` adds broker keys (both brokers), ``namesrv_conf`` nameserver keys (ACL 2.0's, say)."""
    namesrv = Namesrv(root / "namesrv", **(namesrv_conf or {})).start(BOOT_S)
    started: list = [namesrv]
    try:
        # slaveReadEnable on the slave: a RocketMQ slave without it answers every pull with
        # PULL_RETRY_IMMEDIATELY + suggestWhichBrokerId=0, and consumers could not read it after a failover.
        common = {"slaveReadEnable": True, "slaveSynchronizeInterval": 1000, **conf}
        master = Broker(
            root / "master", name=BROKER_NAME, namesrv_addr=namesrv.addr, role="SYNC_MASTER", cluster=CLUSTER, **common
        )
        master.start(BOOT_S)
        started.append(master)
        slave = Broker(
            root / "slave",
            name=BROKER_NAME,
            namesrv_addr=namesrv.addr,
            role="SLAVE",
            broker_id=1,
            cluster=CLUSTER,
            haMasterAddress=master.ha_addr,
            **common,
        )
        slave.start(BOOT_S)
        started.append(slave)
        group = Group(namesrv, master, slave)
        wait_until(
            lambda: len(ok_json("clusterList", "-n", namesrv.addr)) == 2,
            READY_S,
            lambda: f"master and slave did not both register with the nameserver\n{group.logs()}",
        )
        wait_until(
            lambda: slave_in_sync(group),
            READY_S,
            lambda: f"haStatus never showed the slave attached and OK\n{group.logs()}",
        )
        return group
    except BaseException:
        for proc in reversed(started):
            proc.stop()
        raise


def slave_in_sync(group: Group) -> bool:
    """The SYNC_MASTER has its slave attached: without it a send answers SLAVE_NOT_AVAILABLE, not SEND_OK."""
    reports = ok_json("haStatus", "-n", group.namesrv_addr, "-b", group.master.addr)
    report = reports[0] if isinstance(reports, list) else reports
    return any(s["status"] == "OK" for s in report.get("slaves", []))


def create_topic(group: Group, topic: str, queues: int, credentials: tuple[str, str] | None = None) -> None:
    """mqctl updateTopic on the masters; then wait until the nameserver routes it with master and slave listed.
    The C++ producer would also send to an unknown topic (it falls back to TBW102's route); the tests create
    theirs so the queue count is known."""
    ok_json("updateTopic", "-n", group.namesrv_addr, "-c", CLUSTER, "-t", topic, "-r", str(queues), "-w", str(queues))

    def routed() -> bool:
        route = ok_json("topicRoute", "-n", group.namesrv_addr, "-t", topic)
        addrs = {a for b in route["brokerDatas"] for a in b["brokerAddrs"].values()}
        nums = [q["readQueueNums"] for q in route["queueDatas"]]
        return nums == [queues] and {group.master.addr, group.slave.addr} <= addrs

    wait_until(routed, READY_S, lambda: f"topicRoute never listed {topic} with {queues} queues on master and slave")
    # The slave learns topics by its metadata sync (every 10 s); until then it answers TOPIC_NOT_EXIST to pulls, so
    # a test that kills the master must not start before the slave knows the topic.
    wait_until(
        lambda: slave_knows_topic(group, topic, credentials),
        READY_S,
        lambda: f"the slave {group.slave.addr} never synced topic {topic} from its master",
        interval_s=0.5,
    )


def slave_knows_topic(group: Group, topic: str, credentials: tuple[str, str] | None = None) -> bool:
    async def ask() -> bool:
        async with AdminClient(group.namesrv_addr, credentials=credentials) as admin:
            configs = await admin.all_topic_configs(group.slave.addr)
        return any(c.topic_name == topic for c in configs.topic_configs)

    return asyncio.run(ask())


def progress(group: Group, consumer_group: str | None, topic: str | None = None) -> dict | list:
    """``mqctl consumerProgress --json``: per queue of one group (-g), or one row per group without it."""
    args = ["consumerProgress", "-n", group.namesrv_addr]
    if consumer_group:
        args += ["-g", consumer_group]
    if topic:
        args += ["-t", topic]
    return ok_json(*args)


# ---------------------------------------------------------------- C++ clients


class CppProducer:
    """A started ``rocketmq.client.Producer`` with its own group and instance name."""

    def __init__(self, namesrv_addr: str, home: Path, group: str | None = None,
                 credentials: tuple[str, str] | None = None) -> None:
        from rocketmq.client import Producer
        from rocketmq.ffi import dll

        self.group = group or unique("PG_cpp")
        self.producer = Producer(self.group, timeout=10_000)  # send timeout, ms (the library's default: 3000)
        self.producer.set_namesrv_addr(namesrv_addr)
        if credentials is not None:  # ACL: every request signed (AccessKey, OnsChannel, Signature)
            self.producer.set_session_credentials(*credentials, CPP_ONS_CHANNEL)
        # The wrapper has set_instance_name for push consumers only; the C API has it for producers too. One
        # instance per producer: clients of one process with one instance name share an MQClientFactory
        # (clientId "<pid>-<ip>@<instance>").
        dll.SetProducerInstanceName(self.producer._handle, self.group.encode())
        previous = os.environ.get("HOME")
        os.environ["HOME"] = str(home)  # read by the C++ logger when the process's first client starts
        try:
            self.producer.start()
        finally:
            if previous is None:
                os.environ.pop("HOME", None)
            else:
                os.environ["HOME"] = previous
        self.home = home

    def send(self, topic: str, key: str, tags: str, body: str, queue: int | None = None):
        """send_sync; with ``queue``, send_orderly to queue ``queue % queueCount`` (the wrapper's default selector).
        Returns the wrapper's SendResult(status, msg_id, offset): msg_id is the UNIQ_KEY, offset the queue offset."""
        from rocketmq.client import Message

        msg = Message(topic)
        msg.set_keys(key)
        msg.set_tags(tags)
        msg.set_body(body)  # a C string: no NUL bytes (the wrapper uses SetMessageBody, not SetByteMessageBody)
        if queue is None:
            return self.producer.send_sync(msg)
        return self.producer.send_orderly(msg, queue)

    def shutdown(self) -> None:
        self.producer.shutdown()

    def log_tail(self, lines: int = 30) -> str:
        """The end of this process's C++ log (all producers of the process share it)."""
        path = self.home / "logs" / "rocketmq-cpp" / f"{os.getpid()}_rocketmq-cpp.log.0"
        if not path.exists():
            return f"(no C++ log at {path})"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class CppConsumer:
    """tests/compat/cpp_consumer.py in a subprocess; its events are read back from a JSON-lines file."""

    def __init__(self, workdir: Path, namesrv_addr: str, group: str, topic: str, expression: str,
                 credentials: tuple[str, str] | None = None) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        self.group, self.topic, self.expression = group, topic, expression
        self.events_path = workdir / "events.jsonl"
        self.stdout_path = workdir / "consumer.out"
        self.home = workdir / "home"
        self.home.mkdir(exist_ok=True)
        env = dict(os.environ)
        env.pop("NAMESRV_ADDR", None)
        env["HOME"] = str(self.home)
        env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        env["PYTHONUNBUFFERED"] = "1"
        with open(self.stdout_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.compat.cpp_consumer",
                    "--namesrv",
                    namesrv_addr,
                    "--group",
                    group,
                    "--topic",
                    topic,
                    "--expression",
                    expression,
                    "--instance",
                    group,
                    "--out",
                    str(self.events_path),
                ],
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(workdir),
                env=env,
            )
        # the credentials go through a pipe, not the command line (which every process listing shows)
        self.proc.stdin.write(json.dumps(list(credentials) if credentials else None).encode() + b"\n")
        self.proc.stdin.close()
        wait_until(self._started, 30, lambda: f"the C++ push consumer did not start\n{self.diagnostics()}")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def events(self) -> list[dict]:
        if not self.events_path.exists():
            return []
        lines = self.events_path.read_text(encoding="utf-8").split("\n")
        return [json.loads(line) for line in lines[:-1] if line]  # the last piece may be a line being written

    def _started(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"the consumer process exited with {self.proc.returncode}\n{self.diagnostics()}")
        return any(e["event"] == "started" for e in self.events())

    def messages(self) -> list[dict]:
        return [e for e in self.events() if e["event"] == "message"]

    def keys(self) -> list[str]:
        return [m["keys"] for m in self.messages()]

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.resume()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode

    def cpp_log_tail(self, lines: int = 40) -> str:
        logs = sorted((self.home / "logs" / "rocketmq-cpp").glob("*.log*"))
        if not logs:
            return "(no C++ log)"
        return "\n".join(logs[-1].read_text(errors="replace").splitlines()[-lines:])

    def diagnostics(self) -> str:
        out = self.stdout_path.read_text(errors="replace")[-3000:] if self.stdout_path.exists() else ""
        return f"consumer process output:\n{out}\nC++ log ({self.home}/logs/rocketmq-cpp) tail:\n{self.cpp_log_tail()}"
