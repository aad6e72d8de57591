"""Schema-aware REST against a real node: Protobuf over v2 produce/fetch/consumers, and v3 produce with schemas.

confluent-kafka's Protobuf serializer and deserializer (HTTP only, pointed at the node's registry)
check the bytes both ways: what REST wrote, the deserializer reads (asking the registry for the
schema with `?format=serialized`); what the serializer wrote, produced on the binary path, REST
renders as JSON.
"""

from __future__ import annotations

import base64
import json

import httpx
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from lakelog.ingest_api.schemas import wire
from tests.support.faults import wait_for

PROTOBUF_V2 = "application/vnd.kafka.protobuf.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
V2 = "application/vnd.kafka.v2+json"
CLICK = """syntax = "proto3";
package lakelog.rest;
import "google/protobuf/timestamp.proto";
message Click {
  string user = 1;
  int64 count = 2;
  google.protobuf.Timestamp at = 3;
  map<string, int32> tags = 4;
  Where where = 5;
  message Where { string city = 1; }
}
"""
KEY = 'syntax = "proto3"; package lakelog.rest; message ClickKey { string id = 1; }'


def _cluster_id(url: str) -> str:
    return httpx.get(f"{url}/v3/clusters", timeout=10).json()["data"][0]["cluster_id"]


def _create(url: str, topic: str) -> None:
    r = httpx.post(f"{url}/v3/clusters/{_cluster_id(url)}/topics",
                   json={"topic_name": topic, "partitions_count": 1}, timeout=10)
    assert r.status_code == 201, r.text


