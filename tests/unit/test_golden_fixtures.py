"""Golden bytes: batches kafka-python built once (tests/fixtures/make_fixtures.py) decode with our codec.

Uncompressed fixtures must re-encode to the very same bytes. Compressed ones cannot (the codecs'
output depends on library, level and, for gzip, the clock), so for those the inflated records must
be byte-identical and our own compressed encoding must read back the same in kafka-python.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

with warnings.catch_warnings():
    # kafka-python loads its protocol schemas through a deprecated importlib.resources call.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.memory_records import MemoryRecords

from lakelog.logstore.compression import Compression
from lakelog.logstore.record_batch import Record, RecordBatch, build_batch, iter_batches, validate_batch

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text("utf-8"))
CASES = EXPECTED["fixtures"]
CODECS = {"none": Compression.NONE, "gzip": Compression.GZIP, "snappy": Compression.SNAPPY,
          "lz4": Compression.LZ4, "zstd": Compression.ZSTD}


def _bytes(h: str | None) -> bytes | None:
    return None if h is None else bytes.fromhex(h)


def expected_records(case: dict) -> list[Record]:
    base = case["header"]["base_offset"]
    return [Record(base + r["offset"], r["timestamp"], _bytes(r["key"]), _bytes(r["value"]),
                   tuple((k, _bytes(v)) for k, v in r["headers"])) for r in case["records"]]


def load(case: dict) -> bytes:
    return (FIXTURES / case["file"]).read_bytes()


def rebuild(case: dict, compression: Compression) -> bytes:
    h = case["header"]
    return build_batch(expected_records(case), base_offset=h["base_offset"], compression=compression,
                       producer_id=h["producer_id"], producer_epoch=h["producer_epoch"],
                       base_sequence=h["base_sequence"],
                       partition_leader_epoch=h["partition_leader_epoch"],  # kafka-python writes 0
                       is_transactional=bool(h["attributes"] & 0x10),
                       last_offset_delta=h["last_offset_delta"])


def kafka_python_view(data: bytes) -> list[Record]:
    records = MemoryRecords(data)
    out = []
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        out += [Record(r.offset, r.timestamp, r.key, r.value, tuple(tuple(h) for h in r.headers))
                for r in batch]
    return out


def test_every_codec_has_a_fixture():
    assert {c["compression"] for c in CASES} == set(CODECS)
    assert any(c["header"]["attributes"] & 0x10 for c in CASES), "no transactional fixture"
    for case in CASES:
        assert (FIXTURES / case["file"]).stat().st_size == case["size"]


@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_fixture_header_decodes(case):
    batch = RecordBatch(load(case))
    batch.ensure_valid(file=case["file"])
    h = case["header"]
    assert (batch.base_offset, batch.batch_length, batch.partition_leader_epoch, batch.magic, batch.crc,
            batch.attributes, batch.last_offset_delta, batch.base_timestamp, batch.max_timestamp,
            batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.record_count) == \
        (h["base_offset"], h["batch_length"], h["partition_leader_epoch"], h["magic"], h["crc"],
         h["attributes"], h["last_offset_delta"], h["base_timestamp"], h["max_timestamp"],
         h["producer_id"], h["producer_epoch"], h["base_sequence"], h["record_count"])
    assert batch.compression == CODECS[case["compression"]]
    assert batch.size_in_bytes == case["size"]


@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_fixture_records_decode(case):
    data = load(case)
    batch = RecordBatch(data)
    assert batch.records() == expected_records(case)
    # What a leader would demand of a producer: consecutive deltas unless the batch has gaps.
    gaps = [r["offset"] for r in case["records"]] != list(range(len(case["records"])))
    summary = validate_batch(batch, max_message_bytes=len(data), consecutive_offsets=not gaps)
    assert (summary.record_count, summary.max_timestamp, summary.size_in_bytes) == \
        (len(case["records"]), case["header"]["max_timestamp"], len(data))
    assert [b.base_offset for _, b in iter_batches(data + data)] == [0, 0]


@pytest.mark.parametrize("case", [c for c in CASES if c["compression"] == "none"],
                         ids=[c["file"] for c in CASES if c["compression"] == "none"])
def test_uncompressed_fixture_reencodes_byte_for_byte(case):
    data = load(case)
    ours = rebuild(case, Compression.NONE)
    assert ours == data, _first_difference(ours, data)


@pytest.mark.parametrize("case", [c for c in CASES if c["compression"] != "none"],
                         ids=[c["file"] for c in CASES if c["compression"] != "none"])
def test_compressed_fixture_inflates_to_the_records_we_would_write(case):
    data = load(case)
    codec = CODECS[case["compression"]]
    fixture = RecordBatch(data)
    ours = RecordBatch(rebuild(case, codec))
    assert ours.compression == codec
    # The inflated record bytes are the same byte for byte ...
    assert ours.records_bytes() == fixture.records_bytes()
    # ... and so is the header, apart from the length and CRC, which cover the compressed bytes.
    skip = {"batch_length", "crc"}
    fields = [k for k in case["header"] if k not in skip]
    assert {k: getattr(ours, k) for k in fields} == {k: case["header"][k] for k in fields}
    # Our compressed encoding reads back in kafka-python exactly as the fixture's records.
    assert kafka_python_view(bytes(ours.buffer)) == expected_records(case)
    assert kafka_python_view(data) == expected_records(case)


def test_snappy_fixture_spans_several_xerial_blocks():
    case = next(c for c in CASES if c["compression"] == "snappy")
    batch = RecordBatch(load(case))
    assert len(batch.records_bytes()) > 32 * 1024
    assert bytes(batch.buffer[61:61 + 8]) == b"\x82SNAPPY\x00"


def _first_difference(a: bytes, b: bytes) -> str:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"first difference at byte {i}: ours {x:#04x}, fixture {y:#04x}"
    return f"lengths differ: ours {len(a)}, fixture {len(b)}"
