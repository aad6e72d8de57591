"""A log segment: one `.log` file of whole batches plus its `.index`, `.timeindex` and `.txnindex`.

Files are named by the segment's base offset, zero-padded to 20 digits:
`00000000000000005376.log`, `00000000000000005376.index`, `00000000000000005376.timeindex`, and
`00000000000000005376.txnindex` once a transaction is aborted in the segment (index/transaction_index.py).
The `.log` holds RecordBatch v2 bytes back to back (see record_batch.py), exactly as received.
Suffixes `.cleaned` and `.swap` mark replacement segments of a compaction in progress, and
`.deleted` marks files on their way out (see local_log.py for the swap protocol).

Invariants: `size` is the length of the whole batches in the `.log`; index entries point at batch
starts; batches in a segment have increasing offsets, all >= the base offset.

Crash behaviour: an append that the process did not finish can leave a torn batch at the tail of
the `.log`, and indexes that lag or run ahead. `recover()` re-reads every batch, checks its CRC,
cuts the file at the first bad one and rebuilds both indexes; it returns how many bytes it cut.

Concurrency: not thread-safe; the partition log serialises every call.

Composition: a segment holds its `.log` as `FileRecords` (file_records.py: the descriptor, the
size, header scans, whole-batch reads, the valid prefix, pwritev, truncation) and its `OffsetIndex`
and `TimeIndex` (index/) and its `TransactionIndex` (written by the partition log, which knows
the producers' transactions); it keeps the tail (next offset, max timestamp), decides where indexes
get entries, and combines the three for lookups, reads, recovery and renames.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from lakelog.index.errors import CorruptIndexError
from lakelog.index.offset_index import OffsetIndex
from lakelog.index.time_index import TimeIndex
from lakelog.index.transaction_index import TransactionIndex
from lakelog.infra.config import LogConfig
from lakelog.infra.errors import invariant
from lakelog.logstore.file_records import BatchPosition, FileRecords, SegmentReader
from lakelog.logstore.record_batch import HEADER_SIZE, LOG_OVERHEAD, NO_TIMESTAMP, RecordBatch

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
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

    @classmethod
    def of(cls, config: LogConfig) -> SegmentConfig:
        """`index.interval.bytes` and `segment.index.bytes` of a topic's log config."""
        return cls(config.index_interval_bytes, config.segment_index_bytes)


