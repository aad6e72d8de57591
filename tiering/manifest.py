"""The partition manifest (`<topic>-<partition>/manifest.json`): remote log metadata of one partition.

Layout: canonical JSON (keys sorted, no spaces, ASCII), UTF-8 bytes:

    {"crc32c": <uint32 CRC-32C of the canonical JSON of "manifest">,
     "manifest": {
        "topic": str, "partition": int, "topic_id": str | null,
        "generation": int,          +1 with every commit (so no two versions have the same bytes)
        "leader_epoch": int,        highest leader epoch that committed; writers below it are fenced
        "log_start_offset": int,    lowest offset the remote tier serves
        "cleaner_checkpoint": int | null,   slot for the remote compaction job (first dirty offset)
        "deleted": bool,            the topic was deleted: a tombstone that fences its old writers
        "segments": [ {             sorted by base offset
            "id": str,              32 hex digits; the objects are <base:020d>-<id>.{log,index,timeindex,epochs}
            "base_offset": int, "end_offset": int,   the offsets [base, end] the segment covers (end =
                                    the next local segment's base - 1, as Kafka's RemoteLogSegmentMetadata)
            "max_timestamp": int,   largest batch max timestamp, -1 if none
            "size_in_bytes": int,   of the .log object
            "leader_epochs": [[epoch, start offset], ...],   as in the .epochs object
            "state": 0..3,          SegmentState
            "state_epoch": int,     leader epoch of the writer of the last state change
            "origin": str,          "upload" (the leader's tiering) or the writer's name (a job)
            "index": [bytes, crc32c], "time_index": [bytes, crc32c], "epochs": [bytes, crc32c],
            "created_ms": int, "updated_ms": int,
            "delete_after_ms": int  DELETE_STARTED: objects are deleted from this time on; else -1
            "record_count": int     optional: the records of the segment's data batches (control
                                    batches not counted), as the writer's CRC-checked scan found
                                    them; absent in entries written before it existed (readers
                                    then count by reading). The `lakelog` source's count() uses it.
        }, ...]},
     "version": 1}

The CRC covers the canonical JSON of the "manifest" value. A reader refuses another version, a CRC
mismatch, a missing or mistyped field, or a manifest that breaks an invariant (ManifestFormatError).

Segment lifecycle (Kafka's RemoteLogSegmentState), explicit values, checked transitions; repeating
the current state is allowed so that a retried commit is harmless:

    COPY_STARTED(0) -> COPY_FINISHED(1) -> DELETE_STARTED(2) -> DELETE_FINISHED(3)
    COPY_STARTED(0) -----------------------> DELETE_STARTED(2)     (an abandoned upload)

Invariants (`validate`, checked on every encode and decode):
  * segment ids are unique; every segment has base <= end and epochs increasing inside [base, end];
  * segments are sorted by base offset; live segments (COPY_STARTED, COPY_FINISHED) never overlap
    (no duplicate offsets);
  * COPY_FINISHED segments are contiguous: each base is the previous end + 1 (no gap);
  * with COPY_FINISHED segments, the first's base <= log_start_offset <= its end; COPY_STARTED
    segments lie at or above the log start offset;
  * a deleted (tombstone) manifest holds no live segment.
Transitions that would break one raise ManifestInvariantError and change nothing; the log start
offset never moves backwards.

Crash behaviour: a manifest is replaced whole by a conditional PUT (see metadata.py); a crash
leaves the old or the new version. Everything here is pure: the functions at the bottom take a
manifest and return the next one (or None when nothing changes).
"""

from __future__ import annotations

import dataclasses
import enum
import json
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any, Iterable

from lakelog.logstore.record_batch import crc32c
from lakelog.tiering.errors import (
    InvalidStateTransitionError,
    ManifestFormatError,
    ManifestInvariantError,
    UnsupportedManifestVersionError,
)
from lakelog.tiering.layout import is_segment_id, segment_stem

