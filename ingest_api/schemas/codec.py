"""Record values to and from Confluent's wire format, by their schema (pure).

`encode_value(parsed, schema_id, value)` turns a JSON value of a REST produce request into the
bytes stored in the log: the wire-format header (`wire.py`) and the payload —

    AVRO      the value in Avro's JSON encoding (unions as {"type": value}, as Confluent's REST
              Proxy takes them), read by fastavro's JSON decoder against the schema, written as
              Avro binary (fastavro's schemaless writer);
    JSON      the value validated against the JSON Schema (jsonschema, references resolved),
              written as compact UTF-8 JSON.
    PROTOBUF  the value in Protobuf's JSON mapping, parsed into the schema's first message and
              written as Protobuf binary after the message indexes [0] (`protobuf_values.py`).

`decode_value(parsed, payload)` is the inverse for a fetch (Avro rendered in Avro's JSON encoding,
Protobuf in its JSON mapping with default values). A value that does not match its schema raises
`SchemaValueError` (422 42203, Confluent REST Proxy's "conversion failed").
"""

from __future__ import annotations

import io
import json
from typing import Any

from lakelog.ingest_api.errors import InvalidRequestError, UnsupportedMediaTypeError
from lakelog.ingest_api.schemas import protobuf_values, wire
from lakelog.ingest_api.schemas.parsed import AVRO, JSON, PROTOBUF, ParsedSchema

MAX_JSON_DEPTH = 200


class SchemaValueError(InvalidRequestError):
    """A record's key or value does not match its schema (nothing is appended)."""


class UnsupportedSchemaFormat(UnsupportedMediaTypeError):
    """Values of this schema type are not converted over REST (Protobuf, for now)."""


def _avro_schema(parsed: ParsedSchema):
    import fastavro
    cached = getattr(parsed, "_fastavro", None)
    if cached is None:
        # The library's rendering inlines every named type a reference defines: fastavro needs no names table.
        cached = fastavro.parse_schema(json.loads(parsed.normalized()))
        object.__setattr__(parsed, "_fastavro", cached)
    return cached


def encode_value(parsed: ParsedSchema, schema_id: int, value: Any, what: str = "value") -> bytes:
    """The wire-format bytes of a JSON value under `parsed` (registered with `schema_id`)."""
    if parsed.schema_type == AVRO:
        import fastavro
        schema = _avro_schema(parsed)
        try:
            datum = next(iter(fastavro.json_reader(io.StringIO(json.dumps(value)), schema)))
            out = io.BytesIO()
            fastavro.schemaless_writer(out, schema, datum)
        except StopIteration:
            raise SchemaValueError(f"Conversion of JSON to Avro failed for the {what}: empty") from None
        except (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError) as e:
            raise SchemaValueError(f"Conversion of JSON to Avro failed for the {what}: {e}") from None
        return wire.encode(schema_id, out.getvalue())
    if parsed.schema_type == JSON:
        _validate_json(parsed, value, what)
        return wire.encode(schema_id, json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    if parsed.schema_type == PROTOBUF:
        try:
            payload = protobuf_values.to_bytes(parsed, value)
        except (ValueError, TypeError, RecursionError) as e:
            raise SchemaValueError(f"Conversion of JSON to Protobuf failed for the {what}: {e}") from None
        return wire.encode(schema_id, payload, (0,))
    raise UnsupportedSchemaFormat(f"{parsed.schema_type} values are not converted over REST; produce them "
                                  f"framed by a serializer with application/vnd.kafka.binary.v2+json")


def encode_values(parsed: ParsedSchema, schema_id: int, values: list[Any], labels: list[str]) -> list[bytes]:
    """`encode_value` of many values; Avro ones through one JSON decoder pass (half the cost per value).

    On any failure the values are converted one by one, so the error names (`labels[i]`) the first bad one.
    """
    if parsed.schema_type != AVRO or len(values) < 2:
        return [encode_value(parsed, schema_id, v, label) for v, label in zip(values, labels)]
    import fastavro
    schema = _avro_schema(parsed)
    try:
        text = "\n".join(json.dumps(v) for v in values)
        out = []
        for datum in fastavro.json_reader(io.StringIO(text), schema):
            buf = io.BytesIO()
            fastavro.schemaless_writer(buf, schema, datum)
            out.append(wire.encode(schema_id, buf.getvalue()))
        if len(out) == len(values):
            return out
    except (ValueError, TypeError, KeyError, AttributeError, IndexError, RecursionError):
        pass
    return [encode_value(parsed, schema_id, v, label) for v, label in zip(values, labels)]


def decode_value(parsed: ParsedSchema, payload: bytes, what: str = "value",
                 message_indexes: tuple[int, ...] = (0,)) -> Any:
    """The JSON value of a wire-format payload (the header already split off by `wire.decode`)."""
    if parsed.schema_type == AVRO:
        import fastavro
        schema = _avro_schema(parsed)
        try:
            datum = fastavro.schemaless_reader(io.BytesIO(payload), schema, None)
            out = io.StringIO()
            fastavro.json_writer(out, schema, [datum])
        except (ValueError, TypeError, KeyError, EOFError, IndexError, UnicodeDecodeError, OverflowError,
                MemoryError, RecursionError, StopIteration) as e:
            raise SchemaValueError(f"the {what} does not decode as Avro: {type(e).__name__}: {e}") from None
        return json.loads(out.getvalue())
    if parsed.schema_type == JSON:
        try:
            return json.loads(payload)
        except (ValueError, UnicodeDecodeError, RecursionError) as e:
            raise SchemaValueError(f"the {what} is not JSON: {e}") from None
    if parsed.schema_type == PROTOBUF:
        try:
            return protobuf_values.to_json(parsed, payload, message_indexes)
        except (ValueError, TypeError, RecursionError) as e:
            raise SchemaValueError(f"the {what} does not decode as Protobuf: {e}") from None
    raise UnsupportedSchemaFormat(f"{parsed.schema_type} values are not converted over REST")


def _validate_json(parsed: ParsedSchema, value: Any, what: str) -> None:
    import jsonschema
    import referencing
    from referencing.jsonschema import specification_with

    doc = parsed.doc  # type: ignore[attr-defined]
    cls = jsonschema.validators.validator_for(doc, default=jsonschema.Draft7Validator)
    spec = specification_with(cls.META_SCHEMA.get("$schema", ""), default=referencing.jsonschema.DRAFT7)
    registry = referencing.Registry().with_resources(
        (name, referencing.Resource(contents=d, specification=spec)) for name, d in parsed.refs.items())  # type: ignore[attr-defined]
    try:
        error = jsonschema.exceptions.best_match(cls(doc, registry=registry).iter_errors(value))
    except (referencing.exceptions.Unresolvable, RecursionError) as e:
        raise SchemaValueError(f"the {what} cannot be validated: {e}") from None
    if error is not None:
        raise SchemaValueError(f"the {what} does not match its JSON Schema: {error.message} at "
                               f"{'/'.join(str(p) for p in error.absolute_path) or '(root)'}")
