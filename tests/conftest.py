"""How the suite shares this machine when it runs on several workers (``make test`` runs ``pytest -n 2``).

Each work unit goes to one worker as a whole, its tests in collection order. A unit is a module: a module's tests
share its module-scoped processes (a nameserver, a broker group), which two workers would each start again. Two
sets are larger units, because their tests must not overlap at all:
- ``host-ports``: the system tier's compose cluster and swarm stack publish fixed host ports (9876, 10911, ...),
  and so does the test that starts a cluster on RocketMQ's default ports.
- ``spark``: one Spark session (a JVM) serves every Spark test; two would halve each other's CPU on two cores.
The units are given to xdist as the scopes of its load-scope scheduler (xdist's ``loadgroup`` markers cannot carry
them: pytest 9.2 no longer lets xdist rename a node id). Without ``-n`` the suite runs in one process as collected.

Every test also fails when a server logged a programming error while it ran (``harness.pytest_log_check``).
"""

from __future__ import annotations

pytest_plugins = ("harness.pytest_log_check",)

SHARED = {
    "host-ports": ("tests/system/", "tests/integration/broker/test_default_ports.py"),
    "spark": ("tests/spark/",),
}


def unit_of(nodeid: str) -> str:
    """The work unit of a test, from its node id (``tests/.../test_x.py::test_y[param]``)."""
    module = nodeid.split("::", 1)[0]
    for name, prefixes in SHARED.items():
        if module.startswith(prefixes):  # a directory ends with "/", a module path is matched whole
            return name
    return module


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class SharedUnits(LoadScopeScheduling):
        """xdist's load-scope scheduling, with ``unit_of`` as the scope."""

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return SharedUnits(config, log)
