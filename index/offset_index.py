"""The offset index (`.index`): a sparse map from offset to position in the segment's `.log`.

File layout: a sequence of 8-byte entries, no header (the same bytes Kafka writes):

    offset  size  field
    0       4     relative offset  uint32 big-endian  (entry offset - segment base offset)
    4       4     position         uint32 big-endian  (byte position of a batch in the .log)

An entry (O, P) says: the batch that starts at position P holds offset O as its last offset.
Entries are strictly increasing in both fields; one is written each time at least
`index.interval.bytes` of batches were appended since the previous entry. To find offset T:
take the floor entry (largest O <= T), then scan batches forward from P.

Integrity: the index carries no checksum because it is derived data. It is checked structurally
when opened (size is a multiple of 8, entries increase, positions lie inside the log) and each
lookup verifies that the batch at P really ends at O; any failure raises CorruptIndexError and
the owner rebuilds the index from the `.log`. After a crash the tail of the file may be torn or
lag behind the log; recovery of the active segment rebuilds it.

The file handling (open, append, truncate, flush, rename) is `index.abstract_index.AbstractIndex`'s.

Concurrency: not thread-safe; the owning segment serialises appends, truncation and lookups.
"""

from __future__ import annotations

import struct
import sys
from array import array
from bisect import bisect_right

from lakelog.index.abstract_index import AbstractIndex, check_entry_size
from lakelog.index.errors import CorruptIndexError
from lakelog.infra.errors import invariant

ENTRY = struct.Struct(">II")
ENTRY_SIZE = ENTRY.size
assert ENTRY_SIZE == 8


def decode(buf: bytes, *, file: str | None = None) -> tuple[array, array]:
    """Parse index bytes into (relative offsets, positions). Raises CorruptIndexError."""
    check_entry_size(buf, ENTRY, "offset index", file)
    words = array("I")
    words.frombytes(buf)
    if sys.byteorder == "little":
        words.byteswap()
    return words[0::2], words[1::2]


def encode(entries: list[tuple[int, int]]) -> bytes:
    """Encode (relative offset, position) pairs."""
    return b"".join(ENTRY.pack(r, p) for r, p in entries)


class OffsetIndex(AbstractIndex):
    """A segment's offset index: in memory for lookups, appended to its file as it grows."""

    ENTRY = ENTRY
    KIND = "offset index"
    DECODE = staticmethod(decode)
    COLUMNS = ("_rel", "_pos")  # relative offsets, positions
    _rel: array
    _pos: array

    # -- queries
    @property
    def last_offset(self) -> int:
        return self.base_offset + self._rel[-1] if self._rel else self.base_offset

    def entries(self) -> list[tuple[int, int]]:
        """(absolute offset, position) pairs."""
        return [(self.base_offset + r, p) for r, p in zip(self._rel, self._pos)]

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """Floor entry for `target_offset` as (offset, position); (base offset, 0) if none."""
        i = bisect_right(self._rel, target_offset - self.base_offset) if target_offset >= self.base_offset else 0
        if i == 0:
            return self.base_offset, 0
        return self.base_offset + self._rel[i - 1], self._pos[i - 1]

    def entry_at_or_before_position(self, position: int) -> tuple[int, int] | None:
        i = bisect_right(self._pos, position)
        return (self.base_offset + self._rel[i - 1], self._pos[i - 1]) if i else None

    def sanity_check(self, log_size: int) -> None:
        """Raise CorruptIndexError unless entries increase and point inside the log."""
        self._check_not_torn()
        prev_r = prev_p = -1
        for r, p in zip(self._rel, self._pos):
            if r <= prev_r and prev_r >= 0 or p <= prev_p or p >= max(log_size, 1):
                raise CorruptIndexError(f"offset index {self.path} entry ({self.base_offset + r}, {p}) "
                                        f"is out of order or beyond the log ({log_size} bytes)")
            prev_r, prev_p = r, p

    # -- mutations
    def append(self, offset: int, position: int) -> None:
        """Add an entry; offsets and positions must strictly increase."""
        rel = offset - self.base_offset
        invariant(0 <= rel <= 0xFFFFFFFF, f"offset {offset} does not fit segment {self.base_offset}")
        invariant(not self._rel or (rel > self._rel[-1] and position > self._pos[-1]),
                  f"index entries must increase: ({offset}, {position}) after "
                  f"({self.last_offset}, {self._pos[-1] if self._pos else -1})")
        invariant(not self.is_full, f"offset index {self.path} is full")
        self._append_entry(rel, position)

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= `offset`."""
        keep = bisect_right(self._rel, offset - 1 - self.base_offset) if offset > self.base_offset else 0
        self._truncate_entries(keep)

    def truncate_to_position(self, position: int) -> None:
        """Drop every entry pointing at or past `position`."""
        self._truncate_entries(bisect_right(self._pos, position - 1) if position > 0 else 0)
