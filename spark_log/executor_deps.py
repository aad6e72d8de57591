"""The third-party Python packages Lakelog's code imports on executors, shipped with the job so a
cluster's Python needs only pyspark and pyarrow.

What an executor (and the driver-side Python worker that plans a `lakelog` read) imports beyond
pyspark and pyarrow: boto3 for an S3 remote root (with botocore, s3transfer, jmespath,
python-dateutil, urllib3, six), httpx (with its own dependencies) for the nodes' hot tail, the codec libraries of compressed topics (cramjam for snappy,
lz4, zstandard; gzip is the standard library's), crc32c (which has fallbacks), and protobuf
(`google.protobuf` and its C accelerator `google._upb`) for the Protobuf values of typed tables,
views and the `valueFormat` option (decoded in Python on the executors: `schema_columns`). They are written
into one zip, `lakelog_deps.zip`, added to the application with `addFile` (or `--files` under
spark-submit). botocore reads its service models from files, which it cannot do from inside a zip,
so the zip is not put on `sys.path` as it is: each executor extracts it once into its SparkFiles
directory (a temporary folder renamed into place, so concurrent Python workers of one executor
never see half a folder) and appends that folder to `sys.path`. Appended, not prepended: packages
the executor's Python already has win. Of botocore's models only S3's (and the shared endpoint and
retry files) are shipped: about 1 MB instead of 30.

The compiled packages (the codecs, crc32c, protobuf's upb) are the driver's build: an executor whose Python ABI
or platform differs fails to import them, and then only compressed topics of that codec fail
(gzip and uncompressed topics need none of them); protobuf then falls back to its pure-Python
implementation by itself (slower, same results).

Names are import names; a dotted one (`google.protobuf`) is shipped as its folder under its
parents' (`google/protobuf/`), and `google` stays a namespace package, so an executor's own
`google.*` packages still import beside it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
import zipfile
from pathlib import Path

DEPS_ZIP = "lakelog_deps.zip"
#: Top-level import names shipped (the distribution of each is what pip installs for Lakelog).
SHIPPED_MODULES = ("boto3", "botocore", "s3transfer", "jmespath", "dateutil", "urllib3", "six",
                   "crc32c", "cramjam", "lz4", "zstandard",
                   # the nodes' hot tail (`nodes` option, `lakelog.<topic>` in SQL) is read with httpx
                   "httpx", "httpcore", "h11", "anyio", "sniffio", "idna", "certifi", "typing_extensions",
                   # Protobuf values (typed tables, views, the valueFormat option)
                   "google.protobuf", "google._upb")
#: botocore's model folders shipped (`botocore/data/<service>`): only what the S3 store calls.
BOTOCORE_SERVICES = ("s3",)
EXTRACTED_DIR = "lakelog_deps"

_ready: str | None = None


def _module_root(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except ImportError:  # a dotted name whose parent is not installed
        return None
    if spec is None:
        return None
    if spec.origin is None or spec.origin == "namespace":  # a namespace package (google._upb): its folder
        locations = list(spec.submodule_search_locations or [])
        return Path(locations[0]) if locations else None
    origin = Path(spec.origin)
    return origin.parent if spec.submodule_search_locations else origin


def _wanted(rel: Path) -> bool:
    """Whether a file under a shipped module goes into the zip."""
    parts = rel.parts
    if "__pycache__" in parts or rel.suffix in (".pyc", ".pyi"):
        return False
    if parts[0] == "botocore" and len(parts) > 2 and parts[1] == "data":
        return len(parts) == 3 or parts[2] in BOTOCORE_SERVICES
    if parts[0] == "zstandard" and rel.name.startswith("_cffi"):
        return False  # the cffi backend needs cffi; the C backend is the default
    return True


def write_deps_zip(path: Path, modules: tuple[str, ...] = SHIPPED_MODULES) -> Path:
    """The installed copies of `modules` (those this Python has) as a zip; returns `path`."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name in modules:
            root = _module_root(name)
            if root is None:
                continue
            folder = Path(*name.split("."))
            if root.is_file():
                z.write(root, (folder.parent / root.name).as_posix())
                continue
            for f in sorted(root.rglob("*")):
                rel = folder / f.relative_to(root)
                if f.is_file() and _wanted(rel):
                    z.write(f, rel.as_posix())
    return path


def load_shipped_deps(root: str | None = None) -> str | None:
    """In a Spark Python worker: extract the shipped `lakelog_deps.zip` (once per SparkFiles
    directory) and append it to `sys.path`. Returns the folder, or None when nothing was shipped
    (a local master, or a cluster whose Python has Lakelog's dependencies installed)."""
    global _ready
    if root is None:
        try:
            from pyspark import SparkFiles

            root = SparkFiles.getRootDirectory()
        except Exception:  # noqa: BLE001 - not in a Spark worker, or no SparkContext here
            return None
    if not root:
        return None
    target = Path(root) / EXTRACTED_DIR
    if _ready == str(target):
        return _ready
    shipped = Path(root) / DEPS_ZIP
    if not target.is_dir():
        if not shipped.is_file():
            return None
        staging = tempfile.mkdtemp(prefix=".deps-", dir=root)
        with zipfile.ZipFile(shipped) as z:
            z.extractall(staging)
        try:
            os.rename(staging, target)
        except OSError:  # another Python worker of this executor was first: use its folder
            import shutil

            shutil.rmtree(staging, ignore_errors=True)
    if str(target) not in sys.path:
        sys.path.append(str(target))
        importlib.invalidate_caches()
    _ready = str(target)
    return _ready
