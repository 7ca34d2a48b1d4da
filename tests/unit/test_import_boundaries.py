"""The SDK (client/) and the Spark connector (connectors/) never import the broker: what they share with it
(records, properties, msgIds, batches) is remoting.message_codec (DESIGN.md §2)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("client", "connectors")


def _imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import in ``path``, wherever it sits (functions, TYPE_CHECKING blocks too)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
    return out


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_there_are_sources_to_check():
    assert len(_sources()) > 10


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_client_and_connectors_never_import_broker(path):
    bad = [
        f"{path.relative_to(ROOT)}:{line}: {mod}"
        for line, mod in _imported_modules(path)
        if mod.split(".")[0] == "broker"
    ]
    assert not bad, "import remoting.message_codec (or another shared module) instead:\n" + "\n".join(bad)


def test_the_check_sees_broker_imports(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import os\nif True:\n    from broker.store import types\ndef f():\n    import broker.dedup\n")
    assert [m for _, m in _imported_modules(sample) if m.split(".")[0] == "broker"] == ["broker.store", "broker.dedup"]
