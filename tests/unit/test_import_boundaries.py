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



# The store's layers (issue 14): its modules form a graph without cycles, and none reaches into another's
# private names. Every import counts, TYPE_CHECKING blocks and function bodies too: a cycle hidden there still
# ties two modules together, so neither can be read, tested or replaced alone.

STORE = ROOT / "broker" / "store"
ALL_PACKAGES = ("bench", "broker", "client", "common", "connectors", "controller", "ctl", "harness", "namesrv", "remoting",
                "tests")
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}  # public despite the underscore
PUBLIC_DESPITE_UNDERSCORE = NAMEDTUPLE_API | {"_exit"}  # os._exit: the documented way to end a process now


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_statements(path: Path, module: str) -> list[tuple[str, list[str]]]:
    """(module, names) per import in the file at ``path`` (the module ``module``): ``import a.b`` is ("a.b", []),
    ``from pkg import x, y`` is ("pkg", ["x", "y"]); relative imports are made absolute."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            out.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            out.append((base, [alias.name for alias in node.names]))
    return out


def _imports_of(path: Path, module: str) -> set[str]:
    """Every module the file imports: ``from pkg import name`` counts as ``pkg`` and ``pkg.name`` (the graph keeps
    the names that are modules)."""
    out: set[str] = set()
    for base, names in _import_statements(path, module):
        out.add(base)
        out.update(f"{base}.{name}" for name in names)
    return out


def store_import_graph() -> dict[str, set[str]]:
    """broker.store module -> the broker.store modules it imports."""
    modules = {_module_name(p): p for p in STORE.rglob("*.py")}
    return {name: {m for m in _imports_of(path, name) if m in modules and m != name} for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of ``graph`` as a path that ends where it starts, or [] when there is none."""
    on_path: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> list[str]:
        on_path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt in on_path:
                return on_path[on_path.index(nxt) :] + [nxt]
            if nxt not in done:
                found = visit(nxt)
                if found:
                    return found
        on_path.pop()
        done.add(node)
        return []

    for start in sorted(graph):
        if start not in done:
            found = visit(start)
            if found:
                return found
    return []


def test_the_store_import_graph_has_no_cycle():
    graph = store_import_graph()
    assert "broker.store.put" in graph["broker.store.message_store"]  # the graph sees `from broker.store import put`
    cycle = find_cycle(graph)
    assert not cycle, "broker/store import cycle (pass the collaborator in instead): " + " -> ".join(cycle)


def package_import_graph() -> dict[str, set[str]]:
    """Every first-party module -> the first-party modules it imports (generated stubs left out). ``from pkg
    import mod`` counts as importing the module ``pkg.mod`` alone: the package's ``__init__`` runs first, but
    what the importer depends on is the module, and counting the package too would make every package that
    re-exports its modules look cyclic. ``from pkg import name`` (not a module) counts as importing ``pkg``."""
    modules = {_module_name(p): p for p in _all_sources() if "/pb/" not in p.as_posix()}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for base, names in _import_statements(path, name):
            deps.update([f"{base}.{n}" if f"{base}.{n}" in modules else base for n in names] or [base])
        graph[name] = {m for m in deps if m in modules and m != name}
    return graph


def test_the_first_party_import_graph_has_no_cycle():
    graph = package_import_graph()
    assert "client.admin_bodies" in graph["client.admin"]  # `from client import admin_bodies`: the module
    cycle = find_cycle(graph)
    assert not cycle, "import cycle (pass the collaborator in, or move the shared piece down): " + " -> ".join(cycle)


def test_the_cycle_check_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": {"d"}}) == ["d", "d"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_graph_sees_every_kind_of_import(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from . import put\nfrom .get import x\nif TYPE_CHECKING:\n    from broker.store.flush import F\n"
        "def f():\n    import broker.store.cleanup\n"
    )
    got = _imports_of(sample, "broker.store.sample")
    assert {"broker.store.put", "broker.store.get", "broker.store.flush", "broker.store.cleanup"} <= got


