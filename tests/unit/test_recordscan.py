"""The C record walker and the pure-Python reference agree on every input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.logstore import record_batch as rb
from lakelog.logstore.errors import InvalidRecordError, RecordKeyRequiredError


def python_verdict(data: bytes, count: int, lod: int, consecutive: bool, require_keys: bool):
    try:
        rb._walk_records(data, count, lod, consecutive=consecutive, require_keys=require_keys, sink=None,
                         base_offset=0, base_timestamp=0)
    except RecordKeyRequiredError:
        return 2
    except InvalidRecordError:
        return 1
    return None


def c_verdict(data: bytes, count: int, lod: int, consecutive: bool, require_keys: bool):
    failure = rb._recordscan.walk(data, count, lod, consecutive, require_keys)
    return None if failure is None else failure[0]


def test_c_walker_is_built():
    # The Makefile builds it with the project; without it appends are several times slower.
    assert rb._recordscan is not None


records_st = st.lists(
    st.tuples(st.one_of(st.none(), st.binary(max_size=20)), st.one_of(st.none(), st.binary(max_size=40)),
              st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=3),
              st.integers(-2**40, 2**40)),
    min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(records_st, st.booleans(), st.booleans(), st.data())
def test_walkers_agree_on_valid_and_mutated_records(recs, consecutive, require_keys, data):
    body = b"".join(rb.encode_record(i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(recs))
    count = len(recs)
    lod = count - 1
    assert python_verdict(body, count, lod, consecutive, require_keys) == \
        c_verdict(body, count, lod, consecutive, require_keys)
    # Damage the bytes: flip one byte, cut the tail, or lie about the count.
    mutation = data.draw(st.sampled_from(["flip", "cut", "count", "lod"]))
    if mutation == "flip" and body:
        i = data.draw(st.integers(0, len(body) - 1))
        body = body[:i] + bytes([body[i] ^ data.draw(st.integers(1, 255))]) + body[i + 1:]
    elif mutation == "cut":
        body = body[:data.draw(st.integers(0, len(body)))]
    elif mutation == "count":
        count = data.draw(st.integers(0, count + 2))
    else:
        lod = data.draw(st.integers(-1, count + 2))
    assert python_verdict(body, count, lod, consecutive, require_keys) == \
        c_verdict(body, count, lod, consecutive, require_keys)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(0, 10), st.booleans())
def test_walkers_agree_on_garbage(body, count, consecutive):
    assert python_verdict(body, count, max(count - 1, 0), consecutive, False) == \
        c_verdict(body, count, max(count - 1, 0), consecutive, False)


@pytest.mark.parametrize("walker", ["python", "c"])
def test_both_walkers_accept_a_real_batch(walker, monkeypatch):
    batch = rb.build_batch([rb.Record(i, 1000 + i, b"k", b"v" * i, (("h", None),)) for i in range(50)])
    if walker == "python":
        monkeypatch.setattr(rb, "_recordscan", None)
    summary = rb.validate_batch(rb.RecordBatch(batch), max_message_bytes=1 << 20)
    assert summary.record_count == 50
