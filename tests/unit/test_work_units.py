"""The units tests/conftest.py hands to xdist's workers: what must not overlap shares one unit."""

from tests.conftest import unit_of


def test_every_system_test_and_the_default_ports_test_share_the_host_ports_unit():
    for nodeid in ("tests/system/test_cluster_up.py::test_x", "tests/system/test_swarm.py::test_y[a::b]",
                   "tests/integration/broker/test_default_ports.py::test_z[listenPort]"):
        assert unit_of(nodeid) == "host-ports"


def test_spark_tests_share_one_unit_and_any_other_test_goes_with_its_module():
    assert unit_of("tests/spark/test_batch.py::test_a") == unit_of("tests/spark/test_streaming.py::test_b") == "spark"
    for module in ("tests/integration/broker/test_send_pull.py", "tests/integration/broker/test_default_ports_x.py"):
        assert unit_of(f"{module}::test_c[1]") == module
