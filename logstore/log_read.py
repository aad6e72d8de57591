"""Reading the partition log: fetches, batch iteration, segment snapshots, lookups (`PartitionLog`, log.py).

`LogReader` is the part of `PartitionLog` that reads: `read` (whole batches from the one holding an
offset, bounded in bytes and below a max offset, as a fetch), `batches` and `open_segment_reader`
(through private file descriptors, unaffected by later retention, swaps or close),
`offset_for_timestamp` and `end_offset_for_epoch` (OffsetsForLeaderEpoch). Lookups follow the
design: binary search of segments by base offset, the floor entry of the sparse offset index, then a
forward scan; an index that proves wrong on a read is rebuilt and the lookup run again
(`LogState._repairing`, log_state.py; recorded in `index_rebuilds_on_read`). `FetchResult` is what a read answers.

Concurrency: every public method takes the log's lock; what it returns is copied out of the files.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Iterator

from lakelog.logstore.errors import OffsetOutOfRangeError, SegmentsChangedError
from lakelog.logstore.log_state import LogState
from lakelog.logstore.record_batch import RecordBatch
from lakelog.logstore.file_records import SegmentReader


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Whole batches read from the log, CRC-checked, plus the log's bounds at read time."""

    records: bytes | memoryview  # whole batches; a memoryview of a private buffer is possible
    first_offset: int  # base offset of the first batch returned (may be below the offset asked)
    log_start_offset: int
    log_end_offset: int


class LogReader(LogState):
    """Reads and lookups of `PartitionLog` (module doc); the log's state is made in log.py."""

    def _segment_index_for(self, offset: int) -> int:
        return max(0, bisect_right(self._bases, offset) - 1)

    def read(self, start_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> FetchResult:
        """Whole batches from the one holding `start_offset`, at most `max_bytes` (but at least one
        batch when `min_one_batch`), all below `max_offset` (exclusive; a consumer passes the HW).

        Raises OffsetOutOfRangeError below the log start offset or above the LEO.
        """
        with self._lock:
            self._check_open()
            leo = self.log_end_offset
            if start_offset < self.log_start_offset or start_offset > leo:
                raise OffsetOutOfRangeError(f"offset {start_offset} is out of range "
                                            f"[{self.log_start_offset}, {leo}]")
            bound = leo if max_offset is None else min(max_offset, leo)
            if start_offset >= bound:
                return FetchResult(b"", start_offset, self.log_start_offset, leo)
            i = self._segment_index_for(start_offset)
            chunks: list[bytes] = []
            first_offset = -1
            remaining = max_bytes
            while i < len(self._segments) and (remaining > 0 or not chunks):
                seg = self._segments[i]
                got = self._repairing(seg, lambda: seg.read(start_offset, remaining, max_offset=bound,
                                                            min_one_batch=min_one_batch and not chunks))
                i += 1
                if got is None:
                    if chunks:
                        break
                    continue  # nothing at or after start_offset here (a compacted gap): next segment
                _, data, last = got
                if first_offset < 0:
                    first_offset = RecordBatch(data).base_offset
                chunks.append(data)
                remaining -= len(data)
                if last + 1 >= bound or last + 1 < seg.next_offset:
                    break  # at the bound, or out of bytes inside this segment: never skip batches
                start_offset = last + 1
            records = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            return FetchResult(records, first_offset if records else start_offset, self.log_start_offset, leo)

    def batches(self, start_offset: int | None = None, *, max_offset: int | None = None
                ) -> Iterator[RecordBatch]:
        """Every CRC-checked batch from `start_offset` (default: log start) below `max_offset`.

        Iterates a snapshot of the segments through private file descriptors, so concurrent
        appends, retention or compaction swaps never break an iteration in progress.
        """
        with self._lock:
            self._check_open()
            start = self.log_start_offset if start_offset is None else start_offset
            readers = [seg.open_reader() for seg in self._segments if seg.next_offset > start]
        try:
            for reader in readers:
                for _, batch in reader.batches():
                    if batch.last_offset < start:
                        continue
                    if max_offset is not None and batch.last_offset >= max_offset:
                        return
                    yield RecordBatch(bytes(batch.buffer))
        finally:
            for reader in readers:
                reader.close()

    def open_segment_reader(self, base_offset: int) -> SegmentReader:
        """A snapshot of the segment starting at `base_offset`: its bytes as they are now, through
        a private (dup'd) file descriptor, so the reader stays valid if the segment is then deleted
        by retention, replaced by a compaction swap, or the log is closed. The caller closes it.

        Raises SegmentsChangedError when no segment starts at `base_offset` (deleted or merged
        meanwhile), LogClosedError when the log is closed.

        Concurrency: takes the log's lock only to look the segment up and dup its descriptor.
        """
        with self._lock:
            self._check_open()
            i = bisect_right(self._bases, base_offset) - 1
            if i < 0 or self._bases[i] != base_offset:
                raise SegmentsChangedError(f"no segment of {self.directory} starts at offset {base_offset}")
            return self._segments[i].open_reader()

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp`, from the indexes."""
        with self._lock:
            self._check_open()
            for seg in self._segments:
                if seg.max_timestamp < timestamp:
                    continue
                found = self._repairing(seg, lambda: seg.find_offset_by_timestamp(timestamp, self.log_start_offset))
                if found is not None:
                    return found
            return None

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (epoch, end offset) answered from the leader epoch cache."""
        with self._lock:
            return self.epochs.end_offset_for(epoch, self.log_end_offset)
