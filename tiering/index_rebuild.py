"""Rebuild of a remote segment's `.index` and `.timeindex` from its `.log` (the work of the
`rebuild-index` job's Spark tasks, each over a run of segments: tiering/index_rebuild_tasks.py).

The indexes are regenerated exactly as a node builds them (tiering/segment_scan.py `scan_segment`:
one offset index entry per `index.interval.bytes` of batches, a time index entry whenever the max
timestamp grows at such a point, and the final max timestamp appended as when a segment rolls), so
with the topic's `index.interval.bytes` the result is byte for byte the index the node uploaded.

`rebuild_segment`:
  * `mode="missing"` (default) checks the stored objects first (present, size and CRC-32C as the
    manifest records them) and rebuilds only a missing or damaged one; `mode="all"` rebuilds
    every index;
  * the `.log` is read with ranged GETs and every batch CRC-checked (a corrupt `.log` is reported,
    never indexed);
  * a rebuilt index equal to the manifest's record (size and CRC) is written back under its key;
    one that differs (the topic's `index.interval.bytes` changed since the upload) is written and
    the manifest entry updated by compare-and-swap (`commit_index_updates`: one CAS for all the
    segments of a partition one task rebuilt, tiering/index_rebuild_tasks.py);
  * it returns a row of the partition-level remote index (segment, offset range, timestamp range,
    size, leader epochs, state, what was done) for the `_remote_index` Delta table.

No pyspark here; `spark_log/jobs.py` runs it.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import asdict, dataclass

from lakelog.logstore.record_batch import NO_TIMESTAMP, crc32c
from lakelog.tiering import manifest_transitions
from lakelog.tiering.errors import ObjectNotFoundError, RemoteCorruptionError
from lakelog.logstore.segment import INDEX_SUFFIX, TIME_INDEX_SUFFIX
from lakelog.tiering.layout import segment_key
from lakelog.tiering.manifest_model import PartitionManifest, RemoteSegment, SegmentState
from lakelog.tiering.metadata import ManifestStore
from lakelog.tiering.remote_scan import iter_segment_batches
from lakelog.tiering.segment_scan import scan_segment
from lakelog.tiering.store import ObjectStore


@dataclass
class SegmentIndexRow:
    """One row of the partition-level remote index (and what the rebuild did)."""

    topic: str
    partition: int
    segment_id: str
    base_offset: int
    end_offset: int
    min_timestamp: int
    max_timestamp: int
    size_in_bytes: int
    batch_count: int
    first_leader_epoch: int
    last_leader_epoch: int
    leader_epochs: str  # "epoch:start_offset,..." (compact and stable for a Delta column)
    state: str
    index_action: str  # ok | rebuilt | manifest-updated | corrupt-log | gone
    detail: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


#: Rebuilt .log bytes are written to the scratch file this many at a time.
WRITE_BYTES = 8 * 1024 * 1024


def _write_all(fd: int, data: bytes, position: int) -> int:
    done = 0
    while done < len(data):
        done += os.pwrite(fd, memoryview(data)[done:], position + done)
    return done


def _object_ok(store: ObjectStore, key: str, size: int, crc: int) -> bool:
    try:
        data = store.get_range(key, 0, size) if size else b""
        if size == 0:
            store.head(key)
    except ObjectNotFoundError:
        return False
    return len(data) == size and crc32c(data) == crc


@dataclass(frozen=True)
class IndexUpdate:
    """New (size, CRC-32C) of a segment's index objects, written to the store, for the manifest."""

    segment_id: str
    index: tuple[int, int]
    time_index: tuple[int, int]


def rebuild_segment(store: ObjectStore, topic: str, partition: int, seg: RemoteSegment, *,
                    index_interval_bytes: int, mode: str = "missing") -> SegmentIndexRow:
    """Check and, as needed, rebuild the indexes of one COPY_FINISHED segment (see above)."""
    row, update = rebuild_segment_objects(store, topic, partition, seg, index_interval_bytes=index_interval_bytes,
                                          mode=mode)
    if update is not None:
        commit_index_updates(store, topic, partition, [(row, update)])
    return row


