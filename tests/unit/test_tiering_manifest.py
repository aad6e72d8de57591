"""The partition manifest: segment state machine, invariants, codec (version / CRC refusal), transitions."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.tiering import manifest_codec, manifest_model, manifest_transitions
from lakelog.tiering.errors import (
    InvalidStateTransitionError,
    ManifestFormatError,
    ManifestInvariantError,
    UnsupportedManifestVersionError,
)
from lakelog.tiering.manifest_model import MANIFEST_VERSION, PartitionManifest, RemoteSegment, SegmentState
from lakelog.tiering.manifest_transitions import Replacement

S = SegmentState


def seg(base: int, end: int, state: SegmentState = S.COPY_FINISHED, *, n: int | None = None, epoch: int = 1,
        size: int = 100, max_ts: int = 1000, **kw) -> RemoteSegment:
    sid = f"{(n if n is not None else base):032x}"
    return RemoteSegment(sid, base, end, max_ts, size, ((epoch, base),), state, epoch, **kw)


def manifest(*segments: RemoteSegment, log_start: int | None = None, **kw) -> PartitionManifest:
    done = [s for s in segments if s.state == S.COPY_FINISHED]
    start = log_start if log_start is not None else (done[0].base_offset if done else 0)
    return PartitionManifest.empty("orders", 3).replace(segments=tuple(segments), log_start_offset=start,
                                                        leader_epoch=1, **kw)


# ---------------------------------------------------------------------------------------------
# the state machine


def test_states_have_explicit_stored_values():
    assert [(s.name, s.value) for s in SegmentState] == [
        ("COPY_STARTED", 0), ("COPY_FINISHED", 1), ("DELETE_STARTED", 2), ("DELETE_FINISHED", 3)]


ALLOWED = {(S.COPY_STARTED, S.COPY_FINISHED), (S.COPY_STARTED, S.DELETE_STARTED),
           (S.COPY_FINISHED, S.DELETE_STARTED), (S.DELETE_STARTED, S.DELETE_FINISHED)}


@pytest.mark.parametrize("old", list(SegmentState))
@pytest.mark.parametrize("new", list(SegmentState))
def test_transition_table(old, new):
    expected = old == new or (old, new) in ALLOWED
    assert manifest_model.is_valid_transition(old, new) is expected
    if expected:
        manifest_model.check_transition(old, new)
    else:
        with pytest.raises(InvalidStateTransitionError):
            manifest_model.check_transition(old, new)


def test_with_state_repeated_transition_is_a_no_op_and_stamps_changes():
    s = seg(0, 9, S.COPY_STARTED)
    assert s.with_state(S.COPY_STARTED, epoch=5, now_ms=9) is s
    done = s.with_state(S.COPY_FINISHED, epoch=5, now_ms=9)
    assert (done.state, done.state_epoch, done.updated_ms, done.delete_after_ms) == (S.COPY_FINISHED, 5, 9, -1)
    gone = done.with_state(S.DELETE_STARTED, epoch=6, now_ms=10, delete_after_ms=70)
    assert gone.delete_after_ms == 70
    with pytest.raises(InvalidStateTransitionError):
        gone.with_state(S.COPY_FINISHED, epoch=6, now_ms=11)


# ---------------------------------------------------------------------------------------------
# invariants


def test_valid_manifest_passes():
    manifest_model.validate(manifest(seg(0, 14, S.DELETE_STARTED, n=99), seg(0, 9), seg(10, 19), seg(20, 29, S.COPY_STARTED)))


@pytest.mark.parametrize("segments, message", [
    ((seg(0, 9), seg(11, 19)), "gap"),
    ((seg(0, 9), seg(9, 19)), "overlap"),
    ((seg(0, 9), seg(5, 12, S.COPY_STARTED)), "overlap"),
    ((seg(0, 9), seg(0, 9, n=0)), "twice"),
    ((seg(10, 19), seg(0, 9)), "out of order"),
    ((seg(5, 4),), "offsets"),
])
def test_invariant_violations_are_refused(segments, message):
    with pytest.raises(ManifestInvariantError, match=message):
        manifest_model.validate(manifest(*segments))


def test_log_start_must_lie_in_the_first_segment():
    with pytest.raises(ManifestInvariantError, match="log start"):
        manifest_model.validate(manifest(seg(10, 19), log_start=20))
    with pytest.raises(ManifestInvariantError, match="log start"):
        manifest_model.validate(manifest(seg(10, 19), log_start=5))


def test_deleted_manifest_holds_no_live_segment():
    with pytest.raises(ManifestInvariantError, match="deleted"):
        manifest_model.validate(manifest(seg(0, 9), deleted=True))


# ---------------------------------------------------------------------------------------------
# codec


def test_round_trip_and_canonical_bytes():
    m = manifest(seg(0, 9, epoch=1), seg(10, 19, epoch=2), seg(20, 29, S.COPY_STARTED, epoch=2),
                 cleaner_checkpoint=7, topic_id="abc", generation=12)
    data = manifest_codec.encode(m)
    assert manifest_codec.decode(data) == m
    assert manifest_codec.encode(manifest_codec.decode(data)) == data
    doc = json.loads(data)
    assert doc["version"] == MANIFEST_VERSION and isinstance(doc["crc32c"], int)
    assert data == json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def _tamper(data: bytes, fn) -> bytes:
    doc = json.loads(data)
    fn(doc)
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def test_crc_mismatch_is_refused():
    data = manifest_codec.encode(manifest(seg(0, 9)))
    bad = _tamper(data, lambda d: d["manifest"].update(log_start_offset=3))
    with pytest.raises(ManifestFormatError, match="CRC"):
        manifest_codec.decode(bad, key="orders-3/manifest.json")


def test_unknown_version_is_refused():
    data = manifest_codec.encode(manifest(seg(0, 9)))
    with pytest.raises(UnsupportedManifestVersionError, match="version 2"):
        manifest_codec.decode(_tamper(data, lambda d: d.update(version=2)))


@pytest.mark.parametrize("raw", [b"", b"not json", b"[]", b'{"version": 1}', b"\xff\xfe"])
def test_garbage_is_refused(raw):
    with pytest.raises(ManifestFormatError):
        manifest_codec.decode(raw)


def _recrc(doc):
    from lakelog.logstore.record_batch import crc32c
    doc["crc32c"] = crc32c(json.dumps(doc["manifest"], sort_keys=True, separators=(",", ":")).encode())


def test_missing_or_mistyped_field_is_refused_even_with_a_good_crc():
    data = manifest_codec.encode(manifest(seg(0, 9)))
    no_field = _tamper(data, lambda d: (d["manifest"]["segments"][0].pop("state"), _recrc(d)))
    with pytest.raises(ManifestFormatError, match="state"):
        manifest_codec.decode(no_field)
    bad_state = _tamper(data, lambda d: (d["manifest"]["segments"][0].update(state=7), _recrc(d)))
    with pytest.raises(ManifestFormatError, match="unknown state"):
        manifest_codec.decode(bad_state)
    as_bool = _tamper(data, lambda d: (d["manifest"].update(partition=True), _recrc(d)))
    with pytest.raises(ManifestFormatError):
        manifest_codec.decode(as_bool)


def test_decoding_a_manifest_with_a_gap_is_refused():
    data = manifest_codec.encode(manifest(seg(0, 9), seg(10, 19)))
    gap = _tamper(data, lambda d: (d["manifest"]["segments"][1].update(base_offset=11), _recrc(d)))
    with pytest.raises(ManifestFormatError, match="invariant"):
        manifest_codec.decode(gap)


@st.composite
def manifests(draw):
    n = draw(st.integers(0, 6))
    base = draw(st.integers(0, 10**12))
    segments, epoch = [], draw(st.integers(0, 5))
    for i in range(n):
        length = draw(st.integers(1, 10**6))
        epoch += draw(st.integers(0, 2))
        state = draw(st.sampled_from([S.COPY_FINISHED] * 3 + [S.DELETE_FINISHED]))
        segments.append(RemoteSegment(f"{i:032x}", base, base + length - 1, draw(st.integers(-1, 2**62)),
                                      draw(st.integers(0, 2**31)), ((epoch, base),), state, epoch,
                                      index_crc32c=draw(st.integers(0, 2**32 - 1)),
                                      created_ms=draw(st.integers(0, 2**50))))
        if state == S.COPY_FINISHED:
            base += length
    if draw(st.booleans()):
        segments.append(RemoteSegment(f"{99:032x}", base, base + 5, -1, 0, (), S.COPY_STARTED, epoch))
    done = [s for s in segments if s.state == S.COPY_FINISHED]
    start = done[0].base_offset if done else 0
    return PartitionManifest("t.x_y-z", draw(st.integers(0, 1000)), draw(st.none() | st.text("abc0123", max_size=8)),
                             draw(st.integers(0, 10**9)), epoch, start, draw(st.none() | st.integers(0, 10**9)),
                             False, tuple(sorted(segments, key=lambda s: (s.base_offset, s.created_ms, s.segment_id))))


@settings(max_examples=60, deadline=None)
@given(manifests())
def test_codec_round_trips(m):
    assert manifest_codec.decode(manifest_codec.encode(m)) == m


# ---------------------------------------------------------------------------------------------
# transitions


def test_start_copy_must_continue_the_remote_tier():
    m = manifest(seg(0, 9), seg(10, 19))
    with pytest.raises(ManifestInvariantError, match="continue"):
        manifest_transitions.start_copy(m, seg(21, 29, S.COPY_STARTED))
    with pytest.raises(ManifestInvariantError, match="continue"):
        manifest_transitions.start_copy(m, seg(15, 29, S.COPY_STARTED))
    nxt = manifest_transitions.start_copy(m, seg(20, 29, S.COPY_STARTED))
    assert [s.base_offset for s in nxt.segments] == [0, 10, 20]
    assert manifest_transitions.start_copy(nxt, seg(20, 29, S.COPY_STARTED)) is None  # a retry with the same id
    with pytest.raises(ManifestInvariantError, match="overlaps"):
        manifest_transitions.start_copy(nxt, seg(20, 25, S.COPY_STARTED, n=77))


def test_first_copy_may_start_anywhere_at_or_above_the_log_start():
    empty = PartitionManifest.empty("orders", 0)
    m = manifest_transitions.finish_copy(manifest_transitions.start_copy(empty, seg(500, 599, S.COPY_STARTED)), f"{500:032x}", epoch=1, now_ms=1)
    assert m.log_start_offset == 500 and m.end_offset == 599
    expired = empty.replace(log_start_offset=1000)
    with pytest.raises(ManifestInvariantError, match="below the remote log start"):
        manifest_transitions.start_copy(expired, seg(500, 599, S.COPY_STARTED))


def test_finish_copy_rechecks_contiguity_and_repeats_harmlessly():
    m = manifest_transitions.start_copy(manifest(seg(0, 9)), seg(10, 19, S.COPY_STARTED))
    done = manifest_transitions.finish_copy(m, f"{10:032x}", epoch=2, now_ms=5)
    assert done.end_offset == 19 and done.segment(f"{10:032x}").state_epoch == 2
    assert manifest_transitions.finish_copy(done, f"{10:032x}", epoch=2, now_ms=6) is None
    with pytest.raises(InvalidStateTransitionError, match="not in the manifest"):
        manifest_transitions.finish_copy(done, f"{77:032x}", epoch=2, now_ms=6)


def test_abandon_copies_only_moves_copy_started_of_the_origin():
    m = manifest(seg(0, 9), seg(10, 19, S.COPY_STARTED), seg(20, 29, S.COPY_STARTED, origin="compaction-job"))
    out = manifest_transitions.abandon_copies(m, epoch=3, now_ms=50)
    states = {s.base_offset: (s.state, s.delete_after_ms) for s in out.segments}
    assert states == {0: (S.COPY_FINISHED, -1), 10: (S.DELETE_STARTED, 50), 20: (S.COPY_STARTED, -1)}
    assert manifest_transitions.abandon_copies(out, epoch=3, now_ms=50) is None


def test_retention_deletes_leading_segments_and_advances_the_log_start():
    m = manifest(seg(0, 9), seg(10, 19), seg(20, 29))
    out = manifest_transitions.start_delete(m, [f"{0:032x}", f"{10:032x}"], epoch=1, now_ms=5, delete_after_ms=65,
                                            new_log_start_offset=20)
    assert out.log_start_offset == 20 and [s.base_offset for s in out.copy_finished] == [20]
    assert manifest_transitions.start_delete(out, [f"{0:032x}"], epoch=1, now_ms=6, delete_after_ms=66) is None
    # never backwards
    assert manifest_transitions.start_delete(out, [], epoch=1, now_ms=6, delete_after_ms=66, new_log_start_offset=3) is None
    # a hole in the middle is refused by validation when encoded
    hole = manifest_transitions.start_delete(m, [f"{10:032x}"], epoch=1, now_ms=5, delete_after_ms=5)
    with pytest.raises(ManifestInvariantError, match="gap"):
        manifest_codec.encode(hole)


def test_finish_delete_prunes_old_tombstones():
    m = manifest(*[seg(i * 10, i * 10 + 9, S.DELETE_STARTED, updated_ms=i) for i in range(5)], seg(50, 59),
                 log_start=50)
    ids = [f"{i * 10:032x}" for i in range(5)]
    out = manifest_transitions.finish_delete(m, ids, epoch=1, now_ms=100, keep_finished=2)
    finished = out.in_state(S.DELETE_FINISHED)
    assert len(finished) == 2 and len(out.segments) == 3
    assert manifest_transitions.finish_delete(out, [s.segment_id for s in finished], epoch=1, now_ms=101, keep_finished=2) is None


def test_restart_at_deletes_everything_before_the_new_start():
    m = manifest(seg(0, 9), seg(10, 19))
    out = manifest_transitions.restart_at(m, 300, epoch=2, now_ms=1, delete_after_ms=1)
    assert out.end_offset is None and out.log_start_offset == 300
    assert {s.state for s in out.segments} == {S.DELETE_STARTED}
    with pytest.raises(ManifestInvariantError):
        manifest_transitions.restart_at(m, 15, epoch=2, now_ms=1, delete_after_ms=1)


def test_mark_deleted_is_a_tombstone():
    m = manifest(seg(0, 9), seg(10, 19, S.COPY_STARTED))
    out = manifest_transitions.mark_deleted(m, epoch=1, now_ms=4)
    manifest_model.validate(out)
    assert out.deleted and not [s for s in out.segments if s.is_live]
    assert manifest_transitions.mark_deleted(out, epoch=1, now_ms=5) is None


def test_queries():
    m = manifest(seg(0, 9, max_ts=50), seg(10, 19, max_ts=70), seg(20, 29, S.COPY_STARTED), log_start=4)
    assert m.segment_for_offset(3) is None
    assert m.segment_for_offset(4).base_offset == 0
    assert m.segment_for_offset(19).base_offset == 10
    assert m.segment_for_offset(20) is None
    assert m.next_segment(m.segment_for_offset(5)).base_offset == 10
    assert m.next_segment(m.segment_for_offset(10)) is None
    assert (m.end_offset, m.size_in_bytes, m.max_timestamp) == (19, 200, 70)
    assert dataclasses.replace(m, segments=()).end_offset is None


# ---------------------------------------------------------------------------------------------
# jobs' staged replacements


def _staged(base, end, n):
    return seg(base, end, S.COPY_STARTED, n=n, origin="job:compaction")


def test_staged_replacements_may_overlap_and_swap_in_one_commit():
    m = manifest(seg(0, 9), seg(10, 19), seg(20, 29))
    staged = manifest_transitions.stage_replacements(m, [_staged(0, 19, 1000)])
    manifest_model.validate(staged)  # a staged entry overlapping COPY_FINISHED ones is allowed
    assert staged.copy_finished == m.copy_finished  # and is not readable
    assert manifest_transitions.stage_replacements(staged, [_staged(0, 19, 1000)]) is None  # retry: no-op
    swapped = manifest_transitions.swap_replacements(staged, [Replacement((f"{0:032x}", f"{10:032x}"), (f"{1000:032x}",))],
                                                     epoch=1, now_ms=5, delete_after_ms=65)
    manifest_model.validate(swapped)
    assert [(s.base_offset, s.end_offset) for s in swapped.copy_finished] == [(0, 19), (20, 29)]
    old = [swapped.segment(f"{b:032x}") for b in (0, 10)]
    assert all(s.state == S.DELETE_STARTED and s.delete_after_ms == 65 for s in old)
    assert manifest_transitions.swap_replacements(swapped, [Replacement((f"{0:032x}", f"{10:032x}"), (f"{1000:032x}",))],
                                                  epoch=1, now_ms=6, delete_after_ms=66) is None  # retried commit: no-op


def test_a_group_that_moved_under_the_job_is_abandoned_not_swapped():
    m = manifest(seg(0, 9), seg(10, 19), seg(20, 29))
    staged = manifest_transitions.stage_replacements(m, [_staged(0, 19, 1000), _staged(20, 29, 1001)])
    expired = manifest_transitions.start_delete(staged, [f"{0:032x}"], epoch=2, now_ms=5, delete_after_ms=5, new_log_start_offset=10)
    manifest_model.validate(expired)  # a staged entry below the log start does not break the invariants
    out = manifest_transitions.swap_replacements(expired, [Replacement((f"{0:032x}", f"{10:032x}"), (f"{1000:032x}",)),
                                                           Replacement((f"{20:032x}",), (f"{1001:032x}",))],
                               epoch=2, now_ms=6, delete_after_ms=70)
    manifest_model.validate(out)
    assert out.segment(f"{1000:032x}").state == S.DELETE_STARTED  # abandoned at once
    assert out.segment(f"{1000:032x}").delete_after_ms == 6
    assert [(s.base_offset, s.segment_id) for s in out.copy_finished] == [(10, f"{10:032x}"), (20, f"{1001:032x}")]


def test_a_replacement_must_cover_exactly_its_group():
    m = manifest_transitions.stage_replacements(manifest(seg(0, 9), seg(10, 19)), [_staged(0, 15, 1000)])
    out = manifest_transitions.swap_replacements(m, [Replacement((f"{0:032x}", f"{10:032x}"), (f"{1000:032x}",))],
                                                 epoch=1, now_ms=5, delete_after_ms=5)
    assert out.segment(f"{1000:032x}").state == S.DELETE_STARTED  # would open a gap: abandoned
    assert [s.segment_id for s in out.copy_finished] == [f"{0:032x}", f"{10:032x}"]


def test_staging_refuses_upload_origin_entries():
    with pytest.raises(InvalidStateTransitionError):
        manifest_transitions.stage_replacements(manifest(seg(0, 9)), [seg(0, 9, S.COPY_STARTED, n=5)])


# ---------------------------------------------------------------------------------------------
# record_count: an optional field (the `lakelog` source's count() without reading)


def test_record_count_round_trips_and_older_entries_keep_their_bytes():
    counted = manifest(seg(0, 9, record_count=7), seg(10, 19))
    back = manifest_codec.decode(manifest_codec.encode(counted))
    assert [s.record_count for s in back.segments] == [7, None]
    doc = json.loads(manifest_codec.encode(counted))
    assert doc["manifest"]["segments"][0]["record_count"] == 7
    assert "record_count" not in doc["manifest"]["segments"][1]  # absent, not null: as older writers wrote it
    # an entry written before the field existed decodes to None and encodes to the same bytes
    old = manifest_codec.encode(manifest(seg(0, 9), seg(10, 19)))
    assert manifest_codec.encode(manifest_codec.decode(old)) == old
    # a state change keeps the count
    assert back.segments[0].with_state(S.DELETE_STARTED, epoch=2, now_ms=5).record_count == 7


@pytest.mark.parametrize("count", [-1, 11])
def test_a_record_count_the_offsets_cannot_hold_is_refused(count):
    with pytest.raises(ManifestInvariantError, match="cannot hold"):
        manifest_codec.encode(manifest(seg(0, 9, record_count=count)))
    data = manifest_codec.encode(manifest(seg(0, 9)))
    with pytest.raises(ManifestFormatError, match="cannot hold"):
        manifest_codec.decode(_tamper(data, lambda d: (d["manifest"]["segments"][0].update(record_count=count), _recrc(d))))
    with pytest.raises(ManifestFormatError, match="record_count"):
        manifest_codec.decode(_tamper(data, lambda d: (d["manifest"]["segments"][0].update(record_count="7"), _recrc(d))))


def test_later_aborts_round_trip_and_malformed_or_misplaced_ones_are_refused():
    from lakelog.index.transaction_index import AbortedTxn

    listed = (AbortedTxn(7, 3, 12, 13),)
    m = manifest(seg(0, 9, later_aborts=listed), seg(10, 19, later_aborts=()))
    data = manifest_codec.encode(m)
    assert manifest_codec.decode(data) == m
    assert json.loads(data)["manifest"]["segments"][0]["later_aborts"] == [[7, 3, 12, 13]]
    assert "later_aborts" not in json.loads(manifest_codec.encode(manifest(seg(0, 9))))["manifest"]["segments"][0]
    for bad in ([[7, 3, 12]], [[7, 3, 12, True]], [7]):
        doc = _tamper(data, lambda d: (d["manifest"]["segments"][0].update(later_aborts=bad), _recrc(d)))
        with pytest.raises(ManifestFormatError, match="later_aborts"):
            manifest_codec.decode(doc)
    # A marker inside the segment belongs in its .txnindex; data after it cannot be listed.
    for misplaced in (AbortedTxn(7, 3, 9, 10), AbortedTxn(7, 10, 12, 13), AbortedTxn(-1, 3, 12, 13)):
        with pytest.raises(ManifestInvariantError, match="aborted after it"):
            manifest_model.validate(manifest(seg(0, 9, later_aborts=(misplaced,))))
