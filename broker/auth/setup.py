"""Puts ACL 2.0 on a server's remoting ports when a switch is on: loads the store, creates the init Super user,
registers the management codes and sets each server's ``gate``. With both switches off nothing is installed, so a
request costs one attribute test more than before."""

from __future__ import annotations

import logging
from pathlib import Path

from broker.auth import processors
from broker.auth.config import AuthConfig
from broker.auth.gate import AuthGate
from broker.auth.store import AuthStore
from broker.auth.throttle import FailureThrottle
from remoting.acl_signature import signer

log = logging.getLogger(__name__)


def auth_path(config: AuthConfig, config_dir: Path) -> Path:
    return Path(config.auth_config_path) if config.auth_config_path else Path(config_dir) / "auth.json"


def install(config: AuthConfig, config_dir: Path, servers: list, *, name: str = "broker") -> AuthGate | None:
    if not config.enabled:
        # off: no gate, and no AUTH_* code either, so nobody can plant a user that would count once it is on
        return None
    store = AuthStore(auth_path(config, config_dir))
    store.load()
    init = config.init_user()
    if init is not None and store.ensure_super_user(*init):
        store.save_now()
        log.info("%s: created the init Super user %r", name, init[0])
    throttle = FailureThrottle(burst=config.authentication_failure_burst,
                               per_s=1000.0 / config.authentication_failure_refill_millis)
    gate = AuthGate(store, authentication=config.authentication_enabled,
                    authorization=config.authorization_enabled, inner=config.inner_credentials(), name=name,
                    throttle=throttle)
    log.info("%s: ACL 2.0 on (authentication %s, authorization %s), %d users, %d ACLs", name,
             config.authentication_enabled, config.authorization_enabled, len(store.users), len(store.acls))
    for server in servers:
        if server is None:
            continue
        processors.register(server, store, gate)
        server.gate = gate
    return gate


def inner_signer(config: AuthConfig):
    """What the broker signs its own requests with (registration, the slave's metadata sync), or None."""
    creds = config.inner_credentials()
    return signer(creds.access_key, creds.secret_key) if creds is not None else None
