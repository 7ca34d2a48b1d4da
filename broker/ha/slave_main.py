"""A replica-only process: one SLAVE MessageStore plus its HA client, no gRPC (benchmarks and HA tests).

``python -m broker.ha.slave_main --root DIR --master HOST:PORT [--file-size N] [--cluster C] [--broker-name B]
[--broker-id 1] [--auth-secret-file FILE]`` prints ``HA slave ready root=DIR`` once the store is up, replicates until
SIGTERM/SIGINT, then stops the store cleanly. A real broker process does the same through ``HAService``; this
one exists so a benchmark or test can put the slave in another process (and SIGSTOP it) without a nameserver.
The HA secret comes from a file (``haAuthSecretFile``), never from the command line, which any local user reads.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from broker.config import BrokerConfig, BrokerRole, BrokerSettings, MessageStoreConfig
from broker.ha.service import HAService
from broker.store.message_store import MessageStore
from common.log import setup_logging


def build_settings(args: argparse.Namespace) -> BrokerSettings:
    store = MessageStoreConfig(store_path_root_dir=args.root, broker_role=BrokerRole.SLAVE,
                               mapped_file_size_commit_log=args.file_size,
                               mapped_file_size_consume_queue=20 * 100_000, ha_master_address=args.master,
                               ha_auth_secret_file=args.auth_secret_file)
    broker = BrokerConfig(broker_cluster_name=args.cluster, broker_name=args.broker_name, broker_id=args.broker_id,
                          broker_ip1="127.0.0.1", listen_port=0)
    return BrokerSettings(broker=broker, store=store, source="<slave_main>")


async def run(args: argparse.Namespace) -> None:
    settings = build_settings(args)
    store = MessageStore(settings.store)
    ha = HAService(settings, store)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await store.start()
    await ha.start()
    print(f"HA slave ready root={args.root}", flush=True)
    await stop.wait()
    await ha.stop()
    await store.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m broker.ha.slave_main")
    p.add_argument("--root", required=True)
    p.add_argument("--master", required=True, help="master HA address host:port")
    p.add_argument("--file-size", type=int, default=1024 * 1024 * 1024)
    p.add_argument("--cluster", default="DefaultCluster")
    p.add_argument("--broker-name", default="broker-a")
    p.add_argument("--broker-id", type=int, default=1)
    p.add_argument("--auth-secret-file", default="", help="a file whose first line is the cluster's HA secret")
    p.add_argument("--log-level", default="WARNING")
    args = p.parse_args(argv)
    setup_logging(args.log_level)
    logging.getLogger("broker.ha").setLevel(args.log_level)
    asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
