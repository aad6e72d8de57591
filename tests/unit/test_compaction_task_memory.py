"""compaction/task_memory.py: after `bound_retention`, large blocks a task frees go back to the
system at once (counted in the process's resident memory, not timed), and Arrow's pool gives back
what it keeps."""

from __future__ import annotations

import platform

import pyarrow as pa

from lakelog.compaction import task_memory

MiB = 1024 * 1024


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_freed_reads_leave_the_resident_memory_where_it_was():
    assert platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
    assert task_memory.bound_retention() is True
    assert task_memory.bound_retention() is True  # once per process; again is a no-op
    # Free one large block first: without the fixed threshold glibc would raise its mmap
    # threshold to its size here and serve the next ones from a heap it keeps.
    big = bytearray(32 * MiB)
    del big
    before = _rss()
    reads, kept = [], []
    for _ in range(16):  # 8 MiB reads freed, 1 MiB blocks between them kept (a heap's holes)
        reads.append(bytes(bytearray(8 * MiB)))
        kept.append(bytes(bytearray(MiB)))
    held = _rss()
    del reads
    after = _rss()
    # Without the fixed threshold (measured by hand in a fresh process): 98 MiB of the 128 MiB
    # freed stayed resident, in heap holes between the kept blocks.
    assert held - before >= 120 * MiB
    assert after - before < 16 * MiB + 8 * MiB, (before, held, after)
    assert len(kept) == 16


def test_release_unused_returns_what_the_arrow_pool_keeps():
    pool = pa.default_memory_pool()
    arrays = [pa.array(range(1_000_000), pa.int64()) for _ in range(8)]
    allocated = pool.bytes_allocated()
    assert allocated >= 8 * 8_000_000
    del arrays
    task_memory.release_unused()
    assert pool.bytes_allocated() <= allocated - 8 * 8_000_000
