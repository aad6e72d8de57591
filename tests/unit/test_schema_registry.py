"""The Schema Registry's pure parts: languages, compatibility levels, the replicated state and its records."""

from __future__ import annotations

import json

import pytest

from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.schemas import errors as E
from lakelog.ingest_api.schemas.compatibility import compatibility_errors
from lakelog.ingest_api.schemas.languages import parse_schema
from lakelog.ingest_api.schemas.state import SchemaRegistryState
from lakelog.ingest_api.schemas.state_writes import controller_records
from lakelog.ingest_api.http.access import requirement
from lakelog.ingest_api.security.acl import Operation, ResourceType


def avro(*fields, name="R"):
    return json.dumps({"type": "record", "name": name, "fields": [dict(f) for f in fields]})


A = {"name": "a", "type": "int"}
B_DEFAULT = {"name": "b", "type": "string", "default": ""}
B = {"name": "b", "type": "string"}


def register(state, subject, schema, schema_type="AVRO", **extra):
    records, result = controller_records("schema_register", {"subject": subject, "schema": schema,
                                                             "schemaType": schema_type, **extra}, state)
    for r in records:
        state = state.apply(json.loads(json.dumps(r)))  # the records travel as JSON
    return state, result


@pytest.mark.parametrize("level, new, ok", [
    ("BACKWARD", avro(A, B_DEFAULT), True),  # a new field with a default: the new reader fills it
    ("BACKWARD", avro(A, B), False),
    ("FORWARD", avro(A, B), True),  # the old reader ignores the new field
    ("FORWARD", avro({"name": "a", "type": "long"}), False),  # the old int reader cannot read a long
    ("BACKWARD", avro({"name": "a", "type": "long"}), True),  # int promotes to long
    ("FULL", avro(A, B_DEFAULT), True),
    ("FULL", avro(A, B), False),
    ("NONE", avro(B), True),
])
def test_avro_levels(level, new, ok):
    old = parse_schema("AVRO", avro(A))
    errors = compatibility_errors(level, parse_schema("AVRO", new), [(1, old)])
    assert (errors == []) is ok, errors


def test_transitive_levels_check_every_version():
    v1 = parse_schema("AVRO", avro(A))
    v2 = parse_schema("AVRO", avro(A, B_DEFAULT))
    v3 = parse_schema("AVRO", avro(B_DEFAULT))  # drops a (no default in v1's reader) and keeps b
    # BACKWARD: v3 reads v2 data (a ignored, b present); transitive: v3 reads v1 data? b has a default: yes
    assert compatibility_errors("BACKWARD", v3, [(1, v1), (2, v2)]) == []
    # FORWARD: v2 reads v3 data? v2 needs a, v3 lacks it, v2's a has no default: no
    assert compatibility_errors("FORWARD", v3, [(1, v1), (2, v2)]) != []
    v2b = parse_schema("AVRO", avro({"name": "a", "type": "int", "default": 0}, B_DEFAULT))
    assert compatibility_errors("FORWARD", v3, [(1, v1), (2, v2b)]) == []
    assert any("version 1" in e for e in compatibility_errors("FORWARD_TRANSITIVE", v3, [(1, v1), (2, v2b)]))


def test_json_schema_content_models():
    def js(doc):
        return parse_schema("JSON", json.dumps(doc))
    open_v1 = js({"type": "object", "properties": {"a": {"type": "integer"}}})
    closed_v1 = js({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False})
    added = {"b": {"type": "string"}}
    # open content model: adding a property is incompatible, removing one is compatible (Confluent)
    assert js({"type": "object", "properties": {"a": {"type": "integer"}, **added}}).read_errors(open_v1)
    assert js({"type": "object", "properties": {}}).read_errors(open_v1) == []
    # closed: adding an optional property is compatible, a required one is not, removing one is not
    assert js({"type": "object", "properties": {"a": {"type": "integer"}, **added},
               "additionalProperties": False}).read_errors(closed_v1) == []
    assert js({"type": "object", "properties": {"a": {"type": "integer"}, **added}, "required": ["b"],
               "additionalProperties": False}).read_errors(closed_v1)
    assert js({"type": "object", "properties": {}, "additionalProperties": False}).read_errors(closed_v1)
    # types: integer -> number widens; a narrower maximum or a new enum narrows
    assert js({"type": "number"}).read_errors(js({"type": "integer"})) == []
    assert js({"type": "integer"}).read_errors(js({"type": "number"}))
    assert js({"type": "integer", "maximum": 5}).read_errors(js({"type": "integer", "maximum": 9}))
    assert js({"enum": ["x", "y"]}).read_errors(js({"enum": ["x"]})) == []
    assert js({"enum": ["x"]}).read_errors(js({"enum": ["x", "y"]}))


