"""key -> latest offset merged from parts in offset order, within a byte bound that is never passed.

A compaction map task adds one part per decoded chunk (the chunk's keys, each with its latest
offset); the driver adds one part per map task. The map of a prefix of parts is kept: the
longest prefix whose merged map fits `max_bytes` (`map_bytes`, see "Accounting" below), and the
first part that does not fit is reported (`add` / `finish` return
its tag), so the caller ends the map where that part starts, as Kafka's cleaner ends its offset
map where it filled (and cleans up to the offset the map covers).

Invariant (checked after every step): what the map holds -- the merged map plus the parts
waiting to be merged into it -- is at most `max_bytes`. `peak_bytes` records the most it held.

Why parts wait before they are merged: the exact size of a merged map needs the distinct keys of
the map and the part together, which a sort over both gives (`latest`; Arrow has no hash table
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
costs one sort of the map (parts x map rows; a map task's parts are its decoded chunks,
remote_split.map_chunk_rows rows each).

Accounting: an entry is counted at what it holds in Arrow's buffers (its key, a 4-byte key
position, an 8-byte offset: ENTRY_OVERHEAD_BYTES) plus what merging it costs (`latest`'s working
memory: MERGE_KEY_FACTOR x its key + MERGE_ROW_BYTES, `merge_working_bytes`), and a table at
TABLE_OVERHEAD_BYTES: `entry_bytes`, `map_bytes`. Both parts are checked against Arrow's memory
pool in tests/unit/test_compaction_bounded_map.py. So the bound covers what a merge of all that
is held really allocates, not only the map it leaves: with ~10-byte keys an entry counts ~82
bytes, where the map itself keeps ~22 (measured before this accounting, 2026-11-26: a map task
whose map counted 23 MiB added 152 MiB to its worker; a hash aggregation merged then, at ~127
bytes per key of working memory).

Memory: at most max_bytes between calls and during a merge of what waits; a merge forced by a
new part that does not fit for sure takes the map and that part, so at most max_bytes plus
that part's own count (the caller's chunk map: bounded by vectorized.CHUNK_ROWS, not by the map).

Pure apart from Arrow's buffers; not thread-safe.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from lakelog.infra.errors import invariant

#: Bytes a map entry holds beside its key: the key's 4-byte position in the key buffer, the offset.
ENTRY_OVERHEAD_BYTES = 12
#: What `latest` allocates beside its input per input row, beside MERGE_KEY_FACTOR x its key bytes:
#: the sort's indices (8), the sorted keys' positions (4), the result's position and offset (12),
#: the combined input's (12), Arrow's scratch (see merge_working_bytes).
MERGE_ROW_BYTES = 40
MERGE_KEY_FACTOR = 2
#: Bytes a map (or a waiting part) costs beside its entries: the key buffer's extra end position,
#: Arrow's padding of its three buffers to 64 bytes, and the padding of a merge's buffers.
TABLE_OVERHEAD_BYTES = 4 + 3 * 64 + 16 * 64

EMPTY_MAP = pa.table({"key": pa.array([], pa.binary()), "offset": pa.array([], pa.int64())})

Tag = TypeVar("Tag")


def entry_bytes(key_len: int) -> int:
    """What one map entry with a key of `key_len` bytes counts: held + its share of a merge."""
    return (1 + MERGE_KEY_FACTOR) * key_len + ENTRY_OVERHEAD_BYTES + MERGE_ROW_BYTES


def map_bytes(keys: pa.Array | pa.ChunkedArray) -> int:
    """The counted size of a map with these (distinct) keys: `entry_bytes` per key +
    TABLE_OVERHEAD_BYTES. At least what Arrow's memory pool holds for the map `latest` builds
    plus what `latest` allocates to merge it with others (tests/unit/test_compaction_bounded_map.py)."""
    if len(keys) == 0:
        return 0
    key_bytes = int(pc.sum(pc.binary_length(keys)).as_py() or 0)
    return (1 + MERGE_KEY_FACTOR) * key_bytes + (ENTRY_OVERHEAD_BYTES + MERGE_ROW_BYTES) * len(keys) + TABLE_OVERHEAD_BYTES


def latest(table: pa.Table, memory_pool: pa.MemoryPool | None = None) -> pa.Table:
    """key -> max(offset) over a (key, offset) table without null keys, as a (key, offset) table
    with distinct keys (in key order), its buffers from `memory_pool` (default: Arrow's).

    A sort, not Arrow's hash aggregation: measured on 1M distinct 10-byte keys, the aggregation
    allocated 127 B per key from Arrow's pool besides its input (its hash table, the grouper's
    own copy of every key and per-thread states), and the worker's resident memory grew by 172 MiB
    for a map of 21 MiB, as the pool's allocator kept what the threads had freed. The sort's
    working memory is what `merge_working_bytes` counts, allocated on the calling thread."""
    if table.num_rows == 0:
        return EMPTY_MAP
    pool = memory_pool
    keys = table.column("key").combine_chunks(memory_pool=pool)
    offsets = table.column("offset").combine_chunks(memory_pool=pool)
    order = pc.sort_indices(pa.table({"key": keys, "offset": offsets}),
                            sort_keys=[("key", "ascending"), ("offset", "ascending")], memory_pool=pool)
    ordered = pc.take(keys, order, memory_pool=pool)
    # The last row of each run of equal keys holds its largest offset.
    last = pa.concat_arrays([pc.not_equal(ordered.slice(0, len(ordered) - 1), ordered.slice(1), memory_pool=pool),
                             pa.array([True], pa.bool_(), memory_pool=pool)], memory_pool=pool)
    del ordered
    chosen = pc.filter(order, last, memory_pool=pool)
    del order, last
    out_keys = pc.take(keys, chosen, memory_pool=pool)
    out_offsets = pc.take(offsets, chosen, memory_pool=pool)
    # No key is null: drop the validity bitmaps `take` allocates (the map is key bytes + 12 per key).
    out_keys = pa.Array.from_buffers(pa.binary(), len(out_keys), [None] + out_keys.buffers()[1:])
    out_offsets = pa.Array.from_buffers(pa.int64(), len(out_offsets), [None] + out_offsets.buffers()[1:])
    return pa.table({"key": out_keys, "offset": out_offsets})


def merge_working_bytes(key_bytes: int, rows: int) -> int:
    """An upper bound of the most `latest` allocates beside its input for `rows` rows holding
    `key_bytes` key bytes (tests/unit/test_compaction_bounded_map.py checks it against Arrow's
    memory pool): the combined key and offset columns, the sort's indices, the sorted keys, then
    the result, with Arrow's 64-byte padding of each buffer."""
    return MERGE_KEY_FACTOR * key_bytes + MERGE_ROW_BYTES * rows + 16 * 64


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
        #: Rows given to `latest` by the merges so far: the work the merges did.
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
