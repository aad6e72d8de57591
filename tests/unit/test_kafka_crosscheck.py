"""Our batches against kafka-python's, an independent RecordBatch v2 implementation, in both directions.

kafka-python builds batches the way a producer does (base offset 0, leader epoch 0) and reads them
the way a consumer does. Its codecs come from optional packages: python-snappy (on cramjam), lz4 and
zstandard. A missing one fails these tests instead of skipping them: a crosscheck that silently
drops a codec proves nothing about it.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

with warnings.catch_warnings():
    # kafka-python loads its protocol schemas through a deprecated importlib.resources call.
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.codec
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords
    from kafka.record.util import encode_varint as kafka_encode_varint

from lakelog.infra.config import LogConfig
from lakelog.logstore.compression import Compression
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import (
    Record,
    RecordBatch,
    TimestampType,
    build_batch,
    encode_varint,
    validate_batch,
)

CODECS = list(Compression)
KAFKA_CODEC_CHECK = {
    Compression.GZIP: (lambda: kafka.codec.has_gzip(), "the standard library's gzip"),
    Compression.SNAPPY: (lambda: kafka.codec.has_snappy(), "python-snappy (which needs cramjam)"),
    Compression.LZ4: (lambda: kafka.codec.has_lz4(), "lz4"),
    Compression.ZSTD: (lambda: kafka.codec.has_zstd(), "zstandard"),
}
INT64_MAX = (1 << 63) - 1


def require_kafka_codec(codec: Compression) -> None:
    if codec == Compression.NONE:
        return
    available, package = KAFKA_CODEC_CHECK[codec]
    if not available():
        pytest.fail(f"kafka-python cannot use {codec.name.lower()}: install {package}")


@pytest.mark.parametrize("codec", CODECS[1:], ids=lambda c: c.name)
def test_kafka_python_has_every_codec(codec):
    require_kafka_codec(codec)
    # and it really uses it: a compressible batch comes out compressed with that codec
    data = kafka_build([Record(i, 1_000, None, b"abc" * 100) for i in range(5)], codec)
    assert DefaultRecordBatch(data).compression_type == int(codec)


# ---------------------------------------------------------------------------------------------
# helpers


def kafka_build(records: list[Record], codec: Compression, *, producer_id: int = -1,
                producer_epoch: int = -1, base_sequence: int = -1,
                is_transactional: bool = False) -> bytes:
    """A batch built by kafka-python from records whose offsets are deltas from 0."""
    require_kafka_codec(codec)
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=int(codec),
                                        is_transactional=is_transactional, producer_id=producer_id,
                                        producer_epoch=producer_epoch, base_sequence=base_sequence,
                                        batch_size=1 << 26)
    for r in records:
        meta = builder.append(r.offset, timestamp=r.timestamp, key=r.key, value=r.value,
                              headers=list(r.headers))
        assert meta is not None
    data = bytes(builder.build())
    # kafka-python quietly sends a batch uncompressed when compression does not shrink it.
    assert DefaultRecordBatch(data).compression_type == int(codec), "kafka-python did not compress"
    return data


def kafka_read(data: bytes) -> list[tuple[DefaultRecordBatch, list[Record]]]:
    """Every batch in `data` as kafka-python's consumer reads it, CRC checked first."""
    out = []
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        assert isinstance(batch, DefaultRecordBatch)
        assert batch.validate_crc(), "kafka-python says the CRC is wrong"
        out.append((batch, [Record(r.offset, r.timestamp, r.key, r.value, tuple(tuple(h) for h in r.headers))
                            for r in batch]))
    assert records.valid_bytes() == len(data), "kafka-python left bytes it could not frame"
    return out


header_st = st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=6))
# kafka-python starts its max timestamp at the first record's, Java (and we) at -1: they agree
# for timestamps >= -1, which is all Kafka ever writes.
timestamp_st = st.one_of(st.just(-1), st.integers(0, 1 << 45))
record_fields_st = st.lists(
    st.tuples(st.none() | st.binary(max_size=24), st.none() | st.binary(max_size=40),
              st.lists(header_st, max_size=3).map(tuple), timestamp_st,
              st.one_of(st.just(1), st.integers(1, 1_000))),
    min_size=1, max_size=10)
BALLAST = b"lakelog crosscheck ballast " * 20  # makes every batch worth compressing


def records_from(fields: list[tuple], *, base_offset: int = 0, ballast: bool) -> list[Record]:
    out, delta = [], 0
    for i, (key, value, headers, ts, gap) in enumerate(fields):
        delta = 0 if i == 0 else delta + gap
        out.append(Record(base_offset + delta, ts, key, value, headers))
    if ballast:
        out.append(Record(out[-1].offset + 1, out[-1].timestamp, b"ballast", BALLAST))
    return out


