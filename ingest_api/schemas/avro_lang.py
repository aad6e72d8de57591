"""Avro schemas, parsed and compared by the Apache Avro library (`avro`).

Parsing: `avro.schema.make_avsc_object` over one `Names` table into which every reference is
parsed first, so a record may use a named type (record, enum, fixed) a reference defines. The
stored text is the schema's JSON without whitespace, keys in the order given (what Confluent
stores: the parsed schema's compact JSON). Normalized: the library's JSON rendering of the parsed
schema with sorted keys (full names, defaults and logical types kept: they matter to readers).

Reader rules: Avro's schema resolution, as `avro.compatibility.ReaderWriterCompatibilityChecker`
implements it (the Java library's `SchemaCompatibility`, which Confluent uses): promotions
int→long→float→double and string↔bytes, new reader fields need a default, enum symbols, unions.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import avro.compatibility
import avro.errors
import avro.name
import avro.schema

from lakelog.ingest_api.schemas.errors import InvalidSchemaError
from lakelog.ingest_api.schemas.parsed import AVRO, ParsedSchema, Reference


class AvroSchema(ParsedSchema):
    schema_type = AVRO

    def __init__(self, canonical: str, schema: avro.schema.Schema) -> None:
        self.canonical = canonical
        self.schema = schema

    def normalized(self) -> str:
        return json.dumps(self.schema.to_json(), sort_keys=True, separators=(",", ":"))

    def read_errors(self, writer: ParsedSchema) -> list[str]:
        if not isinstance(writer, AvroSchema):
            return [f"a {writer.schema_type} schema is not an Avro schema"]
        result = avro.compatibility.ReaderWriterCompatibilityChecker().get_compatibility(self.schema, writer.schema)
        if result.compatibility is avro.compatibility.SchemaCompatibilityType.compatible:
            return []
        kinds = ", ".join(sorted(i.name.upper() for i in result.incompatibilities)) or "INCOMPATIBLE"
        where = ", ".join(sorted(result.locations))
        return [f"{kinds}: {'; '.join(sorted(result.messages))}" + (f" (at {where})" if where else "")]


def parse_avro(text: str, references: Sequence[Reference]) -> AvroSchema:
    names = avro.name.Names()
    try:
        for name, schema_type, ref_text in references:
            if schema_type != AVRO:
                raise InvalidSchemaError(f"Invalid schema: reference {name!r} is {schema_type}, not AVRO")
            avro.schema.make_avsc_object(json.loads(ref_text), names)
        doc = json.loads(text)
        schema = avro.schema.make_avsc_object(doc, names)
    except InvalidSchemaError:
        raise
    except RecursionError:
        raise InvalidSchemaError("Invalid schema: nested too deeply") from None
    except (ValueError, TypeError, KeyError, AttributeError, avro.errors.AvroException) as e:
        raise InvalidSchemaError(f"Invalid schema {text[:200]!r}: {e}") from None
    return AvroSchema(json.dumps(doc, separators=(",", ":"), ensure_ascii=False), schema)