MANIFEST_VERSION = 1
ORIGIN_UPLOAD = "upload"
NO_TIMESTAMP = -1


class SegmentState(enum.IntEnum):
    """A remote segment's lifecycle state; the values are stored."""

    COPY_STARTED = 0
    COPY_FINISHED = 1
    DELETE_STARTED = 2
    DELETE_FINISHED = 3


_ALLOWED: dict[SegmentState, frozenset[SegmentState]] = {
    SegmentState.COPY_STARTED: frozenset({SegmentState.COPY_STARTED, SegmentState.COPY_FINISHED,
                                          SegmentState.DELETE_STARTED}),
    SegmentState.COPY_FINISHED: frozenset({SegmentState.COPY_FINISHED, SegmentState.DELETE_STARTED}),
    SegmentState.DELETE_STARTED: frozenset({SegmentState.DELETE_STARTED, SegmentState.DELETE_FINISHED}),
    SegmentState.DELETE_FINISHED: frozenset({SegmentState.DELETE_FINISHED}),
}
LIVE_STATES = frozenset({SegmentState.COPY_STARTED, SegmentState.COPY_FINISHED})


def is_valid_transition(old: SegmentState, new: SegmentState) -> bool:
    return new in _ALLOWED[old]


def check_transition(old: SegmentState, new: SegmentState, *, segment_id: str = "") -> None:
    """Raise InvalidStateTransitionError unless `old -> new` is allowed (old == new is)."""
    if not is_valid_transition(old, new):
        raise InvalidStateTransitionError(f"segment {segment_id}: {old.name} -> {new.name} is not allowed")


@dataclass(frozen=True, slots=True)
class RemoteSegment:
    """One manifest entry: a segment in the remote tier (or on its way in or out)."""

    segment_id: str
    base_offset: int
    end_offset: int
    max_timestamp: int
    size_in_bytes: int
    leader_epochs: tuple[tuple[int, int], ...]
    state: SegmentState
    state_epoch: int
    origin: str = ORIGIN_UPLOAD
    index_bytes: int = 0
    index_crc32c: int = 0
    time_index_bytes: int = 0
    time_index_crc32c: int = 0
    epochs_bytes: int = 0
    epochs_crc32c: int = 0
    created_ms: int = 0
    updated_ms: int = 0
    delete_after_ms: int = -1
    record_count: int | None = None  # None: not recorded (older writers)

    @property
    def stem(self) -> str:
        return segment_stem(self.base_offset, self.segment_id)

    @property
    def is_live(self) -> bool:
        return self.state in LIVE_STATES

    @property
    def is_staged(self) -> bool:  # noqa: D401
        """A job's replacement being written (COPY_STARTED, origin other than the leader's upload):
        never readable, may overlap the COPY_FINISHED segments it is meant to replace."""
        return self.state == SegmentState.COPY_STARTED and self.origin != ORIGIN_UPLOAD

    @property
    def first_leader_epoch(self) -> int:
        return self.leader_epochs[0][0] if self.leader_epochs else -1

    @property
    def last_leader_epoch(self) -> int:
        return self.leader_epochs[-1][0] if self.leader_epochs else -1

    def covers(self, offset: int) -> bool:
        return self.base_offset <= offset <= self.end_offset

    def overlaps(self, other: "RemoteSegment") -> bool:
        return self.base_offset <= other.end_offset and other.base_offset <= self.end_offset

    def with_state(self, state: SegmentState, *, epoch: int, now_ms: int, delete_after_ms: int = -1) -> "RemoteSegment":
        """This entry moved to `state` (checked); a repeated state returns the entry unchanged."""
        check_transition(self.state, state, segment_id=self.segment_id)
        if state == self.state:
            return self
        return dataclasses.replace(self, state=state, state_epoch=epoch, updated_ms=now_ms,
                                   delete_after_ms=delete_after_ms if state == SegmentState.DELETE_STARTED else -1)


