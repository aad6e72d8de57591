"""`lakelog dump-log` of `.index`, `.timeindex` and `.txnindex` files: the entries, then notes on
what is wrong.

A `.txnindex` entry prints as Kafka's DumpLogSegments prints it:
`version: 0 producerId: P firstOffset: F lastOffset: L lastStableOffset: S`; notes cover a version
other than 0, first offset > last offset, entries out of order (by last offset), a torn entry and
a last offset no batch of the `.log` holds (the ABORT marker's offset).

Notes cover entries out of order, a torn partial entry, zero entries at the end (preallocated
space of an active segment's index), and entries that do not match the `.log` beside the index (an
offset index entry (O, P) must point at a batch holding O; a time index entry (T, O) at an offset
whose batch has max timestamp T). The `.log` is read through batch headers only. See dump.py for
the output as a whole.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Iterable, TextIO

from lakelog.index import offset_index, time_index, transaction_index
from lakelog.logstore.dump_paths import MAGIC_BYTE, MIN_V2_LENGTH, FileWindow, SegmentFile, open_segment
from lakelog.logstore.record_batch import HEADER, HEADER_SIZE, LOG_OVERHEAD, MAGIC, MAGIC_OFFSET
from lakelog.logstore.segment import LOG_SUFFIX

#: Most notes kept per index file; the rest are counted.
MAX_NOTES = 100


class _Notes:
    """Problems found in an index, printed after its entries; at most MAX_NOTES kept."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.dropped = 0

    def add(self, line: str) -> None:
        if len(self.lines) < MAX_NOTES:
            self.lines.append(line)
        else:
            self.dropped += 1

    def write(self, out: TextIO) -> None:
        for line in self.lines:
            out.write(line + "\n")
        if self.dropped:
            out.write(f"... and {self.dropped} more problems\n")

    def __bool__(self) -> bool:
        return bool(self.lines)


