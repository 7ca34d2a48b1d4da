"""System tier: the compose cluster of docker-compose.yml, brought up once per session.

Skipped only when no Docker engine is reachable. Otherwise a missing compose tool, an image that does not
build, a busy host port or a service that does not become healthy is a failure, with the services' logs.

Environment:
- ``PYRMQ_BASE_IMAGE``: base image for the build (default: what deploy/images/base/build-base.sh picks or builds)
- ``PYRMQ_SKIP_IMAGE_BUILD=1``: use the pyrmq-namesrv/pyrmq-broker images as they are (``make images`` built them)
- ``PYRMQ_KEEP_CLUSTER=1``: leave the cluster running after the session (``docker compose -p <project> down -v``)
- ``PYRMQ_SYSTEM_PROJECT=<name>``: use that running compose project of this file instead of building and starting
  one (no build, no ``up``, no ``down``): for iterating on a test

test_controller_compose.py runs docker-compose.controller.yml, a cluster of its own on a subnet of its own (no host
ports), for its module only (``compose up`` builds pyrmq-etcd there if it is missing).

test_swarm.py deploys the same file as a swarm stack, which publishes the same host ports: its tests run after
every other system test, and take the session's compose cluster down first.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from tests.system.cluster import (
    ClusterError,
    ComposeCluster,
    base_image,
    build_images,
    busy_host_ports,
    compose_command,
    docker_engine_reachable,
)


SWARM_MODULE = "test_swarm.py"
_SESSION: dict = {}  # the session's compose cluster while it runs ("cluster", "failed_before")


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    mine = [i for i, item in enumerate(items) if here in Path(str(item.fspath)).parents]
    for i in mine:
        items[i].add_marker(pytest.mark.system)
        # Building the images and bringing the cluster up counts towards the first test's time.
        items[i].add_marker(pytest.mark.timeout(1800))
    # The swarm tests after the other system tests (they need the compose cluster's host ports).
    swarm = [items[i] for i in mine if Path(str(items[i].fspath)).name == SWARM_MODULE]
    others = [items[i] for i in mine if Path(str(items[i].fspath)).name != SWARM_MODULE]
    if swarm and others:
        rest = [item for item in items if Path(str(item.fspath)).name != SWARM_MODULE or item not in swarm]
        at = rest.index(others[-1]) + 1
        items[:] = rest[:at] + swarm + rest[at:]


def _report(config, text: str) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(text)


@pytest.fixture(scope="session")
def images() -> dict[str, str]:
    """The images every system test runs (deploy/images/build.sh, unless PYRMQ_SKIP_IMAGE_BUILD=1); the env the
    compose tool and the stack need (the base image)."""
    if not docker_engine_reachable():
        pytest.skip("no Docker engine reachable")
    env = {"BROKER_IP1": "127.0.0.1", "PYRMQ_PUBLISH_HOST": "127.0.0.1"}
    try:
        env["PYRMQ_BASE_IMAGE"] = base_image()
        if os.environ.get("PYRMQ_SKIP_IMAGE_BUILD") != "1":
            build_images(env)
    except ClusterError as exc:
        pytest.fail(str(exc))
    return env


def _finish(request, c: ComposeCluster, failed_before: int) -> None:
    """Keep the logs when a test failed, then take the cluster down (unless PYRMQ_KEEP_CLUSTER=1)."""
    if _SESSION.get("cluster") is not c:
        return  # already finished
    del _SESSION["cluster"]
    if request.session.testsfailed > failed_before:
        path = Path(tempfile.gettempdir()) / f"{c.project}.log"
        path.write_text(c.logs())
        _report(request.config, f"\nsystem tests failed: logs of {c.project} in {path}")
    if os.environ.get("PYRMQ_KEEP_CLUSTER") == "1":
        _report(request.config, f"\nleft {c.project} running: {' '.join(c.compose)} -p {c.project} down -v")
    else:
        c.down()


@pytest.fixture(scope="session")
def cluster(request):
    if not docker_engine_reachable():
        pytest.skip("no Docker engine reachable")
    compose = compose_command()
    if compose is None:
        pytest.fail("a Docker engine is reachable but neither `docker compose` nor `docker-compose` is installed")
    if os.environ.get("PYRMQ_SYSTEM_PROJECT"):
        c = ComposeCluster(compose=compose, project=os.environ["PYRMQ_SYSTEM_PROJECT"])
        try:
            c.wait_healthy(30)
        except ClusterError as exc:
            pytest.fail(f"PYRMQ_SYSTEM_PROJECT={c.project}: {exc}")
        yield c
        return
    busy = busy_host_ports()
    if busy:
        pytest.fail(f"host ports {busy} are in use (another pyrmq cluster running?); the compose file publishes them")

    env = request.getfixturevalue("images")
    c = ComposeCluster(compose=compose, env=env)
    failed_before = request.session.testsfailed
    try:
        c.up()
    except ClusterError as exc:
        logs = c.logs(tail=200)
        c.down()
        pytest.fail(f"compose cluster {c.project} did not come up: {exc}\n--- logs (last 200 lines each) ---\n{logs}")
    _report(request.config, f"\ncompose cluster {c.project} is up ({' '.join(compose)})")
    _SESSION["cluster"] = c
    _SESSION["failed_before"] = failed_before
    yield c
    _finish(request, c, failed_before)


@pytest.fixture
def no_compose_cluster(request, images):
    """No compose cluster of this session holds the host ports: the session's is finished here (logs kept when a
    test failed), so the swarm tests that use this run last (pytest_collection_modifyitems)."""
    c = _SESSION.get("cluster")
    if c is not None:
        _finish(request, c, _SESSION["failed_before"])
    return images


@pytest.fixture(scope="session")
def topics(cluster) -> dict[str, str]:
    """The tests' topics, created once through mqctl right after the cluster came up, so the slaves' metadata
    sync (every 10 s) runs while the first tests wait for replication instead of in every test.

    Every topic has 4 queues on broker-a and 4 on broker-b, except ``only_a``: 4 on broker-a alone, so every
    send to it goes to the SYNC_MASTER.
    """
    from tests.system.harness import MASTERS, await_slaves_know, ok, run_async, unique

    names = {
        "basic": unique("sys_basic"),
        "sdk": unique("sys_sdk"),
        "slave_read": unique("sys_slave_read"),
        "master_kill": unique("sys_master_kill"),
        "only_a": unique("sys_only_a"),
    }
    for key, topic in names.items():
        where = ["-b", MASTERS["broker-a"]] if key == "only_a" else ["-c", "DefaultCluster"]
        ok("updateTopic", *where, "-t", topic, "-r", "4", "-w", "4")
    run_async(await_slaves_know, [t for k, t in names.items() if k != "only_a"], (), 40)
    run_async(await_slaves_know, [names["only_a"]], (), 40, ("broker-a",))
    return names


@pytest.fixture
def whole(cluster, topics):
    """Each test starts on a whole cluster: every broker registered, both slaves replicating (bounded wait).

    Compose starts the slaves with their masters, and a slave learns its master's HA address from its next
    registration (every 30 s), so right after ``up`` this can take up to ~30 s.
    """
    from tests.system.harness import await_whole, run_async

    run_async(await_whole, 60)
    return cluster
