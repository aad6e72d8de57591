"""The local part of a partition log: its segments on disk and the recovery point (Kafka's LocalLog).

`LocalLog` holds the `LogSegments` of one directory and the recovery point (offsets below it are
known flushed; `recovery-point-checkpoint`). It appends to the active segment, seals it and starts
the next one, flushes, reads whole batches across segments (`read`, as a fetch), opens snapshot
readers, looks offsets up by timestamp, truncates at the tail, removes leading segments and swaps
in compacted ones. It knows nothing of the log start offset, leader epochs or producers: the
`PartitionLog` (log.py) that owns it passes the log start offset where a read needs it and keeps
those in step.

Lookups: binary search of segments by base offset, the floor entry of the sparse offset index,
then a forward scan of batch headers; an index that proves wrong on a read is rebuilt and the
lookup run again (`LogSegments.repairing`).

Compaction swap (crash-safe, as Kafka's): replacement segments are written with suffix `.cleaned`,
renamed to `.swap`, the replaced segments are deleted, then the `.swap` files lose their suffix
(`LogLoader` completes a swap a crash interrupted).

Concurrency: not thread-safe; every call is made under the partition log's lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from lakelog.infra.config import LogConfig
from lakelog.infra.errors import invariant
from lakelog.logstore.checkpoint import write_checkpoint
from lakelog.logstore.errors import OffsetOutOfRangeError, SegmentsChangedError
from lakelog.logstore.file_records import FileSlice, FileSlices, SegmentReader
from lakelog.logstore.fileutil import fsync_dir
from lakelog.logstore.log_loader import RECOVERY_POINT_FILE
from lakelog.logstore.log_segments import LogSegments
from lakelog.logstore.record_batch import RecordBatch
from lakelog.logstore.segment import CLEANED_SUFFIX, SWAP_SUFFIX, LogSegment, SegmentConfig

T = TypeVar("T")
#: What a segment lookup of a read found: (answer, size in bytes, last offset) (see `LocalLog._walk`).
_Found = tuple[T, int, int]


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Whole batches read from the log, CRC-checked, plus the log's bounds at read time."""

    #: Whole batches; a memoryview of a private buffer is possible; `read_slices` answers FileSlices
    #: (byte ranges of segment snapshots, not read).
    records: bytes | memoryview | FileSlices
    first_offset: int  # base offset of the first batch returned (may be below the offset asked)
    log_start_offset: int
    log_end_offset: int


