"""The check in front of every processor when ACL 2.0 is on: authentication, then authorization, shared by the
remoting ports (``RemotingServer.gate``: this object called with a connection and a request) and the gRPC v2 endpoint
(``broker.grpc_v2.auth``, which calls ``check``). A refusal says which check failed (never a secret or part of one);
on remoting it is NO_PERMISSION, as RocketMQ 5.3's AuthenticationPipeline and AuthorizationPipeline answer both
failures; a log line names who was refused, at most one per ``LOG_EVERY_S``.

Authentication: the request names a user (``AccessKey``) and carries a signature; the user must exist and be enabled,
and the signature must verify with its password. The inner client credentials (``innerClientAuthenticationCredentials``)
are accepted as a Super user. Failed authentications are counted per source address (``FailureThrottle``): an
address past its budget has every request refused at once, without a signature check, until it has waited.
Authorization: Super users may do anything; a Normal user needs every (resource, action) the request needs granted
by its ACL (``broker.auth.actions`` for remoting, ``broker.grpc_v2.auth`` for v2).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from broker.auth.actions import needs
from broker.auth.config import Credentials
from broker.auth.model import Need, User, UserType, decide
from broker.auth.store import AuthStore
from broker.auth.throttle import FailureThrottle
from common.log import RateLimitedLog
from remoting.acl_signature import ACCESS_KEY, verify
from remoting.codes import ResponseCode
from remoting.frame_codec import RemotingCommand, response_to

log = logging.getLogger(__name__)

LOG_EVERY_S = 5.0
MAX_ACCESS_KEY = 255
MAX_CACHED_DECISIONS = 4096  # (user, source IP, needs) -> decision; emptied when full or when the store changes


@dataclass(frozen=True)
class Refusal:
    authentication: bool  # True: who the caller is was not proven; False: the proven caller may not do it
    remark: str


def source_host(peer: str) -> str:
    """``1.2.3.4:5678`` -> ``1.2.3.4`` (``::1:5678`` -> ``::1``); the address failures are counted under."""
    return peer.rsplit(":", 1)[0] if ":" in peer else peer


def valid_access_key(access_key: str) -> bool:
    return len(access_key) <= MAX_ACCESS_KEY and access_key.isascii() and access_key.isprintable()


class AuthGate:
    def __init__(self, store: AuthStore, *, authentication: bool, authorization: bool,
                 inner: Credentials | None = None, name: str = "broker",
                 throttle: FailureThrottle | None = None) -> None:
        self.store = store
        self.authentication = authentication
        self.authorization = authorization
        self.inner = inner
        self.name = name
        self.refused = 0
        self.throttle = throttle if throttle is not None else FailureThrottle()  # an empty one has len 0
        self.clock: Callable[[], float] = time.monotonic
        self._log = RateLimitedLog(log, LOG_EVERY_S)
        self._block_log = RateLimitedLog(log, LOG_EVERY_S)
        self._decisions: dict[tuple, object] = {}
        self._decisions_version = -1

    def _user(self, access_key: str) -> User | None:
        inner = self.inner
        if inner is not None and access_key == inner.access_key:
            return User(access_key, inner.secret_key, UserType.SUPER)
        return self.store.users.get(access_key)

    def is_inner(self, access_key: str | None) -> bool:
        return self.inner is not None and bool(access_key) and access_key == self.inner.access_key

    # remoting ---------------------------------------------------------------------------------------------------
    def __call__(self, conn, cmd: RemotingCommand) -> RemotingCommand | None:
        """None when ``cmd`` may be served, else the refusal to answer with (NO_PERMISSION, RocketMQ's code)."""
        ext = cmd.ext or {}
        refusal = self.check(conn.peer, f"code {cmd.code}", ext.get(ACCESS_KEY),
                             lambda password: verify(password, ext, cmd.body_bytes(), cmd.version), lambda: needs(cmd))
        return None if refusal is None else response_to(cmd, ResponseCode.NO_PERMISSION, refusal.remark)

    # both protocols ---------------------------------------------------------------------------------------------
    def check(self, peer: str, what: str, access_key: str | None, verify_with: Callable[[str], bool],
              wanted: Callable[[], list[Need] | None], problem: str | None = None,
              authenticate: bool = True) -> Refusal | None:
        """None when the request may be served. ``verify_with(password)`` checks the request's signature;
        ``wanted()`` is what it needs granted; ``problem`` is an authentication failure the caller already found
        (a malformed header, a date-time too far away); ``authenticate=False``: the caller was proven before (a
        stream's later commands), authorize only."""
        host = source_host(peer)
        authentication = self.authentication and authenticate
        if authentication:
            wait_s = self.throttle.blocked(host, self.clock())
            if wait_s:
                return self._refuse(peer, what, access_key or "-", True,
                                    f"authentication refused: too many failed authentications from {host}; "
                                    f"fix the client's credentials and retry in {max(1, round(wait_s))} s")
        if access_key and not valid_access_key(access_key):
            return self._fail(peer, what, "?", "authentication failed: the AccessKey is not a user name "
                                               f"(1 to {MAX_ACCESS_KEY} printable ASCII characters)")
        user = self._user(access_key) if access_key else None
        if authentication:
            if problem is not None:
                return self._fail(peer, what, access_key or "-", f"authentication failed: {problem}")
            if not access_key:
                return self._fail(peer, what, "-", "authentication failed: the request is not signed (no AccessKey);"
                                                   " give the client a user's access key and secret key")
            if user is None:
                return self._fail(peer, what, access_key, f"authentication failed: no user {access_key!r}")
            if not user.enabled:
                return self._fail(peer, what, access_key, f"authentication failed: user {access_key!r} is disabled")
            if not verify_with(user.password):
                return self._fail(peer, what, access_key, "authentication failed: the signature does not match "
                                  "(wrong secret key, or the request was changed after signing)")
        if self.authorization:
            if user is None:
                return self._refuse(peer, what, access_key or "-", False,
                                    "authorization failed: the request names no known user (AccessKey)")
            if user.user_type is UserType.SUPER:
                return None
            wanting = self._decide(user.username, wanted(), host)
            if wanting is not None:
                resource, actions = wanting
                if not actions:
                    denied = f"{what} is for Super users only"
                else:
                    denied = f"{'/'.join(sorted(a.value for a in actions))} on {resource} is not granted"
                return self._refuse(peer, what, user.username, False,
                                    f"authorization failed: user {user.username!r}: {denied}")
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

    def _fail(self, peer: str, what: str, who: str, remark: str) -> Refusal:
        """A failed authentication: refused, and counted against the source address."""
        host = source_host(peer)
        if self.throttle.failed(host, self.clock()):
            self._block_log.warning("%s: %s used up its failed-authentication budget (%d at once, %.0f a second): "
                                    "its requests are refused until it slows down", self.name, host,
                                    int(self.throttle.burst), self.throttle.per_s)
        return self._refuse(peer, what, who, True, remark)

    def _refuse(self, peer: str, what: str, who: str, authentication: bool, remark: str) -> Refusal:
        self.refused += 1
        self._log.warning("%s refused %s from %s (user %r): %s", self.name, what, peer, who[:64], remark)
        return Refusal(authentication, remark)