def commit_index_updates(store: ObjectStore, topic: str, partition: int,
                         pending: list[tuple[SegmentIndexRow, IndexUpdate]]) -> int:
    """Record the new index objects of `pending` segments in the manifest with ONE compare-and-swap
    and mark their rows "manifest-updated"; a segment that left COPY_FINISHED meanwhile (compacted
    or expired) is left out and its row marked "gone". Returns the number of manifest commits (0 or 1)."""
    if not pending:
        return 0

    def change(m: PartitionManifest) -> PartitionManifest | None:
        out = None
        for _, u in pending:
            s = (out or m).segment(u.segment_id)
            if s is None or s.state != SegmentState.COPY_FINISHED:
                continue  # re-checked on every CAS attempt: the manifest may have moved on
            out = manifest_transitions.replace_index_objects(out or m, u.segment_id, index=u.index, time_index=u.time_index) or out
        return out

    manifests = ManifestStore(store, topic, partition)
    new = manifests.commit(-1, change, force=True)
    live = {s.segment_id: s for s in new.segments if s.state == SegmentState.COPY_FINISHED}
    for row, u in pending:
        s = live.get(u.segment_id)
        if s is not None and (s.index_bytes, s.index_crc32c) == u.index \
                and (s.time_index_bytes, s.time_index_crc32c) == u.time_index:
            row.index_action = "manifest-updated"
            row.detail = "the stored indexes differed from a rebuild with this index.interval.bytes"
        else:
            row.index_action, row.detail = "gone", "the segment left COPY_FINISHED before the manifest update"
    return manifests.commits


def rebuild_segment_objects(store: ObjectStore, topic: str, partition: int, seg: RemoteSegment, *,
                            index_interval_bytes: int, mode: str = "missing"
                            ) -> tuple[SegmentIndexRow, IndexUpdate | None]:
    """`rebuild_segment` without its manifest update: the row, and the update the manifest still
    needs (None when the rebuilt objects equal the manifest's record, or nothing was rebuilt)."""
    if mode not in ("missing", "all"):
        raise ValueError(f"mode must be 'missing' or 'all', not {mode!r}")
    ikey = segment_key(topic, partition, seg.base_offset, seg.segment_id, INDEX_SUFFIX)
    tkey = segment_key(topic, partition, seg.base_offset, seg.segment_id, TIME_INDEX_SUFFIX)
    row = SegmentIndexRow(topic, partition, seg.segment_id, seg.base_offset, seg.end_offset, NO_TIMESTAMP,
                          seg.max_timestamp, seg.size_in_bytes, 0, seg.first_leader_epoch, seg.last_leader_epoch,
                          ",".join(f"{e}:{o}" for e, o in seg.leader_epochs), seg.state.name, "ok")
    need = mode == "all" or not _object_ok(store, ikey, seg.index_bytes, seg.index_crc32c) \
        or not _object_ok(store, tkey, seg.time_index_bytes, seg.time_index_crc32c)
    fd, path = tempfile.mkstemp(prefix="rebuild-", suffix=".log")
    try:
        os.unlink(path)
        size = 0
        min_ts = None
        count = 0
        pending: list = []  # batch buffers not yet written: one write per WRITE_BYTES, not per batch
        pending_bytes = 0
        try:
            for _, batch in iter_segment_batches(store, topic, partition, seg):
                # With a delete horizon (KIP-534) the base timestamp field holds the horizon.
                first_ts = batch.max_timestamp if batch.has_delete_horizon else batch.base_timestamp
                if min_ts is None or first_ts < min_ts:
                    min_ts = first_ts
                count += 1
                if need:
                    pending.append(batch.buffer)
                    pending_bytes += batch.size_in_bytes
                    if pending_bytes >= WRITE_BYTES:
                        size += _write_all(fd, b"".join(pending), size)
                        pending, pending_bytes = [], 0
            if pending:
                size += _write_all(fd, b"".join(pending), size)
        except RemoteCorruptionError as e:
            row.index_action, row.detail = "corrupt-log", str(e)
            return row, None
        row.min_timestamp = NO_TIMESTAMP if min_ts is None else min_ts
        row.batch_count = count
        if not need:
            return row, None
        # Every batch was CRC-checked by the remote reader above: the scan only frames and indexes.
        scan = scan_segment(fd, size, base_offset=seg.base_offset, end_offset=seg.end_offset,
                            index_interval_bytes=index_interval_bytes, path=ikey, check_crc=False)
    finally:
        os.close(fd)
    store.put(ikey, scan.index)
    store.put(tkey, scan.time_index)
    new_index = (len(scan.index), crc32c(scan.index))
    new_time = (len(scan.time_index), crc32c(scan.time_index))
    row.index_action = "rebuilt"
    if new_index == (seg.index_bytes, seg.index_crc32c) and new_time == (seg.time_index_bytes, seg.time_index_crc32c):
        return row, None
    return row, IndexUpdate(seg.segment_id, new_index, new_time)