class LogSegment:
    """One segment of a partition log: its `.log` (`FileRecords`), `.index` and `.timeindex`."""

    def __init__(self, directory: str | os.PathLike, base_offset: int, config: SegmentConfig, *,
                 suffix: str = "", created_ms: int | None = None) -> None:
        self.directory = Path(directory)
        self.base_offset = base_offset
        self.config = config
        name = segment_name(base_offset)
        self._log = FileRecords(self.directory / (name + LOG_SUFFIX + suffix))
        self.offset_index = OffsetIndex(self.directory / (name + INDEX_SUFFIX + suffix), base_offset,
                                        config.max_index_bytes)
        self.time_index = TimeIndex(self.directory / (name + TIME_INDEX_SUFFIX + suffix), base_offset,
                                    config.max_index_bytes)
        self.txn_index = TransactionIndex(self.directory / (name + TXN_INDEX_SUFFIX + suffix), base_offset)
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
    def log_path(self) -> Path:
        return self._log.path

    @property
    def size(self) -> int:
        """The length of the whole batches in the `.log`."""
        return self._log.size

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
        return self._log.last_modified_ms

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
        for bp in self._log.scan_headers(start):
            next_offset = bp.last_offset + 1
            if bp.max_timestamp > max_ts:
                max_ts, off_of_max = bp.max_timestamp, bp.last_offset
        if start > 0 and next_offset == self.base_offset:
            raise CorruptIndexError(f"offset index {self.offset_index.path} points past the last batch")
        self._next_offset = next_offset
        self._max_timestamp = max_ts
        self._offset_of_max_timestamp = off_of_max

    # ------------------------------------------------------------------ reads and lookups

    def scan_headers(self, start_position: int = 0, end_position: int | None = None) -> Iterator[BatchPosition]:
        """Batch headers from `start_position` on, reading 61 bytes per batch (no CRC check)."""
        return self._log.scan_headers(start_position, end_position)

    def read_bytes(self, position: int, size: int) -> bytes:
        return self._log.read_bytes(position, size)

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
            fields = self._log.header_fields(position)
            if fields is None:
                raise CorruptIndexError(f"offset index {self.offset_index.path} points past the log")
            base, length, _, magic, _, _, lod, *_ = fields
            if magic != 2 or length < HEADER_SIZE - LOG_OVERHEAD or position + length + LOG_OVERHEAD > self.size \
                    or not base <= entry_offset <= base + lod:
                raise CorruptIndexError(f"offset index {self.offset_index.path} entry ({entry_offset}, "
                                        f"{position}) does not point at the batch holding that offset")
        for bp in self._log.scan_headers(max(position, start_position)):
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
            start = self._log.header_at(hint[1])
        else:
            start = self.translate_offset(start_offset)
        want = _budget(start, max_bytes, max_offset, min_one_batch)
        if want is None:
            return None
        got = self._log.read_whole_batches(start, want, max_offset)
        if got is None:
            return None
        data, last_offset = got
        self._read_hint = (last_offset + 1, start.position + len(data))
        return start.position, data, last_offset

    def extent(self, start_offset: int, max_bytes: int, *, max_offset: int | None = None,
               min_one_batch: bool = True) -> tuple[int, int, int, int] | None:
        """Where `read` would read, without reading: (position, size, first batch's base offset,
        last offset) of the same whole batches, from batch headers alone (no CRC check; a Kafka
        consumer checks each batch's CRC). None when nothing qualifies."""
        start = self.translate_offset(start_offset)
        want = _budget(start, max_bytes, max_offset, min_one_batch)
        if want is None:
            return None
        got = self._log.whole_batches_extent(start, want, max_offset)
        if got is None:
            return None
        size, last_offset = got
        return start.position, size, start.base_offset, last_offset

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
        for bp in self._log.scan_headers(position):
            if bp.max_timestamp < timestamp or bp.last_offset < start_offset:
                continue
            batch = RecordBatch(self._log.read_bytes(bp.position, bp.size))
            batch.ensure_valid(file=str(self.log_path), position=bp.position)
            if batch.timestamp_type == 1:  # LogAppendTime: every record carries the batch time
                return max(batch.base_offset, start_offset), batch.max_timestamp
            for rec in batch.records():
                if rec.timestamp >= timestamp and rec.offset >= start_offset:
                    return rec.offset, rec.timestamp
        return None

    def batches(self, start_position: int = 0, *, verify: bool = True) -> Iterator[tuple[int, RecordBatch]]:
        """Every batch from `start_position`, read in large chunks, CRC-checked when `verify`.

        Raises TruncatedBatchError / CorruptRecordError on a torn or damaged file.
        """
        return self._log.batches(start_position, verify=verify)

    def open_reader(self) -> SegmentReader:
        """A snapshot reader with its own file descriptor: it stays valid if the segment is later
        closed, truncated by size, or deleted (the caller must hold the log's lock while opening)."""
        return self._log.open_reader(self.base_offset)

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
        for bp in self._log.scan_headers(0):
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
        if self._max_timestamp is None:
            self._load_tail()  # before the file grows: the new batches are indexed below
        self._log.append(data if isinstance(data, list) else [data])
        self._unflushed = True
        if self._rolling_based_timestamp is None and base_position == 0:
            self._rolling_based_timestamp = batches[0][2]
        self._index_batches(base_position, batches)
        self._next_offset = batches[-1][1] + 1

    def _index_batches(self, base_position: int, batches: list[tuple[int, int, int, int]]) -> None:
        """Add index entries for appended or recovered batches: (position from `base_position`,
        last offset, max timestamp, size) each; one entry every `index.interval.bytes`."""
        interval = self.config.index_interval_bytes
        max_ts, off_of_max = self._max_timestamp, self._offset_of_max_timestamp
        for rel, last_offset, batch_max_ts, size in batches:
            if batch_max_ts > max_ts:  # type: ignore[operator]
                max_ts, off_of_max = batch_max_ts, last_offset
            if self._bytes_since_last_index_entry >= interval or interval == 0:
                if not self.offset_index.is_full:
                    self.offset_index.append(last_offset, base_position + rel)
                self.time_index.maybe_append(max_ts, off_of_max)  # type: ignore[arg-type]
                self._bytes_since_last_index_entry = 0
            self._bytes_since_last_index_entry += size
        self._max_timestamp, self._offset_of_max_timestamp = max_ts, off_of_max

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
        removed = self._log.truncate_to(bp.position)
        self.offset_index.truncate_to_position(bp.position)
        self.time_index.truncate_to(bp.base_offset)
        self.txn_index.truncate_to(bp.base_offset)
        self._bytes_since_last_index_entry = 0
        self._next_offset = bp.base_offset if bp.position else self.base_offset
        self._max_timestamp = None
        self._load_tail()
        self._rolling_based_timestamp = None
        return removed, self._next_offset

    # ------------------------------------------------------------------ recovery

    def recover(self, on_batch: Callable[[RecordBatch], None] | None = None,
                max_batch_bytes: int | None = None) -> int:
        """Re-read every batch, cut the file at the first torn or corrupt one, rebuild indexes.

        Returns the number of bytes cut. `on_batch` sees each valid batch (to rebuild the leader
        epoch cache). Batches whose offsets do not increase are treated as corrupt.
        """
        self._read_hint = None
        self._reset_indexes()
        self._next_offset = self.base_offset
        valid_end = 0
        for position, batch in self._log.valid_batches(self.base_offset, max_batch_bytes):
            if on_batch is not None:
                on_batch(batch)
            self._index_batches(0, [(position, batch.last_offset, batch.max_timestamp, batch.size_in_bytes)])
            self._next_offset = batch.last_offset + 1
            valid_end = position + batch.size_in_bytes
        truncated = self._log.truncate_to(valid_end)
        self._rolling_based_timestamp = None
        return truncated

    def check_indexes(self) -> None:
        """Structural checks of both indexes; raise CorruptIndexError on failure."""
        self.offset_index.sanity_check(self.size)
        self.time_index.sanity_check(self.next_offset - 1 if self.size else self.base_offset)

    def rebuild_indexes(self) -> None:
        """Regenerate `.index` and `.timeindex` from the `.log` (which must be valid)."""
        self._reset_indexes()
        for pos, batch in self._log.batches():
            self._index_batches(0, [(pos, batch.last_offset, batch.max_timestamp, batch.size_in_bytes)])
            self._next_offset = batch.last_offset + 1

    def _reset_indexes(self) -> None:
        self.offset_index.reset()
        self.time_index.reset()
        self._bytes_since_last_index_entry = 0
        self._max_timestamp, self._offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset

    # ------------------------------------------------------------------ files

    def flush(self) -> None:
        if self._unflushed:
            self._log.flush()
            self.offset_index.flush()
            self.time_index.flush()
            self.txn_index.flush()
            self._unflushed = False

    def close(self) -> None:
        self._log.close()
        self.offset_index.close()
        self.time_index.close()

    def files(self) -> list[Path]:
        """The segment's files; the `.txnindex` only when it exists (an abort in the segment)."""
        txn = [self.txn_index.path] if self.txn_index.path.exists() else []
        return [self.log_path, self.offset_index.path, self.time_index.path] + txn

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
        self.txn_index.rename_to(target(self.txn_index.path))
        self._log.rename_to(target(self.log_path))

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


def _budget(start, max_bytes: int, max_offset: int | None, min_one_batch: bool) -> int | None:
    """The bytes a read (or extent) from the batch `start` may take; None when nothing qualifies:
    no batch, the first at or past `max_offset`, or too large for `max_bytes` (unless
    `min_one_batch`, which always lets the first whole batch through)."""
    if start is None or (max_offset is not None and start.last_offset >= max_offset):
        return None
    want = max(max_bytes, start.size) if min_one_batch else max_bytes
    return None if want < start.size else want
