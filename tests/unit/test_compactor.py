"""Key compaction as pure logic: the offset map, record and batch rules, triggers and grouping."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.compaction.compactor import (
    CleaningParams,
    CleaningTrigger,
    CompactionStats,
    OffsetMap,
    SegmentSpan,
    Verdict,
    build_offset_map,
    clean_batch,
    cleaning_trigger,
    compact_batches,
    decide_record,
    dirty_ratio,
    encode_empty_batch,
    first_offset_younger_than,
    first_uncleanable_offset,
    group_segments,
    next_first_dirty_offset,
)
from lakelog.compaction.errors import OffsetMapTooSmallError
from lakelog.infra.errors import InvariantViolation
from lakelog.logstore.compression import Compression
from lakelog.logstore.record_batch import (
    Record,
    RecordBatch,
    TimestampType,
    build_batch,
    validate_batch,
)

NOW = 10_000_000
DAY = 86_400_000


def batch(base: int, items: list[tuple[bytes | None, bytes | None]], *, ts: int = 1_000, gap: int = 1,
          **kw) -> RecordBatch:
    """A stored batch at `base`: records at base, base+gap, ... with keys/values from `items`."""
    recs = [Record(base + i * gap, ts + i, k, v) for i, (k, v) in enumerate(items)]
    return RecordBatch(build_batch(recs, base_offset=base, **kw))


def params(**kw) -> CleaningParams:
    kw.setdefault("now_ms", NOW)
    kw.setdefault("delete_retention_ms", DAY)
    return CleaningParams(**kw)


def records_of(outcomes) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for o in outcomes:
        if o.data is not None:
            out += [(r.offset, r.key, r.value) for r in RecordBatch(o.data).records()]
    return out


# ---------------------------------------------------------------------------------------------
# the offset map


def test_offset_map_keeps_latest_and_is_bounded():
    m = OffsetMap(2)
    m.put(b"a", 1)
    m.put(b"a", 5)
    m.put(b"b", 3)
    assert m.get(b"a") == 5 and m.get(b"b") == 3 and m.get(b"c") is None
    assert len(m) == 2 and m.free_entries() == 0 and m.latest_offset == 5
    assert m.new_keys([b"a", b"c", b"c", b"d"]) == 2
    with pytest.raises(InvariantViolation):
        m.put(b"c", 9)  # full
    with pytest.raises(InvariantViolation):
        m.put(b"a", 4)  # offsets only grow
    with pytest.raises(InvariantViolation):
        OffsetMap(0)


def test_build_offset_map_maps_latest_offsets_including_tombstones():
    bs = [batch(0, [(b"a", b"1"), (b"b", b"1")]), batch(2, [(b"a", None), (None, b"x")]),
          batch(10, [(b"b", b"2")])]
    r = build_offset_map(bs, start_offset=0, end_offset=100)
    assert dict(r.offset_map.items()) == {b"a": 2, b"b": 10}
    assert r.map_end_offset == 100 and not r.full
    assert r.batches_mapped == 3 and r.records_mapped == 4


def test_build_offset_map_starts_at_first_dirty_and_stops_at_a_batch_reaching_the_end():
    bs = [batch(0, [(b"a", b"1")]), batch(1, [(b"b", b"1"), (b"c", b"1")]), batch(3, [(b"d", b"1"), (b"e", b"1")])]
    r = build_offset_map(bs, start_offset=1, end_offset=4)
    assert dict(r.offset_map.items()) == {b"b": 1, b"c": 2}  # batch 0 is clean, batch 3..4 reaches 4
    assert r.map_end_offset == 3 and not r.full


def test_build_offset_map_when_full_covers_a_prefix_ending_at_a_batch_boundary():
    bs = [batch(0, [(b"a", b"1"), (b"b", b"1")]), batch(2, [(b"a", b"2")]), batch(3, [(b"c", b"1")]),
          batch(4, [(b"d", b"1")])]
    r = build_offset_map(bs, start_offset=0, end_offset=100, max_entries=2)
    assert r.full and r.map_end_offset == 3
    assert dict(r.offset_map.items()) == {b"a": 2, b"b": 1}


def test_build_offset_map_too_small_for_one_batch_is_an_error():
    with pytest.raises(OffsetMapTooSmallError):
        build_offset_map([batch(0, [(b"a", b"1"), (b"b", b"1")])], start_offset=0, end_offset=10, max_entries=1)


def test_build_offset_map_skips_control_batches():
    ctrl = batch(0, [(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")], is_control=True)
    r = build_offset_map([ctrl, batch(1, [(b"a", b"1")])], start_offset=0, end_offset=10)
    assert dict(r.offset_map.items()) == {b"a": 1}


# ---------------------------------------------------------------------------------------------
# record rules


@pytest.mark.parametrize("key,tomb,latest,horizon,ts,lag,expected", [
    (b"k", False, 5, None, 0, 0, Verdict.KEEP),  # the latest
    (b"k", False, None, None, 0, 0, Verdict.KEEP),  # not in the map (clean section, or beyond)
    (b"k", False, 9, None, 0, 0, Verdict.DROP_SUPERSEDED),
    (None, False, None, None, 0, 0, Verdict.DROP_NO_KEY),
    (b"k", True, 5, None, 0, 0, Verdict.KEEP),  # tombstone not yet stamped
    (b"k", True, 5, NOW + 1, 0, 0, Verdict.KEEP),  # horizon not reached
    (b"k", True, 5, NOW, 0, 0, Verdict.DROP_EXPIRED_TOMBSTONE),  # now >= horizon
    (b"k", True, 9, None, 0, 0, Verdict.DROP_SUPERSEDED),
    (b"k", False, 9, None, NOW - 100, 1000, Verdict.KEEP_FOR_LAG),  # too young to compact
    (b"k", False, 9, None, NOW - 1000, 1000, Verdict.DROP_SUPERSEDED),  # exactly the lag: old enough
    (b"k", True, 5, NOW, NOW, 10, Verdict.KEEP_FOR_LAG),
    (None, False, None, None, NOW, 10, Verdict.KEEP_FOR_LAG),
])
def test_decide_record(key, tomb, latest, horizon, ts, lag, expected):
    p = params(min_compaction_lag_ms=lag)
    assert decide_record(offset=5, timestamp=ts, key=key, is_tombstone=tomb, latest_offset=latest,
                         delete_horizon_ms=horizon, params=p) is expected


# ---------------------------------------------------------------------------------------------
# batch rules


def test_unchanged_batch_is_returned_byte_for_byte():
    b = batch(0, [(b"a", b"1"), (b"b", b"2")])
    m = OffsetMap()
    m.put(b"a", 0)
    m.put(b"b", 1)
    o = clean_batch(b, m, params())
    assert o.data == bytes(b.buffer) and not o.rewritten and o.records_kept == 2


def test_rebuilt_batch_keeps_offsets_range_and_producer_metadata():
    b = batch(100, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2"), (b"c", b"1")], ts=5_000,
              compression=Compression.GZIP, producer_id=77, producer_epoch=3, base_sequence=40,
              partition_leader_epoch=9, is_transactional=True)
    m = OffsetMap()
    for k, off in ((b"a", 102), (b"b", 500), (b"c", 103)):
        m.put(k, off)
    o = clean_batch(b, m, params())
    out = RecordBatch(o.data)
    out.ensure_valid()
    assert o.rewritten and o.records_kept == 2 and o.dropped_superseded == 2
    assert (out.base_offset, out.last_offset, out.last_offset_delta) == (100, 103, 3)
    assert (out.producer_id, out.producer_epoch, out.base_sequence) == (77, 3, 40)
    assert out.partition_leader_epoch == 9 and out.is_transactional
    assert out.compression == Compression.GZIP and out.base_timestamp == b.base_timestamp
    assert [(r.offset, r.key, r.value, r.timestamp) for r in out.records()] == \
        [(102, b"a", b"2", 5_002), (103, b"c", b"1", 5_003)]
    assert out.max_timestamp == 5_003
    # A follower accepts it: offsets only need to increase.
    validate_batch(out, max_message_bytes=2**31 - 1, consecutive_offsets=False, allow_control=True)


def test_first_clean_stamps_a_delete_horizon_on_batches_keeping_tombstones():
    b = batch(0, [(b"a", b"1"), (b"b", None)], ts=7_000)
    m = OffsetMap()
    m.put(b"a", 0)
    m.put(b"b", 1)
    o = clean_batch(b, m, params(delete_retention_ms=500))
    out = RecordBatch(o.data)
    assert o.rewritten and o.horizon_stamped and o.records_kept == 2
    assert out.has_delete_horizon and out.delete_horizon_ms == NOW + 500 == o.delete_horizon_ms
    assert [(r.offset, r.timestamp, r.value) for r in out.records()] == [(0, 7_000, b"1"), (1, 7_001, None)]
    # Before the horizon a second round keeps it as it is, bytes and horizon unchanged.
    again = clean_batch(out, m, params(now_ms=NOW + 499))
    assert again.data == o.data and not again.rewritten and again.delete_horizon_ms == NOW + 500
    # At the horizon the tombstone goes; the value stays; the horizon is kept on the batch.
    later = clean_batch(out, m, params(now_ms=NOW + 500))
    final = RecordBatch(later.data)
    assert later.dropped_tombstones == 1 and later.delete_horizon_ms is None
    assert [(r.offset, r.key, r.value, r.timestamp) for r in final.records()] == [(0, b"a", b"1", 7_000)]
    assert final.delete_horizon_ms == NOW + 500 and final.last_offset == 1


def test_zero_delete_retention_drops_a_tombstone_on_the_round_after_its_stamp():
    b = batch(0, [(b"a", None)])
    m = OffsetMap()
    m.put(b"a", 0)
    first = clean_batch(b, m, params(delete_retention_ms=0))
    assert first.records_kept == 1 and RecordBatch(first.data).delete_horizon_ms == NOW
    second = clean_batch(RecordBatch(first.data), m, params(delete_retention_ms=0))
    assert second.data is None and second.dropped_tombstones == 1


def test_emptied_batch_is_dropped_unless_kept_empty():
    b = batch(10, [(b"a", b"1"), (b"a", b"2")], producer_id=5, producer_epoch=1, base_sequence=7)
    m = OffsetMap()
    m.put(b"a", 20)
    o = clean_batch(b, m, params())
    assert o.data is None and o.records_kept == 0 and o.dropped_superseded == 2
    kept = clean_batch(b, m, params(), keep_if_emptied=True)
    e = RecordBatch(kept.data)
    e.ensure_valid()
    assert e.record_count == 0 and e.records() == []
    assert (e.base_offset, e.last_offset, e.producer_id, e.producer_epoch, e.base_sequence) == (10, 11, 5, 1, 7)
    assert encode_empty_batch(b) == kept.data


def test_compact_batches_keeps_the_last_batch_of_each_producer_empty_when_asked():
    bs = [batch(0, [(b"a", b"1")], producer_id=1), batch(1, [(b"a", b"2")], producer_id=1),
          batch(2, [(b"a", b"3")], producer_id=2)]
    m = build_offset_map(bs, start_offset=0, end_offset=3).offset_map
    outs = list(compact_batches(bs, m, 3, params(), producer_last_offsets={1: 1, 2: 2}))
    assert outs[0].data is None
    assert RecordBatch(outs[1].data).record_count == 0
    assert records_of(outs) == [(2, b"a", b"3")]


def test_log_append_time_batches_use_the_batch_time_for_the_lag():
    recs = [Record(0, 1, b"a", b"1"), Record(1, 2, b"a", b"2")]
    b = RecordBatch(build_batch(recs, timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=NOW - 10))
    m = OffsetMap()
    m.put(b"a", 1)
    young = clean_batch(b, m, params(min_compaction_lag_ms=100))
    assert young.kept_for_lag == 1 and young.first_kept_for_lag_offset == 0 and young.data == bytes(b.buffer)
    old = clean_batch(b, m, params(min_compaction_lag_ms=5))
    out = RecordBatch(old.data)
    assert out.timestamp_type == TimestampType.LOG_APPEND_TIME and out.max_timestamp == NOW - 10
    assert [r.offset for r in out.records()] == [1]


def test_control_batches_and_batches_beyond_the_map_are_copied():
    ctrl = batch(0, [(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], is_control=True)
    dirty = batch(1, [(b"a", b"1")])
    beyond = batch(2, [(b"a", b"2"), (None, b"z")])
    m = build_offset_map([ctrl, dirty, beyond], start_offset=0, end_offset=2).offset_map
    stats = CompactionStats()
    outs = list(compact_batches([ctrl, dirty, beyond], m, 2, params(), stats=stats))
    assert outs[0].data == bytes(ctrl.buffer) and outs[2].data == bytes(beyond.buffer)
    assert outs[1].data == bytes(dirty.buffer)  # latest within the map
    assert stats.batches_read == 3 and stats.batches_written == 3 and stats.batches_rewritten == 0


def test_compact_batches_refuses_batches_out_of_order():
    bs = [batch(5, [(b"a", b"1")]), batch(3, [(b"b", b"1")])]
    with pytest.raises(InvariantViolation):
        list(compact_batches(bs, OffsetMap(), 10, params()))


def test_stats_track_the_earliest_horizon_and_the_first_lag_kept_offset():
    bs = [batch(0, [(b"a", None)], ts=NOW), batch(1, [(b"b", None)], ts=1), batch(2, [(b"a", b"2")], ts=NOW)]
    m = build_offset_map(bs, start_offset=0, end_offset=3).offset_map
    stats = CompactionStats()
    outs = list(compact_batches(bs, m, 3, params(min_compaction_lag_ms=100, delete_retention_ms=50), stats=stats))
    assert stats.first_kept_for_lag_offset == 0  # the superseded tombstone is too young to go
    assert stats.earliest_delete_horizon_ms == NOW + 50
    assert stats.tombstone_batches_stamped == 2
    assert records_of(outs) == [(0, b"a", None), (1, b"b", None), (2, b"a", b"2")]
    assert next_first_dirty_offset(3, stats.first_kept_for_lag_offset) == 0
    assert next_first_dirty_offset(3, None) == 3


# ---------------------------------------------------------------------------------------------
# triggers, bounds and grouping


def test_dirty_ratio():
    assert dirty_ratio(0, 0) == 0.0
    assert dirty_ratio(300, 100) == 0.25
    assert dirty_ratio(0, 10) == 1.0


def test_cleaning_trigger():
    base = dict(min_cleanable_dirty_ratio=0.5, earliest_dirty_timestamp_ms=-1,
                max_compaction_lag_ms=2**63 - 1, next_delete_horizon_ms=None, now_ms=NOW)
    assert cleaning_trigger(clean_bytes=100, dirty_bytes=100, **base) is CleaningTrigger.DIRTY_RATIO
    assert cleaning_trigger(clean_bytes=101, dirty_bytes=100, **base) is None
    assert cleaning_trigger(clean_bytes=0, dirty_bytes=0, **{**base, "min_cleanable_dirty_ratio": 0.0}) is None
    lagging = {**base, "earliest_dirty_timestamp_ms": NOW - 1001, "max_compaction_lag_ms": 1000}
    assert cleaning_trigger(clean_bytes=1000, dirty_bytes=1, **lagging) is CleaningTrigger.MAX_COMPACTION_LAG
    assert cleaning_trigger(clean_bytes=1000, dirty_bytes=0, **lagging) is None
    assert cleaning_trigger(clean_bytes=1000, dirty_bytes=0, **{**base, "next_delete_horizon_ms": NOW}) \
        is CleaningTrigger.DELETE_HORIZON
    assert cleaning_trigger(clean_bytes=1000, dirty_bytes=0, **{**base, "next_delete_horizon_ms": NOW + 1}) is None


def test_first_uncleanable_offset_and_young_batches():
    assert first_uncleanable_offset(100) == 100
    assert first_uncleanable_offset(100, 80) == 80
    assert first_uncleanable_offset(100, 120, 90) == 90
    headers = [(0, 10), (5, 30), (9, 20)]
    assert first_offset_younger_than(headers, 15) == 5
    assert first_offset_younger_than(headers, 30) is None


def test_group_segments_by_size_index_size_and_offset_span():
    s = [SegmentSpan(0, 10, 40), SegmentSpan(10, 20, 40), SegmentSpan(20, 30, 40), SegmentSpan(30, 40, 100)]
    groups = group_segments(s, max_segment_bytes=100, max_index_bytes=1000)
    assert [[x.base_offset for x in g] for g in groups] == [[0, 10], [20], [30]]
    idx = [SegmentSpan(0, 10, 1, 8, 0), SegmentSpan(10, 20, 1, 8, 0), SegmentSpan(20, 30, 1, 0, 8), SegmentSpan(30, 40, 1, 0, 8)]
    assert [[x.base_offset for x in g] for g in group_segments(idx, max_segment_bytes=100, max_index_bytes=12)] \
        == [[0], [10, 20], [30]]
    far = [SegmentSpan(0, 10, 1), SegmentSpan(2**31, 2**31 + 5, 1)]
    assert len(group_segments(far, max_segment_bytes=100, max_index_bytes=100)) == 2
    assert group_segments([], max_segment_bytes=1, max_index_bytes=1) == []


# ---------------------------------------------------------------------------------------------
# the property: compaction against a reference model

KEYS = [b"a", b"b", b"c", b"d", b"e", None]

record_st = st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(min_size=0, max_size=4)),
                      st.integers(NOW - 5_000, NOW + 1_000))
batch_st = st.tuples(st.lists(record_st, min_size=1, max_size=5), st.integers(1, 3), st.integers(0, 3),
                     st.one_of(st.none(), st.integers(NOW - 2_000, NOW + 2_000)),
                     st.sampled_from([Compression.NONE, Compression.LZ4]))


def make_log(specs) -> list[RecordBatch]:
    """Batches with increasing offsets: per batch (records, offset gap, gap before, delete horizon, codec)."""
    out, offset = [], 0
    for recs, gap, before, horizon, codec in specs:
        offset += before
        records = [Record(offset + i * gap, ts, k, v) for i, (k, v, ts) in enumerate(recs)]
        out.append(RecordBatch(build_batch(records, base_offset=offset, compression=codec,
                                           delete_horizon_ms=horizon)))
        offset = records[-1].offset + 1
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(batch_st, min_size=1, max_size=12), st.integers(0, 3_000), st.integers(1, 3_000),
       st.integers(2, 8), st.integers(0, 10))
def test_compaction_matches_the_reference_model(specs, lag_ms, retention_ms, max_entries, first_dirty_batch):
    log = make_log(specs)
    p = params(min_compaction_lag_ms=lag_ms, delete_retention_ms=retention_ms)
    start = log[min(first_dirty_batch, len(log) - 1)].base_offset
    end = log[-1].last_offset + 1
    try:
        mapped = build_offset_map(log, start_offset=start, end_offset=end, max_entries=max_entries)
    except OffsetMapTooSmallError:
        return
    m, map_end = mapped.offset_map, mapped.map_end_offset
    stats = CompactionStats()
    outs = list(compact_batches(log, m, map_end, p, stats=stats))

    # Reference: latest offset per key over the mapped batches.
    latest: dict[bytes, int] = {}
    for b in log:
        if b.base_offset >= start and b.last_offset < map_end:
            for r in b.records():
                if r.key is not None:
                    latest[r.key] = r.offset
    expected = []
    for b in log:
        for r in b.records():
            young = lag_ms > 0 and r.timestamp > NOW - lag_ms
            keep = b.base_offset >= map_end or young or (
                r.key is not None and r.offset >= latest.get(r.key, -1)
                and not (r.value is None and b.delete_horizon_ms is not None and NOW >= b.delete_horizon_ms))
            if keep:
                expected.append((r.offset, r.key, r.value, r.timestamp, r.headers))
    got = []
    for b, o in zip(log, outs):
        if o.data is None:
            continue
        out = RecordBatch(o.data)
        out.ensure_valid()
        # The batch keeps its offset range and producer fields.
        assert (out.base_offset, out.last_offset) == (b.base_offset, b.last_offset)
        assert (out.producer_id, out.base_sequence) == (b.producer_id, b.base_sequence)
        recs = out.records()
        if any(r.value is None for r in recs) and b.base_offset < map_end:
            assert out.has_delete_horizon  # a kept tombstone always carries its horizon after a clean
        got += [(r.offset, r.key, r.value, r.timestamp, r.headers) for r in recs]
    assert got == expected

    offsets = [g[0] for g in got]
    assert offsets == sorted(set(offsets))  # strictly increasing
    # The latest record of every mapped key survives with its original offset, unless it is an
    # expired tombstone.
    by_offset = {g[0]: g for g in got}
    for b in log:
        for r in b.records():
            if r.key is not None and latest.get(r.key) == r.offset:
                expired = r.value is None and b.delete_horizon_ms is not None and NOW >= b.delete_horizon_ms
                if not expired:
                    assert by_offset[r.offset][1:3] == (r.key, r.value)
            if lag_ms > 0 and r.timestamp > NOW - lag_ms:
                assert by_offset[r.offset] == (r.offset, r.key, r.value, r.timestamp, r.headers)
    assert stats.records_kept == len(got)

    # Cleaning the output again with the same clock changes nothing more.
    cleaned = [RecordBatch(o.data) for o in outs if o.data is not None]
    again = list(compact_batches(cleaned, m, map_end, p))
    assert records_of(again) == [(g[0], g[1], g[2]) for g in got]


# ---------------------------------------------------------------------------------------------
# compaction/vectorized.py (decided over decoded columns) against the reference, byte for byte

from lakelog.compaction import vectorized  # noqa: E402

vbatch_st = st.tuples(st.lists(record_st, min_size=1, max_size=5), st.integers(1, 3), st.integers(0, 3),
                      st.one_of(st.none(), st.integers(NOW - 2_000, NOW + 2_000)),
                      st.sampled_from(list(Compression)), st.sampled_from(["create", "append", "control", "headers"]))


def make_varied_log(specs) -> list[RecordBatch]:
    out, offset = [], 0
    for recs, gap, before, horizon, codec, kind in specs:
        offset += before
        headers = (("h", b"x"), ("n", None)) if kind == "headers" else ()
        records = [Record(offset + i * gap, ts, k, v, headers) for i, (k, v, ts) in enumerate(recs)]
        out.append(RecordBatch(build_batch(
            records, base_offset=offset, compression=codec, delete_horizon_ms=horizon if kind != "append" else None,
            timestamp_type=TimestampType.LOG_APPEND_TIME if kind == "append" else TimestampType.CREATE_TIME,
            log_append_time=NOW - 100 if kind == "append" else None, is_control=kind == "control",
            producer_id=7 if kind == "control" else -1)))
        offset = records[-1].offset + 1
    return out


def test_vectorized_decoder_is_available():
    assert vectorized.available()


@settings(max_examples=120, deadline=None)
@given(st.lists(vbatch_st, min_size=1, max_size=12), st.integers(0, 3_000), st.integers(1, 3_000),
       st.integers(0, 10), st.booleans())
def test_vectorized_compaction_equals_the_reference_byte_for_byte(specs, lag_ms, retention_ms, first_dirty_batch,
                                                                 small_chunks):
    log = make_varied_log(specs)
    p = params(min_compaction_lag_ms=lag_ms, delete_retention_ms=retention_ms)
    start = log[min(first_dirty_batch, len(log) - 1)].base_offset
    end = log[-1].last_offset + 1 if first_dirty_batch % 3 else max(start, log[len(log) // 2].last_offset + 1)
    reference = build_offset_map(log, start_offset=start, end_offset=end, max_entries=100)
    saved = vectorized.CHUNK_ROWS
    vectorized.CHUNK_ROWS = 3 if small_chunks else saved
    try:
        native = vectorized.build_offset_map(iter(log), start_offset=start, end_offset=end, max_entries=100,
                                             max_uncompressed_bytes=1 << 20)
        assert native is not None
        mapped, arrow_map = native
        assert (mapped.map_end_offset, mapped.batches_mapped, mapped.records_mapped) == \
            (reference.map_end_offset, reference.batches_mapped, reference.records_mapped)
        assert dict(zip(arrow_map.keys.to_pylist(), arrow_map.offsets.to_pylist())) == dict(reference.offset_map.items())
        ref_stats, vec_stats = CompactionStats(), CompactionStats()
        expected = list(compact_batches(log, reference.offset_map, reference.map_end_offset, p, stats=ref_stats))
        got = list(vectorized.compact_batches(iter(log), arrow_map, mapped.map_end_offset, p, stats=vec_stats))
    finally:
        vectorized.CHUNK_ROWS = saved
    assert got == expected
    assert vec_stats == ref_stats


def test_vectorized_offset_map_gives_way_when_the_keys_do_not_fit():
    log = make_log([([(b"a", b"1", NOW), (b"b", b"2", NOW), (b"c", b"3", NOW)], 1, 0, None, Compression.NONE)])
    assert vectorized.build_offset_map(iter(log), start_offset=0, end_offset=10, max_entries=2,
                                       max_uncompressed_bytes=1 << 20) is None
