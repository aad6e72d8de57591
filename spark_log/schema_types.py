"""Spark types of registry schemas, and Protobuf messages as Python values of those types (pure).

- `json_schema_type(doc)`: the Spark type a JSON Schema's values are read as by `from_json` —
  object → struct of its properties (in order; `additionalProperties` alone → map<string, T>),
  array → array, integer → bigint, number → double, boolean, string (`format` date → date,
  date-time → timestamp), a nullable union (`["null", T]`, `anyOf`/`oneOf` with a null branch) → T,
  `allOf` of objects → their properties merged, `$ref` inside the document followed; anything else
  (several non-null types, `{}`, recursion past `MAX_DEPTH`) → string, which `from_json` fills
  with the value's JSON text. Integers are always bigint and numbers double, so versions of a
  JSON Schema never change a column's type.
- `protobuf_type(descriptor)`: a message as a struct — int32 / sint32 / sfixed32 → int,
  int64 / uint32 / uint64 / sint64 / fixed* → bigint, float, double, bool, string, bytes → binary,
  enums → string (the value's name), messages → structs (`google.protobuf.Timestamp` → timestamp),
  repeated → array, map → map; a message nested in itself past `MAX_DEPTH` → string (its text
  format).
- `protobuf_value(message, type)`: a parsed message as the Python value Arrow builds that type from.
"""

from __future__ import annotations

from typing import Any

from lakelog.spark_log.schema_refs import json_ref_target

MAX_DEPTH = 32

_JSON_SCALARS = {"integer": "long", "number": "double", "boolean": "boolean", "string": "string"}


def json_schema_type(doc: Any, refs: dict[str, Any] | None = None):
    """The Spark DataType of values of the JSON Schema `doc`; `refs`: the documents of its registry
    references by name (a `$ref` to another subject, `schema_refs.json_ref_target`)."""
    from pyspark.sql.types import _parse_datatype_json_value

    return _parse_datatype_json_value(_json_type(doc, doc, 0, refs or {}))


