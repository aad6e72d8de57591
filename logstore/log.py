"""The partition log: an ordered list of segments in one directory `<topic>-<partition>/`.

Directory contents:

    00000000000000000000.log / .index / .timeindex     sealed segments ...
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
    snapshot lies above the LEO.

Lookups follow the design: binary search of segments by base offset, the floor entry of the sparse
offset index, then a forward scan of batch headers.

Crash recovery (`open` without a clean-shutdown marker): segments from the recovery point on are
re-read batch by batch, CRC-checked, cut at the first torn or corrupt batch (later segments are
dropped), and their indexes rebuilt; every other segment's indexes are checked structurally and
rebuilt if they fail. `recovery` tells what was cut. Loading and recovery live in `log_loader.py`.

Producer state (idempotent produce, producer_state.py): the leader checks each producer batch
(epoch fencing, sequence order, duplicates of a producer's last 5 batches answered with their
original offsets); followers apply batches unchecked, so every replica holds the same state.
A `<offset>.snapshot` of the state is written when a segment rolls and on close. On open the
state comes from the newest snapshot at or below the LEO (corrupt ones are deleted, the next
older one is used) plus a replay of batch headers from there to the LEO — after a crash, folded
into the recovery scan when the snapshot lies in the recovered segments. `truncate_to` reloads the
newest snapshot at or below the new LEO and replays up to it; snapshots above it go first.
Compaction swaps leave the state alone: the cleaner only rewrites sealed segments, which lie
below the newest snapshot (the one taken when the active segment was rolled in).

Compaction swap (crash-safe, as Kafka's): replacement segments are written with suffix `.cleaned`,
renamed to `.swap`, the replaced segments are deleted, then the `.swap` files lose their suffix.
On open, `.cleaned` files are removed and `.swap` files are completed.

Concurrency: every public method takes the log's lock, so calls from several threads are safe;
a read returns bytes copied out of the files, so it is unaffected by later truncation or deletion.

Where the code is: this module holds the constructor, the properties and the lifecycle; the fields
and the primitives every part uses are `LogState` (log_state.py); appends, roll and flush are
`LogAppender` (log_append.py), reads and lookups `LogReader` (log_read.py), truncation, deletion
and the compaction swap `LogTruncation` (log_truncation.py), opening and recovery `LogLoader`
(log_loader.py). They work on the same fields, under the same lock.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path
from types import MappingProxyType
from typing import Callable, Mapping

from lakelog.infra.config import LogConfig
from lakelog.logstore.fileutil import atomic_write
from lakelog.logstore.leader_epoch import LeaderEpochCache
from lakelog.logstore.log_append import LogAppender
from lakelog.logstore.log_loader import CLEAN_SHUTDOWN_FILE, CLEAN_SHUTDOWN_VERSION, LogLoader
from lakelog.logstore.log_read import LogReader
from lakelog.logstore.log_truncation import LogTruncation
from lakelog.logstore.producer_state import (
    DEFAULT_MAX_PRODUCER_IDS,
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    DEFAULT_SNAPSHOTS_TO_KEEP,
    ProducerStateEntry,
    ProducerStateManager,
)
from lakelog.logstore.segment import LogSegment


class PartitionLog(LogAppender, LogReader, LogTruncation):
    """The log of one partition replica."""

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
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._closed = False
        self._listeners: list[Callable[[int], None]] = []
        self._truncation_listeners: list[Callable[[int], None]] = []
        self.index_rebuilds_on_read: list[int] = []
        self._unflushed_records = 0
        self._last_flush_ms = self._now_ms()
        self.epochs = LeaderEpochCache(self.directory)
        self._producers = ProducerStateManager(self.directory, producer_id_expiration_ms=producer_id_expiration_ms,
                                               max_producer_ids=max_producer_ids,
                                               snapshots_to_keep=producer_snapshots_to_keep)
        self.recovery = LogLoader(self).load()

    # ------------------------------------------------------------------ properties

    @property
    def segments(self) -> list[LogSegment]:
        with self._lock:
            return list(self._segments)

    @property
    def size_in_bytes(self) -> int:
        with self._lock:
            return sum(s.size for s in self._segments)

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

    # ------------------------------------------------------------------ config and lifecycle

    def update_config(self, config: LogConfig) -> None:
        with self._lock:
            self.config = config

    def close(self) -> None:
        """Flush, close files and write the clean-shutdown marker."""
        with self._lock:
            if self._closed:
                return
            self.active_segment.on_become_inactive()
            self._flush_locked()
            self._producers.remove_expired(self._now_ms())
            self._producers.take_snapshot(self.log_end_offset)
            for seg in self._segments:
                seg.close()
            atomic_write(self.directory / CLEAN_SHUTDOWN_FILE,
                         f"{CLEAN_SHUTDOWN_VERSION}\n{self.log_end_offset}\n".encode("ascii"))
            self._closed = True

    def delete(self) -> None:
        """Close and remove the whole partition directory."""
        with self._lock:
            if not self._closed:
                for seg in self._segments:
                    seg.close()
                self._closed = True
            shutil.rmtree(self.directory, ignore_errors=True)

    def __repr__(self) -> str:
        return (f"PartitionLog({self.directory}, log_start_offset={self.log_start_offset}, "
                f"log_end_offset={self.log_end_offset}, segments={len(self._segments)})")