def test_protobuf_rules():
    def pb(body, package="p"):
        return parse_schema("PROTOBUF", f'syntax = "proto3"; package {package}; {body}')
    v1 = pb("message M { int32 a = 1; string s = 2; }")
    assert pb("message M { int64 a = 1; bytes s = 2; bool c = 3; }").read_errors(v1) == []  # same wire kinds
    assert pb("message M { int32 a = 1; }").read_errors(v1) == []  # FIELD_REMOVED is compatible
    assert pb("message M { sint32 a = 1; string s = 2; }").read_errors(v1)  # zig-zag is another kind
    assert pb("message M { N a = 1; string s = 2; } message N { int32 x = 1; }").read_errors(v1)
    assert pb("message Other { int32 a = 1; }").read_errors(v1)  # MESSAGE_REMOVED
    assert pb("message M { int32 a = 1; string s = 2; }", package="q").read_errors(v1)  # PACKAGE_CHANGED
    assert pb("message M { oneof o { int32 a = 1; string s = 2; } }").read_errors(v1)  # two fields into a oneof
    assert pb("message M { oneof o { int32 a = 1; } string s = 2; }").read_errors(v1) == []


@pytest.mark.parametrize("schema_type, text", [
    ("AVRO", '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "nosuch"}]}'),
    ("AVRO", '{"type": "enum", "name": "E", "symbols": ["A", "A"]}'),
    ("AVRO", ""),
    ("JSON", '{"type": "objekt"}'),
    ("JSON", '{"$ref": "#/definitions/missing"}'),
    ("PROTOBUF", "message M { int32 a = ; }"),
    ("PROTOBUF", 'syntax = "proto3"; import "other.proto"; message M { Other o = 1; }'),
    ("PROTOBUF", "message M { int32 a = 1; int32 b = 1; }"),
    ("XML", "<a/>"),
])
def test_invalid_schemas_are_refused(schema_type, text):
    with pytest.raises(E.InvalidSchemaError):
        parse_schema(schema_type, text)


def test_state_ids_versions_deletes_and_snapshot():
    st = SchemaRegistryState()
    st, r1 = register(st, "s", avro(A))
    assert r1 == {"id": 1, "version": 1, "subject": "s"}
    st, again = register(st, "s", json.dumps(json.loads(avro(A)), indent=2))  # same schema, other layout
    assert again["id"] == 1 and st.versions("s")[-1].version == 1
    st, r2 = register(st, "s", avro(A, B_DEFAULT))
    st, r3 = register(st, "t", avro(A))
    assert (r2["id"], r3["id"]) == (2, 1)  # the same schema in another subject keeps its id
    with pytest.raises(E.IncompatibleSchemaError):
        register(st, "s", avro(A, B_DEFAULT, {"name": "c", "type": "int"}))  # c has no default
    with pytest.raises(E.VersionNotSoftDeletedError):
        controller_records("schema_delete_version", {"subject": "s", "version": "2", "permanent": True}, st)
    records, res = controller_records("schema_delete_version", {"subject": "s", "version": "latest"}, st)
    st = st.apply(records[0])
    assert res == {"version": 2} and [v.version for v in st.versions("s")] == [1]
    records, _ = controller_records("schema_delete_version", {"subject": "s", "version": "2", "permanent": True}, st)
    st = st.apply(records[0])
    assert 2 not in st.schemas and st.next_id == 3  # ids are never reused
    st, r4 = register(st, "s", avro(A, {"name": "c", "type": "int", "default": 0}))
    assert (r4["id"], r4["version"]) == (3, 2)

    image = ClusterImage()
    for rec in [{"type": "schema_config", "subject": "", "compatibility": "FULL", "normalize": None},
                {"type": "schema_mode", "subject": "s", "mode": "READONLY"}]:
        st = st.apply(rec)
    image.schemas = st
    other = ClusterImage()
    other.restore(image.snapshot())
    assert other.schemas == st and other.schemas.by_key == st.by_key
    assert other.schemas.compatibility_level("x") == "FULL" and other.schemas.mode("s") == "READONLY"


