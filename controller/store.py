"""The controller's etcd adapter: group states changed only by compare-and-swap, and the active-controller lease.

Keys (``prefix`` is ``controllerStorePathPrefix``, default ``/pyrmq``):

    <prefix>/groups/<brokerName>                 GroupState JSON (controller.state); brokerNames are one namespace
                                                 across clusters, as in RocketMQ's controller (requests name only it)
    <prefix>/controller/active                   {"id": ..., "address": ...} of the active instance, on its lease

Consensus is etcd's, never ours. A group state is written only by ``cas_group``: one transaction that succeeds only
if the key's ``mod_revision`` is still the one the caller read (0: the key must not exist yet) **and** the active
key's ``create_revision`` is still the caller's own (``Fence``). A controller that lost its lease, whose key was
then created again by another instance, therefore cannot write anything, however late its request arrives; a
decision taken on a state someone changed meanwhile is refused too. ``CasRefused`` says which compare failed.

The active instance is chosen by ``campaign``: a transaction "if create_revision(active key) == 0 then put it on my
lease". The lease lasts ``ttl_s``; ``refresh`` renews it. ``Campaign.deadline`` is the local monotonic time
until which the lease is certainly still valid in etcd (the send time of the last renewal that etcd answered,
plus the TTL): an instance stops acting as active from that instant on, even if its renewal call is still hanging.

Every call is bounded by ``timeout_s``; a call that fails on transport (etcd down, majority lost, no answer)
raises ``StoreUnavailable`` and the next call tries the next endpoint (one aetcd client per endpoint).
aetcd 1.0.0 speaks etcd's v3 gRPC API with the grpcio/protobuf versions pyrmq already pins.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aetcd
import aetcd.exceptions
import orjson

from common.errors import PyrmqError
from controller.state import GroupState, StateError

log = logging.getLogger(__name__)
T = TypeVar("T")


class StoreUnavailable(PyrmqError):
    """etcd did not answer (down, majority lost, too slow)."""

    retriable = True


class CasRefused(PyrmqError):
    """A compare-and-swap lost: ``stale`` (the group changed since it was read) or ``fenced`` (not active)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Fence:
    """The active key as this instance created it: its create_revision proves the instance is still active."""

    key: bytes
    create_revision: int


@dataclass(frozen=True)
class ActiveInfo:
    instance_id: str
    address: str
    create_revision: int


class EtcdStore:
    def __init__(self, endpoints: list[tuple[str, int]], *, prefix: str = "/pyrmq", timeout_s: float = 2.0) -> None:
        self.endpoints = endpoints
        self.prefix = prefix.rstrip("/")
        self.timeout_s = timeout_s
        self._clients = [aetcd.Client(host=h, port=p, timeout=timeout_s) for h, p in endpoints]
        self._current = 0
        self.active_key = f"{self.prefix}/controller/active".encode()

    @property
    def endpoint(self) -> str:
        host, port = self.endpoints[self._current]
        return f"{host}:{port}"

    def describe(self) -> str:
        return ";".join(f"{h}:{p}" for h, p in self.endpoints)

    async def close(self) -> None:
        for client in self._clients:
            try:
                await asyncio.wait_for(client.close(), self.timeout_s)
            except (Exception, asyncio.TimeoutError) as exc:  # noqa: BLE001 - closing: nothing left to do
                log.debug("closing the etcd client failed: %s", exc)

    async def _call(self, what: str, fn: Callable[[aetcd.Client], Awaitable[T]]) -> T:
        index = self._current
        client = self._clients[index]
        try:
            return await asyncio.wait_for(fn(client), self.timeout_s + 0.5)
        except (aetcd.exceptions.ClientError, asyncio.TimeoutError, OSError) as exc:
            if len(self._clients) > 1 and self._current == index:
                self._current = (index + 1) % len(self._clients)
            text = str(exc).strip() or type(exc).__name__
            raise StoreUnavailable(
                f"etcd at {self.endpoint if len(self._clients) == 1 else self.describe()} did not answer {what}: "
                f"{text[:200]}",
                hint="check that a majority of the etcd members is up and reachable (controllerStoreEtcdEndpoints)",
            ) from None

    # groups -------------------------------------------------------------------------------------------------
    def group_key(self, broker_name: str) -> bytes:
        return f"{self.prefix}/groups/{broker_name}".encode()

    def _decode(self, key: bytes, value: bytes) -> GroupState | None:
        try:
            return GroupState.from_json(value)
        except StateError as exc:
            log.error("etcd key %s holds no valid group state (%s); it is left alone", key.decode(), exc)
            return None

    async def get_group(self, broker_name: str) -> tuple[GroupState | None, int]:
        """(state, mod_revision); (None, 0) when the group is unknown."""
        key = self.group_key(broker_name)
        got = await self._call(f"a read of {key.decode()}", lambda c: c.get(key))
        if got is None:
            return None, 0
        state = self._decode(key, got.value)
        if state is None:
            raise StoreUnavailable(f"etcd key {key.decode()} holds no valid group state",
                                   hint="inspect it with etcdctl get; delete it only if the group is gone")
        return state, got.mod_revision

    async def list_groups(self) -> list[tuple[GroupState, int]]:
        prefix = f"{self.prefix}/groups/".encode()
        found = await self._call("a scan of the groups", lambda c: c.get_prefix(prefix))
        out = []
        for kv in found:
            state = self._decode(kv.key, kv.value)
            if state is not None:
                out.append((state, kv.mod_revision))
        return out

    async def cas_group(self, state: GroupState, expected_revision: int, fence: Fence | None) -> int:
        """Write ``state`` if its key is still at ``expected_revision`` and ``fence`` still holds; the new revision."""
        state.check()
        key = self.group_key(state.broker_name)
        value = state.to_json()

        async def txn(c: aetcd.Client) -> tuple[bool, list[Any]]:
            compare = [c.transactions.mod(key) == expected_revision]
            if fence is not None:
                compare.append(c.transactions.create(fence.key) == fence.create_revision)
            return await c.transaction(
                compare=compare,
                success=[c.transactions.put(key, value)],
                failure=[c.transactions.get(key), c.transactions.get(self.active_key)],
            )

        ok, responses = await self._call(f"the write of {key.decode()}", txn)
        if ok:
            return int(responses[0].response_put.header.revision)
        current = responses[0][0][1].mod_revision if responses and responses[0] else 0
        active = responses[1][0][1].create_revision if len(responses) > 1 and responses[1] else 0
        if fence is not None and active != fence.create_revision:
            raise CasRefused("fenced", f"not the active controller any more: the write of {key.decode()} was fenced")
        raise CasRefused("stale", f"{key.decode()} changed since it was read (revision {expected_revision}, now "
                                  f"{current}); decide again on the new state")

    # the active controller ----------------------------------------------------------------------------------
    async def get_active(self) -> ActiveInfo | None:
        got = await self._call("a read of the active controller", lambda c: c.get(self.active_key))
        return None if got is None else _active_info(got.value, got.create_revision)

    async def grant(self, ttl_s: int) -> int:
        lease = await self._call("a lease grant", lambda c: c.lease(ttl_s))
        return int(lease.id)

    async def campaign(self, lease_id: int, instance_id: str, address: str) -> tuple[Fence | None, ActiveInfo | None]:
        """Become active if nobody is: (fence, None) on success, else (None, the active instance or None)."""
        value = orjson.dumps({"id": instance_id, "address": address})
        key = self.active_key

        async def txn(c: aetcd.Client) -> tuple[bool, list[Any]]:
            return await c.transaction(
                compare=[c.transactions.create(key) == 0],
                success=[c.transactions.put(key, value, lease_id), c.transactions.get(key)],
                failure=[c.transactions.get(key)],
            )

        ok, responses = await self._call("the campaign for the active controller", txn)
        got = responses[-1][0][1] if responses and responses[-1] else None
        if ok and got is not None:
            return Fence(key, int(got.create_revision)), None
        return None, None if got is None else _active_info(got.value, got.create_revision)

    async def refresh(self, lease_id: int) -> int:
        """Renew the lease; its remaining TTL in seconds (<= 0: it has expired)."""
        reply = await self._call("a lease renewal", lambda c: c.refresh_lease(lease_id))
        return int(reply.TTL) if reply is not None else 0

    async def revoke(self, lease_id: int) -> None:
        await self._call("a lease revocation", lambda c: c.revoke_lease(lease_id))


