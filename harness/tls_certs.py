"""A throwaway CA and per-service certificates for TLS tests and ``mqctl dev up --secure``, made by
``deploy/certs/gen-certs.sh`` (openssl; the Debian package is installed when missing and we are root).

``make_certs(out, services)`` returns a ``CertSet``: ``ca`` (the CA file clients trust) and ``cert(name)`` /
``key(name)`` per service. ``server_conf(name, mode)`` is the ``tls.server.*`` keys of a server that presents
``name``'s certificate and checks client certificates against the CA; ``client_conf(name)`` the ``tls.enable`` and
``tls.client.*`` keys of a broker whose own calls use TLS, presenting ``name``'s certificate.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.debian_pkg import find_or_install

GEN_CERTS = Path(__file__).resolve().parents[1] / "deploy" / "certs" / "gen-certs.sh"


class CertsUnavailable(RuntimeError):
    """openssl is missing and cannot be installed here."""


@dataclass(frozen=True)
class CertSet:
    root: Path

    @property
    def ca(self) -> str:
        return str(self.root / "ca.pem")

    def cert(self, name: str) -> str:
        return str(self.root / f"{name}.pem")

    def key(self, name: str) -> str:
        return str(self.root / f"{name}.key")

    def server_conf(self, name: str, mode: str = "enforcing", *, need_client_auth: bool = False) -> dict[str, str]:
        return {"tls.server.mode": mode, "tls.server.certPath": self.cert(name), "tls.server.keyPath": self.key(name),
                "tls.server.trustCertPath": self.ca,
                "tls.server.need.client.auth": "true" if need_client_auth else "false"}

    def client_conf(self, name: str) -> dict[str, str]:
        return {"tls.enable": "true", "tls.client.trustCertPath": self.ca, "tls.client.certPath": self.cert(name),
                "tls.client.keyPath": self.key(name)}


def make_certs(out: Path, services: list[str], *, extra_sans: str = "", service_days: int | None = None,
               local_sans: bool = True) -> CertSet:
    """``service_days=-1``: the services' certificates expired a day ago; ``local_sans=False``: they name only the
    service, not localhost or 127.0.0.1 (a client dialing 127.0.0.1 sees a wrong host name)."""
    binary, why = find_or_install("openssl", "openssl")
    if binary is None:
        raise CertsUnavailable(f"no openssl to make test certificates: {why}")
    env = {"PATH": "/usr/bin:/bin", "EXTRA_SANS": extra_sans, "LOCAL_SANS": "yes" if local_sans else "no"}
    if service_days is not None:
        env["SERVICE_DAYS"] = str(service_days)
    done = subprocess.run(["sh", str(GEN_CERTS), str(out), *services], env=env, capture_output=True, text=True,
                          timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"gen-certs.sh failed ({done.returncode}): {done.stderr.strip()}")
    return CertSet(out)