# ---------------------------------------------------------------------------------------------
# kafka-python writes, we read


@settings(max_examples=60, deadline=None)
@given(record_fields_st, st.sampled_from(CODECS), st.booleans(),
       st.integers(0, INT64_MAX), st.integers(0, (1 << 15) - 1), st.integers(0, (1 << 31) - 1))
def test_kafka_python_batches_decode_with_ours(fields, codec, transactional, pid, epoch, seq):
    records = records_from(fields, ballast=codec != Compression.NONE)
    producer = dict(producer_id=pid, producer_epoch=epoch, base_sequence=seq) if transactional else {}
    data = kafka_build(records, codec, is_transactional=transactional, **producer)
    ours = RecordBatch(data)
    ours.ensure_valid()
    theirs = DefaultRecordBatch(data)
    assert ours.crc == theirs.crc
    assert (ours.base_offset, ours.partition_leader_epoch, ours.magic, ours.attributes,
            ours.last_offset_delta, ours.base_timestamp, ours.max_timestamp, ours.producer_id,
            ours.producer_epoch, ours.base_sequence, ours.record_count) == \
        (0, 0, 2, theirs.attributes, records[-1].offset, records[0].timestamp, theirs.max_timestamp,
         pid if transactional else -1, epoch if transactional else -1, seq if transactional else -1,
         len(records))
    assert ours.compression == codec
    assert ours.is_transactional == transactional
    assert ours.records() == records
    consecutive = [r.offset for r in records] == list(range(len(records)))
    validate_batch(ours, max_message_bytes=len(data), consecutive_offsets=consecutive)
    if codec == Compression.NONE:
        # Same records, same producer fields, same leader epoch: the very same bytes.
        again = build_batch(records, partition_leader_epoch=0, is_transactional=transactional, **producer)
        assert again == data


# ---------------------------------------------------------------------------------------------
# we write, kafka-python reads


@settings(max_examples=60, deadline=None)
@given(record_fields_st, st.sampled_from(CODECS), st.integers(0, 1 << 62), st.integers(-1, (1 << 31) - 1),
       st.booleans(), st.one_of(st.none(), st.integers(0, 1 << 45)), st.integers(0, 200))
def test_our_batches_decode_with_kafka_python(fields, codec, base_offset, leader_epoch, transactional,
                                             log_append_time, slack):
    require_kafka_codec(codec)
    records = records_from(fields, base_offset=base_offset, ballast=False)
    lod = records[-1].offset - base_offset + slack
    kwargs = dict(compression=codec, partition_leader_epoch=leader_epoch, last_offset_delta=lod)
    if transactional:
        kwargs.update(producer_id=4242, producer_epoch=3, base_sequence=17, is_transactional=True)
    if log_append_time is not None:
        kwargs.update(timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=log_append_time)
    data = build_batch(records, **kwargs)
    [(batch, got)] = kafka_read(data)
    assert (batch.base_offset, batch.leader_epoch, batch.magic, batch.last_offset_delta,
            batch.compression_type, batch.is_transactional, batch.is_control_batch, batch.records_count) == \
        (base_offset, leader_epoch, 2, lod, int(codec), transactional, False, len(records))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == \
        ((4242, 3, 17) if transactional else (-1, -1, -1))
    assert batch.first_timestamp == records[0].timestamp
    if log_append_time is None:
        assert batch.timestamp_type == 0
        assert batch.max_timestamp == max(r.timestamp for r in records)
        assert got == records
    else:
        # A consumer sees the log append time on every record, as Kafka's Java client does.
        assert batch.timestamp_type == 1
        assert batch.max_timestamp == log_append_time
        assert got == [Record(r.offset, log_append_time, r.key, r.value, r.headers) for r in records]


def test_several_of_our_batches_in_one_buffer_decode_with_kafka_python():
    batches, expected, offset = [], [], 0
    for i, codec in enumerate(CODECS * 2):
        require_kafka_codec(codec)
        recs = [Record(offset + j, 5_000 + j, b"k%d" % j, b"v%d-%d " % (i, j) * 30, (("i", b"%d" % i),))
                for j in range(i + 1)]
        batches.append(build_batch(recs, compression=codec, partition_leader_epoch=i))
        expected.append(recs)
        offset += len(recs)
    got = kafka_read(b"".join(batches))
    assert [records for _, records in got] == expected
    assert [b.leader_epoch for b, _ in got] == list(range(len(batches)))
    assert [b.compression_type for b, _ in got] == [int(c) for c in CODECS * 2]


