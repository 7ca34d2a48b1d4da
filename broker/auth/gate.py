"""The check in front of every processor when ACL 2.0 is on (``RemotingServer.gate``): authentication, then
authorization. A refusal is NO_PERMISSION with a remark saying which check failed (never a secret or part of
one); a log line names who was refused, at most one per ``LOG_EVERY_S`` per server.

Authentication: the request carries ``AccessKey`` and ``Signature`` (``remoting.acl_signature``); the user must
exist and be enabled, and the signature must verify with its password. The inner client credentials
(``innerClientAuthenticationCredentials``) are accepted as a Super user. Authorization: Super users may do
anything; a Normal user needs every (resource, action) of ``broker.auth.actions.needs`` granted by its ACL.
"""

from __future__ import annotations

import logging

from broker.auth.actions import needs
from broker.auth.config import Credentials
from broker.auth.model import User, UserType, decide
from broker.auth.store import AuthStore
from common.log import RateLimitedLog
from remoting.acl_signature import ACCESS_KEY, verify
from remoting.codes import ResponseCode
from remoting.frame_codec import RemotingCommand, response_to

log = logging.getLogger(__name__)

LOG_EVERY_S = 5.0
MAX_ACCESS_KEY = 255
MAX_CACHED_DECISIONS = 4096  # (user, source IP, needs) -> decision; emptied when full or when the store changes


class AuthGate:
    def __init__(self, store: AuthStore, *, authentication: bool, authorization: bool,
                 inner: Credentials | None = None, name: str = "broker") -> None:
        self.store = store
        self.authentication = authentication
        self.authorization = authorization
        self.inner = inner
        self.name = name
        self.refused = 0
        self._log = RateLimitedLog(log, LOG_EVERY_S)
        self._decisions: dict[tuple, object] = {}
        self._decisions_version = -1

    def _user(self, access_key: str) -> User | None:
        inner = self.inner
        if inner is not None and access_key == inner.access_key:
            return User(access_key, inner.secret_key, UserType.SUPER)
        return self.store.users.get(access_key)

    def __call__(self, conn, cmd: RemotingCommand) -> RemotingCommand | None:
        """None when ``cmd`` may be served, else the refusal to answer with."""
        ext = cmd.ext or {}
        access_key = ext.get(ACCESS_KEY)
        if access_key is not None and (len(access_key) > MAX_ACCESS_KEY or not access_key.isprintable()):
            return self._refuse(conn, cmd, "?", "authentication failed: the AccessKey is not a user name")
        user = self._user(access_key) if access_key else None
        if self.authentication:
            if not access_key:
                return self._refuse(conn, cmd, "-", "authentication failed: the request is not signed (no AccessKey);"
                                                    " give the client a user's access key and secret key")
            if user is None:
                return self._refuse(conn, cmd, access_key, f"authentication failed: no user {access_key!r}")
            if not user.enabled:
                return self._refuse(conn, cmd, access_key, f"authentication failed: user {access_key!r} is disabled")
            if not verify(user.password, ext, cmd.body_bytes()):
                return self._refuse(conn, cmd, access_key, "authentication failed: the signature does not match "
                                    "(wrong secret key, or the request was changed after signing)")
        if self.authorization:
            if user is None:
                return self._refuse(conn, cmd, access_key or "-",
                                    "authorization failed: the request names no known user (AccessKey)")
            if user.user_type is UserType.SUPER:
                return None
            wanting = self._decide(user.username, needs(cmd), conn.peer.rsplit(":", 1)[0])
            if wanting is not None:
                resource, actions = wanting
                if not actions:
                    what = f"request code {cmd.code} is for Super users only"
                else:
                    what = f"{'/'.join(sorted(a.value for a in actions))} on {resource} is not granted"
                return self._refuse(conn, cmd, user.username,
                                    f"authorization failed: user {user.username!r}: {what}")
        return None

    def _decide(self, username: str, wanted: list | None, source_ip: str):
        """``decide`` for this user's ACL, remembered until the store changes (the same producer asks the same
        thing for every send: the policy walk is most of the check's cost)."""
        if self._decisions_version != self.store.version or len(self._decisions) >= MAX_CACHED_DECISIONS:
            self._decisions.clear()
            self._decisions_version = self.store.version
        key = (username, source_ip, None if wanted is None else tuple(wanted))
        try:
            return self._decisions[key]
        except KeyError:
            pass
        acl = self.store.acls.get(username)
        result = self._decisions[key] = decide(acl.entries if acl is not None else (), wanted, source_ip)
        return result

    def _refuse(self, conn, cmd: RemotingCommand, who: str, remark: str) -> RemotingCommand:
        self.refused += 1
        self._log.warning("%s refused code %d from %s (user %r): %s", self.name, cmd.code, conn.peer, who[:64],
                          remark)
        return response_to(cmd, ResponseCode.NO_PERMISSION, remark)
