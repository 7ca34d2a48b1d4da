"""A stand-in broker process that holds one KeepAlive stream open, so a test can SIGKILL it and give the
nameserver a real connection reset. Usage: ``python -m tests.integration.namesrv.keepalive_peer NS_ADDR BROKER_ADDR``.
Prints ``open <code>`` once the first answer arrived, then pings every 200 ms; exits by itself after 60 s so an
orphan never lingers."""

from __future__ import annotations

import asyncio
import sys

from remoting.channel import aio_channel
from remoting.pb import namesrv_pb2, namesrv_pb2_grpc

LIFETIME_S = 60.0
PING_INTERVAL_S = 0.2


async def main(namesrv_addr: str, broker_addr: str) -> None:
    async with aio_channel(namesrv_addr) as channel:
        call = namesrv_pb2_grpc.NameServerStub(channel).KeepAlive()
        ping = namesrv_pb2.KeepAliveRequest(broker_addr=broker_addr)
        await call.write(ping)
        first = await call.read()
        print(f"open {first.code}", flush=True)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + LIFETIME_S
        while loop.time() < deadline:
            await asyncio.sleep(PING_INTERVAL_S)
            await call.write(ping)
            await call.read()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
