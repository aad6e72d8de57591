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


# ---------------------------------------------------------------------------------------------
# The native Arrow decoder (_arrowscan.c) against the pure-Python reference, over a remote segment

import pyarrow as pa  # noqa: E402

from lakelog.logstore import record_arrow  # noqa: E402
from lakelog.logstore.compression import Compression  # noqa: E402
from lakelog.tiering import remote_scan  # noqa: E402
from lakelog.tiering.errors import RemoteCorruptionError  # noqa: E402
from lakelog.tiering.fs_store import FileSystemStore  # noqa: E402
from lakelog.logstore.segment import LOG_SUFFIX
from lakelog.tiering.layout import segment_key
from lakelog.tiering.manifest_model import RemoteSegment, SegmentState  # noqa: E402


def test_arrow_decoder_is_built():
    assert record_arrow.native_available()


def varied_log() -> tuple[bytes, list[int]]:
    """Batches of every codec with null keys and values, headers (one key not ASCII), gaps in the
    offsets (a compacted batch), a control batch, a transactional one, a LogAppendTime one;
    returns the bytes and the position of every batch."""
    out, positions = bytearray(), []
    offset = 100

    def add(batch: bytes) -> None:
        positions.append(len(out))
        out.extend(batch)

    for codec in Compression:
        recs = [rb.Record(offset + 2 * i, 1_700_000_000_000 + 7 * i,
                          None if i % 5 == 0 else b"key-%d" % (i % 3),
                          None if i % 4 == 1 else bytes([i]) * (i * 3),
                          (("trace", b"t%d" % i), ("bad\xff".encode("latin-1").decode("latin-1"), None))
                          if i % 3 == 0 else ()) for i in range(12)]
        add(rb.build_batch(recs, compression=codec, partition_leader_epoch=int(codec), producer_id=40 + int(codec),
                           producer_epoch=1, base_sequence=0, last_offset_delta=2 * 11 + 1))
        offset += 24
    add(rb.build_batch([rb.Record(offset, 1_700_000_001_000, b"\x00\x00\x00\x00\x00\x01", None)],
                       is_control=True, is_transactional=True, producer_id=9, producer_epoch=0))
    offset += 1
    add(rb.build_batch([rb.Record(offset + i, 1_700_000_002_000, b"tx", b"in a transaction") for i in range(3)],
                       is_transactional=True, producer_id=9, producer_epoch=0, base_sequence=0,
                       compression=Compression.LZ4))
    offset += 3
    add(rb.build_batch([rb.Record(offset + i, 5, b"lat", b"x" * 300) for i in range(4)],
                       timestamp_type=rb.TimestampType.LOG_APPEND_TIME, log_append_time=1_700_000_003_000))
    return bytes(out), positions


def _segment(store, data: bytes, base: int = 100, size: int | None = None, end: int = 227) -> RemoteSegment:
    store.put(segment_key("t", 0, base, "seg", LOG_SUFFIX), data)
    return RemoteSegment("seg", base, end, 1_700_000_009_000, len(data) if size is None else size, (),
                         SegmentState.COPY_FINISHED, 0)


def scan(store, seg, native: bool, **kw):
    """(table, None) or (None, (error type, position))."""
    try:
        batches = [pa.RecordBatch.from_pydict(cols)
                   for _, cols in remote_scan.iter_segment_arrow(store, "t", 0, seg, native=native, **kw)]
    except RemoteCorruptionError as e:
        return None, (type(e), e.key, e.position)
    cols = kw.get("columns") or record_arrow.COLUMNS
    schema = pa.schema([(c, record_arrow.TYPES[c]) for c in cols])
    return pa.Table.from_batches(batches, schema=schema).combine_chunks(), None


@pytest.fixture
def store(tmp_path):
    return FileSystemStore(tmp_path / "remote")


def test_native_and_reference_rows_are_identical(store):
    data, _ = varied_log()
    last = [b for _, b in rb.iter_batches(data)][-1]
    assert last.last_offset == 227  # what _segment's manifest entry says
    seg = _segment(store, data)
    native, _ = scan(store, seg, True)
    reference, _ = scan(store, seg, False)
    assert native.num_rows == 5 * 12 + 3 + 4  # the control batch is not a row
    assert native.equals(reference)
    rows = native.to_pylist()
    assert rows[0]["key"] is None and rows[1]["value"] is None
    assert rows[0]["headers"] == [{"key": "trace", "value": b"t0"}, {"key": "bad\xff", "value": None}]
    assert [r["leader_epoch"] for r in rows[::12][:5]] == [0, 1, 2, 3, 4]
    lat = rows[-4:]
    assert {r["timestamp_type"] for r in lat} == {1}
    assert {r["timestamp"].timestamp() for r in lat} == {1_700_000_003.0}


@pytest.mark.parametrize("kw", [
    dict(columns=["offset"]), dict(columns=["value", "offset"]), dict(columns=["headers", "key"]),
    dict(from_offset=111, to_offset=170), dict(from_offset=150),
    dict(min_timestamp=1_700_000_000_021, max_timestamp=1_700_000_001_500),
    dict(chunk_bytes=97, max_rows=5), dict(max_rows=1, max_bytes=1), dict(to_offset=99)])
def test_native_and_reference_agree_on_every_column_set_and_bound(store, kw):
    data, _ = varied_log()
    seg = _segment(store, data)
    native, nerr = scan(store, seg, True, **kw)
    reference, rerr = scan(store, seg, False, **{k: v for k, v in kw.items() if k != "max_bytes"})
    assert nerr is None and rerr is None
    assert native.equals(reference)
    assert native.num_rows == reference.num_rows