@dataclass(frozen=True, slots=True)
class PartitionManifest:
    """The remote log metadata of one partition (immutable; changes build a new one)."""

    topic: str
    partition: int
    topic_id: str | None
    generation: int
    leader_epoch: int
    log_start_offset: int
    cleaner_checkpoint: int | None
    deleted: bool
    segments: tuple[RemoteSegment, ...]

    @classmethod
    def empty(cls, topic: str, partition: int, topic_id: str | None = None) -> "PartitionManifest":
        return cls(topic, partition, topic_id, 0, -1, 0, None, False, ())

    def replace(self, **changes: Any) -> "PartitionManifest":
        return dataclasses.replace(self, **changes)

    # -- queries
    @property
    def copy_finished(self) -> tuple[RemoteSegment, ...]:
        """The readable segments, in offset order (contiguous)."""
        return tuple(s for s in self.segments if s.state == SegmentState.COPY_FINISHED)

    @property
    def end_offset(self) -> int | None:
        """The last offset the remote tier holds (last COPY_FINISHED end), or None if it holds none."""
        done = self.copy_finished
        return done[-1].end_offset if done else None

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size_in_bytes for s in self.copy_finished)

    @property
    def max_timestamp(self) -> int:
        return max((s.max_timestamp for s in self.copy_finished), default=NO_TIMESTAMP)

    def segment(self, segment_id: str) -> RemoteSegment | None:
        for s in self.segments:
            if s.segment_id == segment_id:
                return s
        return None

    def in_state(self, *states: SegmentState) -> tuple[RemoteSegment, ...]:
        return tuple(s for s in self.segments if s.state in states)

    def segment_for_offset(self, offset: int) -> RemoteSegment | None:
        """The COPY_FINISHED segment covering `offset` (None below the log start or past the end)."""
        done = self.copy_finished
        if not done or offset < self.log_start_offset:
            return None
        i = bisect_right([s.base_offset for s in done], offset) - 1
        if i < 0 or not done[i].covers(offset):
            return None
        return done[i]

    def next_segment(self, segment: RemoteSegment) -> RemoteSegment | None:
        """The COPY_FINISHED segment after `segment`."""
        for s in self.copy_finished:
            if s.base_offset > segment.end_offset:
                return s
        return None


# ---------------------------------------------------------------------------------------------
# invariants


def _fail(message: str) -> None:
    raise ManifestInvariantError(message)


