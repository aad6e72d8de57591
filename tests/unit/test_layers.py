"""The import layers of docs/architecture.md, checked by walking every module's imports (ast).

Bottom to top: `infra` (configuration, the error root) -> `index` -> `logstore` -> `tiering` ->
`compaction` -> `ingest_api` | `spark_log` (peers that never import each other) -> `client` (the
Python client, `lakelog.client`) -> `cli`. A module
may import its own package and any package of a lower layer; there is no cycle between files.
Imports under `if TYPE_CHECKING:` are annotations only and do not count; an import inside a
function counts like any other.

Inside `ingest_api/` the same rule holds between its parts (`INNER_LAYERS`): a sub-package, or a
module directly in `ingest_api/`, imports only its own part and the parts below it; the front doors
(`http`, `kafka`) sit on top of the node's core and never import each other.
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

#: The parts of `ingest_api/`, bottom to top (a sub-package, or a module directly in `ingest_api/`).
INNER_LAYERS: list[tuple[str, ...]] = [
    ("errors",),  # the node's error tree
    ("raft", "records"),  # the metadata log's consensus; records as the API carries them
    ("security", "schemas"),  # users, ACLs, quotas, the authorizer; the Schema Registry
    ("config",),  # every key of the node, declared once
    ("cluster",),  # the metadata image, the controller, the quorum host
    ("replication",),  # the replicas, their fetchers, the peer client
    ("broker", "groups"),  # the broker's services; the group coordinator and consumer instances
    ("transactions",),  # the transaction coordinator (its offsets partitions and pending offsets are the groups')
    ("error_table",),  # every part's error classes bound to the one code table (infra/error_codes.py)
    ("node",),  # the wiring: builds every service
    ("http", "kafka"),  # the front doors
    ("server",),  # the node's process: the node and both doors on one event loop
]
INNER_LAYER_OF = {part: i for i, layer in enumerate(INNER_LAYERS) for part in layer}


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


def _inner_part(mod: str) -> str | None:
    parts = mod.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == "ingest_api" else None


def test_every_part_of_ingest_api_has_a_layer():
    parts = {p for p in map(_inner_part, _graph()) if p}
    assert parts - set(INNER_LAYER_OF) == set()


def test_ingest_api_parts_import_only_their_own_part_or_a_lower_one():
    wrong = []
    for mod, deps in _graph().items():
        part = _inner_part(mod)
        if part is None:
            continue
        for dep in deps:
            dep_part = _inner_part(dep)
            if dep_part in (None, part):
                continue
            if INNER_LAYER_OF[dep_part] >= INNER_LAYER_OF[part]:
                wrong.append(f"{mod} -> {dep}")
    assert wrong == []


def test_no_cycle_between_parts_of_ingest_api():
    edges = defaultdict(set)
    for mod, deps in _graph().items():
        for dep in deps:
            a, b = _inner_part(mod), _inner_part(dep)
            if a and b and a != b:
                edges[a].add(b)
    assert _cycles({p: edges.get(p, set()) for p in INNER_LAYER_OF}) == []


def test_ingest_api_package_inits_hold_only_a_docstring():
    """No re-exports: every import names the module that defines the name."""
    loaded = []
    for init in (ROOT / "ingest_api").rglob("__init__.py"):
        body = ast.parse(init.read_text()).body
        if any(not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) for n in body):
            loaded.append(str(init.relative_to(ROOT)))
    assert loaded == []


def test_a_function_level_import_counts():
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\n"
                     "def f():\n    import b\n    from c import d\n")
    assert sorted(n.names[0].name if isinstance(n, ast.Import) else n.module for n in _runtime_imports(tree)) == [
        "b", "c", "typing"]


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
