"""Benchmarks: each module prints a table and writes JSON to bench/results/; they measure, never pass or fail."""
