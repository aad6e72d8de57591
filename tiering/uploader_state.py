"""The fields of a partition's tiering manager, its reports, and the primitives every part uses.

`SegmentUploader` (uploader.py) is one class in several files, one per concern, on the same fields
and under the same lock: `UploaderState` (this module) declares those fields and holds the clock
and a segment's object keys; `UploaderCopy` (uploader_copy.py) runs the copy rounds and
`UploaderCleanup` (uploader_cleanup.py) deletes (delay, orphans, remote retention, topic deletion)
and answers local retention. `CopyReport` and `RemoteRetentionReport` are what the rounds return.

Concurrency: the `_` methods expect the caller to hold the partition's lock.
"""

from __future__ import annotations

import threading
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Callable

from lakelog.tiering.config import TieringConfig
from lakelog.tiering.layout import segment_keys
from lakelog.tiering.manifest_model import RemoteSegment
from lakelog.tiering.metadata import ManifestStore
from lakelog.tiering.metrics import TieringMetrics
from lakelog.tiering.store import ObjectStore


# ---------------------------------------------------------------------------------------------
# reports


@dataclass(slots=True)
class CopyReport:
    """What one copy round did."""

    uploaded: list[RemoteSegment] = field(default_factory=list)
    bytes_uploaded: int = 0
    abandoned: list[str] = field(default_factory=list)  # COPY_STARTED leftovers moved to DELETE_STARTED
    deleted: list[str] = field(default_factory=list)  # segments whose objects were deleted
    orphans_deleted: list[str] = field(default_factory=list)  # object keys
    restarted_at: int | None = None  # the remote tier restarted here (the offsets before expired locally)
    remote_end_offset: int | None = None
    lag_segments: int = 0  # sealed local segments not yet tiered
    lag_bytes: int = 0


@dataclass(slots=True)
class RemoteRetentionReport:
    """What one remote retention pass did."""

    segments_expired: list[str] = field(default_factory=list)
    bytes_expired: int = 0
    log_start_offset: int = 0
    deleted: list[str] = field(default_factory=list)


class UploaderState:
    """The fields of `SegmentUploader` and its shared primitives (module doc)."""

    # Made by SegmentUploader.__init__ (uploader.py).
    meta: ManifestStore
    store: ObjectStore
    object_executor: Executor | None
    topic: str
    partition: int
    config: TieringConfig
    metrics: TieringMetrics
    _clock: Callable[[], float]
    _lock: threading.Lock
    _claimed_epoch: int | None
    _last_sweep: float

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _keys(self, s: RemoteSegment) -> list[str]:
        return segment_keys(self.topic, self.partition, s.base_offset, s.segment_id)
