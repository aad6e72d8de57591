"""Typed Delta tables from the Schema Registry, on local Spark with a real node serving the registry.

Bytes are made by confluent-kafka's own serializers (Avro, JSON Schema, Protobuf; keys too) pointed
at the node, written into the remote tier, and synced by `sync-tables`: values and keys become
typed columns, a compatible new version widens a column in place (int -> bigint, float -> double),
and a record that does not decode goes to `<topic>_errors` while the sync goes on.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from lakelog.infra.config import LogConfig
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import Record, build_batch
from lakelog.spark_log.jobs import run_job
from lakelog.spark_log.session import remote_session
from lakelog.tiering import RemoteTier, TieringConfig
from lakelog.tiering.fs_store import FileSystemStore
from lakelog.tiering.topics import TopicDescriptor, write_topic_descriptor
from tests.support.nodes import start_node

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def spark():
    session = remote_session(None, app_name="lakelog-schema-tables-test")
    yield session
    session.stop()


@pytest.fixture
def registry(tmp_path):
    node = start_node(tmp_path / "registry")
    try:
        yield node.url
    finally:
        try:
            node.stop()
        finally:
            node.kill()


class Remote:
    """Topics written straight into a filesystem remote tier (one partition each)."""

    def __init__(self, tmp_path, registry_url: str) -> None:
        self.tmp_path = tmp_path
        self.store = FileSystemStore(tmp_path / "remote")
        self.tier = RemoteTier(self.store, TieringConfig({"remote.log.copy.max.segments.per.round": 10_000}))
        self.logs: dict[str, PartitionLog] = {}
        self.registry_url = registry_url
        self.url = (tmp_path / "remote").as_uri()

    def append(self, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
        log = self.logs.get(topic)
        if log is None:
            log = self.logs[topic] = PartitionLog(self.tmp_path / "log" / f"{topic}-0",
                                                  LogConfig({"segment.bytes": 100_000, "retention.ms": -1}))
            write_topic_descriptor(self.store, TopicDescriptor(topic, None, 1,
                                                               {"schema.registry.url": self.registry_url}))
        for k, v in records:
            log.append_as_leader(build_batch([Record(0, 1_700_000_000_000, k, v)]), 1)
        log.roll()
        self.tier.partition(topic, 0).copy_segments(log, 1, log.log_end_offset)


def _rows(spark, remote: Remote, table: str, *cols: str) -> list[tuple]:
    df = spark.read.format("delta").load(f"{remote.url}/tables/{table}")
    return [tuple(r[c] for c in cols) for r in df.orderBy("offset").collect()]


def _errors(spark, remote: Remote, topic: str) -> dict[int, str]:
    df = spark.read.format("delta").load(f"{remote.url}/tables/{topic}_errors")
    return {r["offset"]: r["reason"] for r in df.collect()}


def _proto_class(version: int):
    """Click v1 (count int32) or v2 (count int64, a new field), as a generated class."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name=f"click_v{version}.proto", package="lakelog.t", syntax="proto3")
    m = fd.message_type.add(name="Click")
    m.field.add(name="user", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    m.field.add(name="count", number=2, type=F.TYPE_INT32 if version == 1 else F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    m.field.add(name="tags", number=3, type=F.TYPE_STRING, label=F.LABEL_REPEATED)
    if version == 2:
        m.field.add(name="score", number=4, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("lakelog.t.Click"))


def test_sync_tables_types_avro_json_protobuf_values_and_keys_and_widens(tmp_path, spark, registry):
    sr = SchemaRegistryClient({"url": registry})
    remote = Remote(tmp_path, registry)

    # Avro: values v1 {id int, ratio float}; keys Avro strings (subject avro_t-key)
    v1 = {"type": "record", "name": "Item", "namespace": "lakelog.t",
          "fields": [{"name": "id", "type": "int"}, {"name": "ratio", "type": "float"}]}
    v2 = {**v1, "fields": [{"name": "id", "type": "long"}, {"name": "ratio", "type": "double"},
                           {"name": "label", "type": "string", "default": "none"}]}
    actx = SerializationContext("avro_t", MessageField.VALUE)
    kctx = SerializationContext("avro_t", MessageField.KEY)
    key_ser = AvroSerializer(sr, '"string"')
    ser1 = AvroSerializer(sr, json.dumps(v1))
    remote.append("avro_t", [(key_ser(f"k{i}", kctx), ser1({"id": i, "ratio": 0.5}, actx)) for i in range(2)])

    # JSON Schema values; keys not framed (no subject avro... json_t-key): they stay raw
    doc = {"type": "object", "title": "Shape", "properties": {
        "id": {"type": "integer"}, "name": {"type": "string"},
        "dims": {"type": "object", "properties": {"w": {"type": "number"}, "h": {"type": "number"}}},
        "at": {"type": "string", "format": "date-time"}, "tags": {"type": "array", "items": {"type": "string"}}}}
    jctx = SerializationContext("json_t", MessageField.VALUE)
    jser = JSONSerializer(json.dumps(doc), sr)
    remote.append("json_t", [(b"raw-key", jser({"id": 1, "name": "sq", "dims": {"w": 2, "h": 2.5},
                                                "at": "2024-05-01T10:00:00Z", "tags": ["a"]}, jctx)),
                             (b"raw-key", jser({"id": 2, "name": "ln"}, jctx))])

    # Protobuf v1 (count int32), by confluent-kafka's ProtobufSerializer (a FileDescriptorProto schema)
    pctx = SerializationContext("proto_t", MessageField.VALUE)
    c1 = _proto_class(1)
    pser1 = ProtobufSerializer(c1, sr, {"use.deprecated.format": False})
    remote.append("proto_t", [(None, pser1(c1(user="ada", count=3, tags=["x", "y"]), pctx))])

    assert run_job(spark, "sync-tables", remote.url, topics=["avro_t", "json_t", "proto_t"]).totals["rows_added"] == 5
    avro = spark.read.format("delta").load(f"{remote.url}/tables/avro_t")
    assert (dict(avro.dtypes)["id"], dict(avro.dtypes)["ratio"], dict(avro.dtypes)["key_decoded"]) == (
        "int", "float", "string")
    assert _rows(spark, remote, "avro_t", "offset", "id", "key_decoded") == [(0, 0, "k0"), (1, 1, "k1")]
    js = spark.read.format("delta").load(f"{remote.url}/tables/json_t")
    types = dict(js.dtypes)
    assert (types["id"], types["dims"], types["at"], types["tags"]) == (
        "bigint", "struct<w:double,h:double>", "timestamp", "array<string>")
    assert "key_decoded" not in types  # no json_t-key subject: keys stay raw
    assert [(r["id"], r["name"], r["dims"] and r["dims"]["h"]) for r in js.orderBy("offset").collect()] == [
        (1, "sq", 2.5), (2, "ln", None)]
    pb = spark.read.format("delta").load(f"{remote.url}/tables/proto_t")
    assert dict(pb.dtypes)["count"] == "int" and dict(pb.dtypes)["tags"] == "array<string>"
    assert _rows(spark, remote, "proto_t", "user", "count") == [("ada", 3)]

    # The subjects evolve compatibly: int -> long, float -> double (Avro), int32 -> int64 (Protobuf);
    # the tables widen in place and keep their rows
    v2_id = sr.register_schema("avro_t-value", Schema(json.dumps(v2), "AVRO"))
    ser2 = AvroSerializer(sr, json.dumps(v2))
    remote.append("avro_t", [(key_ser("k2", kctx), ser2({"id": 2**40, "ratio": 0.25, "label": "big"}, actx)),
                             (key_ser("k3", kctx), b"\x00" + v2_id.to_bytes(4, "big") + b"\xff"),
                             (b"\x01unframed key", ser1({"id": 7, "ratio": 1.0}, actx))])
    c2 = _proto_class(2)
    pser2 = ProtobufSerializer(c2, sr, {"use.deprecated.format": False})
    bad_pb = pser2(c2(user="x"), pctx)[:6] + b"\x0a\x09ab"  # a string field longer than what follows
    remote.append("proto_t", [(None, pser2(c2(user="bob", count=2**40, score=0.5), pctx)), (None, bad_pb)])
    remote.append("json_t", [(None, b"\x00" + jser({"id": 3}, jctx)[1:5] + b'{"id": "three"}'),
                             (None, b"\x00" + jser({"id": 3}, jctx)[1:5] + b"{not json")])

    res = run_job(spark, "sync-tables", remote.url, topics=["avro_t", "json_t", "proto_t"])
    avro = spark.read.format("delta").load(f"{remote.url}/tables/avro_t")
    assert (dict(avro.dtypes)["id"], dict(avro.dtypes)["ratio"], dict(avro.dtypes)["label"]) == (
        "bigint", "double", "string")
    assert _rows(spark, remote, "avro_t", "offset", "id", "label", "key_decoded") == [
        (0, 0, None, "k0"), (1, 1, None, "k1"), (2, 2**40, "big", "k2")]
    errors = _errors(spark, remote, "avro_t")
    assert sorted(errors) == [3, 4] and "does not decode" in errors[3] and "key is not in Confluent" in errors[4]
    pb = spark.read.format("delta").load(f"{remote.url}/tables/proto_t")
    assert dict(pb.dtypes)["count"] == "bigint" and dict(pb.dtypes)["score"] == "double"
    assert _rows(spark, remote, "proto_t", "offset", "user", "count", "score") == [
        (0, "ada", 3, None), (1, "bob", 2**40, 0.5)]
    assert sorted(_errors(spark, remote, "proto_t")) == [2]
    jerr = _errors(spark, remote, "json_t")
    assert sorted(jerr) == [2, 3] and all("does not decode with JSON" in r for r in jerr.values())
    assert res.totals["rows_added"] == 2
    # again: nothing twice
    assert run_job(spark, "sync-tables", remote.url, topics=["avro_t", "json_t", "proto_t"]).totals["rows_added"] == 0
    assert len(_errors(spark, remote, "avro_t")) == 2


def test_read_decoded_gives_the_data_source_rows_with_typed_columns(tmp_path, spark, registry):
    from lakelog.spark_log.schema_columns import read_decoded

    sr = SchemaRegistryClient({"url": registry})
    remote = Remote(tmp_path, registry)
    doc = {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}}
    ctx = SerializationContext("people", MessageField.VALUE)
    ser = JSONSerializer(json.dumps(doc), sr)
    key_ser = AvroSerializer(sr, '"long"')
    kctx = SerializationContext("people", MessageField.KEY)
    remote.append("people", [(key_ser(1, kctx), ser({"id": 1, "name": "ada"}, ctx)),
                             (key_ser(2, kctx), b"\x00\x00\x00\x00\x63{}"),  # schema id 99: unknown
                             (key_ser(3, kctx), None),  # a tombstone
                             (key_ser(4, kctx), ser({"id": 4, "name": "dee"}, ctx))])
    df = read_decoded(spark, remote.url, "people", startingOffset=0)  # the registry from the topic's config
    assert dict(df.dtypes)["id"] == "bigint" and dict(df.dtypes)["key_decoded"] == "bigint"
    rows = [(r["offset"], r["key_decoded"], r["id"], r["name"], r["decode_error"] is None)
            for r in df.orderBy("offset").collect()]
    assert rows == [(0, 1, 1, "ada", True), (1, 2, None, None, False), (2, 3, None, None, True),
                    (3, 4, 4, "dee", True)]
    assert "unknown" in df.where("offset = 1").first()["decode_error"]
    # the data source's options pass through
    assert [r["offset"] for r in read_decoded(spark, remote.url, "people", registry, startingOffset=3).collect()] == [3]