def test_apply_skips_records_that_do_not_fit():
    image = ClusterImage()
    ok = {"type": "schema_register", "subject": "s", "version": 1, "id": 5, "schema_type": "AVRO",
          "schema": '"int"', "references": []}
    image.apply_record(ok)
    assert image.schemas.next_id == 6 and image.skipped_records == 0
    for bad in [{**ok, "version": 1},  # not above the latest version
                {**ok, "id": 5, "schema": '"long"', "version": 2},  # id 5 is another schema's
                {**ok, "id": 9, "version": 2},  # that schema has id 5
                {**ok, "subject": "", "version": 2},
                {**ok, "references": [{"name": "x", "subject": "nope", "version": 1}], "version": 2, "id": 7},
                {"type": "schema_delete", "subject": "s", "version": 1, "permanent": True},  # not soft deleted
                {"type": "schema_mode", "subject": "s", "mode": "SIDEWAYS"}]:
        image.apply_record(bad)
    assert image.skipped_records == 7 and image.schemas.next_id == 6 and list(image.schemas.schemas) == [5]


def test_references_resolve_through_subjects():
    st = SchemaRegistryState()
    st, _ = register(st, "addr", json.dumps({"type": "record", "name": "Addr", "fields": [{"name": "c", "type": "string"}]}))
    person = avro({"name": "home", "type": "Addr"}, name="Person")
    with pytest.raises(E.InvalidSchemaError):
        register(st, "person", person)
    with pytest.raises(E.InvalidSchemaError):
        register(st, "person", person, references=[{"name": "Addr", "subject": "addr", "version": 2}])
    st, r = register(st, "person", person, references=[{"name": "Addr", "subject": "addr", "version": 1}])
    assert st.referenced_by("addr", 1) == [r["id"]]
    with pytest.raises(E.ReferenceExistsError):
        controller_records("schema_delete_subject", {"subject": "addr"}, st)


def test_modes_and_import():
    st = SchemaRegistryState()
    st, _ = register(st, "s", avro(A))
    with pytest.raises(E.OperationNotPermittedError):
        controller_records("schema_mode", {"subject": "", "mode": "IMPORT"}, st)  # the registry is not empty
    with pytest.raises(E.OperationNotPermittedError):
        register(st, "t", avro(B), id=100)  # an id only in IMPORT mode
    recs, _ = controller_records("schema_mode", {"subject": "t", "mode": "IMPORT"}, st)
    st = st.apply(recs[0])
    st, r = register(st, "t", avro(B), id=100, version=7)
    assert (r["id"], r["version"], st.next_id) == (100, 7, 101)


def test_every_registry_route_has_an_acl_rule():
    assert requirement("POST", "/subjects/orders-value/versions") == requirement("POST", "/subjects/orders-value/versions")
    req = requirement("POST", "/subjects/orders-value/versions")
    assert (req.resource_type, req.resource_name, req.operation) == (ResourceType.SUBJECT, "orders-value", Operation.WRITE)
    assert requirement("DELETE", "/subjects/x").operation is Operation.DELETE
    assert requirement("PUT", "/config/x").operation is Operation.ALTER
    assert requirement("GET", "/schemas/ids/3").kind == "body"  # the router checks READ on a subject using it


def test_values_round_trip_through_the_wire_format():
    from lakelog.ingest_api.schemas import wire
    from lakelog.ingest_api.schemas.codec import SchemaValueError, decode_value, encode_value, encode_values

    p = parse_schema("AVRO", json.dumps({"type": "record", "name": "R", "fields": [
        {"name": "a", "type": "int"}, {"name": "e", "type": ["null", "string"], "default": None}]}))
    values = [{"a": 1, "e": None}, {"a": 2, "e": {"string": "x"}}, {"a": 3, "e": None}]
    batch = encode_values(p, 9, values, ["v0", "v1", "v2"])
    assert batch == [encode_value(p, 9, v) for v in values]  # one decoder pass, the same bytes
    assert [decode_value(p, wire.decode(b).payload) for b in batch] == values
    assert batch[1][:5] == b"\x00\x00\x00\x00\x09"
    with pytest.raises(SchemaValueError, match="v1"):  # the error names the bad one
        encode_values(p, 9, [{"a": 1, "e": None}, {"a": "no"}], ["v0", "v1"])
    j = parse_schema("JSON", json.dumps({"type": "object", "required": ["n"]}))
    assert decode_value(j, wire.decode(encode_value(j, 4, {"n": [1]})).payload) == {"n": [1]}
    with pytest.raises(SchemaValueError):
        encode_value(j, 4, {"m": 1})
    for bad in (b"", b"\x01\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00", b"\x00\x00\x00"):
        with pytest.raises(wire.WireFormatError):
            wire.decode(bad)
    with pytest.raises(wire.WireFormatError):
        wire.decode(b"\x00\x00\x00\x00\x01\x81", protobuf=True)  # a truncated varint
