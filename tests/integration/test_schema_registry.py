"""The Schema Registry against real node processes, driven by confluent-kafka's own client and serializers.

confluent-kafka's `SchemaRegistryClient` and its Avro, JSON Schema and Protobuf serializers speak
HTTP only: pointed at a node's URL, they register, look up, check compatibility and delete as they
would against Confluent's registry. The cluster test kills the active controller between two
registrations and checks that ids stay unique and stable, on every node and after restarts.
"""

from __future__ import annotations

import json
import struct

import httpx
import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient, SchemaRegistryError
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from tests.support.faults import wait_for
from tests.support.nodes import Cluster

SR = "application/vnd.schemaregistry.v1+json"
USER_V1 = {"type": "record", "name": "User", "namespace": "lakelog.test",
           "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}
USER_V2 = {**USER_V1, "fields": USER_V1["fields"] + [{"name": "email", "type": ["null", "string"], "default": None}]}
USER_BAD = {**USER_V1, "fields": USER_V1["fields"] + [{"name": "city", "type": "string"}]}  # no default


def client(url: str) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": url})


def subjects(url: str, deleted: bool = False) -> list[str]:
    return httpx.get(f"{url}/subjects", params={"deleted": str(deleted).lower()}, timeout=10).json()


def test_avro_with_the_confluent_client_and_serializers(node):
    sr = client(node.url)
    ctx = SerializationContext("users", MessageField.VALUE)
    ser = AvroSerializer(sr, json.dumps(USER_V1))
    data = ser({"name": "ada", "age": 36}, ctx)
    assert data[0] == 0  # Confluent's wire format: magic 0, the 4-byte schema id, the Avro body
    schema_id = struct.unpack(">i", data[1:5])[0]
    assert AvroDeserializer(sr)(data, ctx) == {"name": "ada", "age": 36}

    latest = sr.get_latest_version("users-value")
    assert (latest.schema_id, latest.version) == (schema_id, 1)
    assert json.loads(sr.get_schema(schema_id).schema_str) == USER_V1
    assert sr.lookup_schema("users-value", Schema(json.dumps(USER_V1), "AVRO")).version == 1
    assert sr.get_subjects() == ["users-value"]
    assert sr.get_schema_types() == ["JSON", "PROTOBUF", "AVRO"]

    # BACKWARD (the default): an added field needs a default
    assert sr.test_compatibility("users-value", Schema(json.dumps(USER_V2), "AVRO")) is True
    assert sr.test_compatibility("users-value", Schema(json.dumps(USER_BAD), "AVRO")) is False
    with pytest.raises(SchemaRegistryError) as e:
        sr.register_schema("users-value", Schema(json.dumps(USER_BAD), "AVRO"))
    assert e.value.http_status_code == 409 and e.value.error_code == 409
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in e.value.error_message
    assert sr.get_versions("users-value") == [1]  # nothing stored

    v2_id = sr.register_schema("users-value", Schema(json.dumps(USER_V2), "AVRO"))
    assert v2_id == schema_id + 1
    assert sr.register_schema("users-value", Schema(json.dumps(USER_V2), "AVRO")) == v2_id  # idempotent
    assert sr.get_versions("users-value") == [1, 2]
    # the same schema under another subject keeps its id
    assert client(node.url).register_schema("other-value", Schema(json.dumps(USER_V1), "AVRO")) == schema_id
    assert sr.get_subjects_by_schema_id(schema_id) == ["other-value", "users-value"]

    # compatibility levels, global and per subject
    assert sr.set_compatibility("users-value", "NONE") == {"compatibility": "NONE"}
    assert sr.get_compatibility("users-value") == "NONE"
    assert sr.get_compatibility() == "BACKWARD"
    assert sr.register_schema("users-value", Schema(json.dumps(USER_BAD), "AVRO")) == v2_id + 1

    # soft delete, then permanent; a permanent delete needs a soft one first
    with pytest.raises(SchemaRegistryError) as e:
        sr.delete_version("users-value", 3, permanent=True)
    assert e.value.error_code == 40407
    assert sr.delete_version("users-value", 3) == 3
    assert sr.get_versions("users-value") == [1, 2]
    assert sr.get_schema(v2_id + 1) is not None  # a soft-deleted version's schema stays readable by id
    assert sr.delete_version("users-value", 3, permanent=True) == 3
    r = httpx.get(f"{node.url}/schemas/ids/{v2_id + 1}", timeout=10)  # the client would answer from its cache
    assert (r.status_code, r.json()["error_code"]) == (404, 40403)
    assert sr.delete_subject("users-value") == [1, 2]
    assert subjects(node.url) == ["other-value"] and subjects(node.url, True) == ["other-value", "users-value"]
    assert sr.delete_subject("users-value", permanent=True) == [1, 2]
    assert subjects(node.url, True) == ["other-value"]
    # ids are never reused: the next new schema gets a fresh one
    fresh = {**USER_V1, "name": "Fresh"}
    assert client(node.url).register_schema("fresh-value", Schema(json.dumps(fresh), "AVRO")) == v2_id + 2


def test_json_schema_and_protobuf_serializers(node):
    sr = client(node.url)
    ctx = SerializationContext("orders", MessageField.VALUE)
    order = {"type": "object", "properties": {"id": {"type": "integer"}, "item": {"type": "string"}},
             "required": ["id"]}
    ser = JSONSerializer(json.dumps(order), sr)
    data = ser({"id": 7, "item": "tea"}, ctx)
    assert JSONDeserializer(json.dumps(order))(data, ctx) == {"id": 7, "item": "tea"}
    registered = sr.get_latest_version("orders-value")
    assert registered.schema.schema_type == "JSON" and json.loads(registered.schema.schema_str) == order
    # JSON Schema rules: a new property in an open content model is incompatible (Confluent's rule)
    wider = {**order, "properties": {**order["properties"], "qty": {"type": "integer"}}}
    assert sr.test_compatibility("orders-value", Schema(json.dumps(wider), "JSON")) is False
    narrower = {**order, "properties": {"id": {"type": "integer"}}}
    assert sr.test_compatibility("orders-value", Schema(json.dumps(narrower), "JSON")) is True

    msg_class = _click_message_class()
    pctx = SerializationContext("clicks", MessageField.VALUE)
    pser = ProtobufSerializer(msg_class, sr, {"use.deprecated.format": False})
    pdata = pser(msg_class(user="ada", count=3), pctx)
    from lakelog.ingest_api.schemas import wire
    framed = wire.decode(pdata, protobuf=True)  # our decoder reads the serializer's framing
    assert framed.message_indexes == (0,) and framed.schema_id == sr.get_latest_version("clicks-value").schema_id
    assert msg_class.FromString(framed.payload).user == "ada"
    back = ProtobufDeserializer(msg_class, {"use.deprecated.format": False})(pdata, pctx)
    assert (back.user, back.count) == ("ada", 3)
    assert sr.get_latest_version("clicks-value").schema.schema_type == "PROTOBUF"
    # Protobuf rules: int64 -> int32 is the same wire kind; int64 -> string is not
    proto_ok = 'syntax = "proto3"; package lakelog.test; message Click { string user = 1; int32 count = 2; }'
    proto_bad = 'syntax = "proto3"; package lakelog.test; message Click { string user = 1; string count = 2; }'
    assert sr.test_compatibility("clicks-value", Schema(proto_ok, "PROTOBUF")) is True
    assert sr.test_compatibility("clicks-value", Schema(proto_bad, "PROTOBUF")) is False
    assert sr.register_schema("clicks-value", Schema(proto_ok, "PROTOBUF")) > 0


def _click_message_class():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fd = descriptor_pb2.FileDescriptorProto(name="lakelog_click.proto", package="lakelog.test", syntax="proto3")
    m = fd.message_type.add(name="Click")
    m.field.add(name="user", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    m.field.add(name="count", number=2, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("lakelog.test.Click"))


def test_references_and_bad_input_store_nothing(node):
    sr = client(node.url)
    address = {"type": "record", "name": "Address", "namespace": "lakelog.test",
               "fields": [{"name": "city", "type": "string"}]}
    addr_id = sr.register_schema("address", Schema(json.dumps(address), "AVRO"))
    person = {"type": "record", "name": "Person", "namespace": "lakelog.test",
              "fields": [{"name": "home", "type": "lakelog.test.Address"}]}
    refs = [SchemaReference("lakelog.test.Address", "address", 1)]
    person_id = sr.register_schema("person", Schema(json.dumps(person), "AVRO", refs))
    assert person_id == addr_id + 1
    got = httpx.get(f"{node.url}/subjects/person/versions/1", timeout=10).json()
    assert got["references"] == [{"name": "lakelog.test.Address", "subject": "address", "version": 1}]
    assert httpx.get(f"{node.url}/subjects/address/versions/1/referencedby", timeout=10).json() == [person_id]
    r = httpx.delete(f"{node.url}/subjects/address/versions/1", timeout=10)
    assert (r.status_code, r.json()["error_code"]) == (422, 42206)  # still referenced

    def post(path: str, body: dict):
        return httpx.post(f"{node.url}{path}", content=json.dumps(body), headers={"Content-Type": SR}, timeout=10)

    before = (subjects(node.url, True), httpx.get(f"{node.url}/schemas", timeout=10).json())
    cases = [
        ("/subjects/s1/versions", {"schema": '{"type": "record", "name": "X"}'}, 422, 42201),  # no fields
        ("/subjects/s1/versions", {"schema": "{not json"}, 422, 42201),
        ("/subjects/s1/versions", {"schema": '{"type": 5}', "schemaType": "JSON"}, 422, 42201),
        ("/subjects/s1/versions", {"schema": "message {", "schemaType": "PROTOBUF"}, 422, 42201),
        ("/subjects/s1/versions", {"schema": json.dumps(person), "references": [
            {"name": "lakelog.test.Address", "subject": "nowhere", "version": 1}]}, 422, 42201),  # unknown reference
        ("/subjects/s1/versions", {"schema": json.dumps(person)}, 422, 42201),  # unresolved named type
        ("/subjects/s1/versions", {"schema": '"string"', "schemaType": "XML"}, 422, 42201),
        ("/subjects/" + "s" * 256 + "/versions", {"schema": '"string"'}, 422, 42208),  # subject over the limit
        ("/subjects/s1/versions", {"schema": json.dumps({"type": "enum", "name": "E", "symbols": ["A"] * 2})},
         422, 42201),
        ("/subjects/s1/versions", {"schema": "x" * (256 * 1024 + 1)}, 422, 42209),
    ]
    for path, body, status, code in cases:
        r = post(path, body)
        assert (r.status_code, r.json()["error_code"]) == (status, code), (path, body, r.text)
        assert r.headers["content-type"].startswith(SR)
    for path, status, code in [("/schemas/ids/999", 404, 40403), ("/subjects/nope/versions", 404, 40401),
                               ("/subjects/person/versions/9", 404, 40402),
                               ("/subjects/person/versions/0", 422, 42202),
                               ("/config/person", 404, 40408), ("/mode/person", 404, 40409)]:
        r = httpx.get(f"{node.url}{path}", timeout=10)
        assert (r.status_code, r.json()["error_code"]) == (status, code), path
    r = httpx.put(f"{node.url}/config", json={"compatibility": "SIDEWAYS"}, timeout=10)
    assert (r.status_code, r.json()["error_code"]) == (422, 42203)
    assert (subjects(node.url, True), httpx.get(f"{node.url}/schemas", timeout=10).json()) == before
    # after all that, the next schema gets the next id: the refused ones took none
    assert sr.register_schema("s1", Schema('"string"', "AVRO")) == person_id + 1

    # READONLY mode refuses writes
    assert sr.update_mode("s1", "READONLY") == "READONLY"
    r = post("/subjects/s1/versions", {"schema": '"long"'})
    assert (r.status_code, r.json()["error_code"]) == (422, 42205)


def test_cluster_ids_survive_controller_failover_and_restarts(tmp_path):
    c = Cluster(tmp_path, 3).start()
    try:
        urls = [n.url for n in c.nodes]
        first = client(urls[0]).register_schema("a-value", Schema(json.dumps(USER_V1), "AVRO"))
        for url in urls:  # every node reads it from its own metadata image
            wait_for(lambda url=url: httpx.get(f"{url}/schemas/ids/{first}", timeout=10).status_code == 200,
                     timeout_s=20)
        cid = httpx.get(f"{urls[0]}/v3/clusters", timeout=10).json()["data"][0]["cluster_id"]
        controller = int(httpx.get(f"{urls[0]}/v3/clusters/{cid}", timeout=10)
                         .json()["controller"]["related"].rsplit("/", 1)[1])
        c.node(controller).kill()
        survivor = next(n for n in c.nodes if n.node_id != controller)
        second = client(survivor.url).register_schema("b-value", Schema(json.dumps(USER_V2), "AVRO"))
        assert second == first + 1  # unique: the new controller continues from the replicated next id
        c.node(controller).restart()
        for n in c.nodes:
            wait_for(lambda n=n: httpx.get(f"{n.url}/schemas/ids/{second}", timeout=10).status_code == 200,
                     timeout_s=30)
            assert json.loads(httpx.get(f"{n.url}/schemas/ids/{first}", timeout=10).json()["schema"]) == USER_V1
            assert httpx.get(f"{n.url}/subjects", timeout=10).json() == ["a-value", "b-value"]
        # the same schema registered again, through the restarted node, keeps its id
        assert client(c.node(controller).url).register_schema("c-value", Schema(json.dumps(USER_V1), "AVRO")) == first
    finally:
        c.stop()


AVRO_V2 = "application/vnd.kafka.avro.v2+json"
JSONSCHEMA_V2 = "application/vnd.kafka.jsonschema.v2+json"


def test_rest_produce_and_fetch_avro_and_json_schema(node):
    from lakelog.ingest_api.schemas import wire

    r = httpx.post(f"{node.url}/v3/clusters/{_cluster_id(node.url)}/topics",
                   json={"topic_name": "people", "partitions_count": 1}, timeout=10)
    assert r.status_code == 201, r.text
    body = {"value_schema": json.dumps(USER_V2), "key_schema": '"string"',
            "records": [{"key": "k1", "value": {"name": "ada", "age": 36, "email": {"string": "a@b"}}},
                        {"key": "k2", "value": {"name": "bob", "age": 7, "email": None}}]}
    r = httpx.post(f"{node.url}/topics/people", content=json.dumps(body), headers={"Content-Type": AVRO_V2},
                   timeout=10)
    assert r.status_code == 200, r.text
    value_id, key_id = r.json()["value_schema_id"], r.json()["key_schema_id"]
    sr = client(node.url)
    assert sr.get_latest_version("people-value").schema_id == value_id  # registered under TopicNameStrategy
    assert sr.get_latest_version("people-key").schema_id == key_id

    # the stored bytes are Confluent's wire format: confluent-kafka's deserializer reads them
    raw = httpx.get(f"{node.url}/topics/people/partitions/0/records", params={"offset": 0},
                    headers={"Accept": "application/vnd.kafka.binary.v2+json"}, timeout=10).json()
    import base64
    value0 = base64.b64decode(raw[0]["value"])
    assert wire.decode(value0).schema_id == value_id
    ctx = SerializationContext("people", MessageField.VALUE)
    assert AvroDeserializer(sr)(value0, ctx) == {"name": "ada", "age": 36, "email": "a@b"}

    got = httpx.get(f"{node.url}/topics/people/partitions/0/records", params={"offset": 0},
                    headers={"Accept": AVRO_V2}, timeout=10)
    assert got.status_code == 200, got.text
    assert [(x["key"], x["value"]) for x in got.json()] == [
        ("k1", {"name": "ada", "age": 36, "email": {"string": "a@b"}}),
        ("k2", {"name": "bob", "age": 7, "email": None})]

    # a v2 consumer created with format avro gets the decoded records too
    V2 = {"Content-Type": "application/vnd.kafka.v2+json"}
    r = httpx.post(f"{node.url}/consumers/readers", headers=V2, timeout=30, json={
        "name": "c1", "format": "avro", "auto.offset.reset": "earliest"})
    assert r.status_code == 200, r.text
    base = r.json()["base_uri"]
    assert httpx.post(f"{base}/subscription", json={"topics": ["people"]}, headers=V2, timeout=30).status_code == 204
    polled: list = []

    def more():
        r = httpx.get(f"{base}/records", params={"timeout": 200}, headers={"Accept": AVRO_V2}, timeout=30)
        assert r.status_code == 200, r.text
        polled.extend(r.json())
        return len(polled) >= 2

    wait_for(more, 20, "avro records", interval_s=0)
    assert [x["value"]["name"] for x in polled] == ["ada", "bob"]

    # a value that does not match: 422 and nothing appended (the whole request is refused)
    bad = {"value_schema_id": value_id, "records": [{"value": {"name": "eve", "age": 1, "email": None}},
                                                    {"value": {"name": "eve", "age": "old"}}]}
    r = httpx.post(f"{node.url}/topics/people", content=json.dumps(bad), headers={"Content-Type": AVRO_V2},
                   timeout=10)
    assert (r.status_code, r.json()["error_code"]) == (422, 42203), r.text
    for body, code in [({"value_schema_id": 999, "records": [{"value": {}}]}, 40403),
                       ({"value_schema": "{nope", "records": [{"value": {}}]}, 42201),
                       ({"records": [{"value": {"a": 1}}]}, 42201)]:  # a value but no schema
        r = httpx.post(f"{node.url}/topics/people", content=json.dumps(body), headers={"Content-Type": AVRO_V2},
                       timeout=10)
        assert r.json()["error_code"] == code, r.text
    ends = httpx.get(f"{node.url}/topics/people/partitions/0/offsets", timeout=10).json()
    assert ends["end_offset"] == 2
    # to one partition, by schema id
    r = httpx.post(f"{node.url}/topics/people/partitions/0", headers={"Content-Type": AVRO_V2}, timeout=10,
                   content=json.dumps({"value_schema_id": value_id, "records": [
                       {"value": {"name": "cy", "age": 3, "email": None}}]}))
    assert (r.status_code, r.json()["offsets"][0]["offset"], r.json()["value_schema_id"]) == (200, 2, value_id)

    # JSON Schema
    doc = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    r = httpx.post(f"{node.url}/topics/people", headers={"Content-Type": JSONSCHEMA_V2}, timeout=10,
                   content=json.dumps({"value_schema": json.dumps(doc), "records": [{"value": {"n": 1}}]}))
    assert r.status_code == 409, r.text  # people-value holds an Avro schema: another type is incompatible
    r = httpx.post(f"{node.url}/v3/clusters/{_cluster_id(node.url)}/topics",
                   json={"topic_name": "counts", "partitions_count": 1}, timeout=10)
    r = httpx.post(f"{node.url}/topics/counts", headers={"Content-Type": JSONSCHEMA_V2}, timeout=10,
                   content=json.dumps({"value_schema": json.dumps(doc), "records": [{"value": {"n": 1}}]}))
    assert r.status_code == 200, r.text
    r = httpx.post(f"{node.url}/topics/counts", headers={"Content-Type": JSONSCHEMA_V2}, timeout=10,
                   content=json.dumps({"value_schema": json.dumps(doc), "records": [{"value": {"m": 1}}]}))
    assert (r.status_code, r.json()["error_code"]) == (422, 42203)
    got = httpx.get(f"{node.url}/topics/counts/partitions/0/records", params={"offset": 0},
                    headers={"Accept": JSONSCHEMA_V2}, timeout=10).json()
    assert [x["value"] for x in got] == [{"n": 1}]
    assert JSONDeserializer(json.dumps(doc))(
        base64.b64decode(httpx.get(f"{node.url}/topics/counts/partitions/0/records", params={"offset": 0},
                                   headers={"Accept": "application/vnd.kafka.binary.v2+json"}, timeout=10)
                         .json()[0]["value"]), SerializationContext("counts", MessageField.VALUE)) == {"n": 1}


def _cluster_id(url: str) -> str:
    return httpx.get(f"{url}/v3/clusters", timeout=10).json()["data"][0]["cluster_id"]
