"""The partition manifest's transitions: pure functions, manifest in -> next manifest out.

Each returns the next manifest, or None when nothing would change (so a retried commit writes
nothing): the leader's tiering (`claim`, `abandon_copies`, `start_copy`, `finish_copy`,
`start_delete`, `finish_delete`, `restart_at`, `mark_deleted`), the compaction job's checkpoint
(`set_cleaner_checkpoint`), and the jobs' rewrites (`stage_replacements`, `swap_replacements`
with `Replacement`, `replace_index_objects`). A transition that would break an invariant of
manifest_model.py raises ManifestInvariantError and changes nothing. The commit loop
(metadata.py) stamps the generation and the writer's leader epoch.

Everything here is pure.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable

from lakelog.tiering.errors import InvalidStateTransitionError, ManifestInvariantError
from lakelog.tiering.manifest_model import ORIGIN_UPLOAD, PartitionManifest, RemoteSegment, SegmentState


# ---------------------------------------------------------------------------------------------
# transitions: pure functions, manifest in -> next manifest out (None: nothing to change).
# The commit loop (metadata.py) stamps the generation and the writer's leader epoch.


def _with_segments(m: PartitionManifest, segments: Iterable[RemoteSegment], **changes: Any) -> PartitionManifest:
    ordered = tuple(sorted(segments, key=lambda s: (s.base_offset, s.created_ms, s.segment_id)))
    return m.replace(segments=ordered, **changes)


def claim(m: PartitionManifest, epoch: int) -> PartitionManifest | None:
    """A new leader takes over: committing raises the manifest's epoch and so fences older writers."""
    return m if m.leader_epoch < epoch else None


def abandon_copies(m: PartitionManifest, *, epoch: int, now_ms: int, origin: str = ORIGIN_UPLOAD
                   ) -> PartitionManifest | None:
    """Move every COPY_STARTED entry of `origin` (a crashed or superseded upload) to DELETE_STARTED.

    They were never readable, so their objects may go at once (delete_after_ms = now)."""
    stale = [s for s in m.segments if s.state == SegmentState.COPY_STARTED and s.origin == origin]
    if not stale:
        return None
    doomed = {s.segment_id for s in stale}
    return _with_segments(m, [s.with_state(SegmentState.DELETE_STARTED, epoch=epoch, now_ms=now_ms,
                                           delete_after_ms=now_ms) if s.segment_id in doomed else s
                              for s in m.segments])


def start_copy(m: PartitionManifest, segment: RemoteSegment) -> PartitionManifest | None:
    """Record an upload about to begin (state COPY_STARTED). It must continue the remote tier:
    start right after the last COPY_FINISHED segment (or, with none, at or above the log start),
    and overlap no live entry. Retrying with the same id is a no-op."""
    if segment.state != SegmentState.COPY_STARTED:
        raise InvalidStateTransitionError(f"a new segment must start in COPY_STARTED, not {segment.state.name}")
    existing = m.segment(segment.segment_id)
    if existing is not None:
        if existing.state == SegmentState.COPY_STARTED:
            return None
        raise InvalidStateTransitionError(f"segment {segment.segment_id} is already {existing.state.name}")
    end = m.end_offset
    if end is not None and segment.base_offset != end + 1:
        raise ManifestInvariantError(f"segment [{segment.base_offset}, {segment.end_offset}] does not continue "
                                     f"the remote tier, which ends at {end}")
    if end is None and segment.base_offset < m.log_start_offset:
        raise ManifestInvariantError(f"segment at {segment.base_offset} starts below the remote log start "
                                     f"offset {m.log_start_offset}")
    for s in m.segments:
        if s.is_live and s.overlaps(segment):
            raise ManifestInvariantError(f"segment [{segment.base_offset}, {segment.end_offset}] overlaps "
                                         f"{s.state.name} segment {s.segment_id} [{s.base_offset}, {s.end_offset}]")
    return _with_segments(m, m.segments + (segment,))


def finish_copy(m: PartitionManifest, segment_id: str, *, epoch: int, now_ms: int) -> PartitionManifest | None:
    """The upload of `segment_id` completed: COPY_STARTED -> COPY_FINISHED (repeat: no-op)."""
    s = m.segment(segment_id)
    if s is None:
        raise InvalidStateTransitionError(f"segment {segment_id} is not in the manifest (superseded?)")
    if s.state == SegmentState.COPY_FINISHED:
        return None
    done = s.with_state(SegmentState.COPY_FINISHED, epoch=epoch, now_ms=now_ms)
    end = m.end_offset
    log_start = m.log_start_offset
    if end is None:
        log_start = max(log_start, s.base_offset)
    elif s.base_offset != end + 1:
        raise ManifestInvariantError(f"segment {segment_id} at {s.base_offset} does not continue the remote "
                                     f"tier, which ends at {end}")
    return _with_segments(m, [done if x.segment_id == segment_id else x for x in m.segments],
                          log_start_offset=log_start)


