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
from lakelog.spark_log.jvm_source import jvm_source_loaded
from lakelog.spark_log.session import remote_session
from lakelog.tiering.manager import RemoteTier
from lakelog.tiering.config import TieringConfig
from lakelog.tiering.fs_store import FileSystemStore
from lakelog.tiering.topics import TopicDescriptor, write_topic_descriptor
from tests.support.nodes import start_node

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def spark(spark_s3):  # the process's one S3 environment: see tests/integration/conftest.py
    session = remote_session(None, app_name="lakelog-schema-tables-test")
    # the JVM reader serves "lakelog" (make jvm), the Python one "lakelog_python": the options are tested on both
    assert jvm_source_loaded(session), "make jvm builds spark_log/jvm/lakelog-spark.jar"
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

    def append(self, topic: str, records: list[tuple[bytes | None, bytes | None]], *,
               registry_config: bool = True) -> None:
        log = self.logs.get(topic)
        if log is None:
            log = self.logs[topic] = PartitionLog(self.tmp_path / "log" / f"{topic}-0",
                                                  LogConfig({"segment.bytes": 100_000, "retention.ms": -1}))
            config = {"schema.registry.url": self.registry_url} if registry_config else {}
            write_topic_descriptor(self.store, TopicDescriptor(topic, None, 1, config))
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


READERS = ("lakelog", "lakelog_python")  # the JVM reader and the Python one