def _json_type(node: Any, root: Any, depth: int, refs: dict[str, Any]) -> Any:
    if depth > MAX_DEPTH or not isinstance(node, dict):
        return "string"
    ref = node.get("$ref")
    if isinstance(ref, str):
        target, doc = json_ref_target(ref, root, refs)
        return _json_type(target, doc, depth + 1, refs) if target is not None else "string"
    for key in ("anyOf", "oneOf"):
        branches = node.get(key)
        if isinstance(branches, list):
            real = [b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")]
            return _json_type(real[0], root, depth + 1, refs) if len(real) == 1 else "string"
    if isinstance(node.get("allOf"), list):
        merged: dict[str, Any] = {"type": "object", "properties": {}}
        for b in node["allOf"]:
            if isinstance(b, dict) and isinstance(b.get("$ref"), str):
                b, _ = json_ref_target(b["$ref"], root, refs)  # a $ref to another document: not followed further
            if not isinstance(b, dict) or not isinstance(b.get("properties", {}), dict):
                return "string"
            merged["properties"].update(b.get("properties", {}))
        return _json_type(merged, root, depth + 1, refs)
    kind = node.get("type")
    if isinstance(kind, list):
        real = [k for k in kind if k != "null"]
        kind = real[0] if len(real) == 1 else None
    if kind is None and isinstance(node.get("properties"), dict):
        kind = "object"
    if kind == "object":
        props = node.get("properties")
        if isinstance(props, dict) and props:
            return {"type": "struct", "fields": [
                {"name": name, "type": _json_type(sub, root, depth + 1, refs), "nullable": True, "metadata": {}}
                for name, sub in props.items()]}
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            return {"type": "map", "keyType": "string", "valueType": _json_type(extra, root, depth + 1, refs),
                    "valueContainsNull": True}
        return "string"
    if kind == "array":
        return {"type": "array", "elementType": _json_type(node.get("items", {}), root, depth + 1, refs),
                "containsNull": True}
    if kind == "string":
        return {"date": "date", "date-time": "timestamp"}.get(node.get("format"), "string")
    return _JSON_SCALARS.get(kind, "string") if isinstance(kind, str) else "string"




# ------------------------------------------------------------------------------- Protobuf

_INT = {5, 15, 17}  # int32, sfixed32, sint32
_LONG = {3, 4, 6, 7, 13, 16, 18}  # int64, uint64, fixed64, fixed32, uint32, sfixed64, sint64
_SIMPLE = {1: "double", 2: "float", 8: "boolean", 9: "string", 12: "binary", 14: "string"}
TIMESTAMP = "google.protobuf.Timestamp"


def protobuf_type(descriptor):
    """The Spark DataType (a struct) of messages of `descriptor` (a google.protobuf Descriptor)."""
    from pyspark.sql.types import _parse_datatype_json_value

    return _parse_datatype_json_value(_pb_struct(descriptor, 0))


def _pb_struct(desc, depth: int) -> Any:
    if desc.full_name == TIMESTAMP:
        return "timestamp"
    if depth > MAX_DEPTH:
        return "string"
    return {"type": "struct", "fields": [{"name": f.name, "type": _pb_field(f, depth), "nullable": True,
                                          "metadata": {}} for f in desc.fields]}


def _is_map(f) -> bool:
    return f.message_type is not None and f.message_type.GetOptions().map_entry and _repeated(f)


def _repeated(f) -> bool:
    return getattr(f, "is_repeated", None) if hasattr(f, "is_repeated") else f.label == 3


def _pb_single(f, depth: int) -> Any:
    if f.type in (10, 11):
        return _pb_struct(f.message_type, depth + 1)
    if f.type in _INT:
        return "integer"
    if f.type in _LONG:
        return "long"
    return _SIMPLE.get(f.type, "string")


def _pb_field(f, depth: int) -> Any:
    if _is_map(f):
        k, v = f.message_type.fields_by_name["key"], f.message_type.fields_by_name["value"]
        return {"type": "map", "keyType": _pb_single(k, depth), "valueType": _pb_single(v, depth),
                "valueContainsNull": True}
    single = _pb_single(f, depth)
    if _repeated(f):
        return {"type": "array", "elementType": single, "containsNull": True}
    return single


def protobuf_value(msg, depth: int = 0) -> Any:
    """A parsed message as a dict of Python values (Arrow builds the `protobuf_type` struct from it)."""
    desc = msg.DESCRIPTOR
    if desc.full_name == TIMESTAMP:
        from datetime import datetime, timezone
        return datetime.fromtimestamp(msg.seconds + msg.nanos / 1e9, tz=timezone.utc)
    if depth > MAX_DEPTH:
        from google.protobuf import text_format
        return text_format.MessageToString(msg, as_one_line=True)
    out: dict[str, Any] = {}
    for f in desc.fields:
        value = getattr(msg, f.name)
        if _is_map(f):
            vf = f.message_type.fields_by_name["value"]
            out[f.name] = [(k, _pb_scalar(vf, v, depth)) for k, v in value.items()]
        elif _repeated(f):
            out[f.name] = [_pb_scalar(f, v, depth) for v in value]
        elif f.type in (10, 11):
            out[f.name] = protobuf_value(value, depth + 1) if msg.HasField(f.name) else None
        else:
            out[f.name] = _pb_scalar(f, value, depth)
    return out


def _pb_scalar(f, value: Any, depth: int) -> Any:
    if f.type in (10, 11):
        return protobuf_value(value, depth + 1)
    if f.type == 14:
        v = f.enum_type.values_by_number.get(value)
        return v.name if v is not None else str(value)
    if f.type in (4, 6) and value >= 1 << 63:  # uint64 / fixed64 past bigint: wrap as Java would
        return value - (1 << 64)
    return value
