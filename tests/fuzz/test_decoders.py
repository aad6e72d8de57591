"""Coverage-guided fuzzing (hypothesis) of every decoder that reads bytes a client or the disk hands us:
the RecordBatch decoder (framing, validation, decompression, records), the offset and time index
readers (bytes and files), the leader epoch checkpoint, the remote manifest reader, the replica fetch
wire format, the __consumer_offsets and __transaction_state codecs, the metadata snapshot and records (users, ACLs and the
Schema Registry included), the JSON produce path, and Confluent's schema wire format with the Avro
and JSON values it frames. The property is always the same: any input ends in a result or a typed
`LakelogError` — never another exception (IndexError, struct.error, RecursionError, MemoryError...),
never a hang (pytest-timeout bounds each target), never an allocation past the configured bounds.

Inputs are random bytes and, more usefully, mutations of valid encodings: with the CRC recomputed
after the mutation, so that the fuzzer reaches the record parser and the decompressors instead of
stopping at the checksum. The budget is LAKELOG_FUZZ_EXAMPLES examples per target (default 300: a
few seconds each); raise it for long runs, e.g. LAKELOG_FUZZ_EXAMPLES=200000.
"""

from __future__ import annotations

import functools
import json
import os
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lakelog.infra.errors import LakelogError
from lakelog.logstore.compression import Compression
from lakelog.logstore.record_batch import (
    HEADER_SIZE,
    Record,
    RecordBatch,
    build_batch,
    crc32c,
    iter_batches,
    validate_batch,
)

