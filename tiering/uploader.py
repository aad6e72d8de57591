"""The tiering manager of one partition: upload sealed segments, delete by remote retention, clean
up after crashes and older leaders, and tell local retention what it may delete.

Copy round (`copy_segments(log, leader_epoch, high_watermark)`), run by the partition leader:

  1. On the first round of a leader epoch: re-read the manifest, commit a claim (which raises the
     manifest's leader epoch, fencing every older writer) that also abandons leftover COPY_STARTED
     entries (a crash, or an older leader cut off mid-upload: -> DELETE_STARTED), and sweep orphans
     (objects no manifest entry owns — late writes of a fenced zombie).
  2. Delete the objects of DELETE_STARTED entries whose delay is over; commit DELETE_FINISHED.
  3. Candidates: sealed segments (never the active one) whose offsets [base, next segment's base - 1]
     end below the high watermark and are not yet covered by COPY_FINISHED entries, in offset order.
     Each continues the remote tier exactly: from remote end + 1. A new leader's segment boundaries
     differ from the old leader's, so a segment that starts below that offset is uploaded from the
     batch starting at it (its indexes regenerated for the slice) — no overlap, no duplicate.
  4. Per segment: read it once, checking every batch's CRC and building its `.index`/`.timeindex`
     (only real entries, as the local segment writes them) and `.epochs`; commit COPY_STARTED (with
     a fresh segment id, and abandoning any other COPY_STARTED of uploads in the same CAS); PUT
     `.log`, `.index`, `.timeindex`, `.epochs` (the three small ones in parallel with the `.log`,
     on the object executor when there is one, which also scans the next segment meanwhile);
     commit COPY_FINISHED — in the same CAS as the next segment's COPY_STARTED, so a round writes
     the manifest once per segment, plus once at its end.

Why nothing is lost, duplicated or orphaned:
  * COPY_FINISHED entries are contiguous and never overlap (manifest.validate refuses otherwise);
  * an entry is committed COPY_STARTED before its first object is written, so every object has
    an owner in the manifest; objects of an abandoned upload are deleted through DELETE_STARTED ->
    DELETE_FINISHED; a zombie's writes after that are orphans that the sweep deletes (it lists
    first, then reads the manifest, so an upload in flight is never taken for an orphan);
  * a fenced commit (FencedLeaderEpochError) deletes the objects the loser just wrote (best effort;
    the sweep covers a crash);
  * a failure at any step leaves COPY_STARTED, which the next round abandons: uploads are resumable
    (a segment is re-uploaded whole under a new id) and idempotent (repeated transitions are no-ops).

Local retention (`eligible_for_local_deletion`, `apply_local_retention`) only deletes segments
whose offsets are covered by COPY_FINISHED entries (or already expired remotely): if the store is
down, local data stays until the upload succeeds. Remote retention (`enforce_retention`) applies
`retention.ms` / `retention.bytes` to the whole log (remote + local-only bytes) by moving leading
segments to DELETE_STARTED and advancing the remote log start offset; their objects go after
`remote.segment.delete.delay.ms`. `delete_all` removes a deleted topic's partition and leaves a
tombstone manifest that fences that incarnation's writers.

Concurrency: one partition's write paths (copy, cleanup, retention, sweep, delete_all) take the
partition's lock, so a node may call them from any thread; they block on the store (call them from
a background thread, never from the event loop). Different partitions run in parallel.

Where the code is: this module holds `SegmentUploader`'s constructor; the copy round is
`UploaderCopy` (uploader_copy.py), deletion, cleanup and local retention `UploaderCleanup`
(uploader_cleanup.py), the fields, the reports (`CopyReport`, `RemoteRetentionReport`) and the
shared primitives `UploaderState` (uploader_state.py). They work on the same fields, under the same
lock.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Executor
from typing import Callable

from lakelog.tiering.config import TieringConfig
from lakelog.tiering.metadata import ManifestStore
from lakelog.tiering.metrics import TieringMetrics
from lakelog.tiering.store import ObjectStore
from lakelog.tiering.uploader_cleanup import UploaderCleanup
from lakelog.tiering.uploader_copy import UploaderCopy
from lakelog.tiering.uploader_state import (  # noqa: F401  (re-exported: the manager and the package import them here)
    CopyReport,
    RemoteRetentionReport,
)


# ---------------------------------------------------------------------------------------------
# the manager of one partition


class SegmentUploader(UploaderCopy, UploaderCleanup):
    """Uploads, remote retention and cleanup of one partition (see the module docstring)."""

    def __init__(self, meta: ManifestStore, store: ObjectStore, *, config: TieringConfig | None = None,
                 metrics: TieringMetrics | None = None, clock: Callable[[], float] = time.time,
                 object_executor: Executor | None = None) -> None:
        self.meta = meta
        self.store = store
        #: Where a segment's small objects are PUT while the `.log` streams (None: one after another).
        #: Its tasks never wait on anything, so sharing it between partitions cannot deadlock.
        self.object_executor = object_executor
        self.topic = meta.topic
        self.partition = meta.partition
        self.config = config if config is not None else TieringConfig()
        self.metrics = metrics if metrics is not None else TieringMetrics()
        self._clock = clock
        self._lock = threading.Lock()
        self._claimed_epoch: int | None = None
        self._last_sweep = 0.0
