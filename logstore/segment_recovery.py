"""Recovering a log segment: re-read every batch, cut at the first bad one, rebuild the indexes.

`SegmentRecovery` is the part of `LogSegment` (segment.py) that recovers: `recover` re-reads the
`.log` in large chunks, checks every batch's CRC and that offsets increase, cuts the file at the
first torn or corrupt batch and rebuilds `.index` and `.timeindex` on the way; it returns how many
bytes it cut. `check_indexes` runs the indexes' structural checks and `rebuild_indexes`
regenerates them from a valid `.log`.

Concurrency: not thread-safe; the partition log serialises every call.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable

from lakelog.logstore.errors import CorruptRecordError
from lakelog.logstore.record_batch import (
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    NO_TIMESTAMP,
    RecordBatch,
    TruncatedBatchError,
    iter_batches,
)
from lakelog.logstore.segment_read import SCAN_CHUNK_BYTES, SegmentRead

if TYPE_CHECKING:
    from lakelog.logstore.segment import SegmentConfig


class SegmentRecovery(SegmentRead):
    """Recovery and index rebuilds of `LogSegment` (module doc); it reads through `SegmentRead`."""

    # Made by LogSegment.__init__ (segment.py).
    base_offset: int
    config: SegmentConfig
    _bytes_since_last_index_entry: int
    _next_offset: int | None
    _max_timestamp: int | None
    _offset_of_max_timestamp: int
    _rolling_based_timestamp: int | None

    def recover(self, on_batch: Callable[[RecordBatch], None] | None = None,
                max_batch_bytes: int | None = None) -> int:
        """Re-read every batch, cut the file at the first torn or corrupt one, rebuild indexes.

        Returns the number of bytes cut. `on_batch` sees each valid batch (to rebuild the leader
        epoch cache). Batches whose offsets do not increase are treated as corrupt.
        """
        self._read_hint = None
        self.offset_index.reset()
        self.time_index.reset()
        self._bytes_since_last_index_entry = 0
        self._max_timestamp, self._offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
        self._next_offset = self.base_offset
        valid_end = 0
        expected_min_offset = self.base_offset
        pos = 0
        stop = False
        while pos < self.size and not stop:
            data = os.pread(self._fd, min(SCAN_CHUNK_BYTES, self.size - pos), pos)
            consumed = 0
            batches: list[tuple[int, int, int, int]] = []
            try:
                for p, batch in iter_batches(data, base_position=pos, max_batch_bytes=max_batch_bytes):
                    if not batch.is_valid() or batch.base_offset < expected_min_offset:
                        stop = True
                        break
                    expected_min_offset = batch.last_offset + 1
                    batches.append((p - pos, batch.last_offset, batch.max_timestamp, batch.size_in_bytes))
                    if on_batch is not None:
                        on_batch(batch)
                    consumed = p - pos + batch.size_in_bytes
            except TruncatedBatchError:
                if consumed == 0:
                    # Either a torn tail, or one batch larger than a chunk: try it on its own.
                    _, length = HEADER.unpack_from(data, 0)[:2] if len(data) >= HEADER_SIZE else (0, -1)
                    size = length + LOG_OVERHEAD
                    whole = None
                    if len(data) < self.size - pos and pos + size <= self.size:
                        whole = RecordBatch(os.pread(self._fd, size, pos))
                    if whole is not None and whole.is_valid() and whole.base_offset >= expected_min_offset:
                        expected_min_offset = whole.last_offset + 1
                        batches.append((0, whole.last_offset, whole.max_timestamp, size))
                        if on_batch is not None:
                            on_batch(whole)
                        consumed = size
                    else:
                        stop = True
            except CorruptRecordError:
                stop = True
            self._index_recovered(pos, batches)
            pos += consumed
            valid_end = pos
            if consumed == 0:
                stop = True
        truncated = self.size - valid_end
        if truncated:
            os.ftruncate(self._fd, valid_end)
            self.size = valid_end
        self._next_offset = expected_min_offset if valid_end else self.base_offset
        self._rolling_based_timestamp = None
        return truncated

    def _index_recovered(self, chunk_position: int, batches: list[tuple[int, int, int, int]]) -> None:
        interval = self.config.index_interval_bytes
        max_ts, off_of_max = self._max_timestamp, self._offset_of_max_timestamp
        for rel, last_offset, batch_max_ts, size in batches:
            if batch_max_ts > max_ts:
                max_ts, off_of_max = batch_max_ts, last_offset
            if self._bytes_since_last_index_entry >= interval or interval == 0:
                if not self.offset_index.is_full:
                    self.offset_index.append(last_offset, chunk_position + rel)
                self.time_index.maybe_append(max_ts, off_of_max)
                self._bytes_since_last_index_entry = 0
            self._bytes_since_last_index_entry += size
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, off_of_max

    def check_indexes(self) -> None:
        """Structural checks of both indexes; raise CorruptIndexError on failure."""
        self.offset_index.sanity_check(self.size)
        self.time_index.sanity_check(self.next_offset - 1 if self.size else self.base_offset)

    def rebuild_indexes(self) -> None:
        """Regenerate `.index` and `.timeindex` from the `.log` (which must be valid)."""
        self.offset_index.reset()
        self.time_index.reset()
        self._bytes_since_last_index_entry = 0
        self._max_timestamp, self._offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
        for pos, batch in self.batches():
            self._index_recovered(0, [(pos, batch.last_offset, batch.max_timestamp, batch.size_in_bytes)])
            self._next_offset = batch.last_offset + 1