EXAMPLES = int(os.environ.get("LAKELOG_FUZZ_EXAMPLES", "300"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
MAX_UNCOMPRESSED = 1 << 20
pytestmark = pytest.mark.timeout(300)


def _batch(compression: Compression) -> bytes:
    recs = [Record(i, 1_700_000_000_000 + i, f"key-{i}".encode(), (f"value-{i}-" * 5).encode(),
                   (("h", b"v"),) if i % 2 else ()) for i in range(6)]
    return bytes(build_batch(recs, compression=compression))


SEEDS = [_batch(c) for c in Compression]
CRC_AT = 17  # base offset 8, length 4, leader epoch 4, magic 1: the CRC covers what follows it


def _fix_crc(buf: bytearray) -> bytearray:
    if len(buf) >= HEADER_SIZE:
        struct.pack_into(">I", buf, CRC_AT, crc32c(bytes(buf[CRC_AT + 4:])))
    return buf


@st.composite
def mutated(draw, seeds: list[bytes], fix_crc=None) -> bytes:
    buf = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.integers(0, 4))
        if not buf:
            break
        pos = draw(st.integers(0, len(buf) - 1))
        if kind == 0:
            buf[pos] ^= 1 << draw(st.integers(0, 7))
        elif kind == 1:
            buf[pos] = draw(st.sampled_from([0, 0x7F, 0x80, 0xFF, draw(st.integers(0, 255))]))
        elif kind == 2:
            del buf[pos:pos + draw(st.integers(1, 16))]
        elif kind == 3:
            buf[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        elif len(buf) >= 4:  # (a short seed, cut by earlier mutations, has no room for an int32)
            struct.pack_into(">i", buf, min(pos, max(0, len(buf) - 4)),
                             draw(st.sampled_from([-1, 0, 1, 2**31 - 1, -2**31, 61, 1 << 24])))
    if fix_crc is not None and draw(st.booleans()):
        buf = fix_crc(buf)
    return bytes(buf)


def _typed(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except LakelogError:
        return None


def _decode_batches(data: bytes) -> None:
    for _, batch in iter_batches(data):
        validate_batch(batch, max_message_bytes=1 << 20)
        records = batch.records(max_uncompressed_bytes=MAX_UNCOMPRESSED)
        assert len(records) == batch.record_count
        for r in records:
            assert r.key is None or isinstance(r.key, bytes)


@FUZZ
@given(st.one_of(st.binary(max_size=4096), mutated(SEEDS, _fix_crc)))
def test_record_batch_decoder(data):
    _typed(_decode_batches, data)
    if len(data) >= HEADER_SIZE:
        _typed(lambda: RecordBatch(data).records(max_uncompressed_bytes=MAX_UNCOMPRESSED))


def test_decompression_is_bounded():
    """A batch whose payload inflates far past the bound is refused with a typed error."""
    big = [Record(0, 0, None, b"\0" * (8 << 20))]
    for codec in (Compression.GZIP, Compression.ZSTD, Compression.LZ4, Compression.SNAPPY):
        batch = RecordBatch(bytes(build_batch(big, compression=codec)))
        with pytest.raises(LakelogError):
            batch.records(max_uncompressed_bytes=MAX_UNCOMPRESSED)


# ------------------------------------------------------------------------------------- indexes

@FUZZ
@given(st.binary(max_size=2048))
def test_index_readers(data):
    from lakelog.index import offset_index, time_index

    _typed(offset_index.decode, data, file="fuzz.index")
    _typed(time_index.decode, data, file="fuzz.timeindex")


# ------------------------------------------------------------------------------------ manifests

def _manifest_seed() -> bytes:
    from lakelog.tiering import manifest_codec, manifest_transitions
    from lakelog.tiering.manifest_model import PartitionManifest, RemoteSegment, SegmentState

    m = PartitionManifest.empty("orders", 3, "tid")
    seg = RemoteSegment("0123456789abcdef" * 2, 0, 99, 1_700_000_000_000, 4096, ((0, 0),), SegmentState.COPY_STARTED, 0)
    m = manifest_transitions.start_copy(manifest_transitions.claim(m, 1) or m, seg) or m
    return manifest_codec.encode(m)


@FUZZ
@given(st.one_of(st.binary(max_size=2048), mutated([_manifest_seed()])))
def test_manifest_reader(data):
    from lakelog.tiering import manifest_codec, manifest_transitions
    from lakelog.tiering.manifest_model import PartitionManifest, RemoteSegment, SegmentState

    m = _typed(manifest_codec.decode, data, key="fuzz/manifest")
    if m is not None:
        assert manifest_codec.decode(manifest_codec.encode(m)) == m


# ---------------------------------------------------------------- replica wire, committed offsets

@FUZZ
@given(st.binary(max_size=2048))
def test_replica_wire_and_offsets_codec(data):
    from lakelog.ingest_api.groups import offsets_codec
    from lakelog.ingest_api.replication import wire

    _typed(wire.decode_fetch_response, data)
    _typed(offsets_codec.decode_key, data)
    _typed(offsets_codec.decode_value, data)


def _txn_state_seed() -> bytes:
    from lakelog.ingest_api.transactions.state_codec import TxnRecord, encode_value
    return encode_value(TxnRecord(7, 3, 60_000, 1, (("orders", 0), ("orders", 5), ("x", 2)), 1_700_000_000_000,
                                  1_699_999_999_000))


@FUZZ
@given(st.one_of(st.binary(max_size=512), mutated([_txn_state_seed()])))
def test_transaction_state_codec(data):
    from lakelog.ingest_api.transactions import state_codec

    _typed(state_codec.decode_key, data)
    rec = _typed(state_codec.decode_value, data)
    if rec is not None:
        assert state_codec.decode_value(state_codec.encode_value(rec)) == rec


# --------------------------------------------------------------------------- JSON produce path

_json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                            lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
                            max_leaves=20)
_record = st.fixed_dictionaries({}, optional={
    "key": _json_values, "value": _json_values, "partition": st.integers(-2, 2**40) | st.text(max_size=3),
    "headers": st.lists(st.fixed_dictionaries({}, optional={"key": _json_values, "value": _json_values}), max_size=3)
    | _json_values, "timestamp": st.integers(-2**64, 2**64)})
_body = st.fixed_dictionaries({"records": st.lists(_record, max_size=5) | _json_values}, optional={
    "producer_id": st.integers(-2, 2**64), "producer_epoch": st.integers(-2, 2**17), "sequence": _json_values})


@FUZZ
@given(st.one_of(_body.map(lambda d: json.dumps(d).encode()), st.binary(max_size=512),
                 mutated([b'{"records": [{"key": "k", "value": {"a": [1, 2]}, "headers": [{"key": "h", "value": "dg=="}]}]}'])),
       st.sampled_from(["application/vnd.kafka.json.v2+json", "application/vnd.kafka.binary.v2+json"]))
def test_json_produce_path(body, fmt):
    from lakelog.ingest_api.records.formats import parse_produce_request

    result = _typed(parse_produce_request, body, fmt, 100)
    if result is not None:
        assert len(result[0]) <= 100


def test_deeply_nested_json_is_a_typed_error():
    from lakelog.ingest_api.records.formats import parse_produce_request

    for body in (b"[" * 100_000, b'{"records": ' + b"[" * 100_000, b'{"records": [{"value": ' + b"{\"a\":" * 50_000):
        with pytest.raises(LakelogError):
            parse_produce_request(body, "application/vnd.kafka.json.v2+json", 100)


# ----------------------------------------------------- files on disk: indexes, checkpoints, snapshots

@FUZZ
@given(st.binary(max_size=1024), st.binary(max_size=512))
def test_index_and_checkpoint_files_on_disk(tmp_path_factory, index_bytes, checkpoint_bytes):
    """A corrupt index file opens as 'corrupt' (rebuilt by recovery); a corrupt leader epoch
    checkpoint is a typed error: neither crashes the node."""
    from lakelog.index.offset_index import OffsetIndex
    from lakelog.index.time_index import TimeIndex
    from lakelog.logstore.leader_epoch import LeaderEpochCache

    d = tmp_path_factory.mktemp("files")
    (d / "0.index").write_bytes(index_bytes)
    (d / "0.timeindex").write_bytes(index_bytes)
    for cls, name in ((OffsetIndex, "0.index"), (TimeIndex, "0.timeindex")):
        idx = _typed(cls, d / name, 0, 1 << 20)
        if idx is not None:
            try:
                _typed(idx.sanity_check, 1 << 20)
            finally:
                idx.close()
    (d / "leader-epoch-checkpoint").write_bytes(checkpoint_bytes)
    cache = _typed(LeaderEpochCache, d)
    if cache is not None:
        assert all(e >= 0 for e, _ in cache.entries) or cache.entries == []


def _snapshot_seed() -> bytes:
    from lakelog.ingest_api.cluster.image import ClusterImage
    from lakelog.ingest_api.security.credentials import make_credential

    img = ClusterImage()
    img.apply_record({"type": "user_credential", "name": "alice", "credential": make_credential("pw").to_dict()})
    img.apply_record({"type": "create_acls", "acls": [{"principal": "User:alice", "resource_type": "TOPIC",
                                                       "resource_name": "t", "pattern_type": "LITERAL",
                                                       "operation": "READ", "permission": "ALLOW"}]})
    img.apply_record({"type": "schema_register", "subject": "s", "version": 1, "id": 1, "schema_type": "AVRO",
                      "schema": '"int"', "references": []})
    img.apply_record({"type": "schema_register", "subject": "t", "version": 2, "id": 2, "schema_type": "JSON",
                      "schema": "{}", "references": [{"name": "r", "subject": "s", "version": 1}]})
    img.apply_record({"type": "schema_config", "subject": "", "compatibility": "FULL", "normalize": True})
    img.apply_record({"type": "schema_mode", "subject": "s", "mode": "READONLY"})
    assert img.skipped_records == 0 and "schemas" in img.state_dict()
    return img.snapshot()


def _fix_snapshot_crc(buf: bytearray) -> bytearray:
    """Re-seal a mutated snapshot that still parses, so the fuzzer reaches the state checks."""
    try:
        doc = json.loads(bytes(buf))
        image = doc["image"]
    except (ValueError, RecursionError, TypeError, KeyError):
        return buf
    canonical = json.dumps(image, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    doc["crc32c"] = crc32c(canonical)
    return bytearray(json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode())


@FUZZ
@given(st.one_of(st.binary(max_size=1024), mutated([_snapshot_seed()], _fix_snapshot_crc)))
def test_metadata_snapshot_and_records(data):
    """The metadata image: a corrupt snapshot is refused with a typed error; a corrupt record in the
    log is skipped, never raised (a voter that raised would stall the quorum)."""
    from lakelog.ingest_api.cluster.image import ClusterImage
    from lakelog.ingest_api.raft.messages import Entry, EntryKind

    _typed(ClusterImage().restore, data)
    img = ClusterImage()
    img.apply(Entry(1, 1, EntryKind.COMMAND, data))
    assert img.last_applied_index == 1


def _wire_seeds() -> list[bytes]:
    from lakelog.ingest_api.schemas import wire
    from lakelog.ingest_api.schemas.codec import encode_value
    from lakelog.ingest_api.schemas.languages import parse_schema

    avro = parse_schema("AVRO", json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "long"}, {"name": "s", "type": ["null", "string"]},
        {"name": "xs", "type": {"type": "array", "items": "int"}},
        {"name": "m", "type": {"type": "map", "values": "double"}},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}}]}))
    value = {"a": -5, "s": {"string": "text"}, "xs": [1, 2, 3], "m": {"k": 1.5}, "e": "B"}
    return [encode_value(avro, 7, value), wire.encode(3, b'{"n": 1}'), wire.encode(9, b"\x08\x01", [0]),
            wire.encode(9, b"\x08\x01", [2, 1, 300])]


