"""Entrypoint of the broker image: make sure the cluster's HA secret exists, then exec the broker.

    python /opt/pyrmq/ha_secret.py python -m broker -c FILE

The broker reads its HA secret (DESIGN.md §3: only a slave that proves it is served or counts toward a
SYNC_MASTER's SEND_OK) from ``haAuthSecretFile``, which the environment variable ``HA_AUTH_SECRET_FILE``
overrides. When that variable names a file that does not exist yet, this creates it: 32 random bytes as hex, mode
0600, written to a temporary file in the same directory and linked into place with ``os.link``, which fails if the
name exists. When the brokers of a cluster start together on the shared ``ha-secret`` volume of docker-compose.yml,
exactly one secret wins and every broker reads that one. An existing file is never touched: a Docker or swarm
secret, a file the operator provides, or the one generated at the first start (it lives as long as the volume:
``docker compose down -v`` deletes it together with the stores).

Without ``HA_AUTH_SECRET_FILE`` nothing happens (``docker run pyrmq-broker`` with the image's single-master conf).
Then the rest of the arguments is ``exec``ed: the broker stays PID 1 and gets ``docker stop``'s SIGTERM.
Exit status 2 with one line when the secret cannot be created (a read-only or missing directory).
"""

from __future__ import annotations

import os
import secrets
import sys

ENV = "HA_AUTH_SECRET_FILE"


def ensure_secret(path: str) -> bool:
    """Create ``path`` with a fresh secret unless it exists; True when this call created it."""
    if os.path.exists(path):
        return False
    directory = os.path.dirname(path) or "."
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)  # atomic, and never replaces a secret another broker linked first
        except FileExistsError:
            return False
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return True
    finally:
        os.unlink(tmp)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: ha_secret.py COMMAND [ARG...]  (e.g. python -m broker -c FILE)", file=sys.stderr)
        return 2
    path = os.environ.get(ENV, "")
    if path:
        try:
            if ensure_secret(path):
                print(f"ha_secret: generated this cluster's HA secret in {path}", file=sys.stderr, flush=True)
        except OSError as exc:
            print(f"error: {ENV}={path}: cannot create the HA secret there ({exc.strerror}); mount a writable "
                  "volume on its directory (docker-compose.yml: ha-secret) or provide the file (a Docker secret)",
                  file=sys.stderr, flush=True)
            return 2
    os.execvp(argv[0], argv)
    return 127  # not reached: execvp replaces this process or raises


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
