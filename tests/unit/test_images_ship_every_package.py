"""The images copy every package pyproject.toml installs: a package added to the project but not to the Dockerfiles
starts fine from the source tree and dies in its container (the nameserver once did: no module named 'controller')."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def packages() -> list[str]:
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    return sorted(p.rstrip("*") for p in include)


@pytest.mark.parametrize("dockerfile", ["Dockerfile.broker", "Dockerfile.namesrv"])
def test_every_installed_package_is_copied_and_imported(dockerfile):
    text = (ROOT / "deploy" / "images" / dockerfile).read_text()
    copied = set(re.findall(r"^COPY (\w+) \./\1$", text, re.M))
    assert copied >= set(packages()), f"{dockerfile} misses {sorted(set(packages()) - copied)}"
    imported = re.search(r'python -c "import ([^"]+)"', text).group(1)
    assert "controller" in [m.strip() for m in imported.split(",")]
