"""Run bench processes against other source trees of pyrmq (git worktrees), to compare commits in one run.

A tree is ``NAME=PATH`` (``--tree``, repeatable; default ``this=<this checkout>``). Processes of a tree run with
``cwd`` and ``PYTHONPATH`` set to that tree and this interpreter (the project's venv). ``PYTHONPATH`` wins over
the venv's editable install of pyrmq (a meta-path finder appended after the path finder), so ``broker``,
``client`` ... come from the tree: ``check_tree`` proves it in a child before any measurement.

Example: ``git worktree add /work/baseline-grpc f10761f`` (outside the repo), then
``--tree grpc=/work/baseline-grpc --tree remoting=/work/main``. Ratios are always against the first tree.

Variants are interleaved run by run, in ABBA order (reversed on every other run), so slow drifts of a shared
machine (other processes, page cache, thermal) fall on every variant alike.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("broker", "namesrv", "client", "common")
T = TypeVar("T")


@dataclass(frozen=True)
class Tree:
    name: str
    path: Path

    def env(self) -> dict[str, str]:
        """The environment of this tree's processes: PYTHONPATH is the tree alone (not added to the caller's,
        which may point at another tree)."""
        env = dict(os.environ)
        env.pop("NAMESRV_ADDR", None)
        env["PYTHONPATH"] = str(self.path)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def describe(self) -> dict[str, Any]:
        """Name, path, commit and whether the work tree has uncommitted changes (for the JSON)."""
        out: dict[str, Any] = {"name": self.name, "path": str(self.path)}
        try:
            out["commit"] = subprocess.run(["git", "-C", str(self.path), "rev-parse", "--short", "HEAD"],
                                           check=False, capture_output=True, text=True, timeout=10).stdout.strip()
            status = subprocess.run(["git", "-C", str(self.path), "status", "--porcelain", "--untracked-files=no"],
                                    check=False, capture_output=True, text=True, timeout=10).stdout
            out["dirty_files"] = len(status.splitlines())
        except (OSError, subprocess.SubprocessError):
            pass
        return out


def parse_trees(specs: Sequence[str] | None) -> list[Tree]:
    """``["old=/a", "new=/b"]`` -> trees; none -> ``[this=<this checkout>]``. Names must be unique."""
    if not specs:
        return [Tree("this", REPO)]
    trees: list[Tree] = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"--tree {spec!r}: expected NAME=PATH")
        root = Path(path).expanduser().resolve()
        missing = [p for p in PACKAGES if not (root / p).is_dir()]
        if missing:
            raise SystemExit(f"--tree {spec!r}: {root} has no {', '.join(missing)} package (not a pyrmq tree)")
        if any(t.name == name for t in trees):
            raise SystemExit(f"--tree {spec!r}: name {name!r} given twice")
        trees.append(Tree(name, root))
    return trees


def check_tree(tree: Tree) -> dict[str, str]:
    """Import the packages in a child run as the tree's processes are; fail unless every one is the tree's own."""
    code = f"import json, importlib; print(json.dumps({{m: importlib.import_module(m).__file__ for m in {PACKAGES!r}}}))"
    proc = subprocess.run([sys.executable, "-c", code], check=False, cwd=str(tree.path), env=tree.env(),
                          capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        raise SystemExit(f"tree {tree.name}: importing {PACKAGES} failed:\n{proc.stderr[-3000:]}")
    files = json.loads(proc.stdout.strip().splitlines()[-1])
    for module, file in files.items():
        if not Path(file).resolve().is_relative_to(tree.path):
            raise SystemExit(f"tree {tree.name}: {module} was imported from {file}, not from {tree.path}")
    return files


def checked_trees(specs: Sequence[str] | None) -> tuple[list[Tree], list[dict]]:
    """``parse_trees`` and ``check_tree`` each, saying where its broker is imported from: the trees, and each
    one's description with its imported files (for the result file)."""
    trees = parse_trees(specs)
    described = []
    for tree in trees:
        files = check_tree(tree)
        described.append({**tree.describe(), "imports": files})
        print(f"tree {tree.name}: {tree.path} ({described[-1].get('commit', '?')}), broker from {files['broker']}",
              flush=True)
    return trees, described


def interleaved(runs: int, variants: Sequence[T]) -> Iterator[tuple[int, T]]:
    """(run, variant) in ABBA order: run 0 goes A, B; run 1 goes B, A; ..."""
    for run in range(runs):
        for v in (variants if run % 2 == 0 else list(reversed(variants))):
            yield run, v


def median_rows(results: Iterable[dict], keys: Sequence[str]) -> list[dict]:
    """One row per distinct ``keys`` value (in first-seen order): ``runs`` and the median of every numeric field
    present in all of that group's rows."""
    results = list(results)
    groups: dict[tuple, list[dict]] = {}
    for r in results:
        groups.setdefault(tuple(r[k] for k in keys), []).append(r)
    out = []
    for key, rs in groups.items():
        row: dict[str, Any] = dict(zip(keys, key))
        row["runs"] = len(rs)
        for field in rs[0]:
            if field in keys or field == "run":
                continue
            values = [r.get(field) for r in rs]
            if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
                row[field] = statistics.median(values)
        out.append(row)
    return out


def ratio(a: float | None, b: float | None) -> float:
    """a / b, NaN when either is missing or b is 0."""
    if a is None or b is None or not b:
        return float("nan")
    return round(a / b, 2)
