"""Harness code shared by the tests and the benchmarks, and part of neither the product nor the tests.

``bench/`` must not import ``tests/``; what both need lives here: the chaos history checker (``checker``), the
chaos workload, faults and schedules (``chaos``), and the input-fuzz targets (``fuzz_targets``). Nothing here is
installed with pyrmq (pyproject lists the product packages only) and the product never imports it.
"""
