"""The partition manifest's model: segment states and their transitions, the entries, the invariants.

`SegmentState` (Kafka's RemoteLogSegmentState, explicit values) with its checked transitions
(`check_transition`), `RemoteSegment` (one entry), `PartitionManifest` (the whole manifest,
immutable) and `validate`, which checks every invariant below and raises ManifestInvariantError.
The JSON layout, its version and CRC are in manifest_codec.py's docstring; the transitions are
manifest_transitions.py.

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

Everything here is pure and immutable.
"""

from __future__ import annotations

import dataclasses
import enum
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any

from lakelog.index.transaction_index import AbortedTxn
from lakelog.logstore.record_batch import NO_TIMESTAMP
from lakelog.tiering.errors import InvalidStateTransitionError, ManifestInvariantError
from lakelog.tiering.layout import is_segment_id, segment_stem

MANIFEST_VERSION = 1
ORIGIN_UPLOAD = "upload"


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
    #: The `.txnindex` object (Kafka's aborted-transaction index of the slice); 0 / 0: none.
    txn_index_bytes: int = 0
    txn_index_crc32c: int = 0
    created_ms: int = 0
    updated_ms: int = 0
    delete_after_ms: int = -1
    record_count: int | None = None  # None: not recorded (older writers)
    #: The aborted transactions with data at or below `end_offset` whose ABORT marker lies after
    #: it (so not in this segment's `.txnindex`): first offset <= end offset < last offset. With
    #: the `.txnindex` entries they are every aborted transaction overlapping the segment. None:
    #: not recorded (entries written before it existed; readers walk later `.txnindex` objects).
    later_aborts: tuple[AbortedTxn, ...] | None = None

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
        if s.size_in_bytes < 0 or min(s.index_bytes, s.time_index_bytes, s.epochs_bytes, s.txn_index_bytes) < 0:
            _fail(f"segment {s.segment_id} has a negative size")
        if s.record_count is not None and not 0 <= s.record_count <= s.end_offset - s.base_offset + 1:
            _fail(f"segment {s.segment_id} of offsets [{s.base_offset}, {s.end_offset}] cannot hold "
                  f"{s.record_count} records")
        for a in s.later_aborts or ():
            if a.producer_id < 0 or not a.first_offset <= s.end_offset < a.last_offset \
                    or not 0 <= a.last_stable_offset <= a.last_offset + 1:
                _fail(f"segment {s.segment_id} of offsets [{s.base_offset}, {s.end_offset}] lists {a} "
                      f"as aborted after it")
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
