"""Chaos runs against real processes: the cluster and its faults, the workload, and the schedules that combine
them; ``harness.checker`` judges the history. Used by the tests/chaos tier and by bench/chaos.py."""