def _decoded(spark, remote: Remote, fmt: str, topic: str, **options: str):
    reader = spark.read.format(fmt).option("remote", remote.url).option("topic", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_the_value_format_option_types_columns_through_either_reader(tmp_path, spark, registry):
    from pyspark.errors import PySparkException

    from lakelog.spark_log.decoded_read import DecodeOptionError

    sr = SchemaRegistryClient({"url": registry})
    remote = Remote(tmp_path, registry)
    v1 = {"type": "record", "name": "Item", "namespace": "lakelog.o",
          "fields": [{"name": "id", "type": "int"}, {"name": "ratio", "type": "float"}]}
    v2 = {**v1, "fields": [{"name": "id", "type": "long"}, {"name": "ratio", "type": "double"},
                           {"name": "label", "type": "string", "default": "none"}]}
    ctx, kctx = SerializationContext("items", MessageField.VALUE), SerializationContext("items", MessageField.KEY)
    key_ser, ser1 = AvroSerializer(sr, '"string"'), AvroSerializer(sr, json.dumps(v1))
    remote.append("items", [(key_ser("k0", kctx), ser1({"id": 1, "ratio": 0.5}, ctx))])
    v2_id = sr.register_schema("items-value", Schema(json.dumps(v2), "AVRO"))
    ser2 = AvroSerializer(sr, json.dumps(v2))
    remote.append("items", [(key_ser("k1", kctx), ser2({"id": 2**40, "ratio": 0.25, "label": "big"}, ctx)),
                            (key_ser("k2", kctx), b"\x00" + v2_id.to_bytes(4, "big") + b"\xff"),  # does not decode
                            (key_ser("k3", kctx), b"\x00\x00\x01\x86\x9f{}"),  # schema id 99999: no version of it
                            (key_ser("k4", kctx), None),  # a tombstone
                            (b"raw", b"plain text")])  # neither framed
    expected = [(0, "k0", 1, 0.5, "none", None), (1, "k1", 2**40, 0.25, "big", None),
                (2, "k2", None, None, None, "does not decode"), (3, "k3", None, None, None, "not a version of"),
                (4, "k4", None, None, None, None), (5, None, None, None, None, "not in Confluent's wire format")]
    for fmt in READERS:
        df = _decoded(spark, remote, fmt, "items", valueFormat="schema-registry")
        types = dict(df.dtypes)
        # every version reads as the latest: int -> bigint, float -> double, the new field with its default
        assert (types["id"], types["ratio"], types["label"], types["key_decoded"], types["value"]) == (
            "bigint", "double", "string", "string", "binary"), fmt
        rows = [(r["offset"], r["key_decoded"], r["id"], r["ratio"], r["label"], r["decode_error"])
                for r in df.orderBy("offset").collect()]
        assert [r[:5] for r in rows] == [e[:5] for e in expected], fmt
        for got, want in zip(rows, expected):
            assert (got[5] is None) if want[5] is None else (want[5] in got[5]), (fmt, got)
        # the data source's own options still apply under the wrapper
        assert [r["offset"] for r in _decoded(spark, remote, fmt, "items", valueFormat="schema-registry",
                                              startingOffset="1", endingOffset="1").collect()] == [1]
        dropped = _decoded(spark, remote, fmt, "items", valueformat="SCHEMA-REGISTRY", mode="DROPMALFORMED")
        assert "decode_error" not in dropped.columns
        assert sorted(r["offset"] for r in dropped.collect()) == [0, 1, 4]
        raw_keys = _decoded(spark, remote, fmt, "items", valueFormat="schema-registry", keyFormat="raw")
        assert "key_decoded" not in raw_keys.columns and "id" in raw_keys.columns
        keys_only = _decoded(spark, remote, fmt, "items", keyFormat="schema-registry")
        assert [r["key_decoded"] for r in keys_only.orderBy("offset").collect()] == ["k0", "k1", "k2", "k3", "k4", None]
        assert "id" not in keys_only.columns
        with pytest.raises(PySparkException, match="offset 2"):
            _decoded(spark, remote, fmt, "items", valueFormat="schema-registry", mode="FAILFAST").collect()
        assert _decoded(spark, remote, fmt, "items", valueFormat="raw").columns == _decoded(
            spark, remote, fmt, "items").columns  # raw: the data source as it is
        for bad, match in (({"valueFormat": "avro"}, "valueformat must be one of"),
                           ({"valueFormat": "schema-registry", "mode": "LENIENT"}, "mode must be one of"),
                           ({"valueFormat": "schema-registry", "valueSubject": "nope-value"}, "no subject nope-value")):
            with pytest.raises(DecodeOptionError, match=match):
                _decoded(spark, remote, fmt, "items", **bad)
        # a reader without the wrapper (here: the JVM's DataFrameReader itself) is refused, never raw rows
        with pytest.raises(Exception, match="DataFrameReader wrapper"):
            spark._jsparkSession.read().format(fmt).option("remote", remote.url).option("topic", "items") \
                .option("valueFormat", "schema-registry").load().count()

    # JSON Schema and Protobuf values, a registry named by the option (the topic has no config), both readers
    doc = {"type": "object", "properties": {"id": {"type": "integer"}, "tags": {"type": "array",
                                                                                 "items": {"type": "string"}}}}
    jctx = SerializationContext("docs", MessageField.VALUE)
    jser = JSONSerializer(json.dumps(doc), sr)
    remote.append("docs", [(None, jser({"id": 7, "tags": ["a", "b"]}, jctx))], registry_config=False)
    c1 = _proto_class(1)
    pctx = SerializationContext("clicks", MessageField.VALUE)
    pser = ProtobufSerializer(c1, sr, {"use.deprecated.format": False})
    remote.append("clicks", [(None, pser(c1(user="ada", count=3, tags=["x"]), pctx))], registry_config=False)
    for fmt in READERS:
        with pytest.raises(DecodeOptionError, match="schema.registry.url"):
            _decoded(spark, remote, fmt, "docs", valueFormat="schema-registry")
        js = _decoded(spark, remote, fmt, "docs", valueFormat="schema-registry", **{"schema.registry.url": registry})
        assert (dict(js.dtypes)["id"], dict(js.dtypes)["tags"]) == ("bigint", "array<string>")
        assert [(r["id"], r["tags"], r["decode_error"]) for r in js.collect()] == [(7, ["a", "b"], None)]
        pb = _decoded(spark, remote, fmt, "clicks", valueFormat="schema-registry", **{"schema.registry.url": registry})
        assert dict(pb.dtypes)["count"] == "int"
        assert [(r["user"], r["count"], r["tags"]) for r in pb.collect()] == [("ada", 3, ["x"])]


def _order_class():
    """lakelog.t.Order importing acme/money.proto (Money): confluent-kafka's serializer registers the import
    as its own subject and references it."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    F = descriptor_pb2.FieldDescriptorProto
    money = descriptor_pb2.FileDescriptorProto(name="acme/money.proto", package="acme", syntax="proto3")
    m = money.message_type.add(name="Money")
    m.field.add(name="currency", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    m.field.add(name="units", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    order = descriptor_pb2.FileDescriptorProto(name="order.proto", package="lakelog.t", syntax="proto3",
                                               dependency=["acme/money.proto"])
    o = order.message_type.add(name="Order")
    o.field.add(name="id", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    o.field.add(name="total", number=2, type=F.TYPE_MESSAGE, type_name=".acme.Money", label=F.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(money)
    pool.Add(order)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("lakelog.t.Order")), \
        message_factory.GetMessageClass(pool.FindMessageTypeByName("acme.Money"))


def test_schemas_with_references_to_other_subjects_decode_in_tables_and_through_the_option(tmp_path, spark, registry):
    from confluent_kafka.schema_registry import SchemaReference

    sr = SchemaRegistryClient({"url": registry})
    remote = Remote(tmp_path, registry)

    # Avro: Person uses com.acme.Address (subject acme-address), which uses com.acme.Kind (subject acme-kind)
    kind = {"type": "enum", "name": "Kind", "namespace": "com.acme", "symbols": ["HOME", "WORK"]}
    address = {"type": "record", "name": "Address", "namespace": "com.acme",
               "fields": [{"name": "city", "type": "string"}, {"name": "kind", "type": "com.acme.Kind"}]}
    sr.register_schema("acme-kind", Schema(json.dumps(kind), "AVRO"))
    sr.register_schema("acme-address", Schema(json.dumps(address), "AVRO",
                                              [SchemaReference("com.acme.Kind", "acme-kind", 1)]))
    person = {"type": "record", "name": "Person", "namespace": "com.acme.people", "fields": [
        {"name": "name", "type": "string"}, {"name": "home", "type": "com.acme.Address"},
        {"name": "work", "type": ["null", "com.acme.Address"], "default": None}]}
    ctx = SerializationContext("people_ref", MessageField.VALUE)
    ser = AvroSerializer(sr, Schema(json.dumps(person), "AVRO", [SchemaReference("com.acme.Address", "acme-address", 1)]))
    remote.append("people_ref", [(None, ser({"name": "ada", "home": {"city": "Oslo", "kind": "HOME"}, "work": None},
                                            ctx)),
                                 (None, ser({"name": "bob", "home": {"city": "Rome", "kind": "HOME"},
                                             "work": {"city": "Bern", "kind": "WORK"}}, ctx))])

    # JSON Schema: a $ref to the document of subject acme-point, by its reference name
    point = {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}}}
    sr.register_schema("acme-point", Schema(json.dumps(point), "JSON"))
    shape = {"type": "object", "properties": {"name": {"type": "string"}, "at": {"$ref": "point.json"}}}
    shape_id = sr.register_schema("shapes_ref-value", Schema(json.dumps(shape), "JSON",
                                                             [SchemaReference("point.json", "acme-point", 1)]))
    frame = b"\x00" + shape_id.to_bytes(4, "big")
    remote.append("shapes_ref", [(None, frame + json.dumps({"name": "dot", "at": {"x": 1.5, "y": -2}}).encode())])

    # Protobuf: order.proto imports acme/money.proto, registered by confluent-kafka's serializer as a reference
    order_cls, money_cls = _order_class()
    pctx = SerializationContext("orders_ref", MessageField.VALUE)
    pser = ProtobufSerializer(order_cls, sr, {"use.deprecated.format": False})
    remote.append("orders_ref", [(None, pser(order_cls(id="o-1", total=money_cls(currency="EUR", units=12)), pctx))])
    assert sr.get_latest_version("orders_ref-value").schema.references  # the import is a reference indeed

    topics = ["people_ref", "shapes_ref", "orders_ref"]
    res = run_job(spark, "sync-tables", remote.url, topics=topics)
    assert res.totals["rows_added"] == 4  # every record decoded: none went to a dead-letter table
    people = spark.read.format("delta").load(f"{remote.url}/tables/people_ref")
    assert dict(people.dtypes)["home"] == "struct<city:string,kind:string>"
    assert _rows(spark, remote, "people_ref", "name", "home", "work") == [
        ("ada", ("Oslo", "HOME"), None), ("bob", ("Rome", "HOME"), ("Bern", "WORK"))]
    shapes = spark.read.format("delta").load(f"{remote.url}/tables/shapes_ref")
    assert dict(shapes.dtypes)["at"] == "struct<x:double,y:double>"
    assert _rows(spark, remote, "shapes_ref", "name", "at") == [("dot", (1.5, -2.0))]
    orders = spark.read.format("delta").load(f"{remote.url}/tables/orders_ref")
    assert dict(orders.dtypes)["total"] == "struct<currency:string,units:bigint>"
    assert _rows(spark, remote, "orders_ref", "id", "total") == [("o-1", ("EUR", 12))]

    for fmt in READERS:
        got = {t: [tuple(r) for r in _decoded(spark, remote, fmt, t, valueFormat="schema-registry")
                   .orderBy("offset").select(*cols, "decode_error").collect()]
               for t, cols in (("people_ref", ("name", "home")), ("shapes_ref", ("name", "at")),
                               ("orders_ref", ("id", "total")))}
        assert got == {"people_ref": [("ada", ("Oslo", "HOME"), None), ("bob", ("Rome", "HOME"), None)],
                       "shapes_ref": [("dot", (1.5, -2.0), None)],
                       "orders_ref": [("o-1", ("EUR", 12), None)]}, fmt


def test_lakelog_topic_views_are_typed_like_the_tables_and_follow_new_versions(tmp_path, spark, registry):
    from lakelog.spark_log.tables import register_topics

    sr = SchemaRegistryClient({"url": registry})
    remote = Remote(tmp_path, registry)
    v1 = {"type": "record", "name": "Visit", "namespace": "lakelog.v", "fields": [{"name": "page", "type": "string"}]}
    v2 = {**v1, "fields": v1["fields"] + [{"name": "ms", "type": "long", "default": -1}]}
    ctx, kctx = SerializationContext("visits", MessageField.VALUE), SerializationContext("visits", MessageField.KEY)
    key_ser, ser1 = AvroSerializer(sr, '"long"'), AvroSerializer(sr, json.dumps(v1))
    remote.append("visits", [(key_ser(7, kctx), ser1({"page": "/a"}, ctx)), (key_ser(8, kctx), b"\x00junk")])
    remote.append("plain", [(b"k", b"just bytes")])  # no subject: the view stays raw

    names = register_topics(spark, remote.url)
    assert {"visits", "plain"} <= set(names)
    visits = spark.table("lakelog.visits")
    assert (dict(visits.dtypes)["page"], dict(visits.dtypes)["key_decoded"]) == ("string", "bigint")
    rows = spark.sql("SELECT offset, key_decoded, page, decode_error IS NULL AS ok FROM lakelog.visits "
                     "ORDER BY offset").collect()
    assert [tuple(r) for r in rows] == [(0, 7, "/a", True), (1, 8, None, False)]
    assert spark.table("lakelog.plain").columns == spark.read.format("lakelog").option("remote", remote.url) \
        .option("topic", "plain").load().columns  # raw: no decoded columns, no decode_error

    # a new version, and a record written with it: the view made before does not know the version and
    # says so; the next registration (the SQL server refreshes its views) reads it, as the table would
    ser2 = AvroSerializer(sr, json.dumps(v2))
    remote.append("visits", [(key_ser(9, kctx), ser2({"page": "/b", "ms": 12}, ctx))])
    stale = spark.sql("SELECT decode_error FROM lakelog.visits WHERE offset = 2").first()["decode_error"]
    assert "not a version of subject visits-value" in stale
    register_topics(spark, remote.url)
    rows = spark.sql("SELECT offset, page, ms FROM lakelog.visits WHERE decode_error IS NULL ORDER BY offset").collect()
    assert [tuple(r) for r in rows] == [(0, "/a", -1), (2, "/b", 12)]
