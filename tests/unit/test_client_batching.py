"""The producer's batch builder: the native record encoder (logstore/_batchbuild.c) and the pure-Python
path give the same bytes, equal to logstore's build_batch, and an independent decoder reads them."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.client import batching
from lakelog.logstore.compression import Compression
from lakelog.logstore.record_batch import Record, build_batch, iter_batches

headers = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=16)), max_size=3)
records = st.lists(st.tuples(st.integers(0, 2**41), st.none() | st.binary(max_size=300),
                             st.none() | st.binary(max_size=2000), headers), min_size=1, max_size=30)


def test_the_native_encoder_is_built():
    # CI builds the extension (pip install -e .); the fallback is for machines without a compiler.
    assert batching.NATIVE


@settings(max_examples=200, deadline=None)
@given(recs=records, codec=st.sampled_from(list(Compression)), pid=st.integers(-1, 2**40),
       seq=st.integers(-1, 2**31 - 1))
def test_native_and_python_give_identical_bytes_equal_to_build_batch(recs, codec, pid, seq):
    epoch = -1 if pid < 0 else 3
    base_ts = recs[0][0]
    native = batching.encode_records(base_ts, recs, native=True)
    python = batching.encode_records(base_ts, recs, native=False)
    assert native == python
    kw = dict(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
    if codec in (Compression.NONE, Compression.LZ4, Compression.ZSTD, Compression.SNAPPY):  # deterministic codecs
        a = batching.build_producer_batch(recs, compression=codec, native=True, **kw)
        b = batching.build_producer_batch(recs, compression=codec, native=False, **kw)
        assert a == b
        ref = build_batch([Record(i, ts, k, v, tuple(h)) for i, (ts, k, v, h) in enumerate(recs)], base_offset=0,
                          compression=codec, **kw)
        assert a == ref
    built = batching.build_producer_batch(recs, compression=codec, native=True, **kw)
    (_, batch), = list(iter_batches(built))
    assert batch.producer_id == pid and batch.base_sequence == seq
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch.records()] == [
        (i, ts, k, v, [(n, hv) for n, hv in h]) for i, (ts, k, v, h) in enumerate(recs)]


def test_kafka_python_reads_a_producer_batch():
    from kafka.record.default_records import DefaultRecordBatch

    recs = [(1_700_000_000_000 + i, f"k{i}".encode(), b"v" * i, [("h", b"x")]) for i in range(5)]
    data = batching.build_producer_batch(recs, producer_id=7, producer_epoch=0, base_sequence=10)
    batch = DefaultRecordBatch(bytearray(data))
    assert batch.validate_crc()
    got = [(r.offset, r.timestamp, r.key, r.value) for r in batch]
    assert got == [(i, ts, k, v) for i, (ts, k, v, _) in enumerate(recs)]


def test_the_native_encoder_refuses_bad_input():
    from lakelog.logstore import _batchbuild

    with pytest.raises(TypeError):
        _batchbuild.encode_records(0, [(0, "not bytes", None, ())])
    with pytest.raises(TypeError):
        _batchbuild.encode_records(0, [(0, None, None)])
    with pytest.raises(TypeError):
        _batchbuild.encode_records(0, [(0, None, None, [(1, b"")])])
