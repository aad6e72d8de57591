"""Schema references resolved for Spark: Avro named types of other subjects inlined at their first use
(checked by Avro's own parser), JSON Schema `$ref`s to other subjects' documents."""

from __future__ import annotations

import json

import fastavro
import pytest

from lakelog.spark_log.schema_refs import SchemaReferenceError, inline_avro, json_ref_target
from lakelog.spark_log.schema_types import json_schema_type

ADDRESS = {"type": "record", "name": "Address", "namespace": "com.acme",
           "fields": [{"name": "city", "type": "string"}, {"name": "kind", "type": "com.acme.Kind"}]}
KIND = {"type": "enum", "name": "Kind", "namespace": "com.acme", "symbols": ["HOME", "WORK"]}
POINT = {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "double"}]}  # the null namespace


def test_avro_references_are_inlined_once_each_transitively_with_explicit_namespaces():
    person = {"type": "record", "name": "Person", "namespace": "com.acme.people", "fields": [
        {"name": "home", "type": "com.acme.Address"},
        {"name": "work", "type": ["null", "com.acme.Address"], "default": None},
        {"name": "spots", "type": {"type": "array", "items": "Point"}},
        {"name": "kinds", "type": {"type": "map", "values": "com.acme.Kind"}}]}
    named = {"com.acme.Address": ADDRESS, "com.acme.Kind": KIND, "Point": POINT}
    out = inline_avro(person, named)
    text = json.dumps(out)
    assert text.count('"name": "Address"') == 1 and text.count('"symbols"') == 1 and text.count('"name": "Point"') == 1
    assert out["fields"][2]["type"]["items"]["namespace"] == ""  # Point keeps the null namespace
    parsed = fastavro.parse_schema(out)  # Avro's own parser accepts it: every name defined before use
    record = {"home": {"city": "Oslo", "kind": "HOME"}, "work": None, "spots": [{"x": 1.5}], "kinds": {"a": "WORK"}}
    import io
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, parsed, record)
    buf.seek(0)
    assert fastavro.schemaless_reader(buf, parsed) == record
    assert person["fields"][0]["type"] == "com.acme.Address"  # the input is not changed


def test_avro_unknown_names_are_left_for_the_parser_and_depth_is_bounded():
    assert inline_avro({"type": "array", "items": "com.x.Nope"}, {}) == {"type": "array", "items": "com.x.Nope"}
    deep: object = "long"
    for _ in range(100):
        deep = {"type": "array", "items": deep}
    with pytest.raises(SchemaReferenceError):
        inline_avro(deep, {})


def test_json_schema_refs_to_other_documents_by_name_fragment_and_relative_uri():
    address = {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"$ref": "#/definitions/zip"}},
               "definitions": {"zip": {"type": "integer"}}}
    refs = {"https://acme.example/schemas/address.json": address}
    main = {"$id": "https://acme.example/schemas/person.json", "type": "object", "properties": {
        "home": {"$ref": "address.json"},  # relative to $id: the last path segment
        "zip": {"$ref": "https://acme.example/schemas/address.json#/definitions/zip"},
        "nope": {"$ref": "other.json"}}}
    assert json_schema_type(main, refs).simpleString() == (
        "struct<home:struct<city:string,zip:bigint>,zip:bigint,nope:string>")
    assert json_ref_target("#/properties/home", main, refs)[0] == {"$ref": "address.json"}
    assert json_ref_target("missing.json", main, refs) == (None, main)
