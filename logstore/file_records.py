"""The `.log` file of a segment: whole RecordBatch v2 batches back to back (Kafka's FileRecords).

`FileRecords` owns the file descriptor, the path and the size (the length of the whole batches in
the file) and knows nothing of indexes or offsets beyond what a batch header says: it scans batch
headers (61 bytes per batch, no CRC check), reads whole CRC-checked batches from a position,
iterates batches in large chunks, finds the valid prefix after a crash, appends buffers with
pwritev, truncates, fsyncs, renames and opens snapshot readers. `SegmentReader` reads a snapshot
of the file through a private (dup'd) descriptor. `BatchPosition` is what a header scan answers.
`FileSlices` names byte ranges of whole batches in such snapshots without reading them: the Kafka
door sends them with sendfile (zero-copy), or reads them where it cannot (`read()`).

Crash behaviour: an append the process did not finish can leave a torn batch at the tail;
`valid_batches` stops at it (or at the first corrupt batch, or offsets that do not increase) and
the owner truncates the file to the end of the last valid batch.

Concurrency: not thread-safe; the partition log serialises every call. A `SegmentReader` is
unaffected by later truncation, deletion or close of the file it was opened from.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from lakelog.infra.errors import invariant
from lakelog.logstore.disk_delay import DISK_DELAY
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

#: Bytes read at a time while scanning or recovering a segment.
SCAN_CHUNK_BYTES = 8 * 1024 * 1024

#: Buffers per pwritev call (Linux's IOV_MAX is 1024).
_IOV_BATCH = 512


@dataclass(frozen=True, slots=True)
class BatchPosition:
    """Where a batch lives in a segment, with the header fields lookups need."""

    position: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    size: int
    partition_leader_epoch: int


class FileRecords:
    """One `.log` file of whole batches (module doc)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size

    @property
    def path(self) -> Path:
        return self._path

    @property
    def size(self) -> int:
        """The length of the whole batches in the file."""
        return self._size

    @property
    def last_modified_ms(self) -> int:
        return int(os.fstat(self._fd).st_mtime * 1000)

    # ------------------------------------------------------------------ reads

    def read_bytes(self, position: int, size: int) -> bytes:
        return os.pread(self._fd, size, position)

    def header_fields(self, position: int) -> tuple | None:
        """The unpacked batch header at `position` (record_batch.HEADER), None past the end."""
        head = os.pread(self._fd, HEADER_SIZE, position)
        return HEADER.unpack(head) if len(head) == HEADER_SIZE else None

    def header_at(self, position: int) -> BatchPosition | None:
        """The batch starting at `position`, from its header alone (no check), None past the end."""
        fields = self.header_fields(position)
        if fields is None:
            return None
        base, length, ple, _magic, _crc, _attrs, lod, _bts, max_ts, *_ = fields
        return BatchPosition(position, base, base + lod, max_ts, length + LOG_OVERHEAD, ple)

    def scan_headers(self, start_position: int = 0, end_position: int | None = None) -> Iterator[BatchPosition]:
        """Batch headers from `start_position` on, reading 61 bytes per batch (no CRC check)."""
        end = self._size if end_position is None else min(end_position, self._size)
        path = str(self._path)
        pos = start_position
        while pos < end:
            if pos + HEADER_SIZE > end:
                raise TruncatedBatchError(f"{end - pos} trailing bytes are shorter than a batch header",
                                          file=path, position=pos)
            head = os.pread(self._fd, HEADER_SIZE, pos)
            if len(head) < HEADER_SIZE:
                raise TruncatedBatchError("the log file is shorter than its recorded size", file=path, position=pos)
            (base, length, ple, _magic, _crc, _attrs, lod, _bts, max_ts, *_rest) = HEADER.unpack(head)
            size = length + LOG_OVERHEAD
            if length < HEADER_SIZE - LOG_OVERHEAD or pos + size > end:
                raise CorruptRecordError("batch header has an impossible length", file=path,
                                         position=pos, offset=base)
            yield BatchPosition(pos, base, base + lod, max_ts, size, ple)
            pos += size

    def read_whole_batches(self, start: BatchPosition, want: int,
                           max_offset: int | None) -> tuple[bytes | memoryview, int] | None:
        """CRC-checked whole batches from `start`, within `want` bytes and below `max_offset`.

        A batch cut by `want` ends the walk. Returns (bytes, last offset) or None when no whole
        batch qualifies; the bytes may be a memoryview of a private buffer.
        """
        data = os.pread(self._fd, min(want, self._size - start.position), start.position)
        view = memoryview(data)
        path = str(self._path)
        end = 0
        last_offset = -1
        limit = len(data)
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
        return (data if end == len(data) else view[:end]), last_offset

    def whole_batches_extent(self, start: BatchPosition, want: int, max_offset: int | None) -> tuple[int, int] | None:
        """Like `read_whole_batches` without reading the batches: from their headers alone (61
        bytes each, no CRC check) the length of the whole batches from `start` within `want`
        bytes and below `max_offset`, and the last offset. None when no whole batch qualifies."""
        end = start.position
        last_offset = -1
        for bp in self.scan_headers(start.position):
            if bp.position + bp.size - start.position > want:
                break
            if max_offset is not None and bp.last_offset >= max_offset:
                break
            end, last_offset = bp.position + bp.size, bp.last_offset
        if last_offset < 0:
            return None
        return end - start.position, last_offset

    def batches(self, start_position: int = 0, *, verify: bool = True) -> Iterator[tuple[int, RecordBatch]]:
        """Every batch from `start_position`, read in large chunks, CRC-checked when `verify`.

        Raises TruncatedBatchError / CorruptRecordError on a torn or damaged file.
        """
        return _chunked_batches(self._fd, str(self._path), start_position, self._size, verify)

    def valid_batches(self, base_offset: int, max_batch_bytes: int | None) -> Iterator[tuple[int, RecordBatch]]:
        """The valid prefix of the file, batch by batch: (position, batch) in order.

        Stops, without raising, at the first torn batch, corrupt batch (CRC, impossible length,
        larger than `max_batch_bytes`) or batch whose offsets do not increase (from `base_offset`).
        The owner truncates the file to the end of the last batch yielded.
        """
        expected_min_offset = base_offset
        pos = 0
        while pos < self._size:
            data = os.pread(self._fd, min(SCAN_CHUNK_BYTES, self._size - pos), pos)
            consumed = 0
            try:
                for p, batch in iter_batches(data, base_position=pos, max_batch_bytes=max_batch_bytes):
                    if not batch.is_valid() or batch.base_offset < expected_min_offset:
                        return
                    expected_min_offset = batch.last_offset + 1
                    consumed = p - pos + batch.size_in_bytes
                    yield p, batch
            except TruncatedBatchError:
                if consumed == 0:
                    # Either a torn tail, or one batch larger than a chunk: try it on its own.
                    _, length = HEADER.unpack_from(data, 0)[:2] if len(data) >= HEADER_SIZE else (0, -1)
                    size = length + LOG_OVERHEAD
                    whole = None
                    if len(data) < self._size - pos and pos + size <= self._size:
                        whole = RecordBatch(os.pread(self._fd, size, pos))
                    if whole is None or not whole.is_valid() or whole.base_offset < expected_min_offset:
                        return
                    expected_min_offset = whole.last_offset + 1
                    consumed = size
                    yield pos, whole
            except CorruptRecordError:
                return
            if consumed == 0:
                return
            pos += consumed

    def open_reader(self, base_offset: int) -> SegmentReader:
        """A snapshot reader with its own file descriptor: it stays valid if this file is later
        closed, truncated or deleted (the caller must hold the log's lock while opening)."""
        return SegmentReader(base_offset, str(self._path), os.dup(self._fd), self._size)

    # ------------------------------------------------------------------ mutations

    def append(self, buffers: list) -> int:
        """Write `buffers` back to back at the end of the file. Returns the bytes written."""
        DISK_DELAY.pause()  # a test's slow disk (logstore/disk_delay.py); nothing otherwise
        written = _pwrite_all(self._fd, buffers, self._size)
        self._size += written
        return written

    def truncate_to(self, position: int) -> int:
        """Cut the file at `position`. Returns the bytes removed."""
        removed = self._size - position
        if removed:
            os.ftruncate(self._fd, position)
            self._size = position
        return removed

    def flush(self) -> None:
        DISK_DELAY.pause()
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def rename_to(self, target: Path) -> None:
        os.replace(self._path, target)
        self._path = target


