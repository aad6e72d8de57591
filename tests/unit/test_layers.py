"""The import layers of docs/architecture.md, checked by walking every module's imports (ast).

Bottom to top: `infra` (configuration, the error root) -> `index` -> `logstore` -> `tiering` ->
`compaction` -> `ingest_api` | `spark_log` (peers that never import each other) -> `client` (the
Python client, `lakelog.client`) -> `cli`. A module
may import its own package and any package of a lower layer; there is no cycle between files.
Imports under `if TYPE_CHECKING:` are annotations only and do not count; an import inside a
function counts like any other.
"""

from __future__ import annotations

import ast
import re
import subprocess
import tomllib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS: list[tuple[str, ...]] = [
    ("infra",), ("index",), ("logstore",), ("tiering",), ("compaction",), ("ingest_api", "spark_log"), ("client",), ("cli",),
]
LAYER_OF = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}
PACKAGES = tuple(LAYER_OF)


def _module_files() -> dict[str, Path]:
    files = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = list(f.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files["lakelog." + ".".join(parts)] = f
    return files


def _runtime_imports(tree: ast.AST):
    """Import nodes, leaving out the bodies of `if TYPE_CHECKING:` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _graph() -> dict[str, set[str]]:
    files = _module_files()
    graph: dict[str, set[str]] = defaultdict(set)
    for mod, path in files.items():
        is_pkg = path.name == "__init__.py"
        for node in _runtime_imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    anchor = anchor[: len(anchor) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for t in targets:
                if t.startswith("lakelog.") and t != mod:
                    while t not in files and "." in t:
                        t = t.rsplit(".", 1)[0]
                    graph[mod].add(t)
        graph.setdefault(mod, set())
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_no_import_cycle_between_files():
    assert _cycles(_graph()) == []


def test_the_cycle_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_packages_import_only_their_own_package_or_a_lower_layer():
    wrong = []
    for mod, deps in _graph().items():
        pkg = mod.split(".")[1]
        for dep in deps:
            dep_pkg = dep.split(".")[1]
            if dep_pkg != pkg and LAYER_OF[dep_pkg] >= LAYER_OF[pkg]:
                wrong.append(f"{mod} -> {dep}")
    assert wrong == []


def test_no_package_level_cycle():
    edges = defaultdict(set)
    for mod, deps in _graph().items():
        for dep in deps:
            if mod.split(".")[1] != dep.split(".")[1]:
                edges[mod.split(".")[1]].add(dep.split(".")[1])
    assert _cycles({p: edges.get(p, set()) for p in PACKAGES}) == []


BARE = re.compile(rf"^\s*(?:from|import)\s+({'|'.join(PACKAGES)})(?:\.|\s|$)", re.M)


def test_every_import_uses_the_lakelog_namespace():
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    files = tracked.stdout.split() or [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if ".venv" not in p.parts]
    bare = [f"{f}: {m.group(0).strip()}" for f in files for m in BARE.finditer((ROOT / f).read_text())]
    assert bare == []


def test_the_bare_import_check_catches_one():
    assert BARE.search("x = 1\n    from logstore.log import PartitionLog\n")
    assert BARE.search("import index\n")
    assert not BARE.search("from lakelog.index import offset_index\n")


def test_pyproject_maps_every_package_folder():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {"lakelog." + ".".join(p.parent.relative_to(ROOT).parts)
               for pkg in PACKAGES for p in (ROOT / pkg).rglob("__init__.py")}
    assert set(conf["packages"]) == folders
    assert conf["package-dir"] == {f"lakelog.{p}": p for p in PACKAGES}
