"""The JSON / binary produce path as columns: batches built from columns (logstore/batch_columns.py,
`_batchbuild.encode_columns`) equal logstore's reference build_batch, native and Python alike; the v2
body parser keeps every record's key, value, partition and headers; the offsets answer is what a
dict per record through a JSON encoder gave."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.infra.errors import LakelogError
from lakelog.ingest_api.records.formats import BINARY_V2, JSON_V2, parse_produce_request
from lakelog.ingest_api.records.produce_columns import ProduceColumns, ProduceResult, ProduceResults
from lakelog.logstore import batch_columns
from lakelog.logstore.compression import Compression
from lakelog.logstore.record_batch import Record, build_batch, iter_batches

headers = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=16)), max_size=3)
rows = st.lists(st.tuples(st.integers(0, 2**41), st.none() | st.binary(max_size=300),
                          st.none() | st.binary(max_size=2000), headers), min_size=1, max_size=30)


def test_the_native_encoder_is_built():
    assert batch_columns.NATIVE


@settings(max_examples=200, deadline=None)
@given(recs=rows, codec=st.sampled_from([Compression.NONE, Compression.LZ4, Compression.ZSTD, Compression.SNAPPY]),
       pid=st.integers(-1, 2**40), seq=st.integers(-1, 2**31 - 1), one_ts=st.booleans(), no_keys=st.booleans(),
       no_headers=st.booleans())
def test_columns_give_the_bytes_of_build_batch(recs, codec, pid, seq, one_ts, no_keys, no_headers):
    if one_ts:
        recs = [(recs[0][0], k, v, h) for _, k, v, h in recs]
    if no_keys:
        recs = [(ts, None, v, h) for ts, _, v, h in recs]
    if no_headers:
        recs = [(ts, k, v, []) for ts, k, v, _ in recs]
    epoch = -1 if pid < 0 else 3
    kw = dict(producer_id=pid, producer_epoch=epoch, base_sequence=seq, compression=codec)
    cols = dict(timestamps=recs[0][0] if one_ts else [r[0] for r in recs],
                keys=None if no_keys else [r[1] for r in recs], headers=None if no_headers else [r[3] for r in recs])
    values = [r[2] for r in recs]
    ref = build_batch([Record(i, ts, k, v, tuple(h)) for i, (ts, k, v, h) in enumerate(recs)], base_offset=0, **kw)
    assert batch_columns.build_batch_columns(values, **cols, **kw, native=True) == ref
    assert batch_columns.build_batch_columns(values, **cols, **kw, native=False) == ref


def test_the_native_column_encoder_refuses_bad_input():
    from lakelog.logstore import _batchbuild

    with pytest.raises(TypeError):
        _batchbuild.encode_columns(0, 0, None, ["not bytes"], None)
    with pytest.raises(ValueError):
        _batchbuild.encode_columns(0, [0, 1], None, [b"a"], None)  # a timestamp column of another length
    with pytest.raises(ValueError):
        _batchbuild.encode_columns(0, 0, [b"k"], [b"a", b"b"], None)
    with pytest.raises(TypeError):
        _batchbuild.encode_columns(0, 0, None, [b"a"], [[(1, b"")]])
    with pytest.raises(LakelogError):
        batch_columns.build_batch_columns([], timestamps=0)


def _records(cols: ProduceColumns) -> list[tuple]:
    n = len(cols)
    return list(zip(cols.keys or [None] * n, cols.values, cols.partitions or [None] * n, cols.headers or [()] * n))


def test_json_records_become_columns_in_request_order():
    body = json.dumps({"records": [
        {"key": "k1", "value": {"a": [1, 2.5, None, True], "é": "ü"}},
        {"value": "x" * 1000, "partition": 2},
        {"key": 7, "value": None, "headers": [{"key": "h", "value": base64.b64encode(b"\x00\x01").decode()},
                                              {"name": "n", "value": None}]},
        {"value": 123456789012345678901234567890},  # beyond 64 bits: the standard library's way
    ]}, ensure_ascii=False).encode()
    cols, producer = parse_produce_request(body, JSON_V2, 10)
    assert producer is None
    got = _records(cols)
    assert [json.loads(v) if v is not None else None for _, v, _, _ in got] == [
        {"a": [1, 2.5, None, True], "é": "ü"}, "x" * 1000, None, 123456789012345678901234567890]
    assert got[0][1] == '{"a":[1,2.5,null,true],"é":"ü"}'.encode()  # compact UTF-8, as before
    assert [k for k, _, _, _ in got] == [b'"k1"', None, b"7", None]
    assert [p for _, _, p, _ in got] == [None, 2, None, None]
    assert got[2][3] == (("h", b"\x00\x01"), ("n", None))
    assert cols.payload_bytes() == sum(len(v or b"") + len(k or b"") for k, v, _, _ in got)


def test_columns_that_are_the_same_for_every_record_cost_nothing():
    cols, _ = parse_produce_request(b'{"records": [{"value": 1}, {"value": 2}]}', JSON_V2, 10)
    assert cols.keys is None and cols.partitions is None and cols.headers is None


def test_binary_records_become_columns():
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    body = json.dumps({"records": [{"key": b64(b"\xff"), "value": b64(b"v" * 300)}, {"value": None}],
                       "producer_id": 4, "producer_epoch": 0, "sequence": 9}).encode()
    cols, producer = parse_produce_request(body, BINARY_V2, 10)
    assert _records(cols) == [(b"\xff", b"v" * 300, None, ()), (None, None, None, ())]
    assert (producer.producer_id, producer.producer_epoch, producer.sequence) == (4, 0, 9)


@pytest.mark.parametrize("body, fmt", [
    (b'{"records": [{"value": NaN}]}', JSON_V2),
    (b'{"records": [{"value": 1}, 5]}', JSON_V2),
    (b'{"records": [{"value": 1, "partition": -1}]}', JSON_V2),
    (b'{"records": [{"value": 1, "partition": true}]}', JSON_V2),
    (b'{"records": [{"value": 1, "headers": {"a": 1}}]}', JSON_V2),
    (b'{"records": [{"value": 1, "headers": [{"value": "AA=="}]}]}', JSON_V2),
    (b'{"records": [{"value": "not base64!"}]}', BINARY_V2),
    (b'{"records": []}', JSON_V2),
    (b'\xff\xfe', JSON_V2),
])
def test_bad_bodies_are_invalid_requests(body, fmt):
    with pytest.raises(LakelogError) as e:
        parse_produce_request(body, fmt, 10)
    assert e.value.kind.name == "INVALID_REQUEST"


def test_too_many_records_are_refused():
    with pytest.raises(LakelogError) as e:
        parse_produce_request(b'{"records": [{"value": 1}, {"value": 2}]}', JSON_V2, 1)
    assert "max.records.per.request" in str(e.value)


def test_a_request_in_another_utf_encoding_is_still_read():
    # orjson reads UTF-8 only; the standard library detects UTF-16 / 32, as the node did before.
    cols, _ = parse_produce_request(json.dumps({"records": [{"value": "ü"}]}).encode("utf-16"), JSON_V2, 10)
    assert cols.values == ['"ü"'.encode()]


def _reference(results: list[tuple[int, int]], acks_none: bool) -> list[dict]:
    return [{"partition": p, "offset": -1 if acks_none else o, "error_code": None, "error": None} for p, o in results]


@pytest.mark.parametrize("acks_none", [False, True])
def test_offsets_json_is_one_dict_per_record(acks_none):
    one = ProduceResults(3, range(100, 105))
    assert json.loads(one.offsets_json(acks_none)) == _reference([(3, o) for o in range(100, 105)], acks_none)
    assert list(one) == [ProduceResult(3, o) for o in range(100, 105)] and one[-1] == (3, 104) and len(one) == 5
    mixed = ProduceResults([0, 2, 0], [7, 1, 8])
    assert json.loads(mixed.offsets_json(acks_none)) == _reference([(0, 7), (2, 1), (0, 8)], acks_none)
    assert [(r.partition, r.offset) for r in mixed] == [(0, 7), (2, 1), (0, 8)]
    assert json.loads(ProduceResults(1, (5,)).offsets_json(acks_none)) == _reference([(1, 5)], acks_none)


def test_integers_beyond_64_bits_keep_every_digit():
    # orjson reads them as floats: the parser notices and reads the body again exactly.
    big = 2**64 + 1
    for body in (f'{{"records": [{{"value": {big}}}]}}', f'{{"records": [{{"key": {{"id": -{big}}}, "value": [1.5]}}]}}'):
        cols, _ = parse_produce_request(body.encode(), JSON_V2, 10)
        assert str(big).encode() in (cols.values[0] + (cols.keys or [b""])[0])
    with pytest.raises(LakelogError):
        parse_produce_request(b'{"records": [{"value": 1e400}]}', JSON_V2, 10)


@settings(max_examples=300, deadline=None)
@given(key=st.binary(max_size=64), partitions=st.integers(1, 10_000))
def test_native_murmur2_is_kafkas(key, partitions):
    from kafka.partitioner.default import murmur2 as kafka_murmur2

    from lakelog.ingest_api.records import partitioner

    assert partitioner.partition_for_key is not partitioner.partition_for_key_python  # the C one is in use
    assert partitioner.murmur2(key) == partitioner.murmur2_python(key)
    assert partitioner.partition_for_key(key, partitions) == partitioner.partition_for_key_python(key, partitions) \
        == (kafka_murmur2(key) & 0x7FFFFFFF) % partitions
