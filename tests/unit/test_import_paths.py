"""One import path per name, for the storage packages (`index/`, `logstore/`, `tiering/`, `compaction/`).

Every `from lakelog.<module> import <name>` anywhere in the tree (product, tests, bench) must name
the module that defines `<name>` when the name is defined in one of these packages: a module that
only passes a name on (a re-export) is a second path to it. Their `__init__.py` files hold a
docstring only. Found by walking every module's syntax tree (ast).
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STORAGE = ("index", "logstore", "tiering", "compaction")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return "lakelog." + ".".join(parts)


def _defined_names(body: list[ast.stmt], *, choosing: bool = False) -> set[str]:
    """Names a module binds at top level by definition. An import inside a top-level `try` or `if`
    counts too: the module chooses an implementation there (an optional C extension)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)) and choosing:
            names.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Try):
            for part in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                names |= _defined_names(part, choosing=True)
        elif isinstance(node, ast.If):
            names |= _defined_names(node.body, choosing=True) | _defined_names(node.orelse, choosing=True)
    return names


def _extension_modules() -> set[str]:
    """The C extensions of the storage packages (built from `<name>.c`)."""
    return {_module_name(c.with_suffix(".py")) for pkg in STORAGE for c in (ROOT / pkg).rglob("*.c")}


def _tracked_python_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / f for f in out.stdout.split() if (ROOT / f).exists()]


def second_paths(files: dict[str, ast.Module], extensions: frozenset[str] = frozenset()) -> list[str]:
    """`file: from M import N` for every N defined in a storage module but imported from another module."""
    defined = {mod: _defined_names(tree.body) for mod, tree in files.items()}
    owners: dict[str, set[str]] = {}
    for mod, names in defined.items():
        if mod.split(".")[1] in STORAGE:
            for name in names:
                owners.setdefault(name, set()).add(mod)
    wrong = []
    for mod, tree in files.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or node.level or not (node.module or "").startswith("lakelog."):
                continue
            source = node.module
            if source in extensions:
                continue
            for alias in node.names:
                if f"{source}.{alias.name}" in files or f"{source}.{alias.name}" in extensions:
                    continue  # a module, not a name
                storage_source = source.split(".")[1] in STORAGE
                if alias.name in defined.get(source, ()):
                    continue
                if storage_source or alias.name in owners:
                    wrong.append(f"{mod}: from {source} import {alias.name}")
    return sorted(wrong)


def test_every_storage_name_is_imported_from_the_module_that_defines_it():
    files = {}
    for path in _tracked_python_files():
        if path.suffix == ".py":
            files[_module_name(path)] = ast.parse(path.read_text(), str(path))
    assert second_paths(files, frozenset(_extension_modules())) == []


def test_the_check_finds_a_re_export():
    files = {
        "lakelog.index.errors": ast.parse("class CorruptIndexError(Exception): pass\n"),
        "lakelog.logstore.errors": ast.parse("from lakelog.index.errors import CorruptIndexError\n"),
        "lakelog.tests.unit.x": ast.parse("from lakelog.logstore.errors import CorruptIndexError\n"),
    }
    assert second_paths(files) == ["lakelog.tests.unit.x: from lakelog.logstore.errors import CorruptIndexError"]


def test_storage_package_inits_hold_only_a_docstring():
    for pkg in STORAGE:
        for init in (ROOT / pkg).rglob("__init__.py"):
            body = ast.parse(init.read_text()).body
            assert all(isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant) for n in body), init
