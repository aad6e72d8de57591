"""The partition log: an ordered list of segments in one directory `<topic>-<partition>/`.

Directory contents:

    00000000000000000000.log / .index / .timeindex     sealed segments ...
    00000000000000000000.txnindex                      (aborted transactions, once there is one)
    00000000000000005376.log / .index / .timeindex     ... and the active segment (the last)
    leader-epoch-checkpoint                            (epoch, start offset) entries
    log-start-offset-checkpoint                        the log start offset
    recovery-point-checkpoint                          offsets below it are known flushed
    00000000000000005376.snapshot                      idempotent producer state as of that offset
    .lakelog_cleanshutdown                             written by close(), removed on open

Invariants (checked with `invariant()`):
  * log start offset <= log end offset (LEO); neither goes backwards except by an explicit
    truncation (LEO) — the log start offset never moves backwards;
  * segments are sorted by base offset, the active segment is the last, and each segment's offsets
    lie in [base offset, next segment's base offset);
  * leader epochs in the epoch cache only grow;
  * the producer state reflects exactly the batches below the LEO (see producer_state.py), and no
    snapshot lies above the LEO;
  * log start offset <= high watermark <= LEO (the HW is the replication layer's, told to the log
    by `update_high_watermark`), and last stable offset (LSO) <= HW.

Lookups (local_log.py: binary search of segments by base offset, the floor entry of the sparse
offset index, a forward scan of batch headers), the compaction swap (local_log.py) and crash
recovery on open (log_loader.py; `recovery` tells what was cut) belong to the objects it holds.

Producer state (producer_state.py: the leader's checks, the transactions, the snapshot format):
the leader checks each producer batch, followers apply them unchecked, so every replica holds the
same state. A `<offset>.snapshot` is written when a segment rolls and on close; `truncate_to`
deletes the snapshots above the new LEO, then reloads the newest one and replays the batch headers
up to it (log_loader.py). Compaction swaps leave the state alone: the cleaner only rewrites sealed
segments, which lie below the newest snapshot (the one taken when the active segment was rolled in).

Concurrency: every public method takes the log's lock, so calls from several threads are safe;
a read returns bytes copied out of the files, so it is unaffected by later truncation or deletion.

Composition (as Kafka's UnifiedLog): `PartitionLog` holds a `LocalLog` (local_log.py: the
`LogSegments` of the directory and the recovery point; appends, roll, flush, reads, tail
truncation, segment deletion, the compaction swap), a `LeaderEpochCache` (leader_epoch.py), a
`ProducerStateManager` (producer_state.py) and `LogTransactions` (log_transactions.py: the LSO and
the `.txnindex` files; `append_control` writes the COMMIT / ABORT markers of Kafka's transactions),
and owns the log start offset. It validates appends and assigns offsets (`split_and_validate`,
`assign_offsets`, log_append.py) and keeps the holders in step under its lock; none of them reads
another's fields. `LogLoader` (log_loader.py) fills them on open.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Iterator, Mapping

from lakelog.index.transaction_index import AbortedTxn
from lakelog.infra.config import LONG_MAX, LogConfig
from lakelog.infra.errors import invariant
from lakelog.logstore.checkpoint import write_checkpoint
from lakelog.logstore.control_record import ControlRecordType, EndTransactionMarker, build_control_batch
from lakelog.logstore.errors import LogClosedError
from lakelog.logstore.file_records import SegmentReader
from lakelog.logstore.fileutil import atomic_write
from lakelog.logstore.leader_epoch import LeaderEpochCache
from lakelog.logstore.local_log import FetchResult, LocalLog
from lakelog.logstore.log_append import (
    AppendInfo,
    PreparedAppend,
    assign_offsets,
    check_follower_offsets,
    split_and_validate,
)
from lakelog.logstore.log_loader import (
    CLEAN_SHUTDOWN_FILE,
    CLEAN_SHUTDOWN_VERSION,
    LOG_START_OFFSET_FILE,
    LogLoader,
    rebuild_producer_state,
)
from lakelog.logstore.log_segments import LogSegments
from lakelog.logstore.log_transactions import LogTransactions
from lakelog.logstore.producer_state import (
    DEFAULT_MAX_PRODUCER_IDS,
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    DEFAULT_SNAPSHOTS_TO_KEEP,
    ProducerStateEntry,
    ProducerStateManager,
)
from lakelog.logstore.record_batch import RecordBatch
from lakelog.logstore.segment import LogSegment


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class PartitionLog:
    """The log of one partition replica (see the module docstring)."""

    def __init__(self, directory: str | os.PathLike, config: LogConfig | None = None, *,
                 clock: Callable[[], float] = time.time,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
                 max_producer_ids: int = DEFAULT_MAX_PRODUCER_IDS,
                 producer_snapshots_to_keep: int = DEFAULT_SNAPSHOTS_TO_KEEP) -> None:
        """`producer_id_expiration_ms` is Kafka's broker key `producer.id.expiration.ms`;
        `max_producer_ids` bounds the producers tracked (the least recently written is evicted);
        `producer_snapshots_to_keep` is how many `.snapshot` files survive each new one."""
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.config = config or LogConfig()
        self._clock = clock
        self._lock = threading.RLock()
        self._closed = False
        self._listeners: list[Callable[[int], None]] = []
        self._truncation_listeners: list[Callable[[int], None]] = []
        self._unflushed_records = 0
        #: Monotonic: `flush.ms` is a duration, which a step of the wall clock must not stretch or cut.
        self._last_flush_mono_ms = _monotonic_ms()
        self.epochs = LeaderEpochCache(self.directory)
        self._producers = ProducerStateManager(self.directory, producer_id_expiration_ms=producer_id_expiration_ms,
                                               max_producer_ids=max_producer_ids,
                                               snapshots_to_keep=producer_snapshots_to_keep)
        segments = LogSegments()
        loaded = LogLoader(self.directory, self.config, segments, self.epochs, self._producers, self._now_ms).load()
        self.recovery = loaded.recovery
        self.log_start_offset = loaded.log_start_offset
        self._local = LocalLog(self.directory, self.config, segments, loaded.recovery_point, self._now_ms)
        self._high_watermark = self.log_start_offset
        self._txns = LogTransactions(self._producers, segments)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed")

    # ------------------------------------------------------------------ properties

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return self._local.segments.to_list()

    @property
    def active_segment(self) -> LogSegment:
        return self._local.active_segment

    @property
    def has_sealed_segments(self) -> bool:
        """Whether a segment besides the active one exists: retention and compaction act on those
        only. Read without the lock: a roll meanwhile is seen by the next caller."""
        return len(self._local.segments) > 1

    @property
    def log_end_offset(self) -> int:
        """LEO: the offset the next appended record will get."""
        return self._local.log_end_offset

    @property
    def recovery_point(self) -> int:
        """Offsets below it are known flushed."""
        return self._local.recovery_point

    @property
    def index_rebuilds_on_read(self) -> list[int]:
        """Base offsets of segments whose index a read found wrong and rebuilt."""
        return self._local.segments.index_rebuilds_on_read

    @property
    def txn_index_rebuilds_on_read(self) -> list[int]:
        """Base offsets of segments whose `.txnindex` a read found damaged and rebuilt."""
        return self._txns.rebuilds_on_read

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return self._local.segments.size_in_bytes()

    @property
    def latest_epoch(self) -> int:
        return self.epochs.latest_epoch

    @property
    def producer_state(self) -> Mapping[int, ProducerStateEntry]:
        """A read-only copy of the idempotent producers' state (producer id -> entry, least
        recently written first), taken under the lock. Entries are immutable."""
        with self._lock:
            return MappingProxyType(self._producers.copy())

    def producer_entry(self, producer_id: int) -> ProducerStateEntry | None:
        with self._lock:
            return self._producers.entry(producer_id)

    @property
    def high_watermark(self) -> int:
        """The HW as the replication layer last told it (`update_high_watermark`)."""
        return self._high_watermark

    def update_high_watermark(self, high_watermark: int) -> None:
        """The replication layer's HW moved (either way: a new leader's may start lower); it is
        kept within [log start, LEO]. Transactions whose marker it passed become stable.
        Takes the log's lock."""
        with self._lock:
            hw = max(self.log_start_offset, min(high_watermark, self.log_end_offset))
            self._high_watermark = hw
            self._txns.on_high_watermark(hw)

    @property
    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest undecided transaction (open, or its marker not yet
        below the HW); None when there is none. Takes the log's lock."""
        with self._lock:
            return self._txns.first_unstable_offset()

    @property
    def last_stable_offset(self) -> int:
        """LSO: min(first unstable offset, HW); a read_committed reader reads below it. Takes the lock."""
        with self._lock:
            return self._txns.last_stable_offset(self._high_watermark, self.log_start_offset)

    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of each open transaction. Takes the lock."""
        with self._lock:
            return self._txns.ongoing_transactions()

    def remove_expired_producers(self) -> list[int]:
        """For a periodic task: drop producers idle for `producer.id.expiration.ms` (by their
        batches' max timestamps, as Kafka). Rolls and close do it too. Returns their ids."""
        with self._lock:
            self._check_open()
            return self._producers.remove_expired(self._now_ms())

    def add_append_listener(self, listener: Callable[[int], None]) -> None:
        """Called with the new LEO after each append (under the log's lock: keep it short)."""
        self._listeners.append(listener)

    def add_truncation_listener(self, listener: Callable[[int], None]) -> None:
        """Called with the new LEO after `truncate_to` / `truncate_fully_and_start_at` (under the lock)."""
        self._truncation_listeners.append(listener)

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------------ appends

    def append_as_leader(self, data: bytes | bytearray | memoryview, leader_epoch: int, *,
                         consecutive_offsets: bool = True) -> AppendInfo:
        """Validate producer batches, assign offsets from the LEO, stamp `leader_epoch`, append.

        All batches are validated before any byte is written: on any error nothing is appended.
        Batches of idempotent producers (producer id >= 0) are checked against the producer
        state: InvalidProducerEpochError, OutOfOrderSequenceError, MixedDuplicateBatchesError;
        a request of duplicates only appends nothing and returns the original offsets with
        `duplicate=True`.

        Concurrency: takes the log's lock (validation runs before it).
        """
        buf = data if isinstance(data, (bytes, memoryview)) else bytes(data)
        parsed = split_and_validate(buf, self.config, for_leader=consecutive_offsets)
        with self._lock:
            self._check_open()
            first_offset = self.log_end_offset
            now = self._now_ms()
            log_append = self.config.log_append_time
            prepared = assign_offsets(buf, parsed, first_offset, leader_epoch, now, log_append_time=log_append)
            if prepared.producer_batches:
                duplicates = self._producers.check_leader_append([b for _, b, _ in parsed])
                if duplicates is not None:
                    return AppendInfo.of_duplicates(duplicates, log_append_time=log_append,
                                                    log_start_offset=self.log_start_offset)
            if leader_epoch >= 0 and leader_epoch > self.epochs.latest_epoch:
                self.epochs.assign(leader_epoch, first_offset)
            self._append_locked(prepared.parts, prepared.entries, prepared.max_timestamp, now, first_offset)
            for batch, base, batch_max_ts in prepared.producer_batches:
                self._producers.apply(batch.producer_id, batch.producer_epoch, batch.base_sequence, base,
                                      batch.last_offset_delta, batch_max_ts, is_transactional=batch.is_transactional)
            return self._appended(prepared, now if log_append else -1, len(buf))

    def append_as_follower(self, data: bytes | bytearray | memoryview) -> AppendInfo:
        """Append batches that already carry offsets and epochs (replication, restore).

        They must start at or above the LEO and increase; CRCs are checked; bytes are kept as is.

        Concurrency: takes the log's lock (validation runs before it).
        """
        buf = bytes(data)
        parsed = split_and_validate(buf, self.config, for_leader=False)
        with self._lock:
            self._check_open()
            prepared = check_follower_offsets(buf, parsed, self.log_end_offset)
            first = prepared.base_offsets[0]
            if first > self.log_end_offset and self.active_segment.is_empty is False:
                # A gap (the leader's log start moved past ours): start a fresh segment there.
                self._roll_locked(first)
            elif first > self.log_end_offset:
                self._local.reset_active_to(first)
            for _, batch, _ in parsed:
                if batch.partition_leader_epoch > self.epochs.latest_epoch:
                    self.epochs.assign(batch.partition_leader_epoch, batch.base_offset)
            self._append_locked(prepared.parts, prepared.entries, prepared.max_timestamp, self._now_ms(), first)
            # Unchecked: the leader checked them, and the state must end as the leader's.
            for batch, _, _ in prepared.producer_batches:
                self._txns.on_completed(self._producers.apply_batch(batch), self._high_watermark)
            return self._appended(prepared, -1, len(buf))

    def append_control(self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                       leader_epoch: int) -> int:
        """Append a COMMIT (`commit`) or ABORT marker for the producer's transaction as leader;
        returns its offset. It closes the producer's open transaction (an ABORT adds a `.txnindex`
        entry); a marker for a producer with none is appended all the same (Kafka's coordinator
        may resend one). Raises InvalidProducerEpochError for an epoch below the producer's and
        TransactionCoordinatorFencedError for a coordinator epoch below its last marker's.

        Concurrency: takes the log's lock.
        """
        with self._lock:
            self._check_open()
            self._producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
            offset = self.log_end_offset
            now = self._now_ms()
            batch = build_control_batch(producer_id=producer_id, producer_epoch=producer_epoch, commit=commit,
                                        coordinator_epoch=coordinator_epoch, timestamp=now, base_offset=offset,
                                        partition_leader_epoch=leader_epoch)
            if leader_epoch >= 0 and leader_epoch > self.epochs.latest_epoch:
                self.epochs.assign(leader_epoch, offset)
            self._append_locked([batch], [(0, offset, now, len(batch))], now, now, offset)
            marker = EndTransactionMarker(ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
                                          coordinator_epoch)
            completed = self._producers.apply_marker(producer_id, producer_epoch, offset, marker, now)
            self._txns.on_completed(completed, self._high_watermark)
            self._unflushed_records += 1
            self._after_append()
            return offset

    def aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound_offset), for a
        read_committed fetch (`LogTransactions.aborted_transactions`). A damaged `.txnindex` is
        rebuilt from the log, never served.

        Concurrency: takes the log's lock.
        """
        with self._lock:
            self._check_open()
            return self._txns.aborted_transactions(fetch_offset, upper_bound_offset, self.log_start_offset)

    def segment_aborted_transactions(self, base_offset: int) -> list[AbortedTxn]:
        """The `.txnindex` entries of the segment starting at `base_offset` (rebuilt first if
        damaged; [] when no such segment). For the remote tier's upload of that segment.
        Takes the log's lock."""
        with self._lock:
            self._check_open()
            return self._txns.segment_aborted_transactions(base_offset, self.log_start_offset)

    def _appended(self, prepared: PreparedAppend, log_append_time: int, size_in_bytes: int) -> AppendInfo:
        """After the batches of `prepared` were appended: count them for the flush policy, tell the listeners."""
        self._unflushed_records += prepared.record_count
        info = AppendInfo(prepared.base_offsets[0], prepared.last_offset, prepared.max_timestamp, log_append_time,
                          prepared.record_count, len(prepared.entries), size_in_bytes, self.log_start_offset,
                          prepared.base_offsets)
        self._after_append()
        return info

    def _append_locked(self, parts: list, entries: list, max_ts: int, now: int, first_offset: int) -> None:
        size = sum(e[3] for e in entries)
        if self._local.should_roll(size, max_ts, entries[-1][1], now):
            self._roll_locked(first_offset)
        self._local.append(parts, entries)

    def _after_append(self) -> None:
        cfg = self.config
        if self._unflushed_records >= cfg.flush_messages or _monotonic_ms() - self._last_flush_mono_ms >= cfg.flush_ms:
            self._flush_locked()
        leo = self.log_end_offset
        for listener in self._listeners:
            listener(leo)

    # ------------------------------------------------------------------ roll and flush

    def roll(self) -> LogSegment:
        """Seal the active segment and start a new one at the LEO. Takes the log's lock."""
        with self._lock:
            self._check_open()
            return self._roll_locked(self.log_end_offset)

    def _roll_locked(self, new_base: int) -> LogSegment:
        old = self.active_segment
        if old.is_empty and old.base_offset == new_base:
            return old
        self._local.seal_active(new_base)
        # The state covers every batch below the LEO, and no batch lies in [LEO, new_base).
        self._producers.remove_expired(self._now_ms())
        self._producers.take_snapshot(new_base)
        return self._local.start_segment(new_base)

    def flush(self) -> None:
        """fsync every segment with unflushed bytes and advance the recovery point to the LEO.
        Takes the log's lock."""
        with self._lock:
            self._check_open()
            self._flush_locked()

    def _flush_locked(self) -> None:
        self._local.flush()
        self._unflushed_records = 0
        self._last_flush_mono_ms = _monotonic_ms()

    def flush_if_due(self) -> int | None:
        """For a periodic task: flush when `flush.ms` has passed since the last flush. Returns the
        monotonic ms at which the records still unflushed fall due, or None when none are (or
        `flush.ms` is left at its never-due default). Takes the lock."""
        with self._lock:
            if self._closed or not self._unflushed_records:
                return None
            if _monotonic_ms() - self._last_flush_mono_ms >= self.config.flush_ms:
                self._flush_locked()
                return None
            if self.config.flush_ms >= LONG_MAX:
                return None
            return self._last_flush_mono_ms + self.config.flush_ms

    # ------------------------------------------------------------------ reads and lookups

    def read(self, start_offset: int, max_bytes: int, *, max_offset: int | None = None,
             min_one_batch: bool = True) -> FetchResult:
        """Whole batches from the one holding `start_offset`, at most `max_bytes` (but at least one
        batch when `min_one_batch`), all below `max_offset` (exclusive; a consumer passes the HW).

        Raises OffsetOutOfRangeError below the log start offset or above the LEO.

        Concurrency: takes the log's lock; the bytes returned are copied out of the files.
        """
        with self._lock:
            self._check_open()
            return self._local.read(start_offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch,
                                    log_start_offset=self.log_start_offset)

    def read_slices(self, start_offset: int, max_bytes: int, *, max_offset: int | None = None,
                    min_one_batch: bool = True) -> FetchResult:
        """The batches `read` answers, as file positions instead of bytes: `records` is a
        FileSlices (segment snapshots and byte ranges, found from batch headers; batch CRCs are
        not checked, as nothing is read). The caller sends them (sendfile) or reads them, and
        closes them. Raises as `read`.

        Concurrency: takes the log's lock to find the ranges and open the snapshots; the slices
        stay valid after the lock is released, whatever retention or compaction does next.
        """
        with self._lock:
            self._check_open()
            return self._local.read_slices(start_offset, max_bytes, max_offset=max_offset, min_one_batch=min_one_batch,
                                           log_start_offset=self.log_start_offset)

    def batches(self, start_offset: int | None = None, *, max_offset: int | None = None
                ) -> Iterator[RecordBatch]:
        """Every CRC-checked batch from `start_offset` (default: log start) below `max_offset`.

        Iterates a snapshot of the segments through private file descriptors, so concurrent
        appends, retention or compaction swaps never break an iteration in progress.

        Concurrency: takes the log's lock only to open the snapshot.
        """
        with self._lock:
            self._check_open()
            start = self.log_start_offset if start_offset is None else start_offset
            readers = self._local.open_readers(start)
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
            return self._local.open_segment_reader(base_offset)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp`, from the indexes.
        Takes the log's lock."""
        with self._lock:
            self._check_open()
            return self._local.offset_for_timestamp(timestamp, self.log_start_offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (epoch, end offset) answered from the leader epoch cache. Takes the lock."""
        with self._lock:
            return self.epochs.end_offset_for(epoch, self.log_end_offset)

    # ------------------------------------------------------------------ truncation and the log start

    def truncate_to(self, offset: int) -> int:
        """Remove every record at or above `offset` (a follower's truncation). Returns the new LEO.

        A batch that straddles `offset` is removed whole: the LEO may end below `offset`.
        The producer state becomes the state as of the new LEO (newest snapshot at or below it,
        then a replay of the batch headers up to it).

        Concurrency: takes the log's lock.
        """
        with self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                # Nothing to cut, but the epoch cache may still end with an entry at the LEO: a leader
                # records its epoch when elected and may have lost leadership before appending.
                # Keeping it would make the batches this replica now fetches from an older epoch look
                # stale to the cache. (Kafka's truncateTo does the same.)
                self.epochs.truncate_from_end(self.log_end_offset)
                return self.log_end_offset
            invariant(offset >= self.log_start_offset or offset == self._local.segments[0].base_offset,
                      f"cannot truncate to {offset} below the log start offset {self.log_start_offset}")
            # Snapshots above the target go first: after a crash part way, none of them can
            # describe batches that are no longer (or not yet again) in the log.
            self._producers.delete_snapshots_above(offset)
            self._local.truncate_to(offset)
            self.epochs.truncate_from_end(self.log_end_offset)
            # Snapshots lie at batch boundaries, so none is left in (new LEO, offset].
            rebuild_producer_state(self._producers, self._local.segments, self.log_start_offset,
                                   self.log_end_offset)
            self._high_watermark = max(self.log_start_offset, min(self._high_watermark, self.log_end_offset))
            self._txns.on_high_watermark(self._high_watermark)
            self._local.lower_recovery_point()
            for listener in self._truncation_listeners:
                listener(self.log_end_offset)
            return self.log_end_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and restart the log empty at `offset` (and the producer state).
        Takes the log's lock."""
        with self._lock:
            self._check_open()
            self._producers.delete_all_snapshots()
            self._producers.clear()
            self._local.truncate_fully_and_start_at(offset)
            self.log_start_offset = offset
            self._high_watermark = offset
            self.epochs.clear()
            self._write_log_start_offset()
            for listener in self._truncation_listeners:
                listener(offset)

    def maybe_increment_log_start_offset(self, new_start: int) -> bool:
        """Advance the log start offset (retention, DeleteRecords); never moves it backwards.
        Takes the log's lock."""
        with self._lock:
            self._check_open()
            if new_start <= self.log_start_offset:
                return False
            invariant(new_start <= self.log_end_offset, f"log start {new_start} above LEO {self.log_end_offset}")
            self.log_start_offset = new_start
            self._write_log_start_offset()
            self.epochs.truncate_from_start(new_start)
            # Whole segments now entirely below the start are no longer reachable: delete them.
            self._local.delete_segments_below(new_start)
            self._prune_producer_snapshots()
            return True

    def _write_log_start_offset(self) -> None:
        write_checkpoint(self.directory / LOG_START_OFFSET_FILE, [(self.log_start_offset,)])

    def delete_oldest_segments(self, predicate: Callable[[LogSegment, LogSegment | None], bool],
                               *, upper_bound_offset: int | None = None) -> list[int]:
        """Delete leading segments while `predicate(segment, next_segment)` holds.

        Never deletes the active segment, nor a segment holding offsets at or above
        `upper_bound_offset` (the high watermark). Advances the log start offset.
        Returns the base offsets of deleted segments.

        Concurrency: takes the log's lock.
        """
        with self._lock:
            self._check_open()
            doomed = self._local.deletable_segments(predicate, upper_bound_offset)
            if not doomed:
                return []
            # Advance (and persist) the log start offset first: after a crash between the two
            # steps, the files left behind lie below it and are simply unreachable.
            self.log_start_offset = max(self.log_start_offset, self._local.segments[len(doomed)].base_offset)
            self._write_log_start_offset()
            self._local.delete_first(len(doomed))
            self.epochs.truncate_from_start(self.log_start_offset)
            self._prune_producer_snapshots()
            return [seg.base_offset for seg in doomed]

    def _prune_producer_snapshots(self) -> None:
        """The log start moved: snapshots below it go. Producers stay in the state until they
        expire (KIP-360); if no snapshot is left, one of the current state at the LEO keeps them
        across a restart (a replay from the log start would not find their deleted batches)."""
        self._producers.delete_snapshots_below(self.log_start_offset)
        if not self._producers.snapshot_offsets():
            self._producers.take_snapshot(self.log_end_offset)

    def replace_segments(self, new_segments: list[LogSegment], old_segments: list[LogSegment], *,
                         aborted: list[AbortedTxn] | None = None) -> None:
        """Swap compacted replacement segments (written with suffix `.cleaned`) for `old_segments`.

        Crash-safe: `.cleaned` -> `.swap`, delete the old segments, `.swap` -> final names.
        The old segments must be consecutive, sealed and still present. The producer state and
        its snapshots are left alone: they describe the history, which compaction does not change
        (the newest snapshot lies at or above the active segment's base, above every sealed one).

        The new segments' `.txnindex` entries are `aborted` (a cleaner gives the entries of the
        ABORT markers it keeps), each in the segment covering its marker's offset; without it,
        the old segments' entries carry over, unless the new segments come with their own files.

        Concurrency: takes the log's lock.
        """
        with self._lock:
            self._check_open()
            self._txns.place_replacement_entries(new_segments, old_segments, aborted, self.log_start_offset)
            self._local.replace_segments(new_segments, old_segments)

    # ------------------------------------------------------------------ config and lifecycle

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self.config = config
            self._local.update_config(config)

    def close(self) -> None:
        """Flush, close files and write the clean-shutdown marker. Takes the log's lock."""
        with self._lock:
            if self._closed:
                return
            self.active_segment.on_become_inactive()
            self._flush_locked()
            self._producers.remove_expired(self._now_ms())
            self._producers.take_snapshot(self.log_end_offset)
            self._local.close()
            atomic_write(self.directory / CLEAN_SHUTDOWN_FILE,
                         f"{CLEAN_SHUTDOWN_VERSION}\n{self.log_end_offset}\n".encode("ascii"))
            self._closed = True

    def delete(self) -> None:
        """Close and remove the whole partition directory. Takes the log's lock."""
        with self._lock:
            if not self._closed:
                self._local.close()
                self._closed = True
            shutil.rmtree(self.directory, ignore_errors=True)

    def __repr__(self) -> str:
        return (f"PartitionLog({self.directory}, log_start_offset={self.log_start_offset}, "
                f"log_end_offset={self.log_end_offset}, segments={len(self._local.segments)})")
