"""RecordBatch v2: round-trips, varints, in-place rewrites, and every refusal of a bad batch.

Each refusal is checked twice: `validate_batch` raises exactly the documented error (with the C
record walker and with the pure-Python one), and `PartitionLog.append_as_leader` raises the same
error and appends nothing, also when the bad batch follows a good one in the same request.
"""

from __future__ import annotations

import re
import struct
import zlib
from dataclasses import dataclass, field
from typing import Callable

import crc32c as crc32c_lib
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.infra.config import LogConfig
from lakelog.logstore import record_batch as rb
from lakelog.logstore.compression import Compression
from lakelog.logstore.errors import (
    CorruptBatchError,
    CorruptRecordError,
    InvalidRecordError,
    RecordKeyRequiredError,
    RecordTooLargeError,
    UnsupportedCompressionError,
    UnsupportedMagicError,
)
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import (
    Record,
    RecordBatch,
    TimestampType,
    TruncatedBatchError,
    build_batch,
    decode_varint,
    encode_record,
    encode_varint,
    iter_batches,
    set_log_append_time,
    set_offset_and_epoch,
    validate_batch,
)

# The v2 header, written out here rather than taken from the module under test.
HEADER = struct.Struct(">qiibIhiqqqhii")
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
INT32_MAX = (1 << 31) - 1
BIG = 1 << 30


def raises_exactly(exc: type[Exception], fn: Callable, *args, **kwargs) -> Exception:
    """Like pytest.raises, but a subclass does not count: the error type is part of the contract."""
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    assert type(info.value) is exc, f"raised {type(info.value).__name__}: {info.value}"
    return info.value


def assemble(body: bytes, *, count: int, last_offset_delta: int, attributes: int = 0, magic: int = 2,
             base_offset: int = 0, base_timestamp: int = 1_000, max_timestamp: int = 1_000,
             producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
             leader_epoch: int = -1) -> bytes:
    """A batch around `body` (already compressed if `attributes` say so), with a correct CRC."""
    buf = bytearray(HEADER.pack(base_offset, HEADER.size - 12 + len(body), leader_epoch, magic, 0,
                                attributes, last_offset_delta, base_timestamp, max_timestamp,
                                producer_id, producer_epoch, base_sequence, count) + body)
    return recrc(buf)


def recrc(buf: bytes | bytearray) -> bytes:
    buf = bytearray(buf)
    struct.pack_into(">I", buf, 17, crc32c_lib.crc32c(bytes(buf[21:])))
    return bytes(buf)


def body_of(*records: tuple) -> bytes:
    """Records as (offset delta, key, value[, headers]) at timestamp delta 0."""
    return b"".join(encode_record(r[0], 0, r[1], r[2], r[3] if len(r) > 3 else ()) for r in records)


def keyed(count: int, value: bytes = b"v") -> list[Record]:
    return [Record(i, 1_000 + i, b"key-%d" % i, value) for i in range(count)]


# ---------------------------------------------------------------------------------------------
# varints


# Zig-zag maps 0, -1, 1, -2, ... to 0, 1, 2, 3, ...; then 7 bits a byte, least significant first,
# high bit set on every byte but the last.
VARINT_VECTORS = [
    (0, "00"), (-1, "01"), (1, "02"), (-2, "03"), (63, "7e"), (-64, "7f"), (64, "8001"),
    (-65, "8101"), (300, "d804"), (8191, "fe7f"), (-8192, "ff7f"), (8192, "808001"),
    (INT32_MAX, "feffffff0f"), (-(1 << 31), "ffffffff0f"),
    (INT64_MAX, "feffffffffffffffff01"), (INT64_MIN, "ffffffffffffffffff01"),
]