def _iter_entries(fd: int, size: int, entry_size: int, chunk_bytes: int, unpack) -> Iterable[tuple[int, int]]:
    step = max(1, chunk_bytes // entry_size) * entry_size
    whole = size - size % entry_size
    pos = 0
    while pos < whole:
        data = os.pread(fd, min(step, whole - pos), pos)
        usable = len(data) - len(data) % entry_size
        if usable == 0:
            return
        yield from unpack(data[:usable])
        pos += usable


class _LogHeaders:
    """Batch headers of the `.log` an index belongs to, for checking index entries."""

    def __init__(self, path: Path, chunk_bytes: int) -> None:
        self.fd = os.open(path, os.O_RDONLY)
        self.window = FileWindow(self.fd, os.fstat(self.fd).st_size, chunk_bytes)
        self._scan_pos = 0
        self._scan_batch: tuple[int, int, int] | None = None  # base offset, last offset, max ts

    def close(self) -> None:
        os.close(self.fd)

    def header_at(self, position: int) -> tuple[int, int, int] | None:
        """(base offset, last offset, max timestamp) of a magic 2 batch at `position`, else None."""
        if position + HEADER_SIZE > self.window.size:
            return None
        head = self.window.get(position, HEADER_SIZE)
        if len(head) < HEADER_SIZE or MAGIC_BYTE.unpack_from(head, MAGIC_OFFSET)[0] != MAGIC:
            return None
        (base, length, _, _, _, _, last_delta, _, max_ts, *_) = HEADER.unpack_from(head, 0)
        if length < MIN_V2_LENGTH:
            return None
        return base, base + last_delta, max_ts

    def batch_holding(self, offset: int) -> tuple[int, int, int] | None:
        """The batch whose offsets include `offset`, scanning forward (restarting when asked back)."""
        if self._scan_batch is not None and offset < self._scan_batch[0]:
            self._scan_pos, self._scan_batch = 0, None
        if self._scan_batch is not None and offset <= self._scan_batch[1]:
            return self._scan_batch
        while True:
            if self._scan_pos + LOG_OVERHEAD > self.window.size:
                return None
            head = self.window.get(self._scan_pos, LOG_OVERHEAD)
            _, length = struct.unpack_from(">qi", head, 0)
            found = self.header_at(self._scan_pos)
            if found is None or length < MIN_V2_LENGTH:
                return None
            self._scan_batch = found
            self._scan_pos += length + LOG_OVERHEAD
            if found[0] > offset:
                return None
            if offset <= found[1]:
                return found


def _open_log_headers(seg: SegmentFile, chunk_bytes: int, notes: _Notes) -> _LogHeaders | None:
    log_path = seg.sibling(LOG_SUFFIX)
    try:
        return _LogHeaders(log_path, chunk_bytes)
    except OSError as e:
        notes.add(f"Not checked against the log: cannot open {log_path}: {e.strerror or e}")
        return None


def dump_offset_index(seg: SegmentFile, shown: str, verify_only: bool, out: TextIO, chunk_bytes: int) -> None:
    notes = _Notes()
    fd, size = open_segment(seg)
    log = _open_log_headers(seg, chunk_bytes, notes)
    try:
        count = 0
        zeros_pending = 0  # all-zero entries after the first: unused preallocated space if last
        prev: tuple[int, int] | None = None

        def emit(offset: int, position: int) -> None:
            nonlocal prev
            if not verify_only:
                out.write(f"offset: {offset} position: {position}\n")
            if prev is not None and (offset <= prev[0] or position <= prev[1]):
                notes.add(f"Out of order: entry offset: {offset} position: {position} follows "
                          f"offset: {prev[0]} position: {prev[1]}")
            if log is not None:
                # As LogSegment.translate_offset checks: the batch at P must hold O.
                batch = log.header_at(position)
                if batch is None:
                    notes.add(f"Does not match the log: entry offset: {offset} position: {position} "
                              f"points at no batch in {log_name}")
                elif not batch[0] <= offset <= batch[1]:
                    notes.add(f"Does not match the log: entry offset: {offset} position: {position} "
                              f"points at the batch of offsets {batch[0]}..{batch[1]}")
            prev = (offset, position)

        log_name = seg.sibling(LOG_SUFFIX).name
        for rel, position in _iter_entries(fd, size, offset_index.ENTRY_SIZE, chunk_bytes,
                                           offset_index.ENTRY.iter_unpack):
            if count > 0 and rel == 0 and position == 0:
                zeros_pending += 1
            else:
                for _ in range(zeros_pending):
                    emit(seg.base_offset, 0)
                zeros_pending = 0
                emit(seg.base_offset + rel, position)
            count += 1
        _finish_index(shown, size, offset_index.ENTRY_SIZE, count, zeros_pending, verify_only, notes, out)
    finally:
        os.close(fd)
        if log is not None:
            log.close()


def dump_time_index(seg: SegmentFile, shown: str, verify_only: bool, out: TextIO, chunk_bytes: int) -> None:
    notes = _Notes()
    fd, size = open_segment(seg)
    log = _open_log_headers(seg, chunk_bytes, notes)
    try:
        count = 0
        zeros_pending = 0
        prev: tuple[int, int] | None = None

        def emit(timestamp: int, offset: int) -> None:
            nonlocal prev
            if not verify_only:
                out.write(f"timestamp: {timestamp} offset: {offset}\n")
            if prev is not None and (timestamp <= prev[0] or offset < prev[1]):
                notes.add(f"Out of order: entry timestamp: {timestamp} offset: {offset} follows "
                          f"timestamp: {prev[0]} offset: {prev[1]}")
            if log is not None:
                batch = log.batch_holding(offset)
                if batch is None:
                    notes.add(f"Does not match the log: entry timestamp: {timestamp} offset: {offset}: "
                              f"no batch in {log_name} holds that offset")
                elif batch[2] != timestamp:
                    notes.add(f"Does not match the log: entry timestamp: {timestamp} offset: {offset}: "
                              f"the batch holding it has max timestamp {batch[2]}")
            prev = (timestamp, offset)

        log_name = seg.sibling(LOG_SUFFIX).name
        for timestamp, rel in _iter_entries(fd, size, time_index.ENTRY_SIZE, chunk_bytes,
                                            time_index.ENTRY.iter_unpack):
            if count > 0 and timestamp == 0 and rel == 0:
                zeros_pending += 1
            else:
                for _ in range(zeros_pending):
                    emit(0, seg.base_offset)
                zeros_pending = 0
                emit(timestamp, seg.base_offset + rel)
            count += 1
        _finish_index(shown, size, time_index.ENTRY_SIZE, count, zeros_pending, verify_only, notes, out)
    finally:
        os.close(fd)
        if log is not None:
            log.close()


def dump_txn_index(seg: SegmentFile, shown: str, verify_only: bool, out: TextIO, chunk_bytes: int) -> None:
    notes = _Notes()
    fd, size = open_segment(seg)
    log = _open_log_headers(seg, chunk_bytes, notes)
    log_name = seg.sibling(LOG_SUFFIX).name
    try:
        count = 0
        previous = -1
        for version, pid, first, last, lso in _iter_entries(fd, size, transaction_index.ENTRY_SIZE, chunk_bytes,
                                                             transaction_index.ENTRY.iter_unpack):
            if not verify_only:
                out.write(f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} "
                          f"lastStableOffset: {lso}\n")
            where = f"entry producerId: {pid} lastOffset: {last}"
            if version != transaction_index.TXN_INDEX_VERSION:
                notes.add(f"Unknown version: {where} has version {version}")
            if first > last:
                notes.add(f"Impossible: {where} has firstOffset {first} above its lastOffset")
            if last <= previous:
                notes.add(f"Out of order: {where} follows lastOffset: {previous}")
            if log is not None and log.batch_holding(last) is None:
                notes.add(f"Does not match the log: {where}: no batch in {log_name} holds the marker's offset")
            previous = last
            count += 1
        _finish_index(shown, size, transaction_index.ENTRY_SIZE, count, 0, verify_only, notes, out)
    finally:
        os.close(fd)
        if log is not None:
            log.close()


def _finish_index(shown: str, size: int, entry_size: int, count: int, zeros: int, verify_only: bool,
                  notes: _Notes, out: TextIO) -> None:
    if size % entry_size:
        notes.add(f"Torn entry: the last {size % entry_size} bytes are not a whole {entry_size}-byte entry")
    if zeros:
        notes.add(f"{zeros} all-zero entries at the end are unused (preallocated) space, not shown")
    if count == 0 and not size % entry_size:
        out.write(f"{shown} is empty.\n")
    notes.write(out)
    if verify_only and not notes and count:
        out.write(f"{shown}: {count} entries, in order and matching the log.\n")
