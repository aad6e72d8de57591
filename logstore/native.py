"""The optional C extension that builds and decodes record sections (`_batchbuild.c`).

`batchbuild` is the module, or None when it was not built; `NATIVE` says which. Every user
(logstore's column batches, the client's batch builder and fetcher) imports it from here and keeps
its pure-Python path as the reference.
"""

from __future__ import annotations

try:
    import lakelog.logstore._batchbuild as batchbuild
except ImportError:  # not built (optional extension): the pure-Python path
    batchbuild = None

NATIVE = batchbuild is not None
