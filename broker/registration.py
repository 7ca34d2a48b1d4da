"""Broker -> nameserver registration (RocketMQ BrokerController.registerBrokerAll + BrokerOuterAPI, spec §2.3).

- One registration at start, then every ``registerNameServerPeriod`` clamped to [10 s, 60 s] (RocketMQ's bounds;
  no test knob), and at once when a topic is created or changed (``register_now``). While a round fails, or a
  slave's reply names no master yet, the next round comes sooner (1 s, doubling up to the period).
- Each round goes to every nameserver in parallel and waits at most ``registerBrokerTimeoutMills``. The first
  successful reply gives the master's HA address and broker address (for a slave); they are passed to
  ``on_result(ha_server_addr, master_addr)`` after the round.
- The body is the full topic table with the DataVersion; when the broker is not read-write, every topic's
  permission is replaced by the broker's, as RocketMQ does.
- One ``KeepAlive`` stream per nameserver, pinged every 5 s and reopened with backoff when it breaks, so a
  nameserver drops this broker as soon as the process dies instead of after the 120 s silence expiry.
- A clean stop sends ``UnregisterBroker`` to every nameserver, then closes the streams.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import grpc

from broker.config import BrokerSettings
from broker.grpc.convert import data_version_pb, topic_config_pb
from broker.metadata.topics import TopicConfigManager
from common.service import Service
from remoting.channel import aio_channel
from remoting.codes import ResponseCode, describe
from remoting.pb import namesrv_pb2, namesrv_pb2_grpc

log = logging.getLogger(__name__)

PERIOD_MIN_MS = 10_000
PERIOD_MAX_MS = 60_000
KEEPALIVE_PING_S = 5.0
UNSETTLED_RETRY_S = 1.0  # first early re-registration while a slave has no master (doubles up to the period)
KEEPALIVE_BACKOFF_MAX_S = 10.0
UNREGISTER_TIMEOUT_S = 3.0


def register_period_ms(configured_ms: int) -> int:
    return max(PERIOD_MIN_MS, min(configured_ms, PERIOD_MAX_MS))


class RegistrationService(Service):
    def __init__(
        self,
        settings: BrokerSettings,
        topics: TopicConfigManager,
        on_result: Callable[[str, str], None],
    ) -> None:
        super().__init__("registration")
        self.settings = settings
        self.topics = topics
        self.on_result = on_result
        self.namesrv_addrs = settings.broker.namesrv_list
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._kick = asyncio.Event()
        self._keepalive_calls: dict[str, grpc.aio.StreamStreamCall] = {}
        self.rounds = 0
        self.last_success_ms = 0
        self.settled = False  # the last round succeeded and, on a slave, named a master

    # lifecycle ----------------------------------------------------------------------------------------------
    async def on_start(self) -> None:
        if not self.namesrv_addrs:
            log.warning("namesrvAddr is empty: this broker registers nowhere and no client can route to it")
            return
        self._channels = {addr: aio_channel(addr) for addr in self.namesrv_addrs}
        await self.register_all()
        self.spawn("periodic", self._periodic())
        for addr in self.namesrv_addrs:
            self.spawn(f"keepalive-{addr}", self._keep_alive(addr))

    async def on_stop(self) -> None:
        self._kick.set()
        if not self._channels:
            return
        await self.unregister_all()
        for call in self._keepalive_calls.values():
            call.cancel()

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()

    def register_now(self) -> None:
        """Ask for an immediate registration round (topic created or changed)."""
        self._kick.set()

    # registration -------------------------------------------------------------------------------------------
    def _request(self) -> namesrv_pb2.RegisterBrokerRequest:
        broker = self.settings.broker
        configs, version = self.topics.snapshot()
        perm = broker.broker_permission
        override = None if perm == 6 else perm
        return namesrv_pb2.RegisterBrokerRequest(
            cluster_name=broker.broker_cluster_name,
            broker_name=broker.broker_name,
            broker_addr=broker.broker_addr,
            broker_id=broker.broker_id,
            ha_server_addr=self.settings.ha_server_addr,
            data_version=data_version_pb(version),
            topic_configs=[topic_config_pb(c, override) for c in configs],
            broker_permission=perm,
        )

    async def register_all(self) -> bool:
        """One round to every nameserver; True when at least one accepted it."""
        request = self._request()
        timeout_s = self.settings.broker.register_broker_timeout_mills / 1000
        calls = {
            asyncio.ensure_future(
                namesrv_pb2_grpc.NameServerStub(channel).RegisterBroker(request, timeout=timeout_s)
            ): addr
            for addr, channel in self._channels.items()
        }
        first: namesrv_pb2.RegisterBrokerResponse | None = None
        done, pending = await asyncio.wait(calls, timeout=timeout_s)
        for task in pending:
            task.cancel()
            log.warning("registration with nameserver %s timed out after %.1fs", calls[task], timeout_s)
        # "first successful reply": the earliest in the configured nameserver order among those that answered.
        for task in sorted(done, key=lambda t: self.namesrv_addrs.index(calls[t])):
            addr = calls[task]
            try:
                reply = task.result()
            except grpc.aio.AioRpcError as exc:
                log.warning("registration with nameserver %s failed: %s %s", addr, exc.code().name, exc.details())
                continue
            if reply.code != ResponseCode.SUCCESS:
                log.warning("nameserver %s refused the registration: %s: %s", addr, describe(reply.code), reply.remark)
                continue
            if first is None:
                first = reply
        self.rounds += 1
        if first is None:
            self.settled = False
            return False
        self.last_success_ms = int(asyncio.get_running_loop().time() * 1000)
        # A slave that has no master yet keeps asking sooner than the period (see _periodic).
        self.settled = self.settings.role.is_master or bool(first.master_addr)
        self.on_result(first.ha_server_addr, first.master_addr)
        return True

    async def _periodic(self) -> None:
        """Register every period; sooner (1 s, doubling up to the period) while a round failed or a slave has no
        master in the reply. RocketMQ waits the full 30 s, so a slave started before its master leaves a
        SYNC_MASTER answering SLAVE_NOT_AVAILABLE for up to half a minute after both are up."""
        period_s = register_period_ms(self.settings.broker.register_name_server_period) / 1000
        retry_s = UNSETTLED_RETRY_S
        while not self.stopping:
            wait_s = period_s if self.settled else min(retry_s, period_s)
            try:
                await asyncio.wait_for(self._kick.wait(), timeout=wait_s)
            except TimeoutError:
                pass
            if self.stopping:
                return
            self._kick.clear()
            try:
                await self.register_all()
            except Exception:
                self.settled = False
                log.exception("registration round failed; next round in %.0fs", min(retry_s, period_s))
            retry_s = UNSETTLED_RETRY_S if self.settled else min(retry_s * 2, period_s)

    async def unregister_all(self) -> None:
        broker = self.settings.broker
        request = namesrv_pb2.UnregisterBrokerRequest(
            cluster_name=broker.broker_cluster_name,
            broker_name=broker.broker_name,
            broker_addr=broker.broker_addr,
            broker_id=broker.broker_id,
        )

        async def one(addr: str, channel: grpc.aio.Channel) -> None:
            try:
                await namesrv_pb2_grpc.NameServerStub(channel).UnregisterBroker(request, timeout=UNREGISTER_TIMEOUT_S)
            except grpc.aio.AioRpcError as exc:
                log.warning("unregister from nameserver %s failed: %s", addr, exc.code().name)

        await asyncio.gather(*(one(a, c) for a, c in self._channels.items()))

    # keep-alive streams -------------------------------------------------------------------------------------
    async def _pings(self):
        broker = self.settings.broker
        ping = namesrv_pb2.KeepAliveRequest(
            broker_addr=broker.broker_addr,
            broker_name=broker.broker_name,
            broker_id=broker.broker_id,
            cluster_name=broker.broker_cluster_name,
        )
        while True:
            yield ping
            if await self.sleep(KEEPALIVE_PING_S):
                return

    async def _keep_alive(self, addr: str) -> None:
        backoff_s = 0.5
        broken = False  # a previous stream ended: the nameserver may have restarted and forgotten us
        while not self.stopping:
            call = namesrv_pb2_grpc.NameServerStub(self._channels[addr]).KeepAlive(self._pings())
            self._keepalive_calls[addr] = call
            try:
                async for _ in call:
                    backoff_s = 0.5
                    if broken:
                        log.info("keep-alive stream to nameserver %s is open again; re-registering now", addr)
                        broken = False
                        self._kick.set()
                if self.stopping:
                    return
                log.warning("nameserver %s closed the keep-alive stream; reopening", addr)
                broken = True
            except grpc.aio.AioRpcError as exc:
                if self.stopping:
                    return
                if not broken:
                    log.warning("keep-alive stream to nameserver %s broke (%s); reopening", addr, exc.code().name)
                broken = True
            finally:
                self._keepalive_calls.pop(addr, None)
            if await self.sleep(backoff_s):
                return
            backoff_s = min(backoff_s * 2, KEEPALIVE_BACKOFF_MAX_S)
