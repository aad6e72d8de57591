"""Reading a log segment: batch headers, lookups, whole-batch reads, iteration, snapshots.

`SegmentRead` is the part of `LogSegment` (segment.py) that reads its `.log` and indexes:
`scan_headers` (61 bytes per batch, no CRC check), `translate_offset` (the floor entry of the sparse
offset index, checked against the batch it points at, then a forward scan), `read` (whole
CRC-checked batches below a max offset, as a fetch), `find_offset_by_timestamp`, `batches` (large
chunks, CRC-checked) and `open_reader`. `SegmentReader` reads a snapshot of a segment through a
private file descriptor. `BatchPosition` is what a lookup answers.

Concurrency: not thread-safe; the partition log serialises every call. A `SegmentReader` is
unaffected by later truncation, deletion or close of its segment.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from lakelog.index.offset_index import OffsetIndex
from lakelog.index.time_index import TimeIndex
from lakelog.index.errors import CorruptIndexError
from lakelog.logstore.errors import CorruptRecordError
from lakelog.logstore.record_batch import (
    _OFFSET_AND_LENGTH,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    RecordBatch,
    TruncatedBatchError,
    iter_batches,
)

if TYPE_CHECKING:
    from lakelog.logstore.segment import LogSegment

#: Bytes read at a time while scanning or recovering a segment.
SCAN_CHUNK_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class BatchPosition:
    """Where a batch lives in a segment, with the header fields lookups need."""

    position: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    size: int
    partition_leader_epoch: int


class SegmentRead:
    """Reads and lookups of `LogSegment` (module doc); the segment's fields are made in segment.py."""

    # Made by LogSegment.__init__ (segment.py).
    log_path: Path
    size: int
    offset_index: OffsetIndex
    time_index: TimeIndex
    _fd: int
    _read_hint: tuple[int, int] | None

    def scan_headers(self, start_position: int = 0, end_position: int | None = None) -> Iterator[BatchPosition]:
        """Batch headers from `start_position` on, reading 61 bytes per batch (no CRC check)."""
        end = self.size if end_position is None else min(end_position, self.size)
        pos = start_position
        while pos < end:
            if pos + HEADER_SIZE > end:
                raise TruncatedBatchError(f"{end - pos} trailing bytes are shorter than a batch header",
                                          file=str(self.log_path), position=pos)
            head = os.pread(self._fd, HEADER_SIZE, pos)
            if len(head) < HEADER_SIZE:
                raise TruncatedBatchError("the log file is shorter than its recorded size",
                                          file=str(self.log_path), position=pos)
            (base, length, ple, _magic, _crc, _attrs, lod, _bts, max_ts, *_rest) = HEADER.unpack(head)
            size = length + LOG_OVERHEAD
            if length < HEADER_SIZE - LOG_OVERHEAD or pos + size > end:
                raise CorruptRecordError("batch header has an impossible length", file=str(self.log_path),
                                         position=pos, offset=base)
            yield BatchPosition(pos, base, base + lod, max_ts, size, ple)
            pos += size

    def read_bytes(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    def translate_offset(self, offset: int, start_position: int = 0) -> BatchPosition | None:
        """The first batch whose last offset is >= `offset`, scanning from the index's floor entry.

        The floor entry is verified against the batch it points at; a mismatch means the index is
        corrupt (CorruptIndexError), so nothing is served from a wrong position.
        """
        entry_offset, position = self.offset_index.lookup(offset)
        if position > 0:
            # The entry must point at the start of the batch that holds its offset. Anything else
            # (damage, or an index written one entry per multi-batch append) raises, and the
            # log rebuilds the index from the .log and looks up again.
            head = os.pread(self._fd, HEADER_SIZE, position)
            if len(head) < HEADER_SIZE:
                raise CorruptIndexError(f"offset index {self.offset_index.path} points past the log")
            base, length, _, magic, _, _, lod, *_ = HEADER.unpack(head)
            if magic != 2 or length < HEADER_SIZE - LOG_OVERHEAD or position + length + LOG_OVERHEAD > self.size \
                    or not base <= entry_offset <= base + lod:
                raise CorruptIndexError(f"offset index {self.offset_index.path} entry ({entry_offset}, "
                                        f"{position}) does not point at the batch holding that offset")
        for bp in self.scan_headers(max(position, start_position)):
            if bp.last_offset >= offset:
                return bp
        return None

    def read(self, start_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> tuple[int, bytes | memoryview, int] | None:
        """Whole batches from the one holding `start_offset`, up to `max_bytes` and `max_offset`.

        `max_offset` is exclusive (a consumer's bound is the high watermark). With `min_one_batch`
        the first batch is returned even when it alone exceeds `max_bytes`. Every returned batch
        has had its CRC checked. Returns (position, bytes, last offset) or None when nothing
        qualifies; the bytes may be a memoryview of a private buffer.
        """
        hint = self._read_hint
        if hint is not None and hint[0] == start_offset and hint[1] < self.size:
            # A sequential consumer continues where the last read ended: skip the index lookup.
            start = self._header_at(hint[1])
        else:
            start = self.translate_offset(start_offset)
        if start is None:
            return None
        if max_offset is not None and start.last_offset >= max_offset:
            return None
        want = max(max_bytes, start.size) if min_one_batch else max_bytes
        if want < start.size:
            return None
        data = os.pread(self._fd, min(want, self.size - start.position), start.position)
        view = memoryview(data)
        path = str(self.log_path)
        end = 0
        last_offset = -1
        limit = len(data)
        # Walk whole batches in the buffer; a batch cut by `want` ends the walk (no exception).
        while end + LOG_OVERHEAD <= limit:
            _, length = _OFFSET_AND_LENGTH.unpack_from(view, end)
            size = length + LOG_OVERHEAD
            if length < HEADER_SIZE - LOG_OVERHEAD:
                raise CorruptRecordError(f"batch length {length} is impossible", file=path,
                                         position=start.position + end)
            if end + size > limit:
                break
            batch = RecordBatch(view[end:end + size])
            if max_offset is not None and batch.last_offset >= max_offset:
                break
            batch.ensure_valid(file=path, position=start.position + end)
            end += size
            last_offset = batch.last_offset
        if end == 0:
            return None
        self._read_hint = (last_offset + 1, start.position + end)
        return start.position, (data if end == len(data) else view[:end]), last_offset

    def _header_at(self, position: int) -> BatchPosition | None:
        head = os.pread(self._fd, HEADER_SIZE, position)
        if len(head) < HEADER_SIZE:
            return None
        base, length, ple, _magic, _crc, _attrs, lod, _bts, max_ts, *_ = HEADER.unpack(head)
        return BatchPosition(position, base, base + lod, max_ts, length + LOG_OVERHEAD, ple)

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `start_offset` with timestamp >= `timestamp`."""
        entry = self.time_index.last_entry_before(timestamp)
        position = 0
        if entry is not None:
            bp = self.translate_offset(max(entry[1], start_offset))
            position = bp.position if bp else self.size
        elif start_offset > self.base_offset:
            bp = self.translate_offset(start_offset)
            position = bp.position if bp else self.size
        for bp in self.scan_headers(position):
            if bp.max_timestamp < timestamp or bp.last_offset < start_offset:
                continue
            batch = RecordBatch(self.read_bytes(bp.position, bp.size))
            batch.ensure_valid(file=str(self.log_path), position=bp.position)
            if batch.timestamp_type == 1:  # LogAppendTime: every record carries the batch time
                return max(batch.base_offset, start_offset), batch.max_timestamp
            for rec in batch.records():
                if rec.timestamp >= timestamp and rec.offset >= start_offset:
                    return rec.offset, rec.timestamp
        return None

    def batches(self, start_position: int = 0, *, verify: bool = True, fd: int | None = None,
                size: int | None = None) -> Iterator[tuple[int, RecordBatch]]:
        """Every batch from `start_position`, read in large chunks, CRC-checked when `verify`.

        `fd` / `size` let a reader iterate a snapshot through its own file descriptor (see
        `open_reader`); by default the segment's own descriptor and current size are used.
        Raises TruncatedBatchError / CorruptRecordError on a torn or damaged file.
        """
        fd = self._fd if fd is None else fd
        end = self.size if size is None else size
        path = str(self.log_path)
        pos = start_position
        while pos < end:
            data = os.pread(fd, min(SCAN_CHUNK_BYTES, end - pos), pos)
            consumed = 0
            try:
                for p, batch in iter_batches(data, file=path, base_position=pos):
                    if verify:
                        batch.ensure_valid(file=path, position=p)
                    yield p, batch
                    consumed = p - pos + batch.size_in_bytes
            except TruncatedBatchError:
                if consumed == 0:
                    # One batch larger than the chunk: read it whole, if the file holds it.
                    if len(data) < LOG_OVERHEAD:
                        raise
                    _, length = _OFFSET_AND_LENGTH.unpack_from(data, 0)
                    whole = length + LOG_OVERHEAD
                    if length < HEADER_SIZE - LOG_OVERHEAD or pos + whole > end:
                        raise
                    batch = RecordBatch(os.pread(fd, whole, pos))
                    if verify:
                        batch.ensure_valid(file=path, position=pos)
                    yield pos, batch
                    consumed = whole
            pos += consumed

    def open_reader(self) -> "SegmentReader":
        """A snapshot reader with its own file descriptor: it stays valid if the segment is later
        closed, truncated by size, or deleted (the caller must hold the log's lock while opening)."""
        return SegmentReader(self, os.dup(self._fd), self.size)


class SegmentReader:
    """Batches of one segment as it was when the reader was opened, through a private fd.

    Close it (or use it as a context manager) when done.
    """

    def __init__(self, segment: LogSegment, fd: int, size: int) -> None:
        self.segment = segment
        self.base_offset = segment.base_offset
        self.size = size
        self._fd = fd

    def batches(self, start_position: int = 0, *, verify: bool = True) -> Iterator[tuple[int, RecordBatch]]:
        return self.segment.batches(start_position, verify=verify, fd=self._fd, size=self.size)

    def fileno(self) -> int:
        """The private descriptor (for `os.pread` of bytes [0, size)); -1 once closed."""
        return self._fd

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "SegmentReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
