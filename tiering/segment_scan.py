"""Scanning a local segment for upload: one pass that checks every batch's CRC and builds the
`.index` / `.timeindex` (only real entries, as the local segment writes them) and the `.epochs` of
the slice being uploaded. The tiering manager (`uploader.py`), remote compaction and the index
rebuild job build a segment's indexes with it, so every writer lays objects out the same way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from lakelog.index import offset_index, time_index
from lakelog.logstore.errors import CorruptRecordError
from lakelog.logstore.record_batch import _OFFSET_AND_LENGTH, HEADER_SIZE, LOG_OVERHEAD, NO_TIMESTAMP, RecordBatch
from lakelog.tiering.errors import LocalSegmentChangedError, LocalSegmentCorruptError, SegmentBoundaryError

#: Bytes read at a time while scanning a segment for upload.
SCAN_CHUNK_BYTES = 8 * 1024 * 1024




@dataclass(slots=True)
class SegmentScan:
    """What one pass over (a slice of) a local segment found."""

    start_position: int  # byte position in the local .log of the first batch uploaded
    end_position: int  # one past the last byte uploaded (the segment's size)
    first_offset: int | None
    last_offset: int | None
    max_timestamp: int
    batch_count: int
    record_count: int  # records of the data batches (control batches not counted)
    index: bytes  # .index entries relative to the remote base offset and start position
    time_index: bytes
    leader_epochs: list[tuple[int, int]]


def scan_segment(fd: int, size: int, *, base_offset: int, end_offset: int, index_interval_bytes: int,
                 path: str = "", check_crc: bool = True) -> SegmentScan:
    """Read batches [base_offset, end_offset] of a segment file, CRC-checking each, and build the
    remote indexes exactly as a local segment builds its own (one entry per `index.interval.bytes`,
    the final max timestamp appended as on roll).

    Batches ending below `base_offset` are skipped; the first one kept must start at or above it
    (else SegmentBoundaryError). Raises LocalSegmentCorruptError on a bad CRC or framing and
    LocalSegmentChangedError if the file is shorter than `size`. `check_crc=False` skips the CRC
    (framing and offsets are still checked) for bytes whose batches were CRC-checked on their way
    into `fd` (the remote index rebuild).
    """
    index_entries: list[tuple[int, int]] = []
    time_entries: list[tuple[int, int]] = []
    epochs: list[tuple[int, int]] = []
    start_position = size
    first = last = None
    max_ts, off_of_max = NO_TIMESTAMP, base_offset
    bytes_since_entry = 0
    count = 0
    records = 0
    pos = 0
    while pos < size:
        data = os.pread(fd, min(SCAN_CHUNK_BYTES, size - pos), pos)
        if not data:
            raise LocalSegmentChangedError(f"{path} is shorter than {size} bytes")
        view = memoryview(data)
        at = 0
        while at < len(data):
            if len(data) - at < LOG_OVERHEAD:
                if at == 0:
                    raise LocalSegmentCorruptError(f"{path}: torn batch header at position {pos}")
                break
            batch_base, length = _OFFSET_AND_LENGTH.unpack_from(view, at)
            batch_size = length + LOG_OVERHEAD
            if length < HEADER_SIZE - LOG_OVERHEAD or pos + at + batch_size > size:
                raise LocalSegmentCorruptError(f"{path}: impossible batch length {length} at position {pos + at}")
            if at + batch_size > len(data):
                if at > 0:
                    break  # continue with the next read at this batch
                whole = os.pread(fd, batch_size, pos)  # one batch larger than a chunk
                if len(whole) < batch_size:
                    raise LocalSegmentChangedError(f"{path} is shorter than {size} bytes")
                view, data = memoryview(whole), whole
            batch = RecordBatch(view[at:at + batch_size])
            position = pos + at
            at += batch_size
            if batch.last_offset < base_offset:
                continue
            if batch.last_offset > end_offset:
                raise LocalSegmentChangedError(f"{path}: batch ending at {batch.last_offset} lies past the "
                                               f"segment's end offset {end_offset}")
            if first is None:
                if batch.base_offset < base_offset:
                    raise SegmentBoundaryError(f"{path}: offset {base_offset} (where the remote tier continues) "
                                               f"is inside the batch [{batch.base_offset}, {batch.last_offset}]")
                start_position = position
            elif batch.base_offset <= last:  # type: ignore[operator]
                raise LocalSegmentCorruptError(f"{path}: offsets do not increase at position {position}")
            if check_crc:
                try:
                    batch.ensure_valid(file=path, position=position)
                except CorruptRecordError as e:
                    raise LocalSegmentCorruptError(str(e)) from None
            if first is None:
                first = batch.base_offset
            last = batch.last_offset
            count += 1
            if not batch.is_control:
                records += batch.record_count
            rel_position = position - start_position
            if batch.max_timestamp > max_ts:
                max_ts, off_of_max = batch.max_timestamp, batch.last_offset
            if bytes_since_entry >= index_interval_bytes or index_interval_bytes == 0:
                index_entries.append((batch.last_offset - base_offset, rel_position))
                if not time_entries or max_ts > time_entries[-1][0]:
                    time_entries.append((max_ts, off_of_max - base_offset))
                bytes_since_entry = 0
            bytes_since_entry += batch_size
            ple = batch.partition_leader_epoch
            if ple >= 0 and (not epochs or ple > epochs[-1][0]):
                epochs.append((ple, batch.base_offset))
        pos += at
    if count and max_ts > NO_TIMESTAMP and (not time_entries or max_ts > time_entries[-1][0]):
        time_entries.append((max_ts, off_of_max - base_offset))  # as LogSegment.on_become_inactive
    return SegmentScan(start_position, size, first, last, max_ts, count, records, offset_index.encode(index_entries),
                       time_index.encode(time_entries), epochs)


