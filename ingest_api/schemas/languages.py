"""The three schema languages behind one entry point: `parse_schema(type, text, references)`.

Each language's module (`avro_lang`, `json_lang`, `protobuf_lang`) parses with its own library and
returns a `ParsedSchema` (`parsed.py`: the interface, canonical and normalized text, reader rules).
"""

from __future__ import annotations

from collections.abc import Sequence

from lakelog.ingest_api.schemas.avro_lang import parse_avro
from lakelog.ingest_api.schemas.errors import InvalidSchemaError
from lakelog.ingest_api.schemas.json_lang import parse_json_schema
from lakelog.ingest_api.schemas.parsed import AVRO, JSON, PROTOBUF, SCHEMA_TYPES, ParsedSchema, Reference
from lakelog.ingest_api.schemas.protobuf_lang import parse_protobuf

__all__ = ["AVRO", "JSON", "PROTOBUF", "SCHEMA_TYPES", "ParsedSchema", "Reference", "parse_schema"]


def parse_schema(schema_type: str, text: str, references: Sequence[Reference] = ()) -> ParsedSchema:
    """Parse `text` in its language; raises InvalidSchemaError (42201) with the library's reason."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidSchemaError("Invalid schema: the schema is empty")
    if schema_type == AVRO:
        return parse_avro(text, references)
    if schema_type == JSON:
        return parse_json_schema(text, references)
    if schema_type == PROTOBUF:
        return parse_protobuf(text, references)
    raise InvalidSchemaError(f"Invalid schema type {schema_type!r}: one of {', '.join(SCHEMA_TYPES)}")