class SegmentReader:
    """Batches of one segment as it was when the reader was opened, through a private fd.

    Close it (or use it as a context manager) when done.
    """

    def __init__(self, base_offset: int, path: str, fd: int, size: int) -> None:
        self.base_offset = base_offset
        self.size = size
        self._path = path
        self._fd = fd

    def batches(self, start_position: int = 0, *, verify: bool = True) -> Iterator[tuple[int, RecordBatch]]:
        return _chunked_batches(self._fd, self._path, start_position, self.size, verify)

    def fileno(self) -> int:
        """The private descriptor (for `os.pread` of bytes [0, size)); -1 once closed."""
        return self._fd

    @property
    def path(self) -> str:
        return self._path

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> SegmentReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class FileSlice:
    """Bytes [position, position + size) of a segment snapshot: whole batches."""

    reader: SegmentReader
    position: int
    size: int


class FileSlices:
    """Whole batches of one partition, as byte ranges of segment snapshots (Kafka's FileRecords
    as a fetch answer holds it): nothing is read until `read()`, or until the Kafka door sends the
    ranges with sendfile. Owns the snapshots' descriptors: `close()` them, or they are closed when
    the object is collected.

    Concurrency: the snapshots are private descriptors, so any thread may read or send them while
    the log appends, truncates, deletes or swaps segments.
    """

    def __init__(self, slices: list[FileSlice], next_offset: int = -1) -> None:
        self.slices = slices
        #: The offset after the last batch of the slices (-1: not known), found with them from the
        #: batch headers: a read_committed fetch bounds its aborted-transaction lookup with it.
        self.next_offset = next_offset
        self._size = sum(s.size for s in slices)
        readers = [s.reader for s in slices]
        self._finalizer = weakref.finalize(self, _close_readers, readers)

    def __len__(self) -> int:
        return self._size

    def read(self) -> bytes:
        """The bytes of every slice, back to back (for TLS and anything else that cannot sendfile)."""
        out = bytearray()
        for s in self.slices:
            data = os.pread(s.reader.fileno(), s.size, s.position)
            if len(data) != s.size:
                raise TruncatedBatchError(f"read {len(data)} of {s.size} bytes", file=s.reader.path, position=s.position)
            out += data
        return bytes(out)

    def close(self) -> None:
        self._finalizer()


def _close_readers(readers: list[SegmentReader]) -> None:
    for r in readers:
        r.close()


def _chunked_batches(fd: int, path: str, start_position: int, end: int,
                     verify: bool) -> Iterator[tuple[int, RecordBatch]]:
    """Every batch in [start_position, end) of `fd`, read SCAN_CHUNK_BYTES at a time."""
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


def _pwrite_all(fd: int, buffers: list, position: int) -> int:
    """Write `buffers` back to back at `position`, retrying short writes. Returns bytes written."""
    total = 0
    pending = [memoryview(b).cast("B") for b in buffers if len(b)]
    while pending:
        chunk = pending[:_IOV_BATCH]
        n = os.pwritev(fd, chunk, position + total)
        invariant(n > 0, "pwritev wrote nothing")
        total += n
        # Drop what was fully written; keep the unwritten tail of a partly written buffer.
        while n and pending:
            head = pending[0]
            if n >= len(head):
                n -= len(head)
                pending.pop(0)
            else:
                pending[0] = head[n:]
                n = 0
    return total