def validate(m: PartitionManifest) -> None:
    """Check every manifest invariant (see the module docstring); raise ManifestInvariantError."""
    if m.generation < 0 or m.log_start_offset < 0 or m.partition < 0:
        _fail(f"negative generation, log start offset or partition in {m.topic}-{m.partition}")
    ids: set[str] = set()
    prev_base = -1
    for s in m.segments:
        if s.segment_id in ids:
            _fail(f"segment id {s.segment_id} appears twice")
        ids.add(s.segment_id)
        if not is_segment_id(s.segment_id):
            _fail(f"segment id {s.segment_id!r} is not 32 hex digits")
        if not 0 <= s.base_offset <= s.end_offset:
            _fail(f"segment {s.segment_id} has offsets [{s.base_offset}, {s.end_offset}]")
        if s.size_in_bytes < 0 or min(s.index_bytes, s.time_index_bytes, s.epochs_bytes) < 0:
            _fail(f"segment {s.segment_id} has a negative size")
        if s.record_count is not None and not 0 <= s.record_count <= s.end_offset - s.base_offset + 1:
            _fail(f"segment {s.segment_id} of offsets [{s.base_offset}, {s.end_offset}] cannot hold "
                  f"{s.record_count} records")
        if s.base_offset < prev_base:
            _fail(f"segment {s.segment_id} at {s.base_offset} is out of order")
        prev_base = s.base_offset
        for (e1, o1), (e2, o2) in zip(s.leader_epochs, s.leader_epochs[1:]):
            if not (e2 > e1 and o2 > o1):
                _fail(f"segment {s.segment_id} leader epochs do not increase: {s.leader_epochs}")
        if s.leader_epochs and not (s.base_offset <= s.leader_epochs[0][1] and s.leader_epochs[-1][1] <= s.end_offset):
            _fail(f"segment {s.segment_id} leader epochs {s.leader_epochs} lie outside its offsets")
    live = [s for s in m.segments if s.is_live and not s.is_staged]
    for a, b in zip(live, live[1:]):
        if a.overlaps(b):
            _fail(f"segments {a.segment_id} [{a.base_offset}, {a.end_offset}] and {b.segment_id} "
                  f"[{b.base_offset}, {b.end_offset}] overlap")
    done = m.copy_finished
    for a, b in zip(done, done[1:]):
        if b.base_offset != a.end_offset + 1:
            _fail(f"gap or overlap between remote segments ending at {a.end_offset} and starting at {b.base_offset}")
    if done and not done[0].base_offset <= m.log_start_offset <= done[0].end_offset:
        _fail(f"log start offset {m.log_start_offset} lies outside the first remote segment "
              f"[{done[0].base_offset}, {done[0].end_offset}]")
    staged = [s for s in m.segments if s.is_staged]
    for a, b in zip(staged, staged[1:]):
        if a.overlaps(b):
            _fail(f"staged replacements {a.segment_id} and {b.segment_id} overlap")
    for s in m.in_state(SegmentState.COPY_STARTED):
        if s.base_offset < m.log_start_offset and not s.is_staged:
            _fail(f"segment {s.segment_id} being copied starts below the log start offset {m.log_start_offset}")
    if m.deleted and live:
        _fail("a deleted partition's manifest still holds live segments")


# ---------------------------------------------------------------------------------------------
# codec


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")


def _segment_to_dict(s: RemoteSegment) -> dict:
    out = {"id": s.segment_id, "base_offset": s.base_offset, "end_offset": s.end_offset,
            "max_timestamp": s.max_timestamp, "size_in_bytes": s.size_in_bytes,
            "leader_epochs": [list(e) for e in s.leader_epochs], "state": int(s.state),
            "state_epoch": s.state_epoch, "origin": s.origin,
            "index": [s.index_bytes, s.index_crc32c], "time_index": [s.time_index_bytes, s.time_index_crc32c],
            "epochs": [s.epochs_bytes, s.epochs_crc32c], "created_ms": s.created_ms,
            "updated_ms": s.updated_ms, "delete_after_ms": s.delete_after_ms}
    if s.record_count is not None:  # absent, not null, when unknown: older manifests' bytes stay as they were
        out["record_count"] = s.record_count
    return out


def to_dict(m: PartitionManifest) -> dict:
    return {"topic": m.topic, "partition": m.partition, "topic_id": m.topic_id, "generation": m.generation,
            "leader_epoch": m.leader_epoch, "log_start_offset": m.log_start_offset,
            "cleaner_checkpoint": m.cleaner_checkpoint, "deleted": m.deleted,
            "segments": [_segment_to_dict(s) for s in m.segments]}


def encode(m: PartitionManifest) -> bytes:
    """Canonical bytes of `m` (validated first)."""
    validate(m)
    body = to_dict(m)
    return _canonical({"version": MANIFEST_VERSION, "crc32c": crc32c(_canonical(body)), "manifest": body})


