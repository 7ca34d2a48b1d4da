"""Atomic JSON persistence for the broker's config files (topics.json, consumerOffset.json, ...).

RocketMQ's ConfigManager writes ``<file>.tmp``, copies the old file to ``<file>.bak`` and renames, but never
fsyncs, so a power loss can leave an empty file. Here the new content is fsynced before the rename, the old file
becomes ``<file>.bak`` by rename, and the directory is fsynced. A crash at any point leaves either the old or
the new file under one of the two names, and ``read_json`` falls back to ``.bak`` when the main file is missing,
empty or unparsable.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def fsync_dir(path: Path) -> None:
    """Make a rename, creation or removal in ``path`` durable (the directory entry, not the file's bytes)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_json_atomic(path: str | Path, obj: Any) -> None:
    write_bytes_atomic(path, json.dumps(obj, indent=2, sort_keys=True).encode("utf-8"))


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` as the module docstring describes (the old content kept as ``.bak``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    if path.exists():
        os.replace(path, path.with_name(path.name + ".bak"))
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_json(path: str | Path, default: Any = None) -> Any:
    """Load ``path``, else its ``.bak``, else ``default``; a damaged main file is logged, never fatal."""
    path = Path(path)
    for candidate in (path, path.with_name(path.name + ".bak")):
        try:
            text = candidate.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        if not text.strip():
            log.warning("%s is empty; trying the backup", candidate)
            continue
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            log.warning("%s is not valid JSON (%s); trying the backup", candidate, exc)
    return default
