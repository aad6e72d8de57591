"""The native decoder (logstore/_arrowscan.c) on executors of a cluster where Lakelog is not
installed: `session.ship_packages` adds the built extension with `addFile` (an extension cannot be
imported from the packages zip) and tasks call `load_shipped_extension()` before decoding.
`prepare_executor()` is what every executor-side entry point calls first: the shipped third-party
packages (spark_log/executor_deps.py), then the decoder."""

from __future__ import annotations

import sys
from pathlib import Path


def native_extension_path() -> Path | None:
    """The built native decoder (logstore/_arrowscan*.so) of this installation, if any."""
    from lakelog.logstore import record_arrow

    module = record_arrow._arrowscan
    path = getattr(module, "__file__", None) if module is not None else None
    return Path(path) if path else None


def load_shipped_extension() -> bool:
    """In an executor: make the native decoder importable from the file `ship_packages` added
    (an extension cannot load from the packages zip). True when the decoder is available; an
    executor whose Python ABI differs from the driver's keeps the pure-Python reader."""
    from lakelog.logstore import record_arrow

    if record_arrow._arrowscan is not None:
        return True
    name = "lakelog.logstore._arrowscan"
    try:
        from pyspark import SparkFiles

        root = SparkFiles.getRootDirectory()
    except Exception:  # noqa: BLE001 - not in a Spark worker
        return False
    import importlib.machinery
    import importlib.util

    for path in sorted(Path(root).glob("_arrowscan*.so")):
        try:
            loader = importlib.machinery.ExtensionFileLoader(name, str(path))
            spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
            module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
            loader.exec_module(module)
        except ImportError:
            continue
        sys.modules[name] = module
        record_arrow._arrowscan = module
        return True
    return False


def prepare_executor() -> None:
    """Make what the application shipped importable in this Python worker: the third-party
    packages (`lakelog_deps.zip`), then the native decoder. Cheap after the first call."""
    from lakelog.spark_log.executor_deps import load_shipped_deps

    load_shipped_deps()
    load_shipped_extension()
