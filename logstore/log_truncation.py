"""Removing from the partition log: truncation, the log start offset, segment deletion, the compaction swap.

`LogTruncation` is the part of `PartitionLog` (log.py) that takes records away: `truncate_to` (a
follower's truncation to an OffsetsForLeaderEpoch answer; the producer state is reloaded as of the
new LEO) and `truncate_fully_and_start_at`; `maybe_increment_log_start_offset` (retention,
DeleteRecords) and `delete_oldest_segments` (retention by whole segments below the high watermark),
which persist the log start offset before they delete files; `replace_segments`, the crash-safe swap
of compacted segments (`.cleaned` -> `.swap` -> final names, completed by the loader after a crash).

Concurrency: every public method takes the log's lock.
"""

from __future__ import annotations

from typing import Callable

from lakelog.infra.errors import invariant
from lakelog.logstore.checkpoint import write_checkpoint
from lakelog.logstore.errors import SegmentsChangedError
from lakelog.logstore.fileutil import fsync_dir
from lakelog.logstore.log_loader import LOG_START_OFFSET_FILE, RECOVERY_POINT_FILE, LogLoader
from lakelog.logstore.log_state import LogState
from lakelog.logstore.segment import CLEANED_SUFFIX, SWAP_SUFFIX, LogSegment


class LogTruncation(LogState):
    """Truncation, log start offset, deletion and swaps of `PartitionLog` (module doc); state made in log.py."""

    _truncation_listeners: list[Callable[[int], None]]

    def truncate_to(self, offset: int) -> int:
        """Remove every record at or above `offset` (a follower's truncation). Returns the new LEO.

        A batch that straddles `offset` is removed whole: the LEO may end below `offset`.
        The producer state becomes the state as of the new LEO (newest snapshot at or below it,
        then a replay of the batch headers up to it).
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
            invariant(offset >= self.log_start_offset or offset == self._segments[0].base_offset,
                      f"cannot truncate to {offset} below the log start offset {self.log_start_offset}")
            # Snapshots above the target go first: after a crash part way, none of them can
            # describe batches that are no longer (or not yet again) in the log.
            self._producers.delete_snapshots_above(offset)
            while len(self._segments) > 1 and self._segments[-1].base_offset >= offset:
                seg = self._segments.pop()
                self._bases.pop()
                seg.delete_files()
            active = self.active_segment
            self._repairing(active, lambda: active.truncate_to(offset))
            self.epochs.truncate_from_end(self.log_end_offset)
            # Snapshots lie at batch boundaries, so none is left in (new LEO, offset].
            LogLoader(self).reload_producer_state(self.log_end_offset)
            self.recovery_point = min(self.recovery_point, self.log_end_offset)
            write_checkpoint(self.directory / RECOVERY_POINT_FILE, [(self.active_segment.base_offset,)])
            for listener in self._truncation_listeners:
                listener(self.log_end_offset)
            return self.log_end_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and restart the log empty at `offset` (and the producer state)."""
        with self._lock:
            self._check_open()
            self._producers.delete_all_snapshots()
            self._producers.clear()
            for seg in self._segments:
                seg.delete_files()
            self._segments.clear()
            self._bases.clear()
            self._add_segment(LogSegment(self.directory, offset, self._segment_config(), created_ms=self._now_ms()))
            self.log_start_offset = offset
            self.epochs.clear()
            self._write_log_start_offset()
            self.recovery_point = offset
            write_checkpoint(self.directory / RECOVERY_POINT_FILE, [(offset,)])
            for listener in self._truncation_listeners:
                listener(offset)

    def maybe_increment_log_start_offset(self, new_start: int) -> bool:
        """Advance the log start offset (retention, DeleteRecords); never moves it backwards."""
        with self._lock:
            self._check_open()
            if new_start <= self.log_start_offset:
                return False
            invariant(new_start <= self.log_end_offset, f"log start {new_start} above LEO {self.log_end_offset}")
            self.log_start_offset = new_start
            self._write_log_start_offset()
            self.epochs.truncate_from_start(new_start)
            # Whole segments now entirely below the start are no longer reachable: delete them.
            while len(self._segments) > 1 and self._segments[1].base_offset <= new_start:
                seg = self._segments.pop(0)
                self._bases.pop(0)
                seg.delete_files()
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
        """
        with self._lock:
            self._check_open()
            doomed: list[LogSegment] = []
            for seg, nxt in zip(self._segments, self._segments[1:]):
                if upper_bound_offset is not None and seg.next_offset > upper_bound_offset:
                    break
                if not predicate(seg, nxt):
                    break
                doomed.append(seg)
            if not doomed:
                return []
            # Advance (and persist) the log start offset first: after a crash between the two
            # steps, the files left behind lie below it and are simply unreachable.
            self.log_start_offset = max(self.log_start_offset, self._segments[len(doomed)].base_offset)
            self._write_log_start_offset()
            del self._segments[:len(doomed)]
            del self._bases[:len(doomed)]
            for seg in doomed:
                seg.delete_files()
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

    def replace_segments(self, new_segments: list[LogSegment], old_segments: list[LogSegment]) -> None:
        """Swap compacted replacement segments (written with suffix `.cleaned`) for `old_segments`.

        Crash-safe: `.cleaned` -> `.swap`, delete the old segments, `.swap` -> final names.
        The old segments must be consecutive, sealed and still present. The producer state and
        its snapshots are left alone: they describe the history, which compaction does not change
        (the newest snapshot lies at or above the active segment's base, above every sealed one).
        """
        with self._lock:
            self._check_open()
            if not old_segments or any(s not in self._segments for s in old_segments):
                raise SegmentsChangedError("a segment to replace is no longer in the log")
            idx = [self._segments.index(s) for s in old_segments]
            if idx != list(range(idx[0], idx[0] + len(idx))) or idx[-1] >= len(self._segments) - 1:
                raise SegmentsChangedError("replaced segments must be consecutive and sealed")
            for seg in new_segments:
                seg.flush()
                seg.change_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)
            fsync_dir(self.directory)
            # Commit point: the .swap files exist; from here on open() completes the swap if we
            # crash, so the in-memory list switches now and file work that fails is redone there.
            self._segments[idx[0]: idx[-1] + 1] = new_segments
            self._bases = [s.base_offset for s in self._segments]
            for seg in old_segments:
                seg.delete_files()
            for seg in new_segments:
                seg.change_suffix(SWAP_SUFFIX, "")
            fsync_dir(self.directory)
