"""Find a server binary, installing its Debian package when it is missing (tests only; no container registry here).

``find_or_install(binary, package)`` looks on PATH and in /usr/bin; when the binary is missing and we are root,
it runs ``apt-get update`` and ``apt-get install -y --no-install-recommends <package>`` (bounded), and returns
``(path, "")`` or ``(None, why not)`` so the caller can skip with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess

INSTALL_TIMEOUT_S = 600


def find_binary(binary: str) -> str | None:
    found = shutil.which(binary)
    if found:
        return found
    path = f"/usr/bin/{binary}"
    return path if os.access(path, os.X_OK) else None


def find_or_install(binary: str, package: str) -> tuple[str | None, str]:
    """(path, "") when ``binary`` is available, else (None, why not). Installs ``package`` when we are root."""
    found = find_binary(binary)
    if found:
        return found, ""
    if os.geteuid() != 0:
        return None, f"{binary} is not installed and we are not root: apt-get install {package}"
    if not shutil.which("apt-get"):
        return None, f"{binary} is not installed and apt-get is missing: install a {binary} binary on PATH"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "--no-install-recommends", package],
    ):
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            return None, f"{' '.join(cmd)} did not finish in {INSTALL_TIMEOUT_S} s"
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return None, f"{' '.join(cmd)} failed ({proc.returncode}): {' | '.join(tail)}"
    found = find_binary(binary)
    return (found, "") if found else (None, f"apt-get installed {package} but no {binary} binary is on PATH")
