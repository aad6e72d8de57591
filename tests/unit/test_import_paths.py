"""One import path per name: every `from lakelog.M import n` names the module that defines `n`.

A module whose body is only imports (a re-export shim) fails, and so does importing a name from a
module that merely imported it itself: moving code means moving every import with it. Package
`__init__.py` files hold a docstring and nothing else, except the packages whose `__init__` is a
deliberate public API (`PUBLIC_API_PACKAGES`). The walk covers the product packages, `tests/` and
`bench/`.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# `lakelog.client` is the Python client's public API: `from lakelog.client import Producer`.
PUBLIC_API_PACKAGES = {"lakelog.client"}


def _package_dirs() -> dict[str, Path]:
    """`lakelog.<pkg>` -> its folder, from pyproject's package-dir (what the wheel installs)."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {name: ROOT / folder for name, folder in conf["tool"]["setuptools"]["package-dir"].items()}


def _extension_modules() -> set[str]:
    """The C extensions pyproject builds (`lakelog.logstore._recordscan`, ...): modules with no .py."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {ext["name"] for ext in conf["tool"]["setuptools"].get("ext-modules", [])}


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for name, folder in _package_dirs().items():
        for f in folder.rglob("*.py"):
            rel = f.relative_to(folder).with_suffix("").parts
            parts = [p for p in rel if p != "__init__"] if rel[-1] == "__init__" else list(rel)
            out[".".join([name, *parts])] = f
    return out


def _bound_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """Names a module binds at its top level: (defined there, only imported there)."""
    defined: set[str] = set()
    imported: set[str] = set()

    def targets(node: ast.AST) -> None:
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                defined.add(n.id)

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Assign):
                for t in node.targets:
                    targets(t)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets(node.target)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    imported.add((a.asname or a.name).split(".")[0])
            elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(node, field, []) or [])
                for h in getattr(node, "handlers", []) or []:
                    visit(h.body)
                if isinstance(node, ast.For):
                    targets(node.target)
                if isinstance(node, ast.With):
                    for item in node.items:
                        if item.optional_vars is not None:
                            targets(item.optional_vars)
    visit(tree.body)
    return defined, imported - defined


def _all_files() -> list[Path]:
    files = list(_modules().values())
    for extra in ("tests", "bench"):
        files += list((ROOT / extra).rglob("*.py"))
    return files


def test_every_import_names_the_defining_module():
    modules = _modules()
    parsed = {mod: ast.parse(path.read_text(), str(path)) for mod, path in modules.items()}
    bound = {mod: _bound_names(tree) for mod, tree in parsed.items()}
    extensions = _extension_modules()
    wrong: list[str] = []
    for path in _all_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("lakelog."):
                continue
            if node.module not in modules:
                continue  # not a module of this tree (the layer test reports unknown modules)
            defined, only_imported = bound[node.module]
            for alias in node.names:
                name = alias.name
                if f"{node.module}.{name}" in modules or f"{node.module}.{name}" in extensions:
                    continue  # a submodule
                if name == "*" or (name.startswith("__") and name.endswith("__")):
                    continue  # a module's own attributes (`__doc__`)
                if node.module in PUBLIC_API_PACKAGES and path.parent.name != "client":
                    continue
                if name not in defined:
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    why = "re-exported there" if name in only_imported else "not defined there"
                    wrong.append(f"{where}: `{name}` from {node.module} ({why})")
    assert not wrong, "import each name from the module that defines it:\n" + "\n".join(sorted(wrong))


def test_no_module_is_only_reexports():
    shims = []
    for mod, path in _modules().items():
        body = ast.parse(path.read_text()).body
        code = [n for n in body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        code = [n for n in code if not (isinstance(n, ast.Assign)
                                        and any(getattr(t, "id", "") == "__all__" for t in n.targets))]
        code = [n for n in code if not (isinstance(n, ast.ImportFrom) and n.module == "__future__")]
        if code and all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in code) and mod not in PUBLIC_API_PACKAGES:
            shims.append(f"{path.relative_to(ROOT)}")
    assert not shims, "modules whose body is only imports:\n" + "\n".join(shims)


def test_package_inits_hold_only_a_docstring():
    busy = []
    for mod, path in _modules().items():
        if path.name != "__init__.py" or mod in PUBLIC_API_PACKAGES:
            continue
        body = ast.parse(path.read_text()).body
        if any(not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) for n in body):
            busy.append(str(path.relative_to(ROOT)))
    assert not busy, "package __init__.py files with code (keep a docstring only):\n" + "\n".join(busy)
