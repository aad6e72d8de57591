"""The Kafka door's fetch session cache (KIP-227): the (session id, epoch) table, incremental
answers, forgotten partitions, the bounded cache and its eviction."""

from __future__ import annotations

import random
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from lakelog.ingest_api.kafka.fetch_sessions import MAX_SESSION_PARTITIONS, FetchSessionCache

NONE = ErrorCode.none.value


@dataclass
class FP:
    """A request's FetchPartition (the fields the cache reads)."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int = 1024


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def _cache(slots: int = 4, eviction_ms: int = 1000) -> tuple[FetchSessionCache, Clock]:
    clock = Clock()
    return FetchSessionCache(slots, eviction_ms, clock, random.Random(7)), clock


def _doc(p: int, hw: int, records: bytes = b"", error: int = NONE) -> dict:
    return {"partition_index": p, "error_code": error, "high_watermark": hw, "last_stable_offset": hw,
            "log_start_offset": 0, "records": records}


def test_sessionless_full_fetch_keeps_nothing():
    cache, _ = _cache()
    ctx = cache.open(0, -1, [("t", [FP(0, 5)])], [])
    assert ctx.error_code == NONE and ctx.session_id == 0 and ctx.session is None
    assert [(t, [fp.fetch_offset for fp in ps]) for t, ps in ctx.topics] == [("t", [5])]
    assert len(cache) == 0
    assert ctx.answer([{"topic": "t", "partitions": [_doc(0, 9)]}]) == [{"topic": "t", "partitions": [_doc(0, 9)]}]


def test_a_full_fetch_with_epoch_0_opens_a_session_and_incremental_fetches_answer_only_what_changed():
    cache, _ = _cache()
    full = cache.open(0, 0, [("t", [FP(0, 0), FP(1, 0)])], [])
    sid = full.session_id
    assert sid != 0 and len(cache) == 1
    # The full answer carries every partition and is remembered.
    assert len(full.answer([{"topic": "t", "partitions": [_doc(0, 3), _doc(1, 0)]}])[0]["partitions"]) == 2
    # An incremental request naming nothing fetches the session's partitions at their cached offsets.
    inc = cache.open(sid, 1, [], [])
    assert inc.incremental and inc.session_id == sid
    assert [(t, [(fp.partition, fp.fetch_offset) for fp in ps]) for t, ps in inc.topics] == [("t", [(0, 0), (1, 0)])]
    # Partition 1 has nothing new; partition 0 has records: only 0 is answered.
    out = inc.answer([{"topic": "t", "partitions": [_doc(0, 3, b"x"), _doc(1, 0)]}])
    assert [[p["partition_index"] for p in t["partitions"]] for t in out] == [[0]]
    # The client moved partition 0's offset; the HW of partition 1 moved: both answered, offsets updated.
    inc2 = cache.open(sid, 2, [("t", [FP(0, 3)])], [])
    assert dict((fp.partition, fp.fetch_offset) for fp in inc2.topics[0][1]) == {0: 3, 1: 0}
    out = inc2.answer([{"topic": "t", "partitions": [_doc(0, 3), _doc(1, 4)]}])
    assert [p["partition_index"] for p in out[0]["partitions"]] == [1]
    # Nothing changed at all: the answer has no topics.
    assert cache.open(sid, 3, [], []).answer([{"topic": "t", "partitions": [_doc(0, 3), _doc(1, 4)]}]) == []


def test_errors_are_always_answered():
    cache, _ = _cache()
    sid = cache.open(0, 0, [("t", [FP(0, 0)])], []).session_id
    cache.open(sid, 1, [], []).answer([{"topic": "t", "partitions": [_doc(0, 0, error=6)]}])
    out = cache.open(sid, 2, [], []).answer([{"topic": "t", "partitions": [_doc(0, 0, error=6)]}])
    assert out[0]["partitions"][0]["error_code"] == 6


def test_forgotten_partitions_leave_the_session():
    cache, _ = _cache()
    sid = cache.open(0, 0, [("a", [FP(0, 0), FP(1, 0)]), ("b", [FP(0, 0)])], []).session_id
    inc = cache.open(sid, 1, [("c", [FP(2, 7)])], [("a", 1), ("b", 0)])
    assert [(t, [fp.partition for fp in ps]) for t, ps in inc.topics] == [("a", [0]), ("c", [2])]


def test_an_unknown_session_and_a_wrong_epoch_are_refused():
    cache, _ = _cache()
    assert cache.open(12345, 1, [], []).error_code == ErrorCode.fetch_session_id_not_found.value
    assert cache.open(0, 3, [], []).error_code == ErrorCode.invalid_fetch_session_epoch.value
    sid = cache.open(0, 0, [("t", [FP(0, 0)])], []).session_id
    assert cache.open(sid, 2, [], []).error_code == ErrorCode.invalid_fetch_session_epoch.value
    # A refused epoch does not move the session: the right one still works.
    assert cache.open(sid, 1, [], []).error_code == NONE
    # A lost response: the client repeats epoch 1; it is refused (the node cannot know what it saw).
    assert cache.open(sid, 1, [], []).error_code == ErrorCode.invalid_fetch_session_epoch.value


def test_epoch_minus_one_closes_a_session_and_epoch_0_replaces_it():
    cache, _ = _cache()
    sid = cache.open(0, 0, [("t", [FP(0, 0)])], []).session_id
    closing = cache.open(sid, -1, [("t", [FP(0, 4)])], [])
    assert closing.session_id == 0 and closing.error_code == NONE and len(cache) == 0
    sid = cache.open(0, 0, [("t", [FP(0, 0)])], []).session_id
    again = cache.open(sid, 0, [("u", [FP(0, 0)])], [])
    assert again.session_id not in (0, sid) and len(cache) == 1 and cache.get(sid) is None


def test_a_full_cache_evicts_only_sessions_idle_past_the_eviction_time():
    cache, clock = _cache(slots=2, eviction_ms=1000)
    first = cache.open(0, 0, [("t", [FP(0, 0)])], []).session_id
    clock.now = 10
    second = cache.open(0, 0, [("t", [FP(1, 0)])], []).session_id
    clock.now = 500
    refused = cache.open(0, 0, [("t", [FP(2, 0)])], [])
    assert refused.session_id == 0 and refused.error_code == NONE and len(cache) == 2  # answered sessionless
    assert [fp.partition for fp in refused.topics[0][1]] == [2]
    clock.now = 1005  # `first` has been idle 1005 ms; `second` 995 ms
    third = cache.open(0, 0, [("t", [FP(2, 0)])], []).session_id
    assert third != 0 and cache.get(first) is None and cache.get(second) is not None and cache.evictions == 1
    # A session in use is the most recently used: the next eviction takes `second` only once idle.
    assert cache.open(third, 1, [], []).error_code == NONE


def test_zero_slots_answers_every_fetch_sessionless():
    cache, _ = _cache(slots=0)
    assert cache.open(0, 0, [("t", [FP(0, 0)])], []).session_id == 0 and len(cache) == 0


def test_a_session_holds_a_bounded_number_of_partitions():
    cache, _ = _cache()
    big = [("t", [FP(i, 0) for i in range(MAX_SESSION_PARTITIONS + 1)])]
    assert cache.open(0, 0, big, []).session_id == 0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 1, 2, 3]), st.integers(-1, 4), st.integers(0, 3000)), max_size=60))
def test_random_requests_keep_the_cache_within_its_slots(steps):
    """Arbitrary (which session, epoch, clock step) sequences: the invariants hold (checked inside
    the cache after each change) and a session's epoch is the one the next request must send."""
    cache, clock = _cache(slots=2, eviction_ms=1000)
    known: list[int] = [0]
    for pick, epoch, dt in steps:
        clock.now += dt
        sid = known[pick % len(known)]
        ctx = cache.open(sid, epoch, [("t", [FP(pick, 0)])], [])
        assert len(cache) <= 2
        if ctx.session_id:
            known.append(ctx.session_id)
            assert cache.get(ctx.session_id).epoch == (1 if epoch <= 0 else epoch + 1)