def test_our_control_batch_reads_as_a_commit_marker_in_kafka_python():
    # Control record key: version int16 0, type int16 1 (commit); value: version, coordinator epoch.
    data = build_batch([Record(40, 9_000, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x05")],
                       producer_id=77, producer_epoch=2, base_sequence=-1, is_transactional=True,
                       is_control=True, partition_leader_epoch=3)
    [(batch, _)] = kafka_read(data)
    assert batch.is_control_batch and batch.is_transactional
    batch = DefaultRecordBatch(data)
    [marker] = list(batch)
    assert (marker.offset, marker.version, marker.commit) == (40, 0, True)


@settings(max_examples=300, deadline=None)
@given(st.integers(-(1 << 63), (1 << 63) - 1))
def test_varints_match_kafka_python(value):
    theirs = bytearray()
    kafka_encode_varint(value, theirs.append)
    assert encode_varint(value) == bytes(theirs)


# ---------------------------------------------------------------------------------------------
# a segment file written by PartitionLog is a Kafka log file


class FixedClock:
    def __init__(self, now_s: float) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def _append_workload(log: PartitionLog, clock: FixedClock | None = None) -> list[Record]:
    """A few hundred records over many requests, every codec, some requests of several batches.

    Returns the records as a consumer must read them back, with the offsets the log assigned.
    """
    expected: list[Record] = []
    n = 0
    for request in range(40):
        batches, sent = [], []
        for b in range(1 + request % 3):
            codec = CODECS[(request + b) % len(CODECS)]
            require_kafka_codec(codec)
            count = 1 + (request * 7 + b) % 13
            recs = []
            for j in range(count):
                key = None if (n + j) % 11 == 0 else b"key-%d" % ((n + j) % 17)
                value = None if (n + j) % 23 == 5 else b"value %d; " % (n + j) * (1 + (n + j) % 9)
                headers = (("seq", b"%d" % (n + j)),) if (n + j) % 4 else (("a", None), ("b", b""))
                recs.append(Record(j, 1_700_000_000_000 + n + j, key, value, headers))
            n += count
            batches.append(build_batch(recs, compression=codec))
            sent.append(recs)
        epoch = request // 10
        info = log.append_as_leader(b"".join(batches), epoch)
        assert len(info.base_offsets) == len(sent)
        for base, recs in zip(info.base_offsets, sent):
            for r in recs:
                ts = r.timestamp if clock is None else int(clock() * 1000)
                expected.append(Record(base + r.offset, ts, r.key, r.value, r.headers))
        if clock is not None:
            clock.now_s += 0.003
    return expected


def _read_log_files(directory: Path) -> tuple[list[Record], list[tuple[str, DefaultRecordBatch]]]:
    records, batches = [], []
    files = sorted(directory.glob("*.log"))
    assert len(files) >= 3, f"expected several segments, got {[f.name for f in files]}"
    for path in files:
        data = path.read_bytes()
        got = kafka_read(data)
        assert got, f"{path.name} holds no batch"
        # A segment is named after the base offset of its first batch.
        assert got[0][0].base_offset == int(path.name[:20])
        for batch, recs in got:
            batches.append((path.name, batch))
            records += recs
    return records, batches


def test_segment_files_written_by_partition_log_decode_with_kafka_python(tmp_path):
    directory = tmp_path / "topic-0"
    log = PartitionLog(directory, LogConfig({"segment.bytes": 6_000, "index.interval.bytes": 700}))
    expected = _append_workload(log)
    leo = log.log_end_offset
    log.close()
    assert len(expected) >= 300
    got, batches = _read_log_files(directory)
    assert got == expected
    assert [r.offset for r in got] == list(range(leo))
    # The leader stamped its epoch on every batch: requests 0-9 at epoch 0, 10-19 at 1, ...
    assert sorted({b.leader_epoch for _, b in batches}) == [0, 1, 2, 3]
    assert all(b.timestamp_type == 0 for _, b in batches)


def test_log_append_time_segment_files_decode_with_kafka_python(tmp_path):
    directory = tmp_path / "topic-0"
    clock = FixedClock(1_800_000_000.0)
    log = PartitionLog(directory, LogConfig({"segment.bytes": 6_000, "index.interval.bytes": 700,
                                             "message.timestamp.type": "LogAppendTime"}), clock=clock)
    expected = _append_workload(log, clock)
    log.close()
    got, batches = _read_log_files(directory)
    assert got == expected
    assert all(b.timestamp_type == 1 for _, b in batches)