def _active_info(value: bytes, create_revision: int) -> ActiveInfo | None:
    try:
        obj = orjson.loads(value)
        return ActiveInfo(str(obj["id"]), str(obj["address"]), int(create_revision))
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


class Campaign:
    """One instance's hold on the active key: ``is_active`` is true only before the lease's local deadline."""

    def __init__(self, store: EtcdStore, instance_id: str, address: str, ttl_s: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.instance_id = instance_id
        self.address = address
        self.ttl_s = ttl_s
        self._clock = clock
        self.lease_id = 0
        self.fence: Fence | None = None
        self.deadline = 0.0
        self.active_info: ActiveInfo | None = None  # the active instance as last seen (another one, or us)

    @property
    def is_active(self) -> bool:
        return self.fence is not None and self._clock() < self.deadline

    async def step(self) -> bool:
        """One round: renew when active, else try to become active. True when active afterwards.

        A failed renewal, an expired lease or a passed deadline steps down at once (``fence`` cleared)."""
        if self.fence is not None:
            sent = self._clock()
            try:
                ttl = await self.store.refresh(self.lease_id)
            except StoreUnavailable:
                if self._clock() >= self.deadline:
                    self.step_down("the lease could not be renewed before it expired")
                raise
            if ttl <= 0:
                self.step_down("the lease expired in etcd")
                return False
            if self._clock() >= self.deadline:
                self.step_down("the lease's local deadline passed before the renewal answered")
                return False
            self.deadline = sent + ttl
            return True
        other = await self.store.get_active()
        if other is not None:  # one read per round while someone else is active
            self.active_info = other
            if other.instance_id == self.instance_id and self.lease_id:
                await self._drop_lease()  # our own key from before a step-down (etcd was away): free it now
            return False
        sent = self._clock()  # the lease's TTL runs from its grant: count from before we asked
        self.lease_id = await self.store.grant(self.ttl_s)
        fence, other = await self.store.campaign(self.lease_id, self.instance_id, self.address)
        if fence is None:
            self.active_info = other
            await self._drop_lease()
            return False
        self.fence = fence
        self.deadline = sent + self.ttl_s
        self.active_info = ActiveInfo(self.instance_id, self.address, fence.create_revision)
        log.info("controller %s is now the active controller (lease %x, ttl %d s)", self.instance_id,
                 self.lease_id, self.ttl_s)
        return True

    def step_down(self, why: str) -> None:
        if self.fence is not None:
            log.warning("controller %s steps down: %s", self.instance_id, why)
        self.fence = None
        self.deadline = 0.0
        self.active_info = None

    async def _drop_lease(self) -> None:
        lease, self.lease_id = self.lease_id, 0
        if lease:
            try:
                await self.store.revoke(lease)
            except StoreUnavailable:
                pass  # it expires by itself after the TTL

    async def resign(self) -> None:
        """Clean stop: give the active key up at once so another instance takes over without waiting the TTL."""
        self.step_down("stopping")
        await self._drop_lease()
