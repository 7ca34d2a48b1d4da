"""broker/ha has no import cycle, counting imports under TYPE_CHECKING and inside functions (issue 14 item 4: a
connection reaches its master through ``connection.ConnectionOwner``, never by importing ``master.py``)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "broker" / "ha"


def module_imports(path: Path) -> set[str]:
    """The broker.ha modules ``path`` imports, wherever the import sits."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        out |= {n.split(".")[2] for n in names if n.startswith("broker.ha.") and n.count(".") >= 2}
    return out


def graph() -> dict[str, set[str]]:
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    return {p.stem: module_imports(p) & modules for p in PACKAGE.glob("*.py")}


def cycle(edges: dict[str, set[str]]) -> list[str]:
    """One import cycle as a path of module names, or [] when there is none (depth-first search)."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str]:
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return []
        for nxt in sorted(edges.get(node, ())):
            found = visit(nxt, path + [node])
            if found:
                return found
        done.add(node)
        return []

    for start in sorted(edges):
        found = visit(start, [])
        if found:
            return found
    return []


def test_broker_ha_has_no_import_cycle():
    edges = graph()
    assert "master" in edges["service"] and "connection" in edges["master"]  # the graph is really read
    found = cycle(edges)
    assert not found, "import cycle in broker/ha: " + " -> ".join(found)


def test_a_connection_does_not_know_the_master_module():
    assert "master" not in graph()["connection"]


def test_the_cycle_check_finds_a_cycle_through_a_type_checking_import(tmp_path):
    (tmp_path / "a.py").write_text("from broker.ha import b\n")
    (tmp_path / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from broker.ha.a import X\n")
    edges = {p.stem: module_imports(p) for p in tmp_path.glob("*.py")}
    assert edges == {"a": {"b"}, "b": {"a"}}
    assert cycle(edges) in (["a", "b", "a"], ["b", "a", "b"])