def start_delete(m: PartitionManifest, segment_ids: Iterable[str], *, epoch: int, now_ms: int,
                 delete_after_ms: int, new_log_start_offset: int | None = None) -> PartitionManifest | None:
    """Move segments to DELETE_STARTED and (optionally) advance the log start offset past them.

    COPY_FINISHED segments may only leave from the front (retention) or all at once: anything
    else would open a gap, which `validate` refuses."""
    ids = set(segment_ids)
    unknown = ids - {s.segment_id for s in m.segments}
    if unknown:
        raise InvalidStateTransitionError(f"segments {sorted(unknown)} are not in the manifest")
    changed = False
    segments = []
    for s in m.segments:
        if s.segment_id in ids and s.state != SegmentState.DELETE_STARTED:
            s = s.with_state(SegmentState.DELETE_STARTED, epoch=epoch, now_ms=now_ms, delete_after_ms=delete_after_ms)
            changed = True
        segments.append(s)
    log_start = m.log_start_offset
    if new_log_start_offset is not None and new_log_start_offset > log_start:
        log_start = new_log_start_offset
        changed = True
    if not changed:
        return None
    return _with_segments(m, segments, log_start_offset=log_start)


def finish_delete(m: PartitionManifest, segment_ids: Iterable[str], *, epoch: int, now_ms: int,
                  keep_finished: int) -> PartitionManifest | None:
    """The objects of these DELETE_STARTED segments are gone: -> DELETE_FINISHED. Only the newest
    `keep_finished` DELETE_FINISHED entries stay in the manifest."""
    ids = set(segment_ids)
    segments = []
    changed = False
    for s in m.segments:
        if s.segment_id in ids and s.state != SegmentState.DELETE_FINISHED:
            s = s.with_state(SegmentState.DELETE_FINISHED, epoch=epoch, now_ms=now_ms)
            changed = True
        segments.append(s)
    finished = sorted((s for s in segments if s.state == SegmentState.DELETE_FINISHED),
                      key=lambda s: (s.updated_ms, s.segment_id))
    drop = {s.segment_id for s in finished[:max(0, len(finished) - keep_finished)]}
    if drop:
        segments = [s for s in segments if s.segment_id not in drop]
        changed = True
    return _with_segments(m, segments) if changed else None


def restart_at(m: PartitionManifest, offset: int, *, epoch: int, now_ms: int, delete_after_ms: int
               ) -> PartitionManifest | None:
    """The local log no longer holds the offsets after the remote end (they expired before they
    were tiered): the remote tier restarts at `offset`; its older segments are deleted, since
    keeping them would leave a gap."""
    end = m.end_offset
    if offset <= m.log_start_offset and end is None:
        return None
    if end is not None and offset <= end + 1:
        raise ManifestInvariantError(f"restart at {offset} would not skip past the remote end {end}")
    ids = [s.segment_id for s in m.copy_finished]
    moved = start_delete(m, ids, epoch=epoch, now_ms=now_ms, delete_after_ms=delete_after_ms) or m
    return moved.replace(log_start_offset=max(offset, m.log_start_offset))


def mark_deleted(m: PartitionManifest, *, epoch: int, now_ms: int) -> PartitionManifest | None:
    """Topic deletion: every live segment -> DELETE_STARTED (objects may go now); tombstone set."""
    live = [s.segment_id for s in m.segments if s.is_live]
    if m.deleted and not live:
        return None
    moved = start_delete(m, live, epoch=epoch, now_ms=now_ms, delete_after_ms=now_ms) if live else None
    return (moved or m).replace(deleted=True)


def set_cleaner_checkpoint(m: PartitionManifest, offset: int | None) -> PartitionManifest | None:
    """Record the remote compaction job's first dirty offset."""
    return None if m.cleaner_checkpoint == offset else m.replace(cleaner_checkpoint=offset)


# ---------------------------------------------------------------------------------------------
# Rewrites by jobs (remote compaction, index rebuild): stage, then swap in one commit.
#
#   stage_replacements   new entries in COPY_STARTED with the job's origin ("staged"): they own
#                        their objects (so no orphan sweep deletes them while they are written)
#                        but are never readable, and may overlap the segments they replace;
#   swap_replacements    one commit per round: each group of COPY_FINISHED segments becomes
#                        DELETE_STARTED (objects deleted after the delay, so readers that already
#                        hold them finish) and its staged replacements COPY_FINISHED. A group
#                        whose old segments are no longer all COPY_FINISHED (the leader's
#                        retention moved on meanwhile) is abandoned instead: its staged entries
#                        go to DELETE_STARTED at once. Replacements cover exactly the offsets of
#                        the group they replace, so the tier stays contiguous.


