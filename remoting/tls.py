"""TLS settings with RocketMQ's key names, and the ``ssl.SSLContext`` objects built from them.

Server side (``tls.server.*``): ``tls.server.mode`` is ``disabled`` (plain TCP only), ``permissive`` (TLS and plain
TCP on one port: a first byte 0x16 opens a TLS handshake, anything else is a plaintext frame) or ``enforcing`` (TLS
only). RocketMQ defaults to permissive with a self-signed test certificate (``tls.test.mode.enable``); pyrmq never
makes up a certificate, so its default is ``disabled`` and any other mode needs ``tls.server.certPath`` and
``tls.server.keyPath``. An unknown mode stops the load (RocketMQ's ``TlsMode.parse`` falls back to permissive on a
typo). ``tls.server.trustCertPath`` names the CA that client certificates must chain to;
``tls.server.need.client.auth=true`` makes one mandatory (mutual TLS), otherwise a presented one is still checked.

Client side (the broker's own calls: registration, the slave's metadata sync, HA; RocketMQ's ``tls.enable`` and
``tls.client.*``): ``tls.enable=true`` makes every remoting client of the process and the HA slave open TLS,
trusting ``tls.client.trustCertPath`` (the system's CAs when empty) and presenting ``tls.client.certPath`` /
``tls.client.keyPath`` when set. RocketMQ's clients skip verifying the server by default (``tls.client.authServer``
false); pyrmq's always verify the chain, and the host name unless ``tls.client.verifyHostname=false`` (brokers
reached by addresses their certificate does not name).

The key paths (and ``tls.server.keyPassword``) are declared ``conf.secret()``: config reads say ``<set>``, errors
name the key, never the path. The contexts are built at load, so a missing or mismatched file stops the process
with the key to fix instead of failing the first handshake.
"""

from __future__ import annotations

import enum
import ssl
from dataclasses import dataclass, field

from common import conf
from common.errors import ConfigError


class TlsMode(enum.Enum):
    DISABLED = "disabled"
    PERMISSIVE = "permissive"
    ENFORCING = "enforcing"


TLS_RECORD_HANDSHAKE = 0x16  # the first byte of a TLS ClientHello record (RocketMQ's HANDSHAKE_MAGIC_CODE)
MIN_VERSION = ssl.TLSVersion.TLSv1_2


def _key(name: str) -> dict[str, str]:
    return {"key": name}


@dataclass(frozen=True)
class TlsConfig:
    tls_server_mode: TlsMode = field(default=TlsMode.DISABLED, metadata=_key("tls.server.mode"))
    tls_server_cert_path: str = field(default="", metadata=_key("tls.server.certPath"))
    tls_server_key_path: str = conf.secret(key="tls.server.keyPath")
    tls_server_key_password: str = conf.secret(key="tls.server.keyPassword")
    tls_server_trust_cert_path: str = field(default="", metadata=_key("tls.server.trustCertPath"))
    tls_server_need_client_auth: bool = field(default=False, metadata=_key("tls.server.need.client.auth"))
    # pyrmq's: a connection must have sent its first byte and finished its TLS handshake within this time
    tls_server_handshake_timeout_millis: int = conf.ranged(
        5_000, 100, 600_000, "milliseconds from accept to a finished handshake; a handshake needs a round trip",
        key="tls.server.handshakeTimeoutMillis")
    tls_enable: bool = field(default=False, metadata=_key("tls.enable"))
    tls_client_cert_path: str = field(default="", metadata=_key("tls.client.certPath"))
    tls_client_key_path: str = conf.secret(key="tls.client.keyPath")
    tls_client_trust_cert_path: str = field(default="", metadata=_key("tls.client.trustCertPath"))
    tls_client_verify_hostname: bool = field(default=True, metadata=_key("tls.client.verifyHostname"))

    @property
    def mode(self) -> TlsMode:
        return self.tls_server_mode

    @property
    def handshake_timeout_s(self) -> float:
        return self.tls_server_handshake_timeout_millis / 1000

    def check(self, source: str) -> None:
        """At load: every file named must make a context, else ConfigError with the key (never a key's path)."""
        if self.mode is not TlsMode.DISABLED:
            for key, value in (("tls.server.certPath", self.tls_server_cert_path),
                               ("tls.server.keyPath", self.tls_server_key_path)):
                if not value:
                    raise ConfigError(f"tls.server.mode={self.mode.value} needs a certificate and its key",
                                      source=source, key=key, hint="set tls.server.certPath and tls.server.keyPath "
                                      "(mqctl dev up --secure shows a generated set), or tls.server.mode=disabled")
        if self.tls_server_need_client_auth and not self.tls_server_trust_cert_path:
            raise ConfigError("client certificates cannot be checked without the CA they chain to", source=source,
                              key="tls.server.trustCertPath", hint="name the CA's certificate file (PEM)")
        try:
            self.server_context()
            self.client_context()
        except TlsFileError as exc:
            raise ConfigError(exc.problem, source=source, key=exc.key, hint=exc.hint) from None

    def server_context(self) -> ssl.SSLContext | None:
        """The server's context (None when the mode is disabled)."""
        if self.mode is TlsMode.DISABLED:
            return None
        return server_context(self.tls_server_cert_path, self.tls_server_key_path,
                              trust=self.tls_server_trust_cert_path,
                              need_client_auth=self.tls_server_need_client_auth,
                              password=self.tls_server_key_password or None)

    def client_context(self) -> ssl.SSLContext | None:
        """What this process's own clients connect with (None unless ``tls.enable``)."""
        if not self.tls_enable:
            return None
        return client_context(trust=self.tls_client_trust_cert_path, cert=self.tls_client_cert_path,
                              key=self.tls_client_key_path, verify_hostname=self.tls_client_verify_hostname)


