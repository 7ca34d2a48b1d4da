"""Run every benchmark listed here, one after the other (never concurrently: they share the cores).

``python -m bench`` runs them all; ``python -m bench store_bench e2e_bench`` runs a subset. A module that cannot
run (missing dependency, failure) is reported and the others still run.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import traceback

MODULES = [
    "bench.remoting_bench",
    "bench.store_bench",
    "bench.broker_path_bench",
    "bench.index_bench",
    "bench.filter_bench",
    "bench.trace_bench",
    "bench.metrics_bench",
    "bench.metadata_storm_bench",
    "bench.replication_bench",
    "bench.failover_bench",
    "bench.controller_bench",
    "bench.controller_failover_bench",
    "bench.attack_ha",
    "bench.e2e_bench",
    "bench.rocketmq5_bench",
    "bench.deploy_bench",
    "bench.single_send_bench",
    "bench.scaling",  # the cost curve; about 40 min at its defaults (10 s points, a 5 GiB backlog)
    "bench.spark_bench",
    "bench.chaos",
    "bench.fuzz",
    "bench.attack_memory",
    "bench.tls_bench",
]


def _run(module) -> None:
    main = module.main
    if inspect.signature(main).parameters:
        main([])
        return
    saved = sys.argv
    sys.argv = [module.__name__]  # argparse-based mains read sys.argv: give them their defaults
    try:
        main()
    finally:
        sys.argv = saved


def main(argv: list[str] | None = None) -> int:
    only = set(argv if argv is not None else sys.argv[1:])
    failed = []
    for name in MODULES:
        if only and name.rsplit(".", 1)[-1] not in only:
            continue
        print(f"== {name}", flush=True)
        try:
            _run(importlib.import_module(name))
        except SystemExit as exc:
            if exc.code not in (0, None):
                failed.append(name)
        except Exception:  # noqa: BLE001 - one broken bench must not hide the others' numbers
            traceback.print_exc()
            failed.append(name)
    if failed:
        print(f"benchmarks that did not finish: {', '.join(failed)}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