@pytest.mark.parametrize("value,hexbytes", VARINT_VECTORS)
def test_varint_known_vectors(value, hexbytes):
    assert encode_varint(value).hex() == hexbytes
    assert decode_varint(bytes.fromhex(hexbytes), 0) == (value, len(hexbytes) // 2)


def test_varint_vectors_follow_the_zigzag_definition():
    for value, hexbytes in VARINT_VECTORS:
        zigzag = 2 * value if value >= 0 else -2 * value - 1
        decoded = sum((b & 0x7F) << (7 * i) for i, b in enumerate(bytes.fromhex(hexbytes)))
        assert decoded == zigzag, value


@settings(max_examples=300, deadline=None)
@given(st.integers(INT64_MIN, INT64_MAX), st.binary(max_size=3), st.binary(max_size=3))
def test_varint_round_trips_over_int64(value, before, after):
    enc = encode_varint(value)
    zigzag = 2 * value if value >= 0 else -2 * value - 1
    assert len(enc) == max(1, -(-zigzag.bit_length() // 7)) <= 10
    assert all(b & 0x80 for b in enc[:-1]) and not enc[-1] & 0x80
    buf = before + enc + after
    assert decode_varint(buf, len(before)) == (value, len(before) + len(enc))


def test_varint_decode_refuses_truncated_and_overlong_input():
    with pytest.raises(ValueError):
        decode_varint(b"\x80", 0)
    with pytest.raises(ValueError):
        decode_varint(b"\x80\x01", 0, limit=1)  # the limit cuts it
    with pytest.raises(ValueError):
        decode_varint(b"\xff" * 10 + b"\x01", 0)  # 11 bytes
    with pytest.raises(ValueError):
        decode_varint(b"\xff\xff\xff\xff\xff\x01", 0, max_bytes=5)  # too long for an int32
    assert decode_varint(b"\xff\xff\xff\xff\x0f", 0, max_bytes=5) == (-(1 << 31), 5)


def test_record_layout_known_bytes():
    # length 8 | attributes 0 | ts delta 0 | offset delta 0 | key len 1 'k' | value len 1 'v' | 0 headers
    assert encode_record(0, 0, b"k", b"v").hex() == "10" "00" "00" "00" "026b" "0276" "00"
    # null key and null value are length -1 (varint 01); header key "h", header value null
    assert encode_record(3, -1, None, None, [("h", None)]).hex() == "12" "00" "01" "06" "01" "01" "02" "0268" "01"


def test_batch_fields_sit_at_the_documented_offsets():
    buf = build_batch([Record(5, 1_000, b"k", b"v"), Record(6, 1_007, None, b"w")], base_offset=5,
                      compression=Compression.NONE, producer_id=77, producer_epoch=3, base_sequence=9,
                      partition_leader_epoch=4, is_transactional=True)
    fields = HEADER.unpack_from(buf, 0)
    assert fields == (5, len(buf) - 12, 4, 2, crc32c_lib.crc32c(buf[21:]), 0x10, 1, 1_000, 1_007, 77, 3, 9, 2)
    assert buf[61:] == encode_record(0, 0, b"k", b"v") + encode_record(1, 7, None, b"w")


# ---------------------------------------------------------------------------------------------
# round-trips

header_st = st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=6))
record_st = st.tuples(
    st.none() | st.binary(max_size=24),                      # key
    st.none() | st.binary(max_size=48),                      # value
    st.lists(header_st, max_size=3).map(tuple),              # headers
    st.integers(-(1 << 40), 1 << 45),                        # timestamp
    st.one_of(st.just(1), st.integers(1, 5_000)),            # offset gap to the previous record
)


@dataclass
class BatchSpec:
    records: list[Record]
    kwargs: dict = field(default_factory=dict)

    @property
    def consecutive(self) -> bool:
        deltas = [r.offset - self.records[0].offset for r in self.records]
        return deltas == list(range(len(deltas))) and \
            self.kwargs["last_offset_delta"] == len(deltas) - 1


@st.composite
def batch_specs(draw) -> BatchSpec:
    raw = draw(st.lists(record_st, min_size=1, max_size=12))
    base_offset = draw(st.integers(0, 1 << 62))
    records, delta = [], 0
    for i, (key, value, headers, ts, gap) in enumerate(raw):
        delta = 0 if i == 0 else delta + gap
        records.append(Record(base_offset + delta, ts, key, value, headers))
    log_append = draw(st.booleans())
    kwargs = dict(
        base_offset=base_offset,
        compression=draw(st.sampled_from(list(Compression))),
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
        log_append_time=draw(st.integers(0, 1 << 50)) if log_append else None,
        producer_id=draw(st.one_of(st.just(-1), st.integers(0, INT64_MAX))),
        producer_epoch=draw(st.integers(-1, (1 << 15) - 1)),
        base_sequence=draw(st.integers(-1, INT32_MAX)),
        partition_leader_epoch=draw(st.integers(-1, INT32_MAX)),
        is_transactional=draw(st.booleans()),
        is_control=draw(st.booleans()),
        last_offset_delta=delta + draw(st.one_of(st.just(0), st.integers(0, 1_000))),
        delete_horizon_ms=draw(st.one_of(st.none(), st.integers(0, 1 << 45))),
    )
    return BatchSpec(records, kwargs)


@settings(max_examples=200, deadline=None)
@given(batch_specs())
def test_build_then_decode_round_trips(spec):
    kw = spec.kwargs
    buf = build_batch(spec.records, **kw)
    batch = RecordBatch(buf)
    assert batch.is_valid()
    batch.ensure_valid()
    assert batch.size_in_bytes == len(buf)
    assert batch.magic == 2
    assert batch.base_offset == kw["base_offset"] == spec.records[0].offset
    assert batch.partition_leader_epoch == kw["partition_leader_epoch"]
    assert batch.last_offset_delta == kw["last_offset_delta"]
    assert batch.last_offset == kw["base_offset"] + kw["last_offset_delta"]
    assert batch.record_count == len(spec.records)
    assert batch.compression == kw["compression"]
    assert batch.timestamp_type == kw["timestamp_type"]
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == \
        (kw["producer_id"], kw["producer_epoch"], kw["base_sequence"])
    assert (batch.is_transactional, batch.is_control) == (kw["is_transactional"], kw["is_control"])
    assert batch.delete_horizon_ms == kw["delete_horizon_ms"]
    if kw["delete_horizon_ms"] is None:
        assert batch.base_timestamp == spec.records[0].timestamp
    if kw["timestamp_type"] == TimestampType.LOG_APPEND_TIME:
        assert batch.max_timestamp == kw["log_append_time"]
    else:  # Kafka's rule: the largest record timestamp, never below NO_TIMESTAMP (-1)
        assert batch.max_timestamp == max([-1] + [r.timestamp for r in spec.records])
    # Records come back exactly, with their own (create) timestamps even under LogAppendTime.
    assert batch.records() == spec.records
    assert list(batch) == spec.records
    # A replica's check accepts it; the size limit is inclusive.
    summary = validate_batch(batch, max_message_bytes=len(buf), consecutive_offsets=False,
                             allow_control=True)
    assert (summary.record_count, summary.size_in_bytes, summary.max_timestamp) == \
        (len(spec.records), len(buf), batch.max_timestamp)
    raises_exactly(RecordTooLargeError, validate_batch, batch, max_message_bytes=len(buf) - 1,
                   consecutive_offsets=False, allow_control=True)
    if spec.consecutive:
        validate_batch(batch, max_message_bytes=len(buf), allow_control=True)
    else:
        raises_exactly(InvalidRecordError, validate_batch, batch, max_message_bytes=len(buf),
                       allow_control=True)


@settings(max_examples=30, deadline=None)
@given(st.lists(batch_specs(), min_size=1, max_size=4))
def test_concatenated_batches_split_back(specs):
    bufs = [build_batch(s.records, **s.kwargs) for s in specs]
    joined = b"".join(bufs)
    got = list(iter_batches(joined, base_position=100))
    assert [p for p, _ in got] == [100 + sum(len(b) for b in bufs[:i]) for i in range(len(bufs))]
    assert [bytes(b.buffer) for _, b in got] == bufs
    assert [b.records() for _, b in got] == [s.records for s in specs]


def test_build_batch_refuses_bad_input():
    raises_exactly(InvalidRecordError, build_batch, [])
    raises_exactly(InvalidRecordError, build_batch, [Record(3, 0, None, b"a"), Record(3, 0, None, b"b")])
    raises_exactly(InvalidRecordError, build_batch, [Record(3, 0, None, b"a"), Record(2, 0, None, b"b")])
    raises_exactly(InvalidRecordError, build_batch, keyed(3), last_offset_delta=1)


def test_simple_batch_uses_consecutive_offsets_and_one_timestamp():
    batch = RecordBatch(rb.simple_batch([(b"a", b"1"), (None, None)], timestamp=42, base_offset=7,
                                        compression=Compression.LZ4, headers=[("h", b"x")]))
    assert batch.records() == [Record(7, 42, b"a", b"1", (("h", b"x"),)),
                               Record(8, 42, None, None, (("h", b"x"),))]
    assert batch.compression == Compression.LZ4
    validate_batch(batch, max_message_bytes=BIG)


# ---------------------------------------------------------------------------------------------
# in-place rewrites by the leader


@settings(max_examples=75, deadline=None)
@given(batch_specs(), st.integers(0, INT64_MAX), st.integers(-1, INT32_MAX), st.binary(max_size=40))
def test_set_offset_and_epoch_keeps_the_crc_valid(spec, new_base, new_epoch, before):
    original = build_batch(spec.records, **spec.kwargs)
    buf = bytearray(before + original + b"tail")
    set_offset_and_epoch(buf, len(before), new_base, new_epoch)
    assert buf[:len(before)] == before and buf[-4:] == b"tail"
    stored = bytes(buf[len(before):-4])
    batch = RecordBatch(stored)
    assert (batch.base_offset, batch.partition_leader_epoch) == (new_base, new_epoch)
    assert batch.crc == RecordBatch(original).crc
    assert batch.is_valid()
    # Only the base offset and the leader epoch changed, both outside the CRC.
    assert stored[8:12] == original[8:12] and stored[16:] == original[16:]
    shift = new_base - spec.records[0].offset
    assert batch.records() == [Record(r.offset + shift, r.timestamp, r.key, r.value, r.headers)
                               for r in spec.records]


@settings(max_examples=75, deadline=None)
@given(batch_specs(), st.integers(0, 1 << 50), st.binary(max_size=40))
def test_set_log_append_time_keeps_the_batch_valid(spec, now_ms, before):
    original = build_batch(spec.records, **spec.kwargs)
    buf = bytearray(before + original + b"tail")
    set_log_append_time(buf, len(before), len(original), now_ms)
    assert buf[:len(before)] == before and buf[-4:] == b"tail"
    stored = bytes(buf[len(before):-4])
    batch = RecordBatch(stored)
    assert batch.is_valid()
    assert batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert batch.max_timestamp == now_ms
    assert batch.attributes == RecordBatch(original).attributes | 0x08
    # Nothing else moved: attributes (21-22), max timestamp (35-42) and the CRC (17-20) aside.
    changed = [i for i in range(len(stored)) if stored[i] != original[i]]
    assert all(17 <= i <= 22 or 35 <= i <= 42 for i in changed)
    assert batch.records() == spec.records
    validate_batch(batch, max_message_bytes=len(stored), consecutive_offsets=False, allow_control=True)


def test_flipping_a_byte_outside_the_crc_span_is_not_detected_by_design():
    buf = bytearray(build_batch(keyed(2)))
    buf[3] ^= 0xFF  # base offset
    buf[14] ^= 0xFF  # leader epoch
    assert RecordBatch(bytes(buf)).is_valid()


# ---------------------------------------------------------------------------------------------
# refusals: one table, checked against validate_batch and against the leader append


def _flip(buf: bytes, position: int) -> bytes:
    out = bytearray(buf)
    out[position] ^= 0x5A
    return bytes(out)


def _set(buf: bytes, fmt: str, position: int, value: int, *, fix_crc: bool) -> bytes:
    out = bytearray(buf)
    struct.pack_into(fmt, out, position, value)
    return recrc(out) if fix_crc else bytes(out)


def _good() -> bytes:
    return build_batch(keyed(3, b"value"))


def _garbage(codec: Compression) -> bytes:
    return assemble(b"this is not a compressed payload", count=1, last_offset_delta=0,
                    attributes=int(codec))


def _truncated(codec: Compression) -> bytes:
    full = build_batch(keyed(20, b"compressible " * 40), compression=codec)
    payload = full[61:-3]  # cut inside the last block / the trailer / the end mark
    return assemble(payload, count=20, last_offset_delta=19, attributes=int(codec))


def _bomb(codec: Compression) -> bytes:
    # One record whose value is 200 KB of zeros: tiny once compressed.
    return build_batch([Record(0, 1_000, b"k", bytes(200_000))], compression=codec)


def _too_large() -> bytes:
    return build_batch([Record(0, 1_000, b"k", b"x" * 2_000)])


@dataclass(frozen=True)
class Refusal:
    name: str
    make: Callable[[], bytes]
    error: type[Exception]
    reason: str  # a regex the message of validate_batch's error must match
    validate: dict = field(default_factory=dict)  # extra validate_batch arguments
    config: dict = field(default_factory=dict)  # the topic config under which a leader refuses it


def _two(first_delta: int, second_delta: int) -> bytes:
    return body_of((first_delta, b"a", b"1"), (second_delta, b"b", b"2"))


CODECS = (Compression.GZIP, Compression.SNAPPY, Compression.LZ4, Compression.ZSTD)

REFUSALS = [
    Refusal("crc-records-area", lambda: _flip(_good(), len(_good()) - 2), CorruptBatchError, "CRC"),
    Refusal("crc-producer-id", lambda: _flip(_good(), 45), CorruptBatchError, "CRC"),
    Refusal("crc-attributes", lambda: _flip(_good(), 22), CorruptBatchError, "CRC"),
    Refusal("magic-0", lambda: _set(_good(), ">b", 16, 0, fix_crc=False), UnsupportedMagicError, "magic 0"),
    Refusal("magic-1", lambda: _set(_good(), ">b", 16, 1, fix_crc=True), UnsupportedMagicError, "magic 1"),
    Refusal("magic-3", lambda: _set(_good(), ">b", 16, 3, fix_crc=True), UnsupportedMagicError, "magic 3"),
    Refusal("length-past-the-bytes", lambda: _set(_good(), ">i", 8, len(_good()) - 12 + 10, fix_crc=True),
            CorruptBatchError, "batch length 110 does not match"),
    Refusal("length-below-header", lambda: _set(_good(), ">i", 8, 40, fix_crc=True),
            CorruptBatchError, "batch length 40 does not match"),
    Refusal("offset-deltas-not-consecutive", lambda: assemble(_two(0, 2), count=2, last_offset_delta=1),
            InvalidRecordError, "record 1 has offset delta 2"),
    Refusal("offset-deltas-not-consecutive-lod-agrees",
            lambda: assemble(_two(0, 2), count=2, last_offset_delta=2),
            InvalidRecordError, "last offset delta 2 does not match record count 2"),
    Refusal("offset-deltas-repeat", lambda: assemble(_two(0, 0), count=2, last_offset_delta=1),
            InvalidRecordError, "record 1 has offset delta 0"),
    Refusal("offset-deltas-start-at-1", lambda: assemble(_two(1, 2), count=2, last_offset_delta=1),
            InvalidRecordError, "record 0 has offset delta 1"),
    Refusal("last-offset-delta-too-big",
            lambda: assemble(body_of((0, b"a", b"1"), (1, b"b", b"2"), (2, b"c", b"3")), count=3,
                             last_offset_delta=5), InvalidRecordError, "last offset delta 5 does not match"),
    Refusal("last-offset-delta-too-small",
            lambda: assemble(body_of((0, b"a", b"1"), (1, b"b", b"2"), (2, b"c", b"3")), count=3,
                             last_offset_delta=1), InvalidRecordError, "last offset delta 1 does not match"),
    Refusal("last-offset-delta-negative",
            lambda: assemble(body_of((0, b"a", b"1")), count=1, last_offset_delta=-1),
            InvalidRecordError, "last offset delta -1 is negative"),
    Refusal("zero-records", lambda: assemble(b"", count=0, last_offset_delta=-1),
            InvalidRecordError, "record count 0 must be at least 1"),
    Refusal("negative-record-count", lambda: assemble(b"", count=-3, last_offset_delta=0),
            InvalidRecordError, "record count -3 must be at least 1"),
    Refusal("count-above-records", lambda: assemble(_two(0, 1), count=3, last_offset_delta=2),
            InvalidRecordError, "malformed record: varint runs past"),
    Refusal("count-below-records", lambda: assemble(_two(0, 1), count=1, last_offset_delta=0),
            InvalidRecordError, "bytes follow the last of 1 records"),
    *[Refusal(f"garbage-{c.name.lower()}", lambda c=c: _garbage(c), UnsupportedCompressionError,
              f"cannot decompress {c.name.lower()} payload") for c in CODECS],
    *[Refusal(f"truncated-{c.name.lower()}", lambda c=c: _truncated(c), UnsupportedCompressionError,
              "truncated") for c in CODECS],
    *[Refusal(f"codec-id-{i}", lambda i=i: assemble(body_of((0, b"a", b"1")), count=1, last_offset_delta=0,
                                                     attributes=i),
              UnsupportedCompressionError, f"unknown compression codec id {i}") for i in (5, 6, 7)],
    *[Refusal(f"bomb-{c.name.lower()}", lambda c=c: _bomb(c), RecordTooLargeError,
              "exceed the limit of 100000 bytes", validate={"max_uncompressed_bytes": 100_000},
              config={"max.uncompressed.batch.bytes": 100_000}) for c in CODECS],
    Refusal("over-max-message-bytes", _too_large, RecordTooLargeError, "max.message.bytes=1000",
            validate={"max_message_bytes": 1_000}, config={"max.message.bytes": 1_000}),
    Refusal("control-batch-from-a-client",
            lambda: build_batch([Record(0, 1_000, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00")],
                                producer_id=5, producer_epoch=0, is_transactional=True, is_control=True),
            InvalidRecordError, "control batches"),
    Refusal("missing-key-on-compacted-topic",
            lambda: build_batch([Record(0, 1_000, b"k", b"1"), Record(1, 1_000, None, b"2")]),
            RecordKeyRequiredError, "require a key", validate={"require_keys": True},
            config={"cleanup.policy": "compact"}),
    Refusal("record-length-past-the-batch",
            lambda: assemble(encode_varint(100) + bytes(10), count=1, last_offset_delta=0),
            InvalidRecordError, "record 0 length 100 is impossible"),
    Refusal("second-record-length-past-the-batch",
            lambda: assemble(body_of((0, b"a", b"1")) + encode_varint(30) + bytes(12), count=2,
                             last_offset_delta=1), InvalidRecordError, "record 1 length 30 is impossible"),
    Refusal("record-length-varint-cut", lambda: assemble(b"\x80", count=1, last_offset_delta=0),
            InvalidRecordError, "malformed record: varint runs past"),
    Refusal("record-length-below-minimum",
            lambda: assemble(encode_varint(3) + b"\x00\x00\x00", count=1, last_offset_delta=0),
            InvalidRecordError, "record 0 length 3 is impossible"),
    Refusal("key-length-past-the-record",
            lambda: assemble(_record_with(key_len=50), count=1, last_offset_delta=0),
            InvalidRecordError, "record 0 key length 50 is impossible"),
    Refusal("key-length-below-minus-one",
            lambda: assemble(_record_with(key_len=-2), count=1, last_offset_delta=0),
            InvalidRecordError, "record 0 key length -2 is impossible"),
    Refusal("header-value-past-the-record",
            lambda: assemble(_record_with(header_value_len=9), count=1, last_offset_delta=0),
            InvalidRecordError, "record 0 header value length 9 is impossible"),
    Refusal("record-longer-than-its-fields",
            lambda: assemble(_record_with(padding=2), count=1, last_offset_delta=0),
            InvalidRecordError, "record 0 length 14 does not match its fields"),
]


def _record_with(*, key_len: int = 1, header_value_len: int = 1, padding: int = 0) -> bytes:
    """One record, `k`/`v` with header ('h', 'x'), whose length fields may lie."""
    body = b"\x00" + encode_varint(0) + encode_varint(0)
    body += encode_varint(key_len) + b"k" + encode_varint(1) + b"v"
    body += encode_varint(1) + encode_varint(1) + b"h" + encode_varint(header_value_len) + b"x"
    body += bytes(padding)
    return encode_varint(len(body)) + body


def test_record_with_is_valid_when_it_does_not_lie():
    batch = RecordBatch(assemble(_record_with(), count=1, last_offset_delta=0))
    validate_batch(batch, max_message_bytes=BIG)
    assert batch.records() == [Record(0, 1_000, b"k", b"v", (("h", b"x"),))]


@pytest.fixture(params=["c-walker", "python-walker"])
def walker(request, monkeypatch):
    if request.param == "python-walker":
        monkeypatch.setattr(rb, "_recordscan", None)
    else:
        assert rb._recordscan is not None, "the C record walker is not built"
    return request.param


@pytest.mark.parametrize("case", REFUSALS, ids=lambda c: c.name)
def test_validate_batch_refuses(case, walker):
    data = case.make()
    kwargs = {"max_message_bytes": BIG, **case.validate}
    err = raises_exactly(case.error, validate_batch, RecordBatch(data), **kwargs)
    assert re.search(case.reason, str(err)), str(err)


def test_length_shorter_than_the_buffer_is_refused():
    data = _good() + b"\x00"  # one byte more than the length field claims
    raises_exactly(CorruptBatchError, validate_batch, RecordBatch(data), max_message_bytes=BIG)


def test_every_refusal_starts_from_a_valid_batch():
    # The table's damage is what is refused: the same batches undamaged are accepted.
    validate_batch(RecordBatch(_good()), max_message_bytes=BIG, require_keys=True)
    for codec in CODECS:
        full = build_batch(keyed(20, b"compressible " * 40), compression=codec)
        validate_batch(RecordBatch(assemble(full[61:], count=20, last_offset_delta=19,
                                            attributes=int(codec))), max_message_bytes=BIG)
        validate_batch(RecordBatch(_bomb(codec)), max_message_bytes=BIG, max_uncompressed_bytes=200_100)
    validate_batch(RecordBatch(_too_large()), max_message_bytes=len(_too_large()))


def test_a_short_buffer_is_not_a_batch():
    raises_exactly(CorruptRecordError, RecordBatch, _good()[:60])


def test_ensure_valid_names_the_file_and_position():
    bad = RecordBatch(_flip(_good(), 70))
    assert not bad.is_valid()
    err = raises_exactly(CorruptRecordError, bad.ensure_valid, file="00000000000000000000.log", position=4096)
    assert "00000000000000000000.log" in str(err) and "4096" in str(err)
    assert (err.file, err.position, err.offset) == ("00000000000000000000.log", 4096, 0)


def test_iter_batches_refuses_a_torn_tail_and_an_impossible_length():
    good = _good()
    with pytest.raises(TruncatedBatchError):
        list(iter_batches(good + good[:30]))
    with pytest.raises(TruncatedBatchError):
        list(iter_batches(good + good[:8]))  # shorter than offset + length
    with pytest.raises(CorruptRecordError):
        list(iter_batches(good + _set(good, ">i", 8, 10, fix_crc=False)))
    with pytest.raises(CorruptRecordError):
        list(iter_batches(good, max_batch_bytes=len(good) - 1))


# ---------------------------------------------------------------------------------------------
# the leader append refuses the same batches and changes nothing


def _snapshot(log: PartitionLog) -> tuple:
    files = sorted((p.name, p.stat().st_size) for p in log.directory.glob("*.log"))
    return log.log_end_offset, log.size_in_bytes, bytes(log.read(0, 1 << 24).records), files


@pytest.mark.parametrize("case", REFUSALS, ids=lambda c: c.name)
def test_leader_append_refuses_and_leaves_the_log_unchanged(case, tmp_path):
    log = PartitionLog(tmp_path / "topic-0", LogConfig(case.config))
    try:
        log.append_as_leader(_good(), 3)
        before = _snapshot(log)
        assert before[0] == 3
        bad = case.make()
        raises_exactly(case.error, log.append_as_leader, bad, 3)
        assert _snapshot(log) == before
        # A request whose first batch is fine and whose second is bad appends neither.
        raises_exactly(case.error, log.append_as_leader, _good() + bad, 3)
        assert _snapshot(log) == before
        # Nor does a bad batch between two good ones.
        raises_exactly(case.error, log.append_as_leader, _good() + bad + _good(), 3)
        assert _snapshot(log) == before
        # The log still takes good batches afterwards.
        assert log.append_as_leader(_good() + _good(), 3).last_offset == 8
    finally:
        log.close()


def test_leader_refuses_an_empty_request(tmp_path):
    log = PartitionLog(tmp_path / "topic-0")
    try:
        raises_exactly(InvalidRecordError, log.append_as_leader, b"", 0)
        assert log.log_end_offset == 0 and log.size_in_bytes == 0
    finally:
        log.close()


def test_compressed_batch_with_a_bad_crc_is_refused_before_inflating(monkeypatch):
    # The CRC is checked first: a corrupt batch never reaches a decompressor.
    data = _flip(_bomb(Compression.GZIP), 70)
    calls = []
    monkeypatch.setattr(rb, "decompress", lambda *a: calls.append(a) or b"")
    raises_exactly(CorruptBatchError, validate_batch, RecordBatch(data), max_message_bytes=BIG)
    assert calls == []


def test_gzip_bomb_is_stopped_at_the_limit_not_after_inflating():
    # Inflating this fully would take 16 MiB; the check stops at 100 KB.
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    value_len = 16 << 20
    record_head = b"\x00\x00\x00\x02k" + encode_varint(value_len)
    record_tail = b"\x00"
    length = len(record_head) + value_len + len(record_tail)
    payload = c.compress(encode_varint(length) + record_head)
    zeros = bytes(1 << 20)
    payload += b"".join(c.compress(zeros) for _ in range(16)) + c.compress(record_tail) + c.flush()
    data = assemble(payload, count=1, last_offset_delta=0, attributes=int(Compression.GZIP))
    assert len(data) < 100_000
    raises_exactly(RecordTooLargeError, validate_batch, RecordBatch(data), max_message_bytes=BIG,
                   max_uncompressed_bytes=100_000)