@dataclass(frozen=True, slots=True)
class Replacement:
    """Old segment ids (consecutive COPY_FINISHED) and the staged ids that replace them."""

    old_ids: tuple[str, ...]
    new_ids: tuple[str, ...]


def stage_replacements(m: PartitionManifest, segments: Iterable[RemoteSegment]) -> PartitionManifest | None:
    """Add staged (COPY_STARTED, job origin) entries; repeating ids already staged is a no-op."""
    added = []
    for seg in segments:
        if seg.state != SegmentState.COPY_STARTED or seg.origin == ORIGIN_UPLOAD:
            raise InvalidStateTransitionError(f"segment {seg.segment_id}: a staged replacement must be "
                                              f"COPY_STARTED with a job origin")
        existing = m.segment(seg.segment_id)
        if existing is None:
            added.append(seg)
        elif existing.state != SegmentState.COPY_STARTED:
            raise InvalidStateTransitionError(f"segment {seg.segment_id} is already {existing.state.name}")
    if not added:
        return None
    return _with_segments(m, m.segments + tuple(added))


def swap_replacements(m: PartitionManifest, replacements: Iterable[Replacement], *, epoch: int, now_ms: int,
                      delete_after_ms: int, updates: dict[str, RemoteSegment] | None = None
                      ) -> PartitionManifest | None:
    """Swap every still-valid group (see above); abandon the others. `updates` maps a staged id to
    its final entry (sizes, CRCs and timestamps known once its objects are written)."""
    by_id = {s.segment_id: s for s in m.segments}
    new_state: dict[str, RemoteSegment] = {}
    for r in replacements:
        old = [by_id.get(i) for i in r.old_ids]
        new = [by_id.get(i) for i in r.new_ids]
        if not any(s is not None and s.is_staged for s in new):
            continue  # already swapped or abandoned by an earlier (retried) commit
        valid = all(s is not None and s.state == SegmentState.COPY_FINISHED for s in old)
        if valid:
            lo, hi = old[0].base_offset, old[-1].end_offset  # type: ignore[union-attr]
            final = [(updates or {}).get(s.segment_id, s) for s in new if s is not None]
            covered = sorted((s.base_offset, s.end_offset) for s in final)
            contiguous = bool(covered) and covered[0][0] == lo and covered[-1][1] == hi and all(
                b[0] == a[1] + 1 for a, b in zip(covered, covered[1:]))
            valid = contiguous
        if valid:
            for s in old:
                new_state[s.segment_id] = s.with_state(SegmentState.DELETE_STARTED, epoch=epoch,  # type: ignore[union-attr]
                                                       now_ms=now_ms, delete_after_ms=delete_after_ms)
            for s in new:
                f = (updates or {}).get(s.segment_id, s)  # type: ignore[union-attr]
                new_state[f.segment_id] = f.with_state(SegmentState.COPY_FINISHED, epoch=epoch, now_ms=now_ms)
        else:
            for s in new:
                if s is not None and s.state == SegmentState.COPY_STARTED:
                    new_state[s.segment_id] = s.with_state(SegmentState.DELETE_STARTED, epoch=epoch, now_ms=now_ms,
                                                           delete_after_ms=now_ms)
    if not new_state:
        return None
    return _with_segments(m, [new_state.get(s.segment_id, s) for s in m.segments])


def replace_index_objects(m: PartitionManifest, segment_id: str, *, index: tuple[int, int] | None = None,
                          time_index: tuple[int, int] | None = None) -> PartitionManifest | None:
    """Record new (size, CRC-32C) of a segment's rebuilt index objects (the index rebuild job)."""
    s = m.segment(segment_id)
    if s is None or s.state != SegmentState.COPY_FINISHED:
        raise InvalidStateTransitionError(f"segment {segment_id} is not COPY_FINISHED")
    changes: dict[str, int] = {}
    if index is not None and (s.index_bytes, s.index_crc32c) != index:
        changes.update(index_bytes=index[0], index_crc32c=index[1])
    if time_index is not None and (s.time_index_bytes, s.time_index_crc32c) != time_index:
        changes.update(time_index_bytes=time_index[0], time_index_crc32c=time_index[1])
    if not changes:
        return None
    return _with_segments(m, [dataclasses.replace(x, **changes) if x.segment_id == segment_id else x
                              for x in m.segments])