@FUZZ
@given(st.one_of(st.binary(max_size=512), mutated(_wire_seeds())), st.booleans())
def test_schema_wire_format_and_values(data, protobuf):
    """Confluent's wire format and the Avro / JSON values it frames: a result or a typed error."""
    from lakelog.ingest_api.schemas import wire
    from lakelog.ingest_api.schemas.codec import decode_value
    from lakelog.ingest_api.schemas.languages import parse_schema

    framed = _typed(wire.decode, data, protobuf=protobuf)
    if framed is None:
        return
    assert 1 <= framed.schema_id < 2**31 and len(framed.payload) <= len(data)
    if protobuf:
        assert 1 <= len(framed.message_indexes) <= wire.MAX_MESSAGE_INDEXES
    avro = parse_schema("AVRO", json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "long"}, {"name": "s", "type": ["null", "string"]},
        {"name": "xs", "type": {"type": "array", "items": "int"}},
        {"name": "m", "type": {"type": "map", "values": "double"}},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B"]}}]}))
    _typed(decode_value, avro, framed.payload)
    _typed(decode_value, parse_schema("JSON", '{"type": "object"}'), framed.payload)
    if protobuf:  # the message the indexes name (most name none), read from any bytes
        _typed(decode_value, _fuzz_proto(), framed.payload, "value", framed.message_indexes)


@functools.lru_cache(maxsize=1)
def _fuzz_proto():
    from lakelog.ingest_api.schemas.languages import parse_schema
    return parse_schema("PROTOBUF", 'syntax = "proto3"; message M { int64 a = 1; repeated string s = 2; '
                                    'map<string, double> m = 3; N n = 4; message N { bytes b = 1; } } '
                                    'message Other { sint32 x = 1; }')
