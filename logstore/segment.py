"""A log segment: one `.log` file of whole batches plus its `.index` and `.timeindex`.

Files are named by the segment's base offset, zero-padded to 20 digits:
`00000000000000005376.log`, `00000000000000005376.index`, `00000000000000005376.timeindex`.
The `.log` holds RecordBatch v2 bytes back to back (see record_batch.py), exactly as received.
Suffixes `.cleaned` and `.swap` mark replacement segments of a compaction in progress, and
`.deleted` marks files on their way out (see log.py for the swap protocol).

Invariants: `size` is the length of the whole batches in the `.log`; index entries point at batch
starts; batches in a segment have increasing offsets, all >= the base offset.

Crash behaviour: an append that the process did not finish can leave a torn batch at the tail of
the `.log`, and indexes that lag or run ahead. `recover()` re-reads every batch, checks its CRC,
cuts the file at the first bad one and rebuilds both indexes; it returns how many bytes it cut.

Concurrency: not thread-safe; the partition log serialises every call.

Where the code is: this module holds the names, the fields, the tail's bounds and the mutations
(append, roll, truncate, flush, rename, delete); reads and lookups are `SegmentRead`
(segment_read.py, with `SegmentReader` and `BatchPosition`), recovery and index rebuilds
`SegmentRecovery` (segment_recovery.py). They work on the same fields.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from lakelog.index.offset_index import OffsetIndex
from lakelog.index.time_index import TimeIndex
from lakelog.infra.errors import invariant
from lakelog.index.errors import CorruptIndexError
from lakelog.logstore.record_batch import NO_TIMESTAMP
from lakelog.logstore.segment_read import (  # noqa: F401  (re-exported: the log, the uploader and bench import them here)
    SCAN_CHUNK_BYTES,
    BatchPosition,
    SegmentRead,
    SegmentReader,
)
from lakelog.logstore.segment_recovery import SegmentRecovery

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


def parse_base_offset(name: str) -> int | None:
    stem = name.split(".", 1)[0]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


@dataclass(frozen=True, slots=True)
class SegmentConfig:
    """The per-segment knobs, taken from the log config."""

    index_interval_bytes: int
    max_index_bytes: int


class LogSegment(SegmentRecovery, SegmentRead):
    """One segment of a partition log."""

    def __init__(self, directory: str | os.PathLike, base_offset: int, config: SegmentConfig, *,
                 suffix: str = "", created_ms: int | None = None) -> None:
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.config = config
        name = segment_name(base_offset)
        self.log_path = self.directory / (name + LOG_SUFFIX + suffix)
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self.size = os.fstat(self._fd).st_size
        self.offset_index = OffsetIndex(self.directory / (name + INDEX_SUFFIX + suffix), base_offset,
                                        config.max_index_bytes)
        self.time_index = TimeIndex(self.directory / (name + TIME_INDEX_SUFFIX + suffix), base_offset,
                                    config.max_index_bytes)
        self.created_ms = created_ms if created_ms is not None else int(time.time() * 1000)
        self._bytes_since_last_index_entry = 0
        self._next_offset: int | None = None if self.size else base_offset
        self._max_timestamp: int | None = None if self.size else NO_TIMESTAMP
        self._offset_of_max_timestamp = base_offset
        self._rolling_based_timestamp: int | None = None
        self._unflushed = False
        #: (next offset, its position) where the last read ended; reset by truncation.
        self._read_hint: tuple[int, int] | None = None

    # ------------------------------------------------------------------ queries

    @property
    def next_offset(self) -> int:
        """One past the last offset held (the base offset if empty)."""
        if self._next_offset is None:
            self._load_tail()
        return self._next_offset  # type: ignore[return-value]

    @property
    def max_timestamp(self) -> int:
        """The largest batch max timestamp in the segment (-1 if none)."""
        if self._max_timestamp is None:
            self._load_tail()
        return self._max_timestamp  # type: ignore[return-value]

    @property
    def offset_of_max_timestamp(self) -> int:
        if self._max_timestamp is None:
            self._load_tail()
        return self._offset_of_max_timestamp

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    @property
    def last_modified_ms(self) -> int:
        return int(os.fstat(self._fd).st_mtime * 1000)

    def retention_timestamp(self) -> int:
        """The time retention.ms measures from: the newest record's timestamp, else file mtime."""
        ts = self.max_timestamp
        return ts if ts > NO_TIMESTAMP else self.last_modified_ms

    def _load_tail(self) -> None:
        """Find the next offset and max timestamp without reading the whole file.

        Start from the last index entries and read batch headers forward to the end of the file.
        """
        start = 0
        if len(self.offset_index):
            _, start = self.offset_index.lookup(self.offset_index.last_offset)
        next_offset = self.base_offset
        te = self.time_index.last_entry
        max_ts, off_of_max = (te if te else (NO_TIMESTAMP, self.base_offset))
        for bp in self.scan_headers(start):
            next_offset = bp.last_offset + 1
            if bp.max_timestamp > max_ts:
                max_ts, off_of_max = bp.max_timestamp, bp.last_offset
        if start > 0 and next_offset == self.base_offset:
            raise CorruptIndexError(f"offset index {self.offset_index.path} points past the last batch")
        self._next_offset = next_offset
        self._max_timestamp = max_ts
        self._offset_of_max_timestamp = off_of_max


    # ------------------------------------------------------------------ mutations

    def should_roll(self, incoming_bytes: int, incoming_max_timestamp: int, max_offset_in_append: int,
                    segment_bytes: int, segment_ms: int, now_ms: int) -> bool:
        """Kafka's roll rule: size, age, a full index, or an offset that no longer fits."""
        if self.is_empty:
            return False
        if self.size + incoming_bytes > segment_bytes:
            return True
        if self._rolling_based_timestamp is None:
            self._rolling_based_timestamp = self._first_batch_timestamp()
        if self._rolling_based_timestamp > NO_TIMESTAMP and incoming_max_timestamp > NO_TIMESTAMP:
            waited = incoming_max_timestamp - self._rolling_based_timestamp
        else:
            waited = now_ms - self.created_ms
        if waited > segment_ms:
            return True
        if self.offset_index.is_full or self.time_index.is_full:
            return True
        return max_offset_in_append - self.base_offset > 0xFFFFFFFF

    def _first_batch_timestamp(self) -> int:
        for bp in self.scan_headers(0):
            return bp.max_timestamp
        return NO_TIMESTAMP

    def append(self, data: bytes | bytearray | memoryview | list, batches: list[tuple[int, int, int, int]]) -> None:
        """Append whole, validated batches.

        `data` is one buffer or a list of buffers written back to back (gathered with pwritev, so
        a leader can patch batch headers without copying payloads). `batches` lists, for each
        batch: (position within the appended bytes, last offset, max timestamp, size). Index
        entries are added per batch every `index.interval.bytes`.
        """
        invariant(bool(batches), "append needs at least one batch")
        base_position = self.size
        total = _pwrite_all(self._fd, data if isinstance(data, list) else [data], base_position)
        self.size += total
        self._unflushed = True
        if self._rolling_based_timestamp is None and base_position == 0:
            self._rolling_based_timestamp = batches[0][2]
        max_ts = self.max_timestamp
        off_of_max = self._offset_of_max_timestamp
        interval = self.config.index_interval_bytes
        for pos, last_offset, batch_max_ts, size in batches:
            if batch_max_ts > max_ts:
                max_ts, off_of_max = batch_max_ts, last_offset
            if self._bytes_since_last_index_entry >= interval or interval == 0:
                if not self.offset_index.is_full:
                    self.offset_index.append(last_offset, base_position + pos)
                self.time_index.maybe_append(max_ts, off_of_max)
                self._bytes_since_last_index_entry = 0
            self._bytes_since_last_index_entry += size
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, off_of_max
        self._next_offset = batches[-1][1] + 1

    def on_become_inactive(self) -> None:
        """The segment was rolled: record its final max timestamp in the time index."""
        if not self.is_empty and self.max_timestamp > NO_TIMESTAMP:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)


    def truncate_to(self, offset: int) -> tuple[int, int]:
        """Remove every batch whose last offset is >= `offset`.

        A batch that straddles `offset` goes whole (batches are never split), so the segment may end
        below `offset`. Returns (bytes removed, the segment's new next offset).
        """
        self._read_hint = None
        bp = self.translate_offset(offset)
        if bp is None:
            return 0, self.next_offset
        removed = self.size - bp.position
        os.ftruncate(self._fd, bp.position)
        self.size = bp.position
        self.offset_index.truncate_to_position(bp.position)
        self.time_index.truncate_to(bp.base_offset)
        self._bytes_since_last_index_entry = 0
        self._next_offset = bp.base_offset if bp.position else self.base_offset
        self._max_timestamp = None
        self._load_tail()
        self._rolling_based_timestamp = None
        return removed, self._next_offset

    def flush(self) -> None:
        if self._unflushed:
            os.fsync(self._fd)
            self.offset_index.flush()
            self.time_index.flush()
            self._unflushed = False

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.offset_index.close()
        self.time_index.close()

    def files(self) -> list[Path]:
        return [self.log_path, self.offset_index.path, self.time_index.path]

    def change_suffix(self, old: str, new: str) -> None:
        """Rename all three files from suffix `old` to `new` (e.g. '.swap' -> '').

        The `.log` goes last: while it still has the old suffix the step is not done, and
        recovery on open redoes it (index files are derived and are rebuilt when in doubt).
        """
        def target(path: Path) -> Path:
            invariant(path.name.endswith(old), f"{path} does not end with {old!r}")
            return path.with_name(path.name[: len(path.name) - len(old)] + new)

        self.offset_index.rename_to(target(self.offset_index.path))
        self.time_index.rename_to(target(self.time_index.path))
        self._set_log_path(target(self.log_path))

    def _set_log_path(self, target: Path) -> None:
        os.replace(self.log_path, target)
        self.log_path = target

    def delete_files(self) -> None:
        """Close the segment and remove its files (renamed `.deleted` first so a crash is visible)."""
        self.close()
        for path in self.files():
            if path.exists():
                doomed = path.with_name(path.name + DELETED_SUFFIX)
                os.replace(path, doomed)
                os.unlink(doomed)

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size}, path={self.log_path})"


#: Buffers per pwritev call (Linux's IOV_MAX is 1024).
_IOV_BATCH = 512


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
