"""key -> latest offset merged from parts in offset order, within a byte bound that is never passed.

A compaction map task adds one part per decoded chunk (the chunk's keys, each with its latest
offset); the driver adds one part per map task. The map of a prefix of parts is kept: the
longest prefix whose merged map fits `max_bytes` (`map_bytes`: key bytes + ENTRY_OVERHEAD_BYTES
per distinct key), and the first part that does not fit is reported (`add` / `finish` return
its tag), so the caller ends the map where that part starts, as Kafka's cleaner ends its offset
map where it filled (and cleans up to the offset the map covers).

Invariant (checked after every step): what the map holds -- the merged map plus the parts
waiting to be merged into it -- is at most `max_bytes`. `peak_bytes` records the most it held.

Why parts wait before they are merged: the exact size of a merged map needs the distinct keys of
the map and the part together, which a hash aggregation over both gives (Arrow has no hash table
that lives between calls), so a merge costs the whole map. The parts wait in a list instead; a
part's keys are distinct, so the sizes summed are an upper bound of what the waiting parts add:

  * while map + waiting parts + the new part <= max_bytes, the merged map fits for sure: the part
    waits, nothing is merged;
  * past that, the waiting parts are merged into the map (they fit for sure: at most max_bytes
    together), and the new part waits if map + part now fits for sure; else it is merged into the
    map at once, and if the result passes the bound, it is the first part that does not fit
    (the map stays as it was without it) and the map is final. A part larger than the bound on
    its own never fits (the merged map holds all its keys) and is refused without a merge.

So a merge happens only when the bound forces it, and each merge takes in everything that waits.
The result equals merging part by part and checking the bound after each (the reference the unit
test compares against). Work (`rows_grouped` counts the rows given to the aggregation): linear in
the parts' sizes while the map stays at most half the bound, or keeps growing by new keys; the
worst case is a map close to its bound whose later parts repeat its keys, where each part
costs one aggregation of the map (parts x map rows; a map task's parts are its decoded chunks,
vectorized.CHUNK_ROWS rows each).

Memory: at most max_bytes held between calls; during a merge, Arrow's aggregation builds the
merged map (at most max_bytes, it replaces the inputs) beside its inputs, plus the part the
caller passed in, which the caller holds anyway.

Pure apart from Arrow's buffers; not thread-safe.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from lakelog.infra.errors import invariant

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
    """Parts added in offset order, merged when the bound forces it (see the module docstring)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._map: pa.Table = EMPTY_MAP
        self._map_bytes = 0
        self._waiting: list[pa.Table] = []
        self._waiting_bytes = 0
        self._failed: Tag | None = None
        self._closed = False
        #: Rows given to the hash aggregation so far: the work the merges did.
        self.rows_grouped = 0
        #: The most bytes the map held (merged map + waiting parts) after any step: <= max_bytes.
        self.peak_bytes = 0

    @property
    def held_bytes(self) -> int:
        """Bytes held now: the merged map's plus the waiting parts' (an upper bound of their merge)."""
        return self._map_bytes + self._waiting_bytes

    def add(self, part: pa.Table, tag: Tag) -> Tag | None:
        """Add the next part (a (key, offset) table with distinct keys). Returns the tag of the first
        part that does not fit, once known (then the map is final and takes no more parts), else None."""
        if self._closed:
            raise ValueError("the map is final: a part did not fit or finish() was called")
        size = map_bytes(part.column("key"))
        if self.held_bytes + size > self.max_bytes:
            self._merge_waiting()
            if size > self.max_bytes:  # the merged map would hold all its keys: it cannot fit
                self._fail(tag)
            elif self._map_bytes + size > self.max_bytes:
                merged = self._merged([self._map, part])
                merged_bytes = map_bytes(merged.column("key"))
                if merged_bytes <= self.max_bytes:
                    self._map, self._map_bytes = merged, merged_bytes
                else:
                    self._fail(tag)
                self._held()
                return self._failed
        if not self._closed:
            self._waiting.append(part)
            self._waiting_bytes += size
        self._held()
        return self._failed

    def finish(self) -> Tag | None:
        """Merge what waits; the tag of the first part that did not fit, or None. The map is final."""
        if not self._closed:
            self._merge_waiting()
        self._closed = True
        return self._failed

    @property
    def table(self) -> pa.Table:
        """The merged map: (key binary, offset int64), keys distinct, chunks combined. After finish()."""
        if not self._closed:
            raise ValueError("finish() first")
        return self._map

    def _fail(self, tag: Tag) -> None:
        self._failed = tag
        self._closed = True

    def _held(self) -> None:
        held = self.held_bytes
        invariant(held <= self.max_bytes, f"the offset map holds {held} bytes, over its bound {self.max_bytes}")
        self.peak_bytes = max(self.peak_bytes, held)

    def _merged(self, tables: list[pa.Table]) -> pa.Table:
        self.rows_grouped += sum(t.num_rows for t in tables)
        return latest(pa.concat_tables(tables))

    def _merge_waiting(self) -> None:
        """Merge the waiting parts into the map: it fits for sure (held_bytes <= max_bytes)."""
        if not self._waiting:
            return
        merged = self._merged([self._map] + self._waiting)
        self._map, self._map_bytes = merged, map_bytes(merged.column("key"))
        self._waiting, self._waiting_bytes = [], 0
        self._held()
