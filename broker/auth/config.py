"""ACL 2.0's keys (RocketMQ's ``AuthConfig``), read from broker.conf. Both switches are off by default, as in
RocketMQ: then no request is checked and nothing else changes.

``initAuthenticationUser`` is the first Super user, ``{"username": ..., "password": ...}``, created when the store
has no such user (so an operator can always get in). ``innerClientAuthenticationCredentials`` is
``{"accessKey": ..., "secretKey": ...}``: what this broker signs its own requests with (to its master for the
metadata sync, to the nameserver), and a Super identity on every broker that shares it. Both are secrets.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from common import conf
from common.errors import ConfigError


@dataclass(frozen=True)
class Credentials:
    access_key: str = conf.secret()  # a user name, but named like a secret: kept out of reads all the same
    secret_key: str = conf.secret()


def _json_object(text: str, key: str, fields: tuple[str, str]) -> tuple[str, str]:
    try:
        data = json.loads(text)
    except ValueError:
        raise ValueError(f"{key} is not JSON (its text is not shown); write "
                         f'{{"{fields[0]}":"...","{fields[1]}":"..."}}') from None
    if not isinstance(data, dict) or not all(isinstance(data.get(f), str) and data.get(f) for f in fields):
        raise ValueError(f"{key} needs both {fields[0]} and {fields[1]} as non-empty strings")
    return data[fields[0]], data[fields[1]]


@dataclass(frozen=True)
class AuthConfig:
    authentication_enabled: bool = False
    authorization_enabled: bool = False
    init_authentication_user: str = conf.secret()
    inner_client_authentication_credentials: str = conf.secret()
    # where users and ACLs are kept; "" = <storePathRootDir>/config/auth.json
    auth_config_path: str = ""
    # gRPC v2: how far a request's signed x-mq-date-time may be from the broker's clock (RocketMQ checks none, so a
    # captured header worked for ever); within it a header can be replayed: TLS is what stops capture
    authentication_date_time_skew_millis: int = 300_000
    # pyrmq's: failed authentications one source address may make at once, and how often one comes back after
    # that (auth/throttle.py); while its budget is empty every request from that address is refused unchecked
    authentication_failure_burst: int = 20
    authentication_failure_refill_millis: int = 500

    def check(self, source: str) -> None:
        """At load: ConfigError when a JSON key cannot be read (never quoting it: it holds a secret)."""
        if self.authentication_date_time_skew_millis < 1000:
            raise ConfigError(f"authenticationDateTimeSkewMillis is {self.authentication_date_time_skew_millis}",
                              source=source, key="authenticationDateTimeSkewMillis",
                              hint="give at least 1000 (the date-time has whole seconds); 300000 is the default")
        for key, value in (("authenticationFailureBurst", self.authentication_failure_burst),
                           ("authenticationFailureRefillMillis", self.authentication_failure_refill_millis)):
            if value < 1:
                raise ConfigError(f"{key} is {value}", source=source, key=key,
                                  hint="give at least 1 (defaults: a burst of 20, one failure back every 500 ms)")
        for key, read in (("initAuthenticationUser", self.init_user),
                          ("innerClientAuthenticationCredentials", self.inner_credentials)):
            try:
                read()
            except ValueError as exc:
                raise ConfigError(str(exc), source=source, key=key, hint="fix the JSON and start again") from None

    @property
    def enabled(self) -> bool:
        return self.authentication_enabled or self.authorization_enabled

    def init_user(self) -> tuple[str, str] | None:
        if not self.init_authentication_user:
            return None
        return _json_object(self.init_authentication_user, "initAuthenticationUser", ("username", "password"))

    def inner_credentials(self) -> Credentials | None:
        if not self.inner_client_authentication_credentials:
            return None
        return Credentials(*_json_object(self.inner_client_authentication_credentials,
                                         "innerClientAuthenticationCredentials", ("accessKey", "secretKey")))