def test_invalid_utf8_header_key_is_replaced_as_python_does(store):
    rec = rb.encode_record(0, 0, b"k", b"v", ())[1:-1]  # body without length and header count
    body = rec + rb.encode_varint(1) + rb.encode_varint(4) + b"a\xff\xe2b" + rb.encode_varint(-1)
    records = rb.encode_varint(len(body)) + body
    batch = bytearray(rb.build_batch([rb.Record(0, 1, b"k", b"v")]))
    batch = batch[:rb.HEADER_SIZE] + records
    struct_len = len(batch) - rb.LOG_OVERHEAD
    batch[8:12] = struct_len.to_bytes(4, "big")
    batch[rb.CRC_OFFSET:rb.CRC_OFFSET + 4] = rb.crc32c(bytes(batch[rb.ATTRIBUTES_OFFSET:])).to_bytes(4, "big")
    seg = _segment(store, bytes(batch), base=0, end=0)
    native, _ = scan(store, seg, True)
    reference, _ = scan(store, seg, False)
    assert native.equals(reference)
    assert native.column("headers").to_pylist() == [[{"key": "a\ufffd\ufffdb", "value": None}]]


def _outcome_matches(store, data: bytes, **kw):
    seg = _segment(store, data, **kw)
    native, nerr = scan(store, seg, True, chunk_bytes=211)
    reference, rerr = scan(store, seg, False, chunk_bytes=211)
    assert nerr == rerr
    if nerr is None:
        assert native.equals(reference)
    return native, nerr


def test_every_flipped_byte_fails_both_paths_alike(store):
    """A flip inside what the CRC covers (or in the magic, length or CRC fields) fails both paths
    with RemoteCorruptionError at the same batch; a flip in the base offset or leader epoch (outside
    the CRC, as in Kafka) changes those columns alike in both. Never a silent difference."""
    data, positions = varied_log()
    pristine, _ = scan(store, _segment(store, data), False)
    starts = set(positions)
    for i in range(len(data)):
        flipped = bytearray(data)
        flipped[i] ^= 0x5A
        table, err = _outcome_matches(store, bytes(flipped))
        batch_start = max(p for p in positions if p <= i)
        rel = i - batch_start
        if not rb.PARTITION_LEADER_EPOCH_OFFSET <= rel < rb.PARTITION_LEADER_EPOCH_OFFSET + 4:
            assert err is not None, f"flip at {i} (batch at {batch_start}, byte {rel}) went unnoticed"
            assert err[0] is RemoteCorruptionError and err[1].endswith(".log")
            if rel >= rb.MAGIC_OFFSET or rel < rb.LENGTH_OFFSET:
                assert err[2] in (batch_start, max([p for p in positions if p < batch_start], default=0))
        else:  # the leader epoch: outside the CRC (as in Kafka), the same rows with another epoch
            assert err is None and table.num_rows == pristine.num_rows
            assert table.drop(["leader_epoch"]).equals(pristine.drop(["leader_epoch"]))
    assert starts


@settings(max_examples=150, deadline=None)
@given(records_st, st.sampled_from(list(Compression)), st.data())
def test_record_damage_behind_a_valid_crc_fails_both_paths_alike(recs, codec, data):
    """A batch whose records are damaged but whose CRC was recomputed (a buggy writer): the record
    checks themselves must fail both paths alike, never return rows."""
    import tempfile

    body = b"".join(rb.encode_record(2 * i, ts, k, v, h) for i, (k, v, h, ts) in enumerate(recs))
    i = data.draw(st.integers(0, len(body) - 1))
    body = body[:i] + bytes([body[i] ^ data.draw(st.integers(1, 255))]) + body[i + 1:]
    payload = rb.compress(codec, body)
    header = bytearray(rb.HEADER.pack(0, rb.HEADER_SIZE - rb.LOG_OVERHEAD + len(payload), 0, 2, 0, int(codec),
                                      2 * (len(recs) - 1), 1_700_000_000_000, 1_700_000_000_000, -1, -1, -1, len(recs)))
    batch = bytearray(header + payload)
    batch[rb.CRC_OFFSET:rb.CRC_OFFSET + 4] = rb.crc32c(bytes(batch[rb.ATTRIBUTES_OFFSET:])).to_bytes(4, "big")
    with tempfile.TemporaryDirectory() as d:
        _outcome_matches(FileSystemStore(d), bytes(batch), base=0, end=2 * (len(recs) - 1))


def test_truncated_objects_fail_both_paths_alike(store):
    data, positions = varied_log()
    for cut in list(range(0, len(data), 37)) + [p + d for p in positions for d in (0, 5, 12, 60, 61)]:
        if cut >= len(data):
            continue
        # The manifest agrees with the cut object: the torn tail is found by framing.
        table, err = _outcome_matches(store, data[:cut], size=cut)
        if cut in positions or cut == 0:
            assert err is None
        else:
            assert err is not None and err[2] == max(p for p in positions if p <= cut)
        # The manifest says more than the object holds.
        _, err = _outcome_matches(store, data[:cut], size=len(data))
        assert err is not None and err[0] is RemoteCorruptionError


def test_native_crc_matches_the_library():
    from lakelog.logstore import _arrowscan

    for n in (0, 1, 7, 8, 9, 63, 64, 1000):
        blob = bytes((i * 31 + n) & 0xFF for i in range(n))
        assert _arrowscan.crc32c(blob) == rb.crc32c(blob)
