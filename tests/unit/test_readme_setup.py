"""README "Set up": exactly the two commands the project promises, in the order that works without a registry.

``make test`` builds the images (and, where no registry answers, the base image, Prometheus and the compose
override); ``docker compose up`` before it fails on such a machine, so the order is part of the promise.
"""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_set_up_is_make_test_then_compose_up():
    text = README.read_text()
    start = text.index("\n## Set up\n")
    section = text[start : text.index("\n## ", start + 1)]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block, "README 'Set up' has a sh block"
    commands = [re.split(r"\s{2,}#", line)[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert commands == ["make test", "docker compose up"]
