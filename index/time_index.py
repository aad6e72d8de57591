"""The time index (`.timeindex`): a sparse map from timestamp to offset.

File layout: a sequence of 12-byte entries, no header (the same bytes Kafka writes):

    offset  size  field
    0       8     timestamp        int64 big-endian  (a batch's max timestamp, ms)
    8       4     relative offset  uint32 big-endian (that batch's last offset - base offset)

Entries are strictly increasing in timestamp and non-decreasing in offset: an entry is added
(with the offset index entry) only when the segment's max timestamp so far grew. So an entry
(T, O) says: no record at an offset <= O has a timestamp above T. To find the first offset whose
timestamp is >= t, start the scan after the last entry with T < t (or at the segment start).

Integrity and crash behaviour are as for the offset index: structural checks on open, rebuilt
from the `.log` when they fail or after an unclean shutdown of the active segment.

The file handling (open, append, truncate, flush, rename) is `index.abstract_index.AbstractIndex`'s.

Concurrency: not thread-safe; the owning segment serialises access.
"""

from __future__ import annotations

import struct
from bisect import bisect_left

from lakelog.index.abstract_index import AbstractIndex, check_entry_size
from lakelog.index.errors import CorruptIndexError
from lakelog.infra.errors import invariant

ENTRY = struct.Struct(">qI")
ENTRY_SIZE = ENTRY.size
assert ENTRY_SIZE == 12


def decode(buf: bytes, *, file: str | None = None) -> tuple[list[int], list[int]]:
    """Parse time index bytes into (timestamps, relative offsets). Raises CorruptIndexError."""
    check_entry_size(buf, ENTRY, "time index", file)
    ts: list[int] = []
    rel: list[int] = []
    for t, r in ENTRY.iter_unpack(buf):
        ts.append(t)
        rel.append(r)
    return ts, rel


def encode(entries: list[tuple[int, int]]) -> bytes:
    """Encode (timestamp, relative offset) pairs."""
    return b"".join(ENTRY.pack(t, r) for t, r in entries)


class TimeIndex(AbstractIndex):
    """A segment's time index: in memory for lookups, appended to its file as it grows."""

    ENTRY = ENTRY
    KIND = "time index"
    DECODE = staticmethod(decode)
    COLUMNS = ("_ts", "_rel")  # timestamps, relative offsets
    _ts: list[int]
    _rel: list[int]

    @property
    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, absolute offset) of the last entry."""
        return (self._ts[-1], self.base_offset + self._rel[-1]) if self._ts else None

    def entries(self) -> list[tuple[int, int]]:
        """(timestamp, absolute offset) pairs."""
        return [(t, self.base_offset + r) for t, r in zip(self._ts, self._rel)]

    def last_entry_before(self, timestamp: int) -> tuple[int, int] | None:
        """The last entry whose timestamp is strictly below `timestamp`, as (timestamp, offset)."""
        i = bisect_left(self._ts, timestamp)
        return (self._ts[i - 1], self.base_offset + self._rel[i - 1]) if i else None

    def sanity_check(self, last_offset: int) -> None:
        self._check_not_torn()
        prev_t, prev_r = None, -1
        for t, r in zip(self._ts, self._rel):
            if (prev_t is not None and t <= prev_t) or r < prev_r or self.base_offset + r > last_offset:
                raise CorruptIndexError(f"time index {self.path} entry ({t}, {self.base_offset + r}) "
                                        f"is out of order or beyond the last offset {last_offset}")
            prev_t, prev_r = t, r

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Add (timestamp, offset) if `timestamp` is above the last entry's; return whether added."""
        if self._ts and timestamp <= self._ts[-1]:
            return False
        rel = offset - self.base_offset
        invariant(0 <= rel <= 0xFFFFFFFF, f"offset {offset} does not fit segment {self.base_offset}")
        invariant(not self._rel or rel >= self._rel[-1], "time index offsets must not decrease")
        if self.is_full:
            return False
        self._append_entry(timestamp, rel)
        return True

    def truncate_to(self, offset: int) -> None:
        """Drop every entry whose offset is >= `offset`."""
        keep = len(self._rel)
        while keep and self.base_offset + self._rel[keep - 1] >= offset:
            keep -= 1
        self._truncate_entries(keep)
