"""Keep a compaction task's resident memory at what it holds, not at what its allocators keep.

Measured in one map task over 128 MB of a segment of 100 B values (bench/spark_memory.py's
`compaction-map` case, 2026-11-26): after the offset map's merge became a sort, the worker's
peak resident memory was 86 MiB above its start while Arrow's pool never held more than 21 MiB.
The rest was memory already freed but kept by two allocators:

  * glibc's malloc raises its mmap threshold (from 128 KiB up to 32 MiB) each time a large
    block is freed, so the 8 MiB reads of the segment and the decoder's column buffers that
    follow come from the heap, and freed heap blocks are reused but seldom returned;
  * mimalloc (Arrow's default pool) keeps freed pages for a while before it returns them.

`bound_retention` fixes glibc's threshold at its default 128 KiB (a fixed value turns the dynamic
raise off), so every block above it is mapped and unmapped on its own; `release_unused` asks
Arrow's pool to return what it keeps, between two chunks of a task. Together: 86 -> 56 MiB in the
same case. Both change only where memory comes from, never a result.

The threshold is a setting of the whole process (a Spark Python worker runs one task at a time,
and keeps the setting for the tasks after it); on a libc without mallopt (not glibc) it is left as
it is. Thread-safe (glibc serialises mallopt; Arrow's pool is thread-safe).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import pyarrow as pa

#: glibc's M_MMAP_THRESHOLD parameter, and the value it starts with.
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 128 * 1024

_done = False


def bound_retention() -> bool:
    """Fix glibc's mmap threshold at MMAP_THRESHOLD_BYTES (once per process); True when set."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _done = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
    return _done


def release_unused() -> None:
    """Ask Arrow's default pool to return the memory it keeps freed (between two chunks of a task)."""
    pa.default_memory_pool().release_unused()
