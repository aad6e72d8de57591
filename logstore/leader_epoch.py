"""The leader epoch cache and its `leader-epoch-checkpoint` file.

Each entry (epoch, start offset) says: the leader of `epoch` wrote its first batch at `start offset`.
Entries strictly increase in both fields. The file uses the checkpoint layout (see checkpoint.py):
version 0, a count, then one `epoch start_offset` line per entry.

It answers OffsetsForLeaderEpoch: the end offset of epoch E is the start offset of the first epoch
above E, or the log end offset if E is the latest. A follower truncates to that answer (never to
its own high watermark) so that its log is a prefix of the leader's.

Invariants: epochs and start offsets only grow along the list. Every change is persisted before the
method returns, except a write inside a `SyncBatch` (fileutil.py), which is durable once the batch
syncs: a new partition's first stamp, and the stamps of the partitions a node starts leading in
one metadata delta (thousands after a failover; the replica manager syncs its batch before it
returns to the event loop, so before any of them takes a produce). A crash before that sync leaves
the old file (a replacement is batched in two phases, old or new), or of a new partition's first
write an empty file; an empty file reads as no entries, and the unclean open that follows re-reads
the log from its recovery point (0 for such a partition) and re-assigns the epochs its batches carry. Concurrency: not thread-safe; the owning partition log serialises calls.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from pathlib import Path

from lakelog.infra.errors import invariant
from lakelog.logstore.checkpoint import read_checkpoint, write_checkpoint

FILE_NAME = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


class LeaderEpochCache:
    def __init__(self, directory: str | os.PathLike) -> None:
        self.path = Path(directory) / FILE_NAME
        empty = self.path.exists() and self.path.stat().st_size == 0  # a batched first write cut by a crash
        self._entries: list[tuple[int, int]] = (
            [] if empty else [tuple(e) for e in (read_checkpoint(self.path, 2) or [])])  # type: ignore[misc]
        self._check()

    def _check(self) -> None:
        for (e1, o1), (e2, o2) in zip(self._entries, self._entries[1:]):
            invariant(e2 > e1 and o2 >= o1, f"leader epoch entries must increase: {self._entries}")

    def _persist(self) -> None:
        write_checkpoint(self.path, list(self._entries), batchable=True)

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose leader wrote `offset` (UNDEFINED_EPOCH if before the first entry)."""
        starts = [o for _, o in self._entries]
        i = bisect_right(starts, offset)
        return self._entries[i - 1][0] if i else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; ignore epochs at or below the latest."""
        if epoch < 0:
            return False
        if self._entries:
            last_epoch, last_start = self._entries[-1]
            if epoch <= last_epoch:
                return False
            if start_offset <= last_start:
                # A new epoch cannot start at or before the previous one: those entries are stale
                # (an epoch that starts where the new one does holds no record). Kafka's assign
                # removes them the same way.
                self._entries = [(e, o) for e, o in self._entries if o < start_offset]
        self._entries.append((epoch, start_offset))
        self._persist()
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetsForLeaderEpoch: (largest epoch <= requested, its end offset).

        The end offset is the start offset of the next higher epoch, or `log_end_offset` when the
        requested epoch is the latest; an epoch older than every entry ends where the first entry
        starts. (UNDEFINED_EPOCH, UNDEFINED_OFFSET) for an undefined epoch or an empty cache.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if requested_epoch >= self._entries[-1][0]:
            # The latest epoch ends at the LEO. (Kafka answers UNDEFINED for an epoch newer than the
            # latest; a leader records its own epoch when elected, so a follower cannot ask for a
            # newer one — and if it did, the latest epoch's end is still the right bound.)
            return self._entries[-1][0], log_end_offset
        epochs = [e for e, _ in self._entries]
        i = bisect_right(epochs, requested_epoch)
        if i == 0:
            # Older than every entry: nothing here belongs to it or before it, so it ended (at the
            # latest) where the first known epoch starts.
            return requested_epoch, self._entries[0][1]
        return self._entries[i - 1][0], self._entries[i][1]

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop entries starting at or after `end_offset` (the log was truncated to it)."""
        kept = [(e, o) for e, o in self._entries if o < end_offset]
        if kept != self._entries:
            self._entries = kept
            self._persist()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log start moved to `start_offset`: drop older entries, clamp the one that spans it."""
        starts = [o for _, o in self._entries]
        i = bisect_right(starts, start_offset)
        if i == 0:
            return
        kept = [(self._entries[i - 1][0], max(start_offset, self._entries[i - 1][1]))] + self._entries[i:]
        if kept != self._entries:
            self._entries = kept
            self._persist()

    def clear(self) -> None:
        self._entries = []
        self._persist()
