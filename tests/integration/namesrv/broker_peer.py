"""A stand-in broker process that registers with a nameserver over one remoting connection, as a broker does, so a
test can SIGKILL it (a real connection reset) or SIGSTOP it (an open connection that goes silent).

Usage: ``python -m tests.integration.namesrv.broker_peer NS_ADDR CLUSTER BROKER_NAME BROKER_ADDR TOPIC PERIOD_MS``.
Registers as the group's master with TOPIC, prints ``registered <code>`` after the first answer, then registers
again every PERIOD_MS (0: never again, the connection stays open and silent). A registration that fails at the
transport level is retried next period over a new connection, as the broker's registration client does. Exits by
itself after 60 s so an orphan never lingers.
"""

from __future__ import annotations

import asyncio
import sys

from remoting.client import RemotingClient
from remoting.errors import RemotingError
from tests.integration.namesrv.conftest import Names, register

LIFETIME_S = 60.0


async def main(namesrv_addr: str, cluster: str, broker_name: str, broker_addr: str, topic: str, period_ms: str):
    names = Names()
    names.cluster, names.broker_name, names.master_addr, names.topic = cluster, broker_name, broker_addr, topic
    client = RemotingClient(name="broker-peer")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LIFETIME_S
    first = True
    while loop.time() < deadline:
        try:
            resp = await register(client, namesrv_addr, names, topics=[topic])
            if first:
                print(f"registered {resp.code}", flush=True)
                first = False
        except RemotingError as exc:
            print(f"registration failed: {exc}", flush=True)
        if int(period_ms) <= 0:
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            break
        await asyncio.sleep(int(period_ms) / 1000)
    await client.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:7]))