class TlsFileError(ValueError):
    """A certificate, key or CA file that does not make a context; names the key, never a secret's path."""

    def __init__(self, key: str, problem: str, hint: str) -> None:
        super().__init__(f"{key}: {problem}; {hint}")
        self.key, self.problem, self.hint = key, problem, hint


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or exc.__class__.__name__
    if isinstance(exc, OSError):
        return exc.strerror or exc.__class__.__name__
    return exc.__class__.__name__


def server_context(cert: str, key: str, *, trust: str = "", need_client_auth: bool = False,
                   password: str | None = None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = MIN_VERSION
    _load_chain(ctx, cert, key, password, "tls.server")
    if trust:
        _load_trust(ctx, trust, "tls.server.trustCertPath")
        ctx.verify_mode = ssl.CERT_REQUIRED if need_client_auth else ssl.CERT_OPTIONAL
    return ctx


def client_context(*, trust: str = "", cert: str = "", key: str = "", verify_hostname: bool = True,
                   prefix: str = "tls.client") -> ssl.SSLContext:
    """A client context verifying the server against ``trust`` (a CA file; empty: the system's CAs), presenting
    ``cert``/``key`` when given (mutual TLS)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = MIN_VERSION
    ctx.check_hostname = verify_hostname
    if trust:
        _load_trust(ctx, trust, f"{prefix}.trustCertPath")
    else:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if cert or key:
        if not (cert and key):
            raise TlsFileError(f"{prefix}.{'keyPath' if cert else 'certPath'}", "a client certificate needs its key "
                               "and the key its certificate", "set both or neither")
        _load_chain(ctx, cert, key, None, prefix)
    return ctx


def _load_chain(ctx: ssl.SSLContext, cert: str, key: str, password: str | None, prefix: str) -> None:
    try:
        with open(cert, "rb"):
            pass
    except OSError as exc:
        raise TlsFileError(f"{prefix}.certPath", f"cannot read {cert} ({_reason(exc)})",
                           "name a PEM certificate file this process can read") from None
    try:
        with open(key, "rb"):
            pass
    except OSError as exc:  # the key's path is a secret-like setting: the error names the key, not the path
        raise TlsFileError(f"{prefix}.keyPath", f"cannot read the private key file ({_reason(exc)})",
                           "name a PEM key file this process can read (chmod 600, owned by its user)") from None
    try:
        ctx.load_cert_chain(cert, key, password)
    except (ssl.SSLError, ValueError) as exc:
        raise TlsFileError(f"{prefix}.keyPath", f"the certificate and key do not load together ({_reason(exc)})",
                           "check that the key is the certificate's, both PEM, and the password if it is "
                           "encrypted") from None


def _load_trust(ctx: ssl.SSLContext, path: str, key: str) -> None:
    try:
        ctx.load_verify_locations(cafile=path)
    except (OSError, ssl.SSLError) as exc:
        raise TlsFileError(key, f"cannot load CA certificates from {path} ({_reason(exc)})",
                           "name a PEM file holding the CA certificate(s)") from None


# The process's own outgoing connections (RocketMQ's -Dtls.enable is a JVM-wide switch too): a broker sets it from
# broker.conf at start, so registration, the metadata sync, the v2 endpoint's route lookups and the HA slave all
# use it without each being handed a context. A library user passes a context to its client instead.
_inner_client_context: ssl.SSLContext | None = None


def set_inner_client_context(ctx: ssl.SSLContext | None) -> None:
    global _inner_client_context
    _inner_client_context = ctx


def inner_client_context() -> ssl.SSLContext | None:
    return _inner_client_context