class LocalLog:
    """The segments of one partition directory and its recovery point (module doc)."""

    def __init__(self, directory: Path, config: LogConfig, segments: LogSegments, recovery_point: int,
                 now_ms: Callable[[], int]) -> None:
        self.directory = directory
        self._config = config
        self.segments = segments
        self.recovery_point = recovery_point
        self._now_ms = now_ms

    def update_config(self, config: LogConfig) -> None:
        self._config = config

    @property
    def active_segment(self) -> LogSegment:
        return self.segments.active

    @property
    def log_end_offset(self) -> int:
        """LEO: the offset the next appended record will get."""
        return self.segments.active.next_offset

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(self.directory, base_offset, SegmentConfig.of(self._config), created_ms=self._now_ms())

    def _write_recovery_point(self, offset: int) -> None:
        write_checkpoint(self.directory / RECOVERY_POINT_FILE, [(offset,)])

    # ------------------------------------------------------------------ appends, roll, flush

    def should_roll(self, size: int, max_timestamp: int, last_offset: int, now_ms: int) -> bool:
        """Whether an append of `size` bytes up to `last_offset` needs a new active segment."""
        return self.segments.active.should_roll(size, max_timestamp, last_offset, self._config.segment_bytes,
                                                self._config.segment_ms, now_ms)

    def append(self, parts: list, entries: list) -> None:
        """Append whole batches to the active segment (see `LogSegment.append`)."""
        self.segments.active.append(parts, entries)

    def seal_active(self, new_base: int) -> None:
        """Make way for a segment at `new_base`: seal the active segment (an empty one is deleted)."""
        old = self.segments.active
        invariant(new_base >= old.next_offset, f"new segment base {new_base} below LEO {old.next_offset}")
        if old.is_empty:
            self.segments.pop_last().delete_files()
        else:
            old.on_become_inactive()
            # Sealed segments are flushed once, so recovery only ever re-reads the active one.
            old.flush()

    def start_segment(self, new_base: int) -> LogSegment:
        """Add the new active segment at `new_base`; recovery restarts from it."""
        seg = self._new_segment(new_base)
        self.segments.add(seg)
        self.recovery_point = new_base
        self._write_recovery_point(new_base)
        return seg

    def reset_active_to(self, new_base: int) -> None:
        """Replace the empty active segment by an empty one at `new_base`."""
        self.segments.pop_last().delete_files()
        self.segments.add(self._new_segment(new_base))

    def flush(self) -> None:
        """fsync every segment with unflushed bytes and advance the recovery point to the LEO."""
        for seg in self.segments:
            seg.flush()
        leo = self.log_end_offset
        if self.recovery_point != leo:
            self.recovery_point = leo
            # Recovery restarts from the segment holding the recovery point.
            self._write_recovery_point(leo)

    def close(self) -> None:
        for seg in self.segments:
            seg.close()

    # ------------------------------------------------------------------ reads and lookups

    def read(self, start_offset: int, max_bytes: int, *, max_offset: int | None, min_one_batch: bool,
             log_start_offset: int) -> FetchResult:
        """Whole batches from the one holding `start_offset` (see `PartitionLog.read`)."""
        leo, bound = self._bounds(start_offset, max_offset, log_start_offset)

        def lookup(seg: LogSegment, start: int, remaining: int, min_one: bool) -> _Found[bytes | memoryview] | None:
            got = seg.read(start, remaining, max_offset=bound, min_one_batch=min_one)
            return None if got is None else (got[1], len(got[1]), got[2])

        chunks = [data for _, data in self._walk(start_offset, max_bytes, bound, min_one_batch, lookup)]
        if not chunks:
            return FetchResult(b"", start_offset, log_start_offset, leo)
        records = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return FetchResult(records, RecordBatch(chunks[0]).base_offset, log_start_offset, leo)

    def read_slices(self, start_offset: int, max_bytes: int, *, max_offset: int | None, min_one_batch: bool,
                    log_start_offset: int) -> FetchResult:
        """The batches `read` would answer as FileSlices: each segment's range through a snapshot
        reader, found from batch headers, nothing read (see `PartitionLog.read_slices`)."""
        leo, bound = self._bounds(start_offset, max_offset, log_start_offset)

        def lookup(seg: LogSegment, start: int, remaining: int, min_one: bool
                   ) -> _Found[tuple[int, int, int, int]] | None:
            got = seg.extent(start, remaining, max_offset=bound, min_one_batch=min_one)
            return None if got is None else (got, got[1], got[3])

        slices: list[FileSlice] = []
        first_offset = next_offset = start_offset
        try:
            for seg, (position, size, base, last) in self._walk(start_offset, max_bytes, bound, min_one_batch,
                                                                lookup):
                if not slices:
                    first_offset = base
                slices.append(FileSlice(seg.open_reader(), position, size))
                next_offset = last + 1
        except BaseException:
            for s in slices:
                s.reader.close()
            raise
        return FetchResult(FileSlices(slices, next_offset), first_offset, log_start_offset, leo)

    def _bounds(self, start_offset: int, max_offset: int | None, log_start_offset: int) -> tuple[int, int]:
        """(LEO, the exclusive bound of a read from `start_offset`); OffsetOutOfRangeError outside the log."""
        leo = self.log_end_offset
        if start_offset < log_start_offset or start_offset > leo:
            raise OffsetOutOfRangeError(f"offset {start_offset} is out of range [{log_start_offset}, {leo}]")
        return leo, leo if max_offset is None else min(max_offset, leo)

    def _walk(self, start_offset: int, max_bytes: int, bound: int, min_one_batch: bool,
              lookup: Callable[[LogSegment, int, int, bool], _Found[T] | None]) -> Iterator[tuple[LogSegment, T]]:
        """The segments a read from `start_offset` visits, each with what
        `lookup(segment, start offset, bytes left, min_one_batch)` found there: (answer, size in
        bytes, last offset), or None when the segment has nothing at or after the start offset.

        From the segment holding `start_offset`, while bytes are left (at least one answer is
        found); a segment with nothing is skipped before the first answer (a compacted gap) and
        ends the walk after it. The walk stops at `bound` and at a segment that ran out of bytes
        inside it, so no batch is ever skipped. An index that proves wrong is rebuilt
        (`LogSegments.repairing`).
        """
        if start_offset >= bound:
            return
        segments = self.segments
        i = segments.index_for(start_offset)
        remaining = max_bytes
        found = False
        while i < len(segments) and (remaining > 0 or not found):
            seg = segments[i]
            got = segments.repairing(seg, lambda: lookup(seg, start_offset, remaining, min_one_batch and not found))
            i += 1
            if got is None:
                if found:
                    break
                continue  # nothing at or after start_offset here (a compacted gap): next segment
            answer, size, last = got
            found = True
            yield seg, answer
            remaining -= size
            if last + 1 >= bound or last + 1 < seg.next_offset:
                break  # at the bound, or out of bytes inside this segment: never skip batches
            start_offset = last + 1

    def open_readers(self, start_offset: int) -> list[SegmentReader]:
        """Snapshot readers of every segment holding offsets at or above `start_offset`."""
        return [seg.open_reader() for seg in self.segments if seg.next_offset > start_offset]

    def open_segment_reader(self, base_offset: int) -> SegmentReader:
        """A snapshot reader of the segment starting at `base_offset` (SegmentsChangedError if none)."""
        seg = self.segments.starting_at(base_offset)
        if seg is None:
            raise SegmentsChangedError(f"no segment of {self.directory} starts at offset {base_offset}")
        return seg.open_reader()

    def offset_for_timestamp(self, timestamp: int, log_start_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp`, from the indexes."""
        for seg in self.segments:
            if seg.max_timestamp < timestamp:
                continue
            found = self.segments.repairing(seg, lambda: seg.find_offset_by_timestamp(timestamp, log_start_offset))
            if found is not None:
                return found
        return None

    # ------------------------------------------------------------------ removal

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or above `offset` (whole batches: the LEO may end below it)."""
        segments = self.segments
        while len(segments) > 1 and segments.active.base_offset >= offset:
            segments.pop_last().delete_files()
        active = segments.active
        segments.repairing(active, lambda: active.truncate_to(offset))

    def lower_recovery_point(self) -> None:
        """After a truncation: recovery restarts from the active segment."""
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self._write_recovery_point(self.segments.active.base_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start one, empty, at `offset`."""
        for seg in self.segments.clear():
            seg.delete_files()
        self.segments.add(self._new_segment(offset))
        self.recovery_point = offset
        self._write_recovery_point(offset)

    def delete_segments_below(self, offset: int) -> None:
        """Delete leading segments wholly below `offset` (never the active one)."""
        segments = self.segments
        while len(segments) > 1 and segments[1].base_offset <= offset:
            for seg in segments.remove_first(1):
                seg.delete_files()

    def deletable_segments(self, predicate: Callable[[LogSegment, LogSegment | None], bool],
                           upper_bound_offset: int | None) -> list[LogSegment]:
        """Leading sealed segments while `predicate(segment, next_segment)` holds, none holding
        offsets at or above `upper_bound_offset`."""
        doomed: list[LogSegment] = []
        segments = self.segments.to_list()
        for seg, nxt in zip(segments, segments[1:]):
            if upper_bound_offset is not None and seg.next_offset > upper_bound_offset:
                break
            if not predicate(seg, nxt):
                break
            doomed.append(seg)
        return doomed

    def delete_first(self, count: int) -> None:
        """Delete the first `count` segments (the caller moved the log start offset past them)."""
        for seg in self.segments.remove_first(count):
            seg.delete_files()

    def replace_segments(self, new_segments: list[LogSegment], old_segments: list[LogSegment]) -> None:
        """Swap compacted replacement segments (suffix `.cleaned`) for `old_segments` (module doc).

        The old segments must be consecutive, sealed and still present (SegmentsChangedError).
        """
        segments = self.segments
        idx = [segments.position_of(s) for s in old_segments]
        if not old_segments or None in idx:
            raise SegmentsChangedError("a segment to replace is no longer in the log")
        if idx != list(range(idx[0], idx[0] + len(idx))) or idx[-1] >= len(segments) - 1:  # type: ignore[operator]
            raise SegmentsChangedError("replaced segments must be consecutive and sealed")
        for seg in new_segments:
            seg.flush()
            seg.change_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)
        fsync_dir(self.directory)
        # Commit point: the .swap files exist; from here on open() completes the swap if we
        # crash, so the in-memory list switches now and file work that fails is redone there.
        segments.replace(idx[0], idx[-1], new_segments)  # type: ignore[arg-type]
        for seg in old_segments:
            seg.delete_files()
        for seg in new_segments:
            seg.change_suffix(SWAP_SUFFIX, "")
        fsync_dir(self.directory)
