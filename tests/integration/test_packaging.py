"""The wheel built from the tree: one top-level import package, `lakelog`, with every package folder.

The tree is copied (package folders, `pyproject.toml`, `README.md`) to a temporary directory first,
so the build leaves no `build/` or `*.egg-info` behind in the working tree. The wheel is then
installed into its own target directory and `python -m lakelog.cli --help` runs from there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(600)


def _package_dirs() -> dict[str, str]:
    """`lakelog.<package>` -> folder, as pyproject.toml maps them."""
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return conf["tool"]["setuptools"]["package-dir"]


def _copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.pyc")
    for folder in sorted(set(_package_dirs().values())):
        shutil.copytree(ROOT / folder, dest / folder, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    out = tmp_path_factory.mktemp("wheel")
    _copy_tree(src)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out), str(src)], check=True, cwd=src, timeout=540)
    wheels = list(out.glob("lakelog-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_the_only_top_level_package_is_lakelog(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        top_level = [z.read(n).decode() for n in names if n.endswith(".dist-info/top_level.txt")]
    roots = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert roots == {"lakelog"}, roots
    assert "lakelog/__init__.py" not in names  # a namespace package: nothing else claims `lakelog`
    assert all(t.split() == ["lakelog"] for t in top_level), top_level


def test_the_wheel_holds_every_package_folder_and_the_c_extension(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    expected = []
    for package, folder in _package_dirs().items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            expected.append("/".join([*package.split("."), *rel.parts, "__init__.py"]))
    assert len(expected) >= len(_package_dirs())
    missing = [e for e in expected if e not in names]
    assert not missing, missing
    # every module of the tree, not only the package markers
    modules = [f"{package.replace('.', '/')}/{py.relative_to(ROOT / folder).as_posix()}"
               for package, folder in _package_dirs().items() for py in (ROOT / folder).rglob("*.py")]
    assert not [m for m in modules if m not in names]
    assert [n for n in names if re.fullmatch(r"lakelog/logstore/_recordscan\.[^/]*\.so", n)], \
        "the C extension lakelog.logstore._recordscan is not in the wheel"
    assert [n for n in names if re.fullmatch(r"lakelog/logstore/_batchbuild\.[^/]*\.so", n)], \
        "the producer's C extension lakelog.logstore._batchbuild is not in the wheel"
    assert [n for n in names if re.fullmatch(r"lakelog/logstore/_arrowscan\.[^/]*\.so", n)], \
        "the native decoder lakelog.logstore._arrowscan is not in the wheel"
    assert "lakelog/infra/pom.xml" in names
    # The web console: its own files, and the libraries `make console` copied from npm.
    for name in ("index.html", "app.js", "style.css", "vendor/preact.mjs", "vendor/uPlot.esm.js"):
        assert f"lakelog/ingest_api/console/{name}" in names, name


def test_the_installed_wheel_runs_the_cli(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q", "--target",
                    str(site), str(wheel)], check=True, timeout=300)
    env = {**os.environ, "PYTHONPATH": str(site)}
    where = subprocess.run(
        [sys.executable, "-c", "import lakelog.cli.main as m, lakelog.logstore._recordscan as c; "
                               "print(m.__file__); print(c.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    assert all(line.startswith(str(site)) for line in where.stdout.split()), where.stdout  # the wheel's copy
    out = subprocess.run([sys.executable, "-m", "lakelog.cli", "--help"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "usage:" in out.stdout and "topics" in out.stdout and "produce" in out.stdout, out.stdout
