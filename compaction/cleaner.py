"""The local log cleaner: compaction rounds over a `PartitionLog`'s files, and the background thread.

The decisions are the pure functions of `compactor.py`; this module reads segments, writes
replacement segments, swaps them in and keeps the cleaner checkpoint.

A round (`clean_log`), for a log whose `cleanup.policy` includes `compact`:
  1. first dirty offset = the checkpoint (the log start offset when there is none, or when it is
     below the log start offset or above the log end offset: retention or truncation moved past it);
     first uncleanable offset = min(active segment base, high watermark, first batch younger than
     `min.compaction.lag.ms`).
  2. clean bytes = sealed segments wholly below the first dirty offset; dirty bytes = sealed
     segments holding a dirty offset. The round runs when dirty / (clean + dirty) >=
     `min.cleanable.dirty.ratio`, when a dirty segment's first batch is older than
     `max.compaction.lag.ms`, when the earliest delete horizon of a kept tombstone has passed,
     or when forced.
  3. the offset map (bounded by `max_offset_map_entries`) is built over the dirty section; when it
     fills up, the round covers only a prefix (up to the map end offset).
  4. every sealed segment below the map end offset is cleaned, in groups of consecutive segments
     whose sizes add up to at most `segment.bytes` (Kafka groups small cleaned segments into one).
     Each group becomes one segment written with suffix `.cleaned` (base offset = the group's first
     base offset, indexes built by `LogSegment.append`, mtime = the group's newest mtime so
     `retention.ms` measures as before), then `PartitionLog.replace_segments` swaps it in.
  5. after every group is swapped, the checkpoint is written. The active segment is never read
     for cleaning, never rewritten.

Cleaner checkpoint file `cleaner-offset-checkpoint` in the partition directory, in the format of
`logstore/checkpoint.py` (text; line 1 version 0, line 2 count = 1, then one entry line):

    first_dirty_offset  next_delete_horizon_ms      (both int64; -1 = no kept tombstone)

Crash behaviour: the checkpoint is replaced atomically and only after the swaps, so a crash
leaves the old checkpoint and the next round redoes work that is idempotent (a record's fate
depends only on the map, the clock and its batch's delete horizon, which is kept once stamped).
A crash while `.cleaned` files are written leaves files that `PartitionLog` removes on open; a
crash during a swap is completed by `PartitionLog` on open (see logstore/log.py). The checkpoint
never runs ahead of what was compacted: the clean section must hold at most one record per key,
or an older value could resurface once a later tombstone of its key is dropped.

Concurrency: `clean_log` may run alongside appends, reads and retention of the same log (it reads
sealed segments without the log's lock and swaps under it); two rounds must not run on one log at
once (`LogCleaner` serialises its passes). If the segments it read were removed meanwhile
(truncation, DeleteRecords), the round is abandoned without a swap (CleaningAbortedError).
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from lakelog.compaction.compactor import (
    DEFAULT_MAX_OFFSET_MAP_ENTRIES,
    CleaningParams,
    CleaningTrigger,
    CompactionStats,
    OffsetMap,
    SegmentSpan,
    build_offset_map,
    cleaning_trigger,
    compact_batches,
    dirty_ratio,
    first_offset_younger_than,
    first_uncleanable_offset,
    group_segments,
    next_first_dirty_offset,
)
from lakelog.compaction.errors import CleaningAbortedError, CorruptCleanerCheckpointError
from lakelog.compaction.txn_markers import TransactionCleaning
from lakelog.logstore.retention import RetentionResult, apply_retention
from lakelog.infra.errors import InvariantViolation, invariant
from lakelog.logstore.checkpoint import read_checkpoint, write_checkpoint
from lakelog.logstore.errors import CorruptRecordError, LogClosedError
from lakelog.logstore.record_batch import NO_TIMESTAMP, RecordBatch
from lakelog.logstore.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    SegmentConfig,
    segment_name,
)

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
#: Bytes of cleaned batches buffered before one gathered write to the replacement segment.
WRITE_BUFFER_BYTES = 1024 * 1024
#: Bounds of the background cleaner's pass interval.
MIN_INTERVAL_MS = 1
MAX_INTERVAL_MS = 60 * 60 * 1000


# ---------------------------------------------------------------------------------------------
# The checkpoint


@dataclass(frozen=True, slots=True)
class CleanerCheckpoint:
    """Where the dirty section starts, and when a kept tombstone may next be dropped."""

    first_dirty_offset: int
    next_delete_horizon_ms: int | None = None


def read_cleaner_checkpoint(directory: str | os.PathLike) -> CleanerCheckpoint | None:
    """The partition's cleaner checkpoint; None if it has none.

    Raises UnsupportedFormatVersionError for an unknown version, CorruptCleanerCheckpointError
    for a malformed file or impossible values.
    """
    path = Path(directory) / CLEANER_CHECKPOINT_FILE
    try:
        entries = read_checkpoint(path, 2)
    except CorruptRecordError as e:
        raise CorruptCleanerCheckpointError(str(e)) from None
    if entries is None:
        return None
    if len(entries) != 1:
        raise CorruptCleanerCheckpointError(f"{path} holds {len(entries)} entries, expected 1")
    first_dirty, horizon = entries[0]
    if first_dirty < 0 or horizon < -1:
        raise CorruptCleanerCheckpointError(f"{path} holds impossible values {first_dirty} {horizon}")
    return CleanerCheckpoint(first_dirty, None if horizon == -1 else horizon)


def write_cleaner_checkpoint(directory: str | os.PathLike, checkpoint: CleanerCheckpoint) -> None:
    """Replace the checkpoint atomically (temp file, fsync, rename, fsync the directory)."""
    invariant(checkpoint.first_dirty_offset >= 0, "first dirty offset cannot be negative")
    horizon = -1 if checkpoint.next_delete_horizon_ms is None else checkpoint.next_delete_horizon_ms
    write_checkpoint(Path(directory) / CLEANER_CHECKPOINT_FILE, [(checkpoint.first_dirty_offset, horizon)])


def maybe_truncate_cleaner_checkpoint(log, offset: int) -> None:
    """After the log was truncated to `offset`, pull the checkpoint back to it (Kafka's
    `maybeTruncateCheckpoint`): records appended again above `offset` are dirty, not clean."""
    cp = read_cleaner_checkpoint(log.directory)
    if cp is not None and cp.first_dirty_offset > offset:
        write_cleaner_checkpoint(log.directory, CleanerCheckpoint(offset, cp.next_delete_horizon_ms))


# ---------------------------------------------------------------------------------------------
# One round


@dataclass(frozen=True, slots=True)
class CleanResult:
    """What one `clean_log` call did (or why it did nothing)."""

    cleaned: bool
    reason: str
    trigger: CleaningTrigger | None = None
    first_dirty_offset: int = 0
    first_uncleanable_offset: int = 0
    map_end_offset: int = 0
    next_first_dirty_offset: int = 0
    dirty_ratio: float = 0.0
    offset_map_full: bool = False
    replaced: tuple[tuple[int, ...], ...] = ()  # base offsets of each replaced group
    stats: CompactionStats = field(default_factory=CompactionStats)


def _new_cleaned_segment(log, base_offset: int) -> LogSegment:
    # LogSegment opens existing files as they are: clear what an abandoned round left behind.
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        (log.directory / (segment_name(base_offset) + suffix + CLEANED_SUFFIX)).unlink(missing_ok=True)
    return LogSegment(log.directory, base_offset, SegmentConfig.of(log.config), suffix=CLEANED_SUFFIX)


def _discard(segment: LogSegment) -> None:
    segment.close()
    for path in segment.files():
        path.unlink(missing_ok=True)


class _SegmentWriter:
    """Buffers cleaned batches and appends them to a replacement segment in gathered writes."""

    def __init__(self, segment: LogSegment, buffer_bytes: int) -> None:
        self.segment = segment
        self.buffer_bytes = buffer_bytes
        self._parts: list[bytes] = []
        self._entries: list[tuple[int, int, int, int]] = []
        self._pending = 0

    def add(self, data: bytes) -> None:
        batch = RecordBatch(data)
        self._parts.append(data)
        self._entries.append((self._pending, batch.last_offset, batch.max_timestamp, len(data)))
        self._pending += len(data)
        if self._pending >= self.buffer_bytes:
            self.flush()

    def flush(self) -> None:
        if self._parts:
            self.segment.append(self._parts, self._entries)
            self._parts, self._entries, self._pending = [], [], 0


def _batches(segments, should_stop: Callable[[], bool]) -> Iterator[RecordBatch]:
    for seg in segments:
        for _, batch in seg.batches():
            if should_stop():
                raise CleaningAbortedError(f"cleaning of {seg.directory} stopped")
            yield batch


def _first_young_offset(sealed, first_dirty: int, cutoff_ms: int) -> int | None:
    for seg in sealed:
        if seg.next_offset <= first_dirty or seg.max_timestamp <= cutoff_ms:
            continue
        found = first_offset_younger_than(
            ((bp.base_offset, bp.max_timestamp) for bp in seg.scan_headers() if bp.last_offset >= first_dirty),
            cutoff_ms)
        if found is not None:
            return found
    return None


def _first_batch_timestamp(seg) -> int:
    for bp in seg.scan_headers():
        return bp.max_timestamp
    return NO_TIMESTAMP


def clean_log(log, now_ms: int, *, high_watermark: int | None = None,
              max_offset_map_entries: int = DEFAULT_MAX_OFFSET_MAP_ENTRIES, force: bool = False,
              should_stop: Callable[[], bool] | None = None,
              write_buffer_bytes: int = WRITE_BUFFER_BYTES) -> CleanResult:
    """Run one compaction round over `log` (a PartitionLog) if it needs one; see the module doc.

    `high_watermark` bounds what may be cleaned (records at or above it may still be truncated).
    `should_stop` is polled between batches; when it returns True the round is abandoned
    (CleaningAbortedError), as it is when the log's segments change under it.
    """
    stop = should_stop or (lambda: False)
    cfg = log.config
    if not cfg.compact:
        return CleanResult(False, "cleanup.policy does not include compact")
    segments = log.segments
    sealed = segments[:-1]
    active = segments[-1]
    log_start, log_end = log.log_start_offset, log.log_end_offset
    checkpoint = read_cleaner_checkpoint(log.directory)
    first_dirty = checkpoint.first_dirty_offset if checkpoint is not None else log_start
    if not log_start <= first_dirty <= log_end:
        first_dirty = log_start
    pending_horizon = checkpoint.next_delete_horizon_ms if checkpoint is not None else None

    young = None
    if cfg.min_compaction_lag_ms > 0:
        young = _first_young_offset(sealed, first_dirty, now_ms - cfg.min_compaction_lag_ms)
    uncleanable = max(first_dirty, first_uncleanable_offset(active.base_offset, high_watermark, young,
                                                            log.first_unstable_offset))

    clean_bytes = sum(s.size for s in sealed if s.next_offset <= first_dirty)
    dirty_segments = [s for s in sealed if s.next_offset > first_dirty and s.base_offset < uncleanable]
    dirty_bytes = sum(s.size for s in dirty_segments)
    ratio = dirty_ratio(clean_bytes, dirty_bytes)
    stamps = [t for t in (_first_batch_timestamp(s) for s in dirty_segments) if t > NO_TIMESTAMP]
    trigger = CleaningTrigger.FORCED if force else cleaning_trigger(
        clean_bytes=clean_bytes, dirty_bytes=dirty_bytes,
        min_cleanable_dirty_ratio=cfg.min_cleanable_dirty_ratio,
        earliest_dirty_timestamp_ms=min(stamps) if stamps else NO_TIMESTAMP,
        max_compaction_lag_ms=cfg.max_compaction_lag_ms, next_delete_horizon_ms=pending_horizon,
        now_ms=now_ms)
    summary = dict(first_dirty_offset=first_dirty, first_uncleanable_offset=uncleanable, dirty_ratio=ratio)
    if trigger is None:
        return CleanResult(False, f"dirty ratio {ratio:.3f} below {cfg.min_cleanable_dirty_ratio}",
                           map_end_offset=first_dirty, next_first_dirty_offset=first_dirty, **summary)

    swapped: list[LogSegment] = []  # old segments this round replaced itself
    try:
        return _run_round(log, now_ms, cfg, sealed, dirty_segments, first_dirty, uncleanable, trigger, summary,
                          max_offset_map_entries, stop, write_buffer_bytes, swapped)
    except (OSError, CorruptRecordError) as e:
        # Segments are read without the log's lock: one deleted meanwhile (retention elsewhere,
        # DeleteRecords, truncation) has a closed file. That is a changed log, not corruption.
        if _gone(log, [s for s in sealed if not any(s is x for x in swapped)]):
            raise CleaningAbortedError(f"segments of {log.directory} were removed during cleaning: {e}") from e
        raise


def _gone(log, segments: list[LogSegment]) -> bool:
    current = log.segments[:-1]
    return not all(any(c is s for c in current) for s in segments)


def _run_round(log, now_ms: int, cfg, sealed: list[LogSegment], dirty_segments: list[LogSegment],
               first_dirty: int, uncleanable: int, trigger: CleaningTrigger, summary: dict,
               max_offset_map_entries: int, stop: Callable[[], bool], write_buffer_bytes: int,
               swapped: list[LogSegment]) -> CleanResult:
    # Every transaction with data below `uncleanable` is decided (it lies below the LSO).
    aborted = log.aborted_transactions(log.log_start_offset, uncleanable)
    mapped = build_offset_map(_batches(dirty_segments, stop), start_offset=first_dirty, end_offset=uncleanable,
                              max_entries=max_offset_map_entries,
                              max_uncompressed_bytes=cfg.max_uncompressed_batch_bytes, aborted=aborted)
    map_end = mapped.map_end_offset
    # The segments the map was built from must still be there at every swap, or the map may
    # hold records that were truncated away.
    mapped_segments = [s for s in dirty_segments if s.base_offset < map_end]
    invariant(first_dirty <= map_end <= uncleanable, f"map end {map_end} outside [{first_dirty}, {uncleanable}]")
    to_clean = [s for s in sealed if s.base_offset < map_end]
    if not to_clean:
        return CleanResult(False, "no sealed segment to clean", trigger, map_end_offset=map_end,
                           next_first_dirty_offset=first_dirty, **summary)

    params = CleaningParams.from_config(cfg, now_ms)
    stats = CompactionStats()
    spans = [SegmentSpan(s.base_offset, s.next_offset, s.size, s.offset_index.size_in_bytes,
                         s.time_index.size_in_bytes) for s in to_clean]
    by_base = {s.base_offset: s for s in to_clean}
    replaced: list[tuple[int, ...]] = []
    txns = TransactionCleaning(aborted)  # one walk from the log start through every group (txn_markers.py)
    for group_spans in group_segments(spans, max_segment_bytes=cfg.segment_bytes,
                                      max_index_bytes=cfg.segment_index_bytes):
        group = [by_base[s.base_offset] for s in group_spans]
        _clean_group(log, group, mapped_segments, mapped.offset_map, map_end, params, stats, stop,
                     write_buffer_bytes, txns)
        swapped.extend(group)
        replaced.append(tuple(s.base_offset for s in group))

    next_dirty = next_first_dirty_offset(map_end, stats.first_kept_for_lag_offset)
    write_cleaner_checkpoint(log.directory, CleanerCheckpoint(next_dirty, stats.earliest_delete_horizon_ms))
    return CleanResult(True, trigger.value, trigger, map_end_offset=map_end, next_first_dirty_offset=next_dirty,
                       offset_map_full=mapped.full, replaced=tuple(replaced), stats=stats, **summary)


def _clean_group(log, group: list[LogSegment], mapped_segments: list[LogSegment], offset_map: OffsetMap,
                 map_end: int, params: CleaningParams, stats: CompactionStats, stop: Callable[[], bool],
                 write_buffer_bytes: int, txns: TransactionCleaning) -> None:
    """Write the cleaned batches of `group` into one `.cleaned` segment and swap it in, with the
    `.txnindex` entries of the ABORT markers it keeps."""
    cleaned = _new_cleaned_segment(log, group[0].base_offset)
    try:
        writer = _SegmentWriter(cleaned, write_buffer_bytes)
        for outcome in compact_batches(_batches(group, stop), offset_map, map_end, params, stats=stats,
                                       txns=txns):
            if outcome.data is not None:
                writer.add(outcome.data)
        writer.flush()
        cleaned.on_become_inactive()
        newest_mtime_ns = max(os.stat(s.log_path).st_mtime_ns for s in group)
        os.utime(cleaned.log_path, ns=(newest_mtime_ns, newest_mtime_ns))
        # Mapped segments below this group were replaced by this round's earlier swaps.
        if _gone(log, group + [s for s in mapped_segments if s.base_offset > group[-1].base_offset]):
            raise CleaningAbortedError(f"segments of {log.directory} changed while they were cleaned")
    except BaseException:
        _discard(cleaned)
        raise
    try:
        log.replace_segments([cleaned], group,
                             aborted=txns.entries_between(group[0].base_offset, group[-1].next_offset))
    except (ValueError, InvariantViolation) as e:
        # The log's pre-checks refused (a segment went away or became active since the check
        # above); they run before any file is renamed, so the `.cleaned` files are ours to remove.
        _discard(cleaned)
        raise CleaningAbortedError(f"swap into {log.directory} refused: {e}") from e
    # Any other failure may come after the rename to `.swap`: the files are left for the log's
    # recovery on open, which completes the swap.


# ---------------------------------------------------------------------------------------------
# The background cleaner


@dataclass(frozen=True, slots=True)
class CleanerPassEntry:
    """What one pass did to one log."""

    directory: Path
    retention: RetentionResult | None = None
    clean: CleanResult | None = None
    error: BaseException | None = None


class LogCleaner:
    """A background thread that, every `interval_ms` (the node's `log.cleaner.backoff.ms`), applies
    retention to logs whose `cleanup.policy` includes `delete` and runs `clean_log` on logs whose
    policy includes `compact`, over the registered logs.

    `high_watermark`, given per log at registration, bounds both (a leader passes its HW).
    Errors are kept per pass (the last `max_errors_kept`) and never stop the thread; a closed log
    is unregistered. Concurrency: every method is thread-safe; passes never overlap.
    """

    def __init__(self, *, interval_ms: int, clock: Callable[[], float] = time.time,
                 max_offset_map_entries: int = DEFAULT_MAX_OFFSET_MAP_ENTRIES, max_logs: int = 100_000,
                 max_errors_kept: int = 100) -> None:
        invariant(MIN_INTERVAL_MS <= interval_ms <= MAX_INTERVAL_MS,
                  f"cleaner interval {interval_ms} ms is outside [{MIN_INTERVAL_MS}, {MAX_INTERVAL_MS}]")
        invariant(max_logs >= 1 and max_errors_kept >= 1, "cleaner limits must be positive")
        self.interval_ms = interval_ms
        self.max_offset_map_entries = max_offset_map_entries
        self.max_logs = max_logs
        self._clock = clock
        self._logs: dict[int, tuple[object, Callable[[], int | None] | None]] = {}
        self._lock = threading.Lock()
        self._pass_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: deque[tuple[Path, BaseException]] = deque(maxlen=max_errors_kept)
        self.passes = 0
        #: Logs the passes looked at (an operation count: tests, metrics).
        self.logs_serviced = 0

    def register(self, log, high_watermark: Callable[[], int | None] | None = None) -> None:
        """Have the cleaner look after `log`; `high_watermark()` is asked at every pass."""
        with self._lock:
            invariant(id(log) in self._logs or len(self._logs) < self.max_logs,
                      f"the cleaner already looks after {self.max_logs} logs")
            if id(log) not in self._logs:
                # Records appended again after a truncation are dirty: pull the checkpoint back.
                log.add_truncation_listener(lambda offset, log=log: maybe_truncate_cleaner_checkpoint(log, offset))
            self._logs[id(log)] = (log, high_watermark)

    def unregister(self, log) -> None:
        """Stop looking after `log`; a pass already running may still finish with it."""
        with self._lock:
            self._logs.pop(id(log), None)

    @property
    def logs(self) -> list:
        with self._lock:
            return [log for log, _ in self._logs.values()]

    def run_once(self) -> list[CleanerPassEntry]:
        """One pass over the registered logs, on the caller's thread. A log holding only its active
        segment is passed over (no entry): retention and compaction never touch the active
        segment, and a segment is sealed only by an append (a roll), so an idle log costs no work."""
        with self._pass_lock:
            with self._lock:
                registered = list(self._logs.values())
            out = []
            for log, hw_fn in registered:
                if self._stop.is_set():
                    break
                if not log.closed and not log.has_sealed_segments:
                    continue
                self.logs_serviced += 1
                out.append(self._service(log, hw_fn))
            self.passes += 1
            return out

    def _service(self, log, hw_fn) -> CleanerPassEntry:
        retention = clean = None
        try:
            if log.closed:
                raise LogClosedError(f"log {log.directory} is closed")
            hw = hw_fn() if hw_fn is not None else None
            now_ms = int(self._clock() * 1000)
            # A tiered log's retention (local.retention.*, only segments already in the remote
            # tier) is the remote log manager's (ingest_api/node.py), not the cleaner's.
            if log.config.delete and not log.config.remote_storage_enable:
                retention = apply_retention(log, now_ms, hw)
            # A tiered compacted log is compacted over the remote tier by the Spark compaction
            # job (compaction/remote.py); locally it keeps only its hot tail, which the uploader
            # must find as the leader wrote it.
            if log.config.compact and not log.config.remote_storage_enable:
                clean = clean_log(log, now_ms, high_watermark=hw,
                                  max_offset_map_entries=self.max_offset_map_entries,
                                  should_stop=self._stop.is_set)
            return CleanerPassEntry(log.directory, retention, clean)
        except LogClosedError as e:
            self.unregister(log)
            return CleanerPassEntry(log.directory, retention, clean, e)
        except CleaningAbortedError as e:  # stopping, or the log changed: the next pass retries
            return CleanerPassEntry(log.directory, retention, clean, e)
        except Exception as e:  # one log's trouble must not stop the others
            self.errors.append((log.directory, e))
            return CleanerPassEntry(log.directory, retention, clean, e)

    def start(self) -> None:
        """Start the thread (once)."""
        invariant(self._thread is None, "the cleaner was already started")
        self._thread = threading.Thread(target=self._run, name="lakelog-log-cleaner", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_ms / 1000):
            self.run_once()

    def stop(self, timeout_s: float = 10.0) -> bool:
        """Stop the thread: a running round is abandoned at its next batch. True if it ended in time."""
        self._stop.set()
        if self._thread is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()
