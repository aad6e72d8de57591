"""key -> latest offset merged from parts in offset order, within a byte bound, in linear work.

A compaction map task adds one part per decoded chunk (the chunk's keys, each with its latest
offset); the driver adds one part per map task. The map of a prefix of parts is kept: the
longest prefix whose merged map fits `max_bytes` (`map_bytes`: key bytes + ENTRY_OVERHEAD_BYTES
per distinct key), and the first part that does not fit is reported (`add` / `finish` return
its tag), so the caller ends the map where that part starts, as Kafka's cleaner ends its offset
map where it filled.

Why parts wait before they are merged: the exact size of a merged map needs the distinct keys of
the map and the part together, which a hash aggregation over both gives (Arrow has no hash table
that lives between calls). Merging every part as it comes costs the whole map per part, so
chunks x map size. Instead the parts wait in a list, and their sizes summed are an upper bound
of what they add (a part's keys are distinct, but may already be in the map):

  * while map + waiting parts <= max_bytes, the merged map fits for sure: nothing is merged;
  * past that, the waiting parts are merged into the map only once they hold at least as many
    bytes as the map itself, so each merge costs at most twice the bytes it takes in (the work
    stays linear in the parts' sizes, `rows_grouped` counts it);
  * a merge that does not fit finds the first part that does not, by bisection over the waiting
    parts (the merged size only grows with more parts), once per map: about log2(waiting parts)
    merges of the map with a share of the waiting parts.

The result equals merging part by part and checking the bound after each (the reference the unit
test compares against). Memory: the map (<= max_bytes) plus waiting parts of at most as many
bytes, so twice the bound, plus what the caller holds.

Pure apart from Arrow's buffers; not thread-safe.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

#: Bytes a map entry costs beside its key: the key's 4-byte position in the key buffer, the offset.
ENTRY_OVERHEAD_BYTES = 12

EMPTY_MAP = pa.table({"key": pa.array([], pa.binary()), "offset": pa.array([], pa.int64())})

Tag = TypeVar("Tag")


def map_bytes(keys: pa.Array | pa.ChunkedArray) -> int:
    """The bounded size of a map with these (distinct) keys: key bytes + ENTRY_OVERHEAD_BYTES per key."""
    if len(keys) == 0:
        return 0
    return int(pc.sum(pc.binary_length(keys)).as_py() or 0) + ENTRY_OVERHEAD_BYTES * len(keys)


def latest(table: pa.Table) -> pa.Table:
    """key -> max(offset) over a (key, offset) table, as a (key, offset) table with distinct keys."""
    out = table.group_by("key").aggregate([("offset", "max")])
    return pa.table({"key": out.column("key").combine_chunks(), "offset": out.column("offset_max").combine_chunks()})


class BoundedLatestMap(Generic[Tag]):
    """Parts added in offset order, merged lazily (see the module docstring)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._map: pa.Table = EMPTY_MAP
        self._map_bytes = 0
        self._waiting: list[tuple[pa.Table, int, Tag]] = []  # (part, its bytes, its tag)
        self._waiting_bytes = 0
        self._failed: Tag | None = None
        self._closed = False
        #: Rows given to the hash aggregation so far: the work the merges did.
        self.rows_grouped = 0

    def add(self, part: pa.Table, tag: Tag) -> Tag | None:
        """Add the next part (a (key, offset) table with distinct keys). Returns the tag of the first
        part that does not fit, once known (then the map is final and takes no more parts), else None."""
        if self._closed:
            raise ValueError("the map is final: a part did not fit or finish() was called")
        size = map_bytes(part.column("key"))
        self._waiting.append((part, size, tag))
        self._waiting_bytes += size
        if self._map_bytes + self._waiting_bytes > self.max_bytes and self._waiting_bytes >= self._map_bytes:
            self._merge_waiting()
        return self._failed

    def finish(self) -> Tag | None:
        """Merge what waits; the tag of the first part that did not fit, or None. The map is final."""
        if not self._closed and self._waiting:
            self._merge_waiting()
        self._closed = True
        return self._failed

    @property
    def table(self) -> pa.Table:
        """The merged map: (key binary, offset int64), keys distinct, chunks combined. After finish()."""
        if not self._closed:
            raise ValueError("finish() first")
        return self._map

    def _merged(self, base: pa.Table, parts: list[tuple[pa.Table, int, Tag]]) -> pa.Table:
        tables = [base] + [p for p, _, _ in parts]
        self.rows_grouped += sum(p.num_rows for p in tables)
        return latest(pa.concat_tables(tables))

    def _merge_waiting(self) -> None:
        merged = self._merged(self._map, self._waiting)
        size = map_bytes(merged.column("key"))
        if size <= self.max_bytes:
            self._map, self._map_bytes = merged, size
            self._waiting, self._waiting_bytes = [], 0
            return
        # The first part that does not fit, by bisection: `fits` waiting parts are known to fit
        # (their map is `best`), `too_many` are known not to; each step merges only the parts
        # between the two into `best`.
        fits, too_many = 0, len(self._waiting)
        best, best_size = self._map, self._map_bytes
        while too_many - fits > 1:
            mid = (fits + too_many) // 2
            candidate = self._merged(best, self._waiting[fits:mid])
            candidate_size = map_bytes(candidate.column("key"))
            if candidate_size <= self.max_bytes:
                fits, best, best_size = mid, candidate, candidate_size
            else:
                too_many = mid
        self._failed = self._waiting[fits][2]
        self._map, self._map_bytes = best, best_size
        self._waiting, self._waiting_bytes = [], 0
        self._closed = True