def _private_names_imported(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            out += [f"{node.lineno}: from {node.module} import {a.name}" for a in node.names if _is_private(a.name)]
        elif isinstance(node, ast.Import):
            out += [f"{node.lineno}: import {a.name}" for a in node.names if any(map(_is_private, a.name.split(".")))]
    return out


def _private_attributes_used(path: Path) -> list[str]:
    """``x._name`` where ``x`` is not ``self`` or ``cls``: a private name of another object (its module's)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Attribute) and _is_private(node.attr) and node.attr not in PUBLIC_DESPITE_UNDERSCORE:
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                out.append(f"{node.lineno}: {ast.unparse(node)}")
    return out


def _all_sources() -> list[Path]:
    return sorted(p for pkg in ALL_PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_no_module_imports_a_private_name_of_another():
    bad = [f"{p.relative_to(ROOT)}:{hit}" for p in _all_sources() for hit in _private_names_imported(p)]
    assert not bad, "make the name public (it is part of the module's API) or keep it inside:\n" + "\n".join(bad)


@pytest.mark.parametrize("path", sorted(STORE.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_store_modules_use_only_public_names_of_each_other(path):
    bad = _private_attributes_used(path)
    assert not bad, (
        f"{path.relative_to(ROOT)} reaches into another object's private names; pass the collaborator in "
        "(consume_queue_store, dispatch_state) or give it a public method:\n" + "\n".join(bad)
    )


def test_no_product_module_uses_a_private_name_of_another_object():
    """The same rule for all code but the tests (which may look inside what they test): bench/ and harness/
    included, generated stubs left out."""
    sources = [p for p in _all_sources() if p.relative_to(ROOT).parts[0] != "tests" and "/pb/" not in p.as_posix()]
    bad = [f"{p.relative_to(ROOT)}:{hit}" for p in sources for hit in _private_attributes_used(p)]
    assert not bad, "make the name public (it is part of the API) or keep it inside:\n" + "\n".join(bad)


def test_the_private_name_checks_see_violations(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from broker.store.get import _record_tags, store_time_of\nimport a._b\n"
        "class C:\n    def f(self, store):\n        self._ok = store._cq\n        return p._replace(x=1)\n"
    )
    assert [h.split(":")[0] for h in _private_names_imported(sample)] == ["1", "2"]
    assert _private_attributes_used(sample) == ["5: store._cq"]


# A module of the SDK or the connector never imports its own package (issue 22 item 13): ``client`` and
# ``connectors.spark`` load some of their modules lazily (``__getattr__``), so ``from client import admin_bodies``
# inside ``client.admin`` ties the package and its module into a loop. Import the module itself
# (``import client.admin_bodies as bodies``, ``from client.admin_bodies import ...``).


def own_package_imports(path: Path, module: str) -> list[str]:
    """The imports in ``path`` (the module ``module``) that name one of its enclosing packages."""
    parts = module.split(".")
    ancestors = {".".join(parts[:i]) for i in range(1, len(parts))}
    return [base for base, _ in _import_statements(path, module) if base in ancestors]


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_sdk_and_connector_modules_never_import_their_own_package(path):
    bad = own_package_imports(path, _module_name(path))
    assert not bad, f"{path.relative_to(ROOT)} imports its own package {bad}: import the module itself"


def test_the_own_package_check_sees_self_imports(tmp_path):
    sample = tmp_path / "admin.py"
    sample.write_text("from client import admin_bodies as b\nimport client.errors\nfrom . import x\n"
                      "def f():\n    from connectors import spark\n")
    assert own_package_imports(sample, "client.admin") == ["client", "client"]
    assert own_package_imports(sample, "connectors.spark.source") == ["connectors.spark", "connectors"]


# The broker's domain services answer in domain terms (store statuses, refusals); the request layer (processors,
# the broker context, remoting's frames, headers and codes) imports them and maps their answers to responses,
# never the other way round (issue 22 item 13).

DOMAIN_SERVICES = ("broker.retry",)
REQUEST_LAYER = ("broker.processors", "broker.context", "remoting.codes", "remoting.frame_codec", "remoting.headers",
                 "remoting.connection", "remoting.server")


def request_layer_imports(path: Path, module: str) -> list[str]:
    return sorted({m for m in _imports_of(path, module) if m.startswith(REQUEST_LAYER)
                   and any(m == layer or m.startswith(layer + ".") for layer in REQUEST_LAYER)})


@pytest.mark.parametrize("module", DOMAIN_SERVICES)
def test_domain_services_never_import_the_request_layer(module):
    path = ROOT / (module.replace(".", "/") + ".py")
    bad = request_layer_imports(path, module)
    assert not bad, f"{module} imports the request layer {bad}: answer a domain result and map it in the processor"


def test_the_request_layer_check_sees_imports(tmp_path):
    sample = tmp_path / "retry.py"
    sample.write_text("from broker.processors.status_map import put_code\nfrom remoting.codes import ResponseCode\n"
                      "from remoting.message_codec import decode\nimport broker.processors_x\n")
    assert request_layer_imports(sample, "broker.retry") == [
        "broker.processors.status_map", "broker.processors.status_map.put_code", "remoting.codes",
        "remoting.codes.ResponseCode"]
