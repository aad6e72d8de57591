"""Opening a partition log's directory: loading and crash recovery (Kafka's LogLoader).

`LogLoader(directory, config, segments, epochs, producers, now_ms).load()` runs once, from
`PartitionLog.__init__`, before the log is shared: it finishes or undoes what a crash interrupted
(deletions, compaction outputs, swaps), opens the segments into the `LogSegments` it is given,
recovers those from the recovery point on after an unclean shutdown (re-read batch by batch,
CRC-checked, cut at the first torn or corrupt batch, later segments dropped, indexes rebuilt) and
checks the others structurally, rebuilds the leader epoch cache from what it re-read, then loads
the idempotent producer state (newest snapshot at or below the LEO plus a replay of batch headers;
folded into the recovery scan where it can be), and rebuilds the `.txnindex` of every recovered
segment and of every segment whose `.txnindex` fails its checks (`rebuild_txn_indexes`: a replay of
the producer state from the newest snapshot at or below the first such segment). It answers a `LoadedLog`: the `RecoveryReport`
(what was found and cut), the log start offset and the recovery point. `rebuild_producer_state`
is the same producer load, used again by `PartitionLog.truncate_to`; `rebuild_txn_indexes` again
by `LogTransactions` (log_transactions.py) when a read finds a damaged `.txnindex`.

The checkpoint and marker files of the directory are named here.

Concurrency: the loader owns the objects it fills until `load` returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from lakelog.index.errors import CorruptIndexError
from lakelog.index.transaction_index import AbortedTxn
from lakelog.infra.config import LogConfig
from lakelog.infra.errors import invariant
from lakelog.logstore.checkpoint import read_checkpoint
from lakelog.logstore.errors import CorruptRecordError, UnsupportedFormatVersionError
from lakelog.logstore.leader_epoch import LeaderEpochCache
from lakelog.logstore.log_segments import LogSegments
from lakelog.logstore.producer_state import CompletedTxn, ProducerStateManager, SnapshotLoad, snapshot_name
from lakelog.logstore.record_batch import (
    CONTROL_MASK,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TRANSACTIONAL_MASK,
    RecordBatch,
)
from lakelog.logstore.segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    LogSegment,
    SegmentConfig,
    parse_base_offset,
)

#: Bytes read at a time while replaying producer batch headers.
_REPLAY_READ_BYTES = 64 * 1024

CLEAN_SHUTDOWN_FILE = ".lakelog_cleanshutdown"
CLEAN_SHUTDOWN_VERSION = 1
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
RECOVERY_POINT_FILE = "recovery-point-checkpoint"


@dataclass(slots=True)
class RecoveryReport:
    """What `open` found and cut after an unclean shutdown."""

    clean_shutdown: bool
    segments_recovered: int = 0
    bytes_truncated: int = 0
    segments_dropped: list[int] = field(default_factory=list)
    indexes_rebuilt: list[int] = field(default_factory=list)
    swaps_completed: int = 0
    leftovers_removed: list[str] = field(default_factory=list)
    producer_snapshot_offset: int | None = None  # producer state loaded from this snapshot
    producer_batches_replayed: int = 0  # producer batches applied on top of it
    producer_snapshots_removed: list[str] = field(default_factory=list)  # corrupt or above the LEO
    txn_indexes_rebuilt: list[int] = field(default_factory=list)  # segments whose .txnindex was rebuilt

    def __str__(self) -> str:
        producers = (f"; producer state from snapshot {self.producer_snapshot_offset} + "
                     f"{self.producer_batches_replayed} batch(es)"
                     + (f", removed snapshots {self.producer_snapshots_removed}" if self.producer_snapshots_removed
                        else ""))
        if self.txn_indexes_rebuilt:
            producers += f"; rebuilt .txnindex of {self.txn_indexes_rebuilt}"
        if self.clean_shutdown and not self.indexes_rebuilt and not self.swaps_completed:
            return "clean shutdown, nothing to recover" + producers
        return (f"recovered {self.segments_recovered} segment(s), truncated {self.bytes_truncated} bytes, "
                f"dropped segments {self.segments_dropped}, rebuilt indexes of {self.indexes_rebuilt}, "
                f"completed {self.swaps_completed} swap(s), removed {len(self.leftovers_removed)} leftover file(s)"
                + producers)


@dataclass(frozen=True, slots=True)
class LoadedLog:
    """What `LogLoader.load` found: the report, and the offsets the log starts from."""

    recovery: RecoveryReport
    log_start_offset: int
    recovery_point: int


class LogLoader:
    """Loads and recovers one partition directory into the `LogSegments`, `LeaderEpochCache` and
    `ProducerStateManager` it is given (see the module docstring)."""

    def __init__(self, directory: Path, config: LogConfig, segments: LogSegments, epochs: LeaderEpochCache,
                 producers: ProducerStateManager, now_ms: Callable[[], int]) -> None:
        self.directory = directory
        self.config = config
        self.segments = segments
        self.epochs = epochs
        self.producers = producers
        self._now_ms = now_ms
        self._segment_config = SegmentConfig.of(config)
        self.log_start_offset = 0

    def load(self) -> LoadedLog:
        marker = self.directory / CLEAN_SHUTDOWN_FILE
        # A directory without segments is a new log: nothing can need recovery.
        clean = marker.exists() or not any(p.name.endswith(LOG_SUFFIX) for p in self.directory.iterdir())
        if marker.exists():
            self._read_clean_shutdown_marker(marker)
        report = RecoveryReport(clean_shutdown=clean)
        self._remove_leftovers(report)
        bases = sorted({b for p in self.directory.iterdir() if p.name.endswith(LOG_SUFFIX)
                        and (b := parse_base_offset(p.name)) is not None})
        for b in bases:
            self.segments.add(LogSegment(self.directory, b, self._segment_config, created_ms=self._now_ms()))
        stored_start = read_checkpoint(self.directory / LOG_START_OFFSET_FILE, 1)
        recovery_point = read_checkpoint(self.directory / RECOVERY_POINT_FILE, 1)
        rp = recovery_point[0][0] if recovery_point else 0
        if not self.segments:
            start = stored_start[0][0] if stored_start else 0
            self.segments.add(LogSegment(self.directory, start, self._segment_config, created_ms=self._now_ms()))
        self.log_start_offset = max(stored_start[0][0] if stored_start else 0, self.segments[0].base_offset)
        replayed_from: int | None = None
        if clean:
            for seg in self.segments:
                self._check_segment(seg, report)
            recovered_from: int | None = None
        else:
            recovered_from = self.segments[self.segments.index_for(rp)].base_offset
            replayed_from = self._recover(rp, report)
        if self.log_start_offset > self.segments.active.next_offset:
            # Recovery cut the log below its start offset: nothing readable is left. Restart the
            # log empty at its start offset (as Kafka's loader does) rather than refuse to open.
            for seg in self.segments:
                report.segments_dropped.append(seg.base_offset)
                seg.delete_files()
            self.segments.clear()
            self.segments.add(LogSegment(self.directory, self.log_start_offset, self._segment_config,
                                         created_ms=self._now_ms()))
            self.epochs.clear()
            replayed_from = None
        self._open_producer_state(report, replayed_from)
        self._check_txn_indexes(report, recovered_from)
        marker.unlink(missing_ok=True)
        invariant(self.log_start_offset <= self.segments.active.next_offset,
                  f"log start offset {self.log_start_offset} above log end offset {self.segments.active.next_offset}")
        self.epochs.truncate_from_end(self.segments.active.next_offset)
        self.epochs.truncate_from_start(self.log_start_offset)
        recovery_point = self.segments.active.next_offset if clean else self.segments.active.base_offset
        return LoadedLog(report, self.log_start_offset, recovery_point)

    def _read_clean_shutdown_marker(self, marker: Path) -> None:
        lines = marker.read_text("ascii", errors="replace").split()
        if lines and lines[0].isdigit() and int(lines[0]) != CLEAN_SHUTDOWN_VERSION:
            raise UnsupportedFormatVersionError(f"{marker} has version {lines[0]}")

    def _remove_leftovers(self, report: RecoveryReport) -> None:
        """Finish or undo what a crash interrupted: deletions, compaction outputs, swaps."""
        for p in sorted(self.directory.iterdir()):
            name = p.name
            stray_index_swap = name.endswith(SWAP_SUFFIX) and not name.endswith(LOG_SUFFIX + SWAP_SUFFIX) \
                and not (self.directory / (name[:20] + LOG_SUFFIX + SWAP_SUFFIX)).exists()
            if name.endswith(DELETED_SUFFIX) or name.endswith(CLEANED_SUFFIX) or name.endswith(".tmp") \
                    or stray_index_swap:
                p.unlink()
                report.leftovers_removed.append(name)
        swaps = sorted(p for p in self.directory.iterdir() if p.name.endswith(LOG_SUFFIX + SWAP_SUFFIX))
        for swap in swaps:
            base = parse_base_offset(swap.name)
            if base is None:
                continue
            seg = LogSegment(self.directory, base, self._segment_config, suffix=SWAP_SUFFIX)
            last = seg.next_offset
            # The swap replaces every old segment whose offsets it covers.
            for p in list(self.directory.iterdir()):
                b = parse_base_offset(p.name)
                if b is not None and p.name.endswith(LOG_SUFFIX) and base <= b < last:
                    for suffix in (".log", ".index", ".timeindex", ".txnindex"):
                        (self.directory / (p.name[:20] + suffix)).unlink(missing_ok=True)
            seg.change_suffix(SWAP_SUFFIX, "")
            # Its index files may be missing or half-renamed: regenerate them from the .log.
            seg.rebuild_indexes()
            seg.close()
            report.swaps_completed += 1

    def _recover(self, recovery_point: int, report: RecoveryReport) -> int | None:
        """Recover segments at or after the recovery point; check the indexes of the others.

        Returns the offset from which producer batches were applied to the state during the
        scan (on top of the snapshot in `report`), or None when the state still needs loading.
        """
        max_batch = max(self.config.max_message_bytes, self.config.segment_bytes)
        first = self.segments.index_for(recovery_point)
        for seg in self.segments.to_list()[:first]:
            self._check_segment(seg, report)
        self.epochs.truncate_from_end(self.segments[first].base_offset)
        # Snapshots at or below the recovery point were written after everything below them was
        # flushed. When the newest lies in the segments re-read here, their batches are applied as
        # recovery reads them: no second pass over the active segment.
        load = self.producers.load_latest_snapshot(recovery_point)
        report.producer_snapshots_removed += load.removed
        replay_from = self.log_start_offset if load.offset is None else max(load.offset, self.log_start_offset)
        direct = replay_from >= self.segments[first].base_offset
        replayed = 0
        producers = self.producers

        def on_batch(batch: RecordBatch) -> None:
            nonlocal replayed
            if batch.partition_leader_epoch >= 0:
                self.epochs.assign(batch.partition_leader_epoch, batch.base_offset)
            if direct and batch.producer_id >= 0 and batch.base_offset + batch.last_offset_delta >= replay_from:
                producers.apply_batch(batch)
                replayed += 1

        i = first
        while i < len(self.segments):
            seg = self.segments[i]
            cut = seg.recover(on_batch=on_batch, max_batch_bytes=max_batch)
            report.segments_recovered += 1
            report.bytes_truncated += cut
            if cut:
                # Everything after a corrupt or torn batch is unreliable: drop later segments.
                for later in self.segments.remove_after(i):
                    report.segments_dropped.append(later.base_offset)
                    report.bytes_truncated += later.size
                    later.delete_files()
                break
            if i + 1 < len(self.segments) and seg.next_offset > self.segments[i + 1].base_offset:
                raise CorruptRecordError(f"segment {seg.base_offset} overlaps the next segment",
                                         file=str(seg.log_path))
            i += 1
        # Drop empty trailing segments other than the first, as they carry no information.
        while len(self.segments) > 1 and self.segments[-1].is_empty and \
                self.segments[-2].next_offset < self.segments[-1].base_offset:
            seg = self.segments.pop_last()
            report.segments_dropped.append(seg.base_offset)
            seg.delete_files()
        if not direct:
            return None
        report.producer_snapshot_offset = load.offset
        report.producer_batches_replayed = replayed
        return replay_from

    def _open_producer_state(self, report: RecoveryReport, replayed_from: int | None) -> None:
        """Drop snapshots above the LEO; load the state unless recovery already built it.

        A snapshot at or below the LEO is sound even if it lies above the recovery point (one
        taken at the LEO when the log start moved): recovery cuts the log at the first batch that
        did not reach the disk, and any snapshot above the cut goes.
        """
        leo = self.segments.active.next_offset
        report.producer_snapshots_removed += [snapshot_name(o) for o in self.producers.delete_snapshots_above(leo)]
        used = report.producer_snapshot_offset
        newer = [o for o in self.producers.snapshot_offsets() if used is None or o > used]
        if replayed_from is not None and replayed_from <= leo and not newer:
            return
        load, replayed = rebuild_producer_state(self.producers, self.segments, self.log_start_offset, leo)
        report.producer_snapshots_removed += load.removed
        report.producer_snapshot_offset = load.offset
        report.producer_batches_replayed = replayed

    def _check_txn_indexes(self, report: RecoveryReport, recovered_from: int | None) -> None:
        """Rebuild the `.txnindex` of segments recovered (base >= `recovered_from`; None after a
        clean shutdown) or failing their checks; the others are sound."""
        targets = []
        for seg in self.segments:
            if recovered_from is not None and seg.base_offset >= recovered_from:
                targets.append(seg)
                continue
            try:
                seg.txn_index.sanity_check(seg.next_offset)
            except CorruptIndexError:
                targets.append(seg)
        if targets:
            rebuild_txn_indexes(self.producers, self.segments, self.log_start_offset, targets)
            report.txn_indexes_rebuilt += [seg.base_offset for seg in targets]

    def _check_segment(self, seg: LogSegment, report: RecoveryReport) -> None:
        """Structural checks of a flushed segment; rebuild its indexes or cut a damaged tail.

        A damaged flushed segment keeps its valid prefix and the later segments stay: they hold
        whole, CRC-valid batches at higher offsets. Damage further inside a segment is caught by
        the CRC check of every read and refused there.
        """
        try:
            seg.check_indexes()
        except CorruptIndexError:
            try:
                seg.rebuild_indexes()
                report.indexes_rebuilt.append(seg.base_offset)
                return
            except CorruptRecordError:
                pass
        except CorruptRecordError:
            pass
        else:
            return
        max_batch = max(self.config.max_message_bytes, self.config.segment_bytes)
        report.bytes_truncated += seg.recover(max_batch_bytes=max_batch)
        report.segments_recovered += 1
        report.indexes_rebuilt.append(seg.base_offset)


def rebuild_producer_state(producers: ProducerStateManager, segments: LogSegments, log_start_offset: int,
                           end_offset: int) -> tuple[SnapshotLoad, int]:
    """The producer state as of `end_offset`: the newest snapshot at or below it, then a replay of
    the batch headers from there (or from the log start) up to it. Returns (load, batches replayed).

    Used on open and by `PartitionLog.truncate_to`; the caller holds the log's lock or owns the log.
    """
    load = producers.load_latest_snapshot(end_offset)
    start = log_start_offset if load.offset is None else max(load.offset, log_start_offset)
    return load, _replay_producer_batches(producers, segments, start, end_offset)


def rebuild_txn_indexes(producers: ProducerStateManager, segments: LogSegments, log_start_offset: int,
                        targets: list[LogSegment]) -> None:
    """Rewrite the `.txnindex` of each segment of `targets` from the log.

    A scratch producer state (the live one is left alone) is loaded from the newest snapshot at
    or below the first target and replayed to the end of the last one; every ABORT marker that
    closes a transaction inside a target becomes an entry with the LSO of that moment. A
    transaction whose first batch lies below the log start (deleted by retention) cannot be
    recovered and gets no entry. The caller holds the log's lock or owns the log.
    """
    if not targets:
        return
    scratch = ProducerStateManager(producers.directory, producer_id_expiration_ms=producers.producer_id_expiration_ms,
                                   max_producer_ids=producers.max_producer_ids,
                                   snapshots_to_keep=producers.snapshots_to_keep)
    first = min(seg.base_offset for seg in targets)
    end = max(seg.next_offset for seg in targets)
    wanted = {seg.base_offset: seg for seg in targets}
    found: dict[int, list[AbortedTxn]] = {b: [] for b in wanted}

    def on_completed(seg: LogSegment, txn: CompletedTxn, last_stable_offset: int) -> None:
        if txn.is_aborted and seg.base_offset in wanted:
            found[seg.base_offset].append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset,
                                                     last_stable_offset))

    load = scratch.load_latest_snapshot(first)
    start = log_start_offset if load.offset is None else max(load.offset, log_start_offset)
    _replay_producer_batches(scratch, segments, start, end, on_completed=on_completed)
    for base, seg in wanted.items():
        seg.txn_index.write_all(found[base])


def _replay_producer_batches(producers: ProducerStateManager, segments: LogSegments, start: int, end: int, *,
                             on_completed: Callable[[LogSegment, CompletedTxn, int], None] | None = None) -> int:
    """Apply the producer batches with offsets in [start, end) to the state, reading headers
    only (64 KiB at a time while batches are small, one header at a time once they are not);
    a control batch is read whole, for its marker. `on_completed(segment, transaction, LSO)`
    sees each transaction a marker closes."""
    replayed = 0
    if start >= end:
        return 0
    for seg in segments.from_offset(start):
        if seg.base_offset >= end:
            break
        if seg.is_empty or seg.next_offset <= start:
            continue
        pos = 0
        if seg.base_offset < start:
            found = segments.repairing(seg, lambda s=seg: s.translate_offset(start))
            if found is None:
                continue
            pos = found.position
        size = seg.size
        buf, buf_pos = b"", 0
        read_size = _REPLAY_READ_BYTES
        while pos < size:
            rel = pos - buf_pos
            if rel < 0 or rel + HEADER_SIZE > len(buf):
                buf, buf_pos, rel = seg.read_bytes(pos, min(max(read_size, HEADER_SIZE), size - pos)), pos, 0
                if len(buf) < HEADER_SIZE:
                    raise CorruptRecordError("batch header runs past the end of the log",
                                             file=str(seg.log_path), position=pos)
            (base, length, _ple, _magic, _crc, attributes, delta, _bts, max_ts, producer_id,
             producer_epoch, base_sequence, _count) = HEADER.unpack_from(buf, rel)
            if base >= end:
                break
            if length < HEADER_SIZE - LOG_OVERHEAD:
                raise CorruptRecordError(f"batch length {length} is impossible", file=str(seg.log_path),
                                         position=pos, offset=base)
            if producer_id >= 0 and base + delta >= start and attributes & CONTROL_MASK:
                completed = producers.apply_batch(RecordBatch(seg.read_bytes(pos, length + LOG_OVERHEAD)))
                if completed is not None and on_completed is not None:
                    on_completed(seg, completed, producers.last_stable_offset_of(completed))
                replayed += 1
            elif producer_id >= 0 and base + delta >= start:
                producers.apply(producer_id, producer_epoch, base_sequence, base, delta, max_ts,
                                is_transactional=bool(attributes & TRANSACTIONAL_MASK))
                replayed += 1
            pos += length + LOG_OVERHEAD
            # Large batches: read just the next header rather than 64 KiB of records.
            read_size = HEADER_SIZE if length + LOG_OVERHEAD > _REPLAY_READ_BYTES // 4 else _REPLAY_READ_BYTES
    return replayed