class _Fields:
    """Typed access to a JSON object's fields; errors name the field and where it is."""

    def __init__(self, doc: Any, where: str) -> None:
        if not isinstance(doc, dict):
            raise ManifestFormatError(f"{where} is not a JSON object")
        self.doc = doc
        self.where = where

    def get(self, name: str, *types: type, nullable: bool = False) -> Any:
        if name not in self.doc:
            raise ManifestFormatError(f"{self.where} lacks field {name!r}")
        value = self.doc[name]
        if value is None and nullable:
            return None
        if isinstance(value, bool) and bool not in types:
            raise ManifestFormatError(f"{self.where} field {name!r} has type bool")
        if not isinstance(value, types):
            raise ManifestFormatError(f"{self.where} field {name!r} is {type(value).__name__}, "
                                      f"expected {'/'.join(t.__name__ for t in types)}")
        return value

    def pair(self, name: str) -> tuple[int, int]:
        value = self.get(name, list)
        if len(value) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise ManifestFormatError(f"{self.where} field {name!r} is not a pair of integers")
        return value[0], value[1]


def _segment_from_dict(doc: Any, i: int, where: str) -> RemoteSegment:
    f = _Fields(doc, f"{where} segment #{i}")
    state_value = f.get("state", int)
    try:
        state = SegmentState(state_value)
    except ValueError:
        raise ManifestFormatError(f"{f.where} has unknown state {state_value}") from None
    epochs_raw = f.get("leader_epochs", list)
    epochs = []
    for e in epochs_raw:
        if not (isinstance(e, list) and len(e) == 2 and all(isinstance(v, int) and not isinstance(v, bool) for v in e)):
            raise ManifestFormatError(f"{f.where} has a malformed leader epoch entry {e!r}")
        epochs.append((e[0], e[1]))
    index = f.pair("index")
    time_index = f.pair("time_index")
    epochs_file = f.pair("epochs")
    return RemoteSegment(
        segment_id=f.get("id", str), base_offset=f.get("base_offset", int), end_offset=f.get("end_offset", int),
        max_timestamp=f.get("max_timestamp", int), size_in_bytes=f.get("size_in_bytes", int),
        leader_epochs=tuple(epochs), state=state, state_epoch=f.get("state_epoch", int),
        origin=f.get("origin", str), index_bytes=index[0], index_crc32c=index[1],
        time_index_bytes=time_index[0], time_index_crc32c=time_index[1],
        epochs_bytes=epochs_file[0], epochs_crc32c=epochs_file[1],
        created_ms=f.get("created_ms", int), updated_ms=f.get("updated_ms", int),
        delete_after_ms=f.get("delete_after_ms", int),
        record_count=f.get("record_count", int) if "record_count" in doc else None)


def decode(buf: bytes, *, key: str | None = None) -> PartitionManifest:
    """Parse and check manifest bytes; raise ManifestFormatError (naming `key`) on any failure."""
    where = f"manifest {key}" if key else "manifest"
    try:
        doc = json.loads(buf)
    except (UnicodeDecodeError, ValueError) as e:
        raise ManifestFormatError(f"{where} is not JSON: {e}") from None
    top = _Fields(doc, where)
    version = doc.get("version") if isinstance(doc, dict) else None
    if version != MANIFEST_VERSION:
        raise UnsupportedManifestVersionError(f"{where} has version {version!r}; this code reads {MANIFEST_VERSION}")
    body = top.get("manifest", dict)
    crc = top.get("crc32c", int)
    actual = crc32c(_canonical(body))
    if crc != actual:
        raise ManifestFormatError(f"{where} CRC-32C is {actual}, the manifest says {crc}")
    f = _Fields(body, where)
    segments = f.get("segments", list)
    try:
        m = PartitionManifest(
            topic=f.get("topic", str), partition=f.get("partition", int), topic_id=f.get("topic_id", str, nullable=True),
            generation=f.get("generation", int), leader_epoch=f.get("leader_epoch", int),
            log_start_offset=f.get("log_start_offset", int),
            cleaner_checkpoint=f.get("cleaner_checkpoint", int, nullable=True), deleted=f.get("deleted", bool),
            segments=tuple(_segment_from_dict(s, i, where) for i, s in enumerate(segments)))
        validate(m)
    except ManifestInvariantError as e:
        raise ManifestFormatError(f"{where} breaks an invariant: {e}") from None
    return m


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
