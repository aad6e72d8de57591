"""The segments of one partition log, in base-offset order (Kafka's LogSegments).

`LogSegments` keeps the list and the parallel list of base offsets it binary-searches; it adds
segments in order, finds the one holding an offset, removes leading or trailing runs and replaces
a consecutive run by compacted segments. `repairing` runs an index-guided lookup on a segment and,
if the index proves wrong, rebuilds it and runs the lookup again (recorded in
`index_rebuilds_on_read`).

Invariants: base offsets strictly increase; the last segment is the active one.

Concurrency: not thread-safe; the partition log calls it under its lock (or while it opens).
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Callable, Iterator, TypeVar

from lakelog.index.errors import CorruptIndexError
from lakelog.infra.errors import invariant
from lakelog.logstore.segment import LogSegment

T = TypeVar("T")


class LogSegments:
    """The ordered segments of a partition log (module doc)."""

    def __init__(self) -> None:
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        #: Base offsets of segments whose index a read found wrong and rebuilt.
        self.index_rebuilds_on_read: list[int] = []

    def __len__(self) -> int:
        return len(self._segments)

    def __iter__(self) -> Iterator[LogSegment]:
        return iter(self._segments)

    def __getitem__(self, i: int) -> LogSegment:
        return self._segments[i]

    def to_list(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active(self) -> LogSegment:
        return self._segments[-1]

    def index_for(self, offset: int) -> int:
        """The position of the segment that holds `offset` (the floor by base offset; 0 below all)."""
        return max(0, bisect_right(self._bases, offset) - 1)

    def from_offset(self, offset: int) -> list[LogSegment]:
        """The segment holding `offset` and every later one."""
        return self._segments[self.index_for(offset):]

    def starting_at(self, base_offset: int) -> LogSegment | None:
        """The segment whose base offset is exactly `base_offset`, if any."""
        i = bisect_right(self._bases, base_offset) - 1
        return self._segments[i] if i >= 0 and self._bases[i] == base_offset else None

    def add(self, seg: LogSegment) -> None:
        invariant(not self._bases or seg.base_offset > self._bases[-1], "segments must be added in order")
        self._segments.append(seg)
        self._bases.append(seg.base_offset)

    def pop_last(self) -> LogSegment:
        self._bases.pop()
        return self._segments.pop()

    def remove_first(self, count: int) -> list[LogSegment]:
        """Remove (but do not delete) the first `count` segments; returns them."""
        gone = self._segments[:count]
        del self._segments[:count]
        del self._bases[:count]
        return gone

    def remove_after(self, i: int) -> list[LogSegment]:
        """Remove (but do not delete) every segment after position `i`; returns them."""
        gone = self._segments[i + 1:]
        del self._segments[i + 1:]
        del self._bases[i + 1:]
        return gone

    def clear(self) -> list[LogSegment]:
        """Remove (but do not delete) every segment; returns them."""
        return self.remove_after(-1)

    def position_of(self, seg: LogSegment) -> int | None:
        try:
            return self._segments.index(seg)
        except ValueError:
            return None

    def replace(self, first: int, last: int, new_segments: list[LogSegment]) -> None:
        """Put `new_segments` in place of positions [first, last]."""
        self._segments[first: last + 1] = new_segments
        self._bases = [s.base_offset for s in self._segments]

    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def repairing(self, seg: LogSegment, lookup: Callable[[], T]) -> T:
        """Run an index-guided lookup; if the index proves wrong, rebuild it and run it again."""
        try:
            return lookup()
        except CorruptIndexError:
            seg.rebuild_indexes()
            self.index_rebuilds_on_read.append(seg.base_offset)
            return lookup()
