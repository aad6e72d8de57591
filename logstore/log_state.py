"""The fields of a partition log and the few primitives every part of `PartitionLog` uses.

`PartitionLog` (log.py) is one class in several files, one per concern, all on the same fields and
under the same lock: `LogState` (this module) declares those fields and holds what every part
calls — the clock, the active segment and the LEO, the closed check, adding a segment in order, and
`_repairing` (run an index-guided lookup; if the index proves wrong, rebuild it and run it again).
`LogAppender` (log_append.py), `LogReader` (log_read.py) and `LogTruncation` (log_truncation.py)
extend it; `PartitionLog.__init__` and `LogLoader` (log_loader.py) set the fields.

Concurrency: the `_` methods expect the caller to hold the log's lock (or to own the log while it opens).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from lakelog.infra.config import LogConfig
from lakelog.infra.errors import invariant
from lakelog.index.errors import CorruptIndexError
from lakelog.logstore.errors import LogClosedError
from lakelog.logstore.leader_epoch import LeaderEpochCache
from lakelog.logstore.producer_state import ProducerStateManager
from lakelog.logstore.segment import LogSegment, SegmentConfig


class LogState:
    """The fields of `PartitionLog` and its shared primitives (module doc)."""

    # Made by PartitionLog.__init__ and the loader (log.py, log_loader.py).
    directory: Path
    config: LogConfig
    epochs: LeaderEpochCache
    log_start_offset: int
    recovery_point: int
    _lock: threading.RLock
    _segments: list[LogSegment]
    _bases: list[int]
    _producers: ProducerStateManager
    _clock: Callable[[], float]
    _closed: bool
    index_rebuilds_on_read: list[int]

    def _segment_config(self) -> SegmentConfig:
        return SegmentConfig(self.config.index_interval_bytes, self.config.segment_index_bytes)

    def _add_segment(self, seg: LogSegment) -> None:
        invariant(not self._bases or seg.base_offset > self._bases[-1], "segments must be added in order")
        self._segments.append(seg)
        self._bases.append(seg.base_offset)

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def log_end_offset(self) -> int:
        """LEO: the offset the next appended record will get."""
        return self._segments[-1].next_offset

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed")

    def _repairing(self, seg: LogSegment, lookup: Callable):
        """Run an index-guided lookup; if the index proves wrong, rebuild it and run it again."""
        try:
            return lookup()
        except CorruptIndexError:
            seg.rebuild_indexes()
            self.index_rebuilds_on_read.append(seg.base_offset)
            return lookup()
