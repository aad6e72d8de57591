"""Retention planning (pure): which leading segments retention.ms / retention.bytes delete."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.logstore.retention import RetentionReason, SegmentInfo, plan_retention
from lakelog.infra.errors import InvariantViolation

NOW = 1_000_000


def segs(*specs: tuple[int, int]) -> list[SegmentInfo]:
    """(size, retention timestamp) per segment; each holds 10 offsets; the last is the active one."""
    return [SegmentInfo(i * 10, i * 10 + 10, size, ts) for i, (size, ts) in enumerate(specs)]


def plan(segments, *, retention_ms=-1, retention_bytes=-1, high_watermark=None):
    return plan_retention(segments, now_ms=NOW, retention_ms=retention_ms, retention_bytes=retention_bytes,
                          high_watermark=high_watermark)


def test_nothing_configured_deletes_nothing():
    p = plan(segs((100, 0), (100, 0), (100, 0)))
    assert p.is_empty and p.new_log_start_offset is None and p.bytes_deleted == 0


def test_time_deletes_the_leading_expired_run_only():
    s = segs((100, NOW - 500), (100, NOW - 50), (100, NOW - 500), (100, NOW))
    p = plan(s, retention_ms=100)
    # The third segment is expired too, but the second is not: only a leading run goes.
    assert p.base_offsets == (0,)
    assert p.reasons == (RetentionReason.TIME,)
    assert p.new_log_start_offset == 10
    assert p.bytes_deleted == 100


def test_time_boundary_is_strictly_greater():
    s = segs((100, NOW - 100), (100, NOW))
    assert plan(s, retention_ms=100).is_empty
    assert plan(s, retention_ms=99).base_offsets == (0,)


def test_time_never_deletes_the_active_segment():
    s = segs((100, 0), (100, 0), (100, 0))
    p = plan(s, retention_ms=1)
    assert p.base_offsets == (0, 10)
    assert p.new_log_start_offset == 20


def test_size_deletes_while_the_log_stays_at_or_above_the_limit():
    s = segs((100, NOW), (100, NOW), (100, NOW), (50, NOW))  # 350 bytes
    assert plan(s, retention_bytes=250).base_offsets == (0,)  # 350-100 = 250 >= 250
    assert plan(s, retention_bytes=251).is_empty
    assert plan(s, retention_bytes=150).base_offsets == (0, 10)
    p = plan(s, retention_bytes=0)
    assert p.base_offsets == (0, 10, 20)  # never the active one
    assert set(p.reasons) == {RetentionReason.SIZE}


def test_time_and_size_take_the_longer_run():
    s = segs((100, NOW - 500), (100, NOW), (100, NOW), (50, NOW))
    p = plan(s, retention_ms=100, retention_bytes=150)
    assert p.base_offsets == (0, 10)
    assert p.reasons == (RetentionReason.TIME, RetentionReason.SIZE)


def test_high_watermark_bounds_deletion():
    s = segs((100, 0), (100, 0), (100, 0), (100, 0))
    assert plan(s, retention_ms=1, high_watermark=20).base_offsets == (0, 10)
    assert plan(s, retention_ms=1, high_watermark=19).base_offsets == (0,)
    assert plan(s, retention_ms=1, high_watermark=5).is_empty
    assert plan(s, retention_bytes=0, high_watermark=10).base_offsets == (0,)


def test_empty_and_single_segment_logs():
    assert plan([], retention_ms=1).is_empty
    assert plan(segs((100, 0)), retention_ms=1, retention_bytes=0).is_empty


def test_segments_out_of_order_are_refused():
    s = [SegmentInfo(10, 20, 1, 0), SegmentInfo(0, 10, 1, 0)]
    with pytest.raises(InvariantViolation):
        plan(s, retention_ms=1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(NOW - 2000, NOW + 10)), min_size=1, max_size=12),
       st.integers(-1, 1500), st.integers(-1, 5000), st.one_of(st.none(), st.integers(0, 130)))
def test_plan_properties(specs, retention_ms, retention_bytes, hw):
    s = segs(*specs)
    p = plan(s, retention_ms=retention_ms, retention_bytes=retention_bytes, high_watermark=hw)
    n = len(p.base_offsets)
    assert n < len(s)  # the active segment stays
    assert p.base_offsets == tuple(x.base_offset for x in s[:n])  # a leading run
    if hw is not None:
        assert all(x.next_offset <= hw for x in s[:n])
    if n:
        assert p.new_log_start_offset == s[n].base_offset
    for i, reason in enumerate(p.reasons):
        if reason is RetentionReason.TIME:
            assert NOW - s[i].retention_timestamp_ms > retention_ms >= 0
        else:
            assert retention_bytes >= 0 and sum(x.size_in_bytes for x in s[i + 1:]) >= retention_bytes
