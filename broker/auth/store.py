"""Users and ACLs of one broker, kept in one JSON file (``{"users": [...], "acls": [...]}``, RocketMQ's UserInfo
and AclInfo shapes) written atomically with ``common.persist``. Lookups are dict reads on the event loop; a change
replaces the file off the loop before it is answered, so an acknowledged change survives a restart."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from broker.auth.model import Acl, AuthError, User, UserType
from common.persist import read_json, write_json_atomic

log = logging.getLogger(__name__)

MAX_USERS = 10_000
MAX_ACLS = 10_000


class AuthStore:
    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        self.users: dict[str, User] = {}
        self.acls: dict[str, Acl] = {}
        self.version = 0  # bumped on every change: caches of decisions compare it
        self.change_listeners: list = []  # called (no arguments) after a management change is persisted
        self._lock = asyncio.Lock()

    def load(self) -> None:
        if self.path is None:
            return
        data = read_json(self.path, default={}) or {}
        for raw in data.get("users") or []:
            try:
                user = User.from_json(raw)
            except AuthError as exc:
                log.error("%s: a user is skipped: %s", self.path, exc)
                continue
            self.users[user.username] = user
        for raw in data.get("acls") or []:
            try:
                acl = Acl.from_json(raw)
            except AuthError as exc:
                log.error("%s: an ACL is skipped: %s", self.path, exc)
                continue
            self.acls[acl.username] = acl

    def snapshot(self) -> dict:
        return {"users": [u.to_json(with_password=True) for u in self.users.values()],
                "acls": [a.to_json() for a in self.acls.values()]}

    def ensure_super_user(self, username: str, password: str) -> bool:
        """Create the init user unless a user of that name exists; whether the file must be written."""
        if username in self.users:
            return False
        self.users[username] = User(username, password, UserType.SUPER)
        return True

    def save_now(self) -> None:
        if self.path is not None:
            write_json_atomic(self.path, self.snapshot(), private=True)

    async def replace_all(self, users: list[User], acls: list[Acl]) -> bool:
        """Take a master's users and ACLs (the slave's metadata sync); False when they are what we hold. Persisted
        before it returns, so a restarted slave checks with the last copy before its first sync."""
        async with self._lock:
            new_users = {u.username: u for u in users}
            new_acls = {a.username: a for a in acls}
            if new_users == self.users and new_acls == self.acls:
                return False
            old = self.users, self.acls
            self.users, self.acls = new_users, new_acls
            self.version += 1
            if self.path is not None:
                try:
                    await asyncio.to_thread(write_json_atomic, self.path, self.snapshot(), private=True)
                except OSError:
                    self.users, self.acls = old
                    self.version += 1
                    raise
            return True

    async def change(self, mutate) -> object:
        """Apply ``mutate()`` (raising AuthError leaves everything as it was) and persist before returning."""
        async with self._lock:
            users, acls = dict(self.users), dict(self.acls)
            self.version += 1
            try:
                result = mutate()
            except AuthError:
                self.users, self.acls = users, acls
                raise
            if len(self.users) > MAX_USERS or len(self.acls) > MAX_ACLS:
                self.users, self.acls = users, acls
                raise AuthError(f"at most {MAX_USERS} users and {MAX_ACLS} ACLs; delete some first")
            snapshot = self.snapshot()
            if self.path is not None:
                try:
                    await asyncio.to_thread(write_json_atomic, self.path, snapshot, private=True)
                except OSError:
                    self.users, self.acls = users, acls  # not persisted: not applied either
                    self.version += 1
                    raise
        for listener in self.change_listeners:
            listener()
        return result