def _raw(url: str, topic: str) -> list[dict]:
    r = httpx.get(f"{url}/topics/{topic}/partitions/0/records", params={"offset": 0},
                  headers={"Accept": BINARY_V2}, timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def _message_class(url: str, schema_id: int, name: str):
    """The generated class of `name`, from the registry's serialized descriptor (what a client would do)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

    doc = httpx.get(f"{url}/schemas/ids/{schema_id}", params={"format": "serialized"},
                    timeout=10).json()
    fd = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(doc["schema"]))
    pool = descriptor_pool.DescriptorPool()
    ts = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(ts)
    pool.Add(ts)
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def test_rest_protobuf_produce_fetch_consume_and_confluent_serdes_both_ways(node):
    url = node.url
    _create(url, "clicks")
    body = {"key_schema": KEY, "value_schema": CLICK, "records": [
        {"key": {"id": "k1"}, "value": {"user": "ada", "count": "3", "at": "2024-05-01T10:00:00Z",
                                        "tags": {"a": 1}, "where": {"city": "Paris"}}},
        {"key": {"id": "k2"}, "value": {"user": "bob"}}]}
    r = httpx.post(f"{url}/topics/clicks", content=json.dumps(body), headers={"Content-Type": PROTOBUF_V2},
                   timeout=30)
    assert r.status_code == 200, r.text
    value_id, key_id = r.json()["value_schema_id"], r.json()["key_schema_id"]
    sr = SchemaRegistryClient({"url": url})
    assert sr.get_latest_version("clicks-value").schema_id == value_id
    assert sr.get_latest_version("clicks-key").schema.schema_type == "PROTOBUF"

    # Confluent's framing: magic, id, message indexes [0] (one 0 byte), then the Protobuf bytes
    raw = _raw(url, "clicks")
    value0 = base64.b64decode(raw[0]["value"])
    framed = wire.decode(value0, protobuf=True)
    assert (value0[0], framed.schema_id, framed.message_indexes, value0[5]) == (0, value_id, (0,), 0)
    click = _message_class(url, value_id, "lakelog.rest.Click")
    decoded = click.FromString(framed.payload)
    assert (decoded.user, decoded.count, decoded.where.city, dict(decoded.tags)) == ("ada", 3, "Paris", {"a": 1})

    # confluent-kafka's deserializer reads what REST wrote (it fetches ?format=serialized from the node)
    ctx = SerializationContext("clicks", MessageField.VALUE)
    back = ProtobufDeserializer(click, {"use.deprecated.format": False}, sr)(value0, ctx)
    assert (back.user, back.count, back.at.ToJsonString()) == ("ada", 3, "2024-05-01T10:00:00Z")

    # fetch as JSON: Protobuf's JSON mapping, default values included (Confluent's printer)
    got = httpx.get(f"{url}/topics/clicks/partitions/0/records", params={"offset": 0},
                    headers={"Accept": PROTOBUF_V2}, timeout=10)
    assert got.status_code == 200, got.text
    assert [(x["key"], x["value"]) for x in got.json()] == [
        ({"id": "k1"}, {"user": "ada", "count": "3", "at": "2024-05-01T10:00:00Z", "tags": {"a": 1},
                        "where": {"city": "Paris"}}),
        ({"id": "k2"}, {"user": "bob", "count": "0", "tags": {}})]

    # and the other way: confluent-kafka's serializer writes, the binary path stores, REST renders JSON
    other = SerializationContext("clicks", MessageField.VALUE)
    ser = ProtobufSerializer(click, sr, {"use.deprecated.format": False, "auto.register.schemas": True})
    data = ser(click(user="cy", count=9), other)
    r = httpx.post(f"{url}/topics/clicks", headers={"Content-Type": BINARY_V2}, timeout=10,
                   json={"records": [{"value": base64.b64encode(data).decode()}]})
    assert r.status_code == 200, r.text
    got = httpx.get(f"{url}/topics/clicks/partitions/0/records", params={"offset": 2},
                    headers={"Accept": PROTOBUF_V2}, timeout=10).json()
    assert got[0]["value"] == {"user": "cy", "count": "9", "tags": {}}

    # a v2 consumer created with format protobuf
    r = httpx.post(f"{url}/consumers/pb", headers={"Content-Type": V2}, timeout=30, json={
        "name": "c1", "format": "protobuf", "auto.offset.reset": "earliest"})
    assert r.status_code == 200, r.text
    base = r.json()["base_uri"]
    r = httpx.post(f"{base}/subscription", json={"topics": ["clicks"]}, headers={"Content-Type": V2}, timeout=30)
    assert r.status_code == 204
    polled: list = []

    def more():
        r = httpx.get(f"{base}/records", params={"timeout": 200}, headers={"Accept": PROTOBUF_V2}, timeout=30)
        assert r.status_code == 200, r.text
        polled.extend(r.json())
        return len(polled) >= 3

    wait_for(more, 20, "protobuf records", interval_s=0)
    assert [x["value"]["user"] for x in polled] == ["ada", "bob", "cy"]
    assert polled[0]["key"] == {"id": "k1"}

    # bad input: nothing appended
    _create(url, "fresh")
    for doc, status, code in [
        ({"value_schema_id": value_id, "records": [{"value": {"user": "x"}}, {"value": {"nope": 1}}]}, 422, 42203),
        ({"value_schema_id": value_id, "records": [{"value": {"count": "many"}}]}, 422, 42203),
        ({"value_schema": 'syntax = "proto3"; message M { Missing m = 1; }', "records": [{"value": {}}]}, 422, 42201),
        ({"value_schema": "message {", "records": [{"value": {}}]}, 422, 42201),
        ({"value_schema_id": 9999, "records": [{"value": {}}]}, 404, 40403),
    ]:
        for topic in ("clicks", "fresh"):  # "fresh" has no subject yet: a schema protoc refuses is not registered
            r = httpx.post(f"{url}/topics/{topic}", content=json.dumps(doc), timeout=30,
                           headers={"Content-Type": PROTOBUF_V2})
            assert (r.status_code, r.json()["error_code"]) == (status, code), (topic, r.text)
    assert httpx.get(f"{url}/topics/clicks/partitions/0/offsets", timeout=10).json()["end_offset"] == 3
    assert httpx.get(f"{url}/topics/fresh/partitions/0/offsets", timeout=10).json()["end_offset"] == 0
    assert "fresh-value" not in httpx.get(f"{url}/subjects", timeout=10).json()
    # the registry's own API refuses what protoc refuses, too (Confluent: 42201), and stores nothing
    r = httpx.post(f"{url}/subjects/broken-value/versions", timeout=30, json={
        "schemaType": "PROTOBUF", "schema": 'syntax = "proto3"; message M { Missing m = 1; }'})
    assert (r.status_code, r.json()["error_code"]) == (422, 42201) and "Missing" in r.json()["message"], r.text
    assert "broken-value" not in httpx.get(f"{url}/subjects", timeout=10).json()


USER = {"type": "record", "name": "User", "namespace": "lakelog.v3",
        "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}


def test_v3_produce_with_schemas_strategies_and_confluent_errors(node):
    from confluent_kafka.schema_registry import Schema
    from confluent_kafka.schema_registry.avro import AvroDeserializer

    url = node.url
    _create(url, "members")
    base = f"{url}/v3/clusters/{_cluster_id(url)}/topics/members/records"
    sr = SchemaRegistryClient({"url": url})

    # a raw schema: registered under TopicNameStrategy's subject; the report names it
    r = httpx.post(base, json={"key": {"type": "JSONSCHEMA", "schema": '{"type": "string"}', "data": "m1"},
                               "value": {"type": "AVRO", "schema": json.dumps(USER),
                                         "data": {"name": "ada", "age": 36}}}, timeout=30)
    assert r.status_code == 200, r.text
    rep = r.json()
    value_id = sr.get_latest_version("members-value").schema_id
    assert rep["value"] == {"type": "AVRO", "subject": "members-value", "schema_id": value_id, "schema_version": 1,
                            "size": rep["value"]["size"]} and rep["value"]["size"] > 5
    assert rep["key"]["type"] == "JSONSCHEMA" and rep["key"]["subject"] == "members-key"
    raw = _raw(url, "members")
    ctx = SerializationContext("members", MessageField.VALUE)
    assert AvroDeserializer(sr)(base64.b64decode(raw[0]["value"]), ctx) == {"name": "ada", "age": 36}
    assert json.loads(base64.b64decode(raw[0]["key"])[5:]) == "m1"

    # by id, by version, by the latest version (type only), each to the same subject
    for field in ({"schema_id": value_id}, {"schema_version": 1}, {"type": "AVRO"},
                  {"subject": "members-value", "schema_version": 1}):
        r = httpx.post(base, json={"value": {**field, "data": {"name": "bob", "age": 7}}}, timeout=30)
        assert r.status_code == 200, (field, r.text)
        assert (r.json()["value"]["schema_id"], r.json()["value"]["subject"]) == (value_id, "members-value")

    # RECORD_NAME and TOPIC_RECORD_NAME: the subject is the record's full name (prefixed by the topic)
    record_id = sr.register_schema("lakelog.v3.User", Schema(json.dumps(USER), "AVRO"))
    r = httpx.post(base, json={"value": {"schema_id": record_id, "subject_name_strategy": "RECORD_NAME",
                                         "data": {"name": "cy", "age": 1}}}, timeout=30)
    assert (r.status_code, r.json()["value"]["subject"]) == (200, "lakelog.v3.User"), r.text
    r = httpx.post(base, json={"value": {"type": "PROTOBUF", "subject_name_strategy": "TOPIC_RECORD_NAME",
                                         "schema": KEY, "data": {"id": "p1"}}}, timeout=30)
    assert (r.status_code, r.json()["value"]["subject"]) == (200, "members-lakelog.rest.ClickKey"), r.text
    pb = wire.decode(base64.b64decode(_raw(url, "members")[-1]["value"]), protobuf=True)
    assert pb.message_indexes == (0,) and pb.payload == b"\x0a\x02p1"

    # a batch: one bad entry fails alone; the stream (chunked) reports each record in order
    r = httpx.post(base + ":batch", timeout=30, json={"entries": [
        {"id": "a", "value": {"schema_id": value_id, "data": {"name": "dee", "age": 2}}},
        {"id": "b", "value": {"schema_id": value_id, "data": {"name": "dee", "age": "two"}}}]})
    assert r.status_code == 207, r.text
    assert [s["id"] for s in r.json()["successes"]] == ["a"]
    assert [(f["id"], f["error_code"]) for f in r.json()["failures"]] == [("b", 42207)]

    def chunks():
        yield json.dumps({"value": {"schema_id": value_id, "data": {"name": "eve", "age": 3}}}).encode()
        yield json.dumps({"value": {"schema_id": 4242, "data": {}}}).encode()
        yield json.dumps({"value": {"type": "AVRO", "data": {"name": "fay", "age": 4}}}).encode()

    r = httpx.post(base, content=chunks(), headers={"Content-Type": "application/json"}, timeout=30)
    codes = [json.loads(line)["error_code"] for line in r.text.splitlines()]
    assert codes == [200, 42207, 200], r.text
    end = httpx.get(f"{url}/topics/members/partitions/0/offsets", timeout=10).json()["end_offset"]

    # Confluent v3's errors; nothing appended
    for body, status, code in [
        ({"value": {"schema_id": 4242, "data": {}}}, 422, 42207),  # unknown id
        ({"value": {"schema_id": record_id + 1000, "data": {}}}, 422, 42207),
        ({"value": {"schema_id": record_id, "data": {"name": "x", "age": 1}}}, 200, None),  # same text as members-value v1
        ({"value": {"schema_version": 9, "data": {}}}, 400, 400),
        ({"value": {"subject_name_strategy": "RECORD_NAME", "schema_version": 1, "data": {}}}, 400, 400),
        ({"value": {"subject_name_strategy": "NEAREST", "schema_id": value_id, "data": {}}}, 400, 400),
        ({"value": {"type": "AVRO", "schema": "{nope", "data": {}}}, 422, 42205),
        ({"value": {"schema": json.dumps(USER), "data": {}}}, 400, 400),  # a raw schema needs its type
        ({"value": {"schema_id": value_id, "data": {"name": "x"}}}, 422, 42207),  # data does not convert
        ({"value": {"type": "JSONSCHEMA", "schema_id": value_id, "data": {}}}, 422, 42207),  # an AVRO id
        ({"value": {"schema_id": "1", "data": {}}}, 400, 400),
    ]:
        r = httpx.post(base, json=body, timeout=30)
        assert r.status_code == status, (body, r.text)
        if code is not None:
            assert (r.json()["error_code"], r.headers["content-type"]) == (code, "application/json"), r.text
            end_now = httpx.get(f"{url}/topics/members/partitions/0/offsets", timeout=10).json()["end_offset"]
            assert end_now == end, body
        else:
            end += 1
