"""Schema-aware v3 produce (`POST /v3/clusters/{c}/topics/{t}/records`): Confluent REST Proxy v3's rules.

A record's `key` / `value` (ProduceRequestData) takes the schema-based form

    {"type": "AVRO" | "JSONSCHEMA" | "PROTOBUF",          (needed with "schema"; else taken from the schema)
     "subject": S, "subject_name_strategy": "TOPIC_NAME" | "RECORD_NAME" | "TOPIC_RECORD_NAME",
     "schema_id": N | "schema_version": V | "schema": TEXT,  (none of them: the subject's latest version)
     "data": <the value as JSON>}

The schema is found as Confluent's `SchemaManagerImpl` finds it, in this order:
1. `schema_id`: that schema; its subject is `subject`, else the strategy's, else TopicNameStrategy's
   (`<topic>-key` / `<topic>-value`); the schema must be a version of that subject.
2. `schema_version`: that version of the subject (a strategy that needs the record's name cannot
   name a subject without a schema: 400).
3. `schema`: the text, parsed as `type`, registered under the subject (the same text again
   answers its existing id).
4. none: the subject's latest version.

Subject name strategies (Confluent's): TOPIC_NAME `<topic>-key|value`, RECORD_NAME the record's
full name, TOPIC_RECORD_NAME `<topic>-<record full name>`. A record's name: Avro, the named
type's full name; JSON Schema, its `title`; Protobuf, the schema's first message's full name.

Errors, as Confluent's v3: a field of the wrong type, an unknown strategy, `schema` without a
schema `type`, or a version the subject does not have: 400 / 400 ("Schema does not exist for
subject: S, version: V"); a schema id, subject or latest version that cannot be fetched, or a
value that does not convert: 422 / 42207 ("Error serializing message. ..."); a raw schema that
does not parse: 422 / 42205 ("Invalid schema: ..."). The delivery report's key / value carry
`type`, `subject`, `schema_id`, `schema_version` and `size`.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

from lakelog.ingest_api.errors import InvalidRequestError
from lakelog.ingest_api.schemas import errors as E
from lakelog.ingest_api.schemas import protobuf_values
from lakelog.ingest_api.schemas import state as S
from lakelog.ingest_api.schemas import state_writes as W
from lakelog.ingest_api.schemas.codec import SchemaValueError, encode_value
from lakelog.ingest_api.schemas.parsed import AVRO, JSON, PROTOBUF, ParsedSchema
from lakelog.ingest_api.schemas.service import SchemaRegistry

#: v3 type name -> registry schema type
V3_TYPES = {"AVRO": AVRO, "JSONSCHEMA": JSON, "PROTOBUF": PROTOBUF}
_V3_NAMES = {v: k for k, v in V3_TYPES.items()}
STRATEGIES = ("TOPIC_NAME", "RECORD_NAME", "TOPIC_RECORD_NAME")
SCHEMA_FIELDS = ("subject", "subject_name_strategy", "schema_id", "schema_version", "schema")
MAX_CACHED_PER_REQUEST = 64  # schema lookups remembered across the records of one request


class V3SerializationError(InvalidRequestError):
    """A v3 schema-based record that cannot be serialized: its schema cannot be fetched, or its data
    does not convert (Confluent v3: 422 / 42207; `error_table.V3_ONLY_TABLE`)."""


class V3InvalidSchemaError(InvalidRequestError):
    """A v3 record's raw `schema` that does not parse as its type (Confluent v3: 422 / 42205)."""


class V3SchemaBadRequest(InvalidRequestError):
    """A v3 schema field of the wrong type, or a subject version that does not exist (Confluent v3: 400 / 400)."""


@dataclass(frozen=True)
class ResolvedSchema:
    schema_id: int
    subject: str
    version: int
    parsed: ParsedSchema


def wants_schema(field: dict[str, Any]) -> bool:
    """Whether a key / value field asks for a schema-based format."""
    kind = field.get("type")
    return (isinstance(kind, str) and kind.upper() in V3_TYPES) or any(field.get(k) is not None
                                                                       for k in SCHEMA_FIELDS)


def record_name(parsed: ParsedSchema) -> str | None:
    """The record's full name a RECORD_NAME strategy uses; None when the schema has none."""
    if parsed.schema_type == AVRO:
        full = getattr(getattr(parsed, "schema", None), "fullname", None)
        return full or None
    if parsed.schema_type == JSON:
        title = getattr(parsed, "doc", {}).get("title") if isinstance(getattr(parsed, "doc", None), dict) else None
        return title if isinstance(title, str) and title else None
    order = getattr(getattr(parsed, "model", None), "message_order", None)
    return order[0].lstrip(".") if order else None


def _subject(topic: str, part: str, field: dict, strategy: str | None, parsed: ParsedSchema | None) -> str:
    subject = field.get("subject")
    if subject is not None:
        return subject
    if strategy in (None, "TOPIC_NAME"):
        return f"{topic}-{part}"
    if parsed is None:
        raise V3SchemaBadRequest(f"Cannot use schema_subject_strategy={strategy} without schema_id or schema.")
    name = record_name(parsed)
    if name is None:
        raise V3SchemaBadRequest(f"subject_name_strategy={strategy} needs a named record schema (an Avro named "
                                 f"type, a JSON Schema with a title, a Protobuf message)")
    return name if strategy == "RECORD_NAME" else f"{topic}-{name}"


def _check_fields(field: dict, what: str) -> tuple[str | None, str | None]:
    kind = field.get("type")
    if kind is not None:
        if not isinstance(kind, str) or kind.upper() not in V3_TYPES:
            raise V3SchemaBadRequest(f"{what}.type must be AVRO, JSONSCHEMA or PROTOBUF with a schema")
        kind = V3_TYPES[kind.upper()]
    strategy = field.get("subject_name_strategy")
    if strategy is not None and (not isinstance(strategy, str) or strategy.upper() not in STRATEGIES):
        raise V3SchemaBadRequest(f"{what}.subject_name_strategy must be one of {', '.join(STRATEGIES)}")
    for name, types in (("subject", str), ("schema", str)):
        if field.get(name) is not None and not isinstance(field[name], types):
            raise V3SchemaBadRequest(f"{what}.{name} must be a string")
    for name in ("schema_id", "schema_version"):
        v = field.get(name)
        if v is not None and (type(v) is not int or v < 0):
            raise V3SchemaBadRequest(f"{what}.{name} must be a non-negative integer")
    if field.get("subject") is not None:
        try:
            S.check_subject_name(field["subject"])
        except E.SchemaRegistryError as e:
            raise V3SchemaBadRequest(f"{what}.subject: {e}") from None
    return kind, strategy.upper() if isinstance(strategy, str) else None


async def resolve(registry: SchemaRegistry, topic: str, part: str, field: dict) -> ResolvedSchema:
    """The schema a key / value field names (the order in the module docstring)."""
    what = part
    kind, strategy = _check_fields(field, what)
    st = registry.state
    schema_id, version, text = field.get("schema_id"), field.get("schema_version"), field.get("schema")
    if schema_id is not None:
        try:
            stored = st.schema(schema_id)
            parsed = st.parsed(stored)
        except E.SchemaRegistryError as e:
            raise V3SerializationError(f"Error serializing message. Error when fetching schema by id. "
                                       f"schemaId = {schema_id}\n{e}") from None
        subject = _subject(topic, part, field, strategy, parsed)
        found = next((v for v in reversed(st.versions(subject)) if v.schema_id == schema_id), None)
        if found is None:
            raise V3SerializationError(f"Error serializing message. Error when fetching schema version. "
                                       f"subject = {subject}, schema id = {schema_id}\nSubject Not Found; "
                                       f"error code: 40401")
        resolved = ResolvedSchema(schema_id, subject, found.version, parsed)
    elif version is not None:
        subject = _subject(topic, part, field, strategy, None)
        try:
            v = st.version(subject, version) if version > 0 else None
        except E.SchemaRegistryError:
            v = None
        if v is None:
            raise V3SchemaBadRequest(f"Schema does not exist for subject: {subject}, version: {version}")
        resolved = ResolvedSchema(v.schema_id, subject, v.version, st.parsed(st.schema(v.schema_id)))
    elif text is not None:
        if kind is None:
            raise V3SchemaBadRequest(f"{what}.schema needs {what}.type (AVRO, JSONSCHEMA or PROTOBUF)")
        try:
            parsed = S.parse_schema(kind, text, ())
            if kind == PROTOBUF:
                await asyncio.to_thread(protobuf_values.descriptor_set, parsed)
        except E.SchemaRegistryError as e:
            raise V3InvalidSchemaError(f"Invalid schema: Error when parsing raw schema. format = "
                                       f"{_V3_NAMES[kind]}, schema = {text[:200]}: {e}") from None
        subject = _subject(topic, part, field, strategy, parsed)
        args = {"subject": subject, "schema": text, "schemaType": kind, "references": [], "normalize": None}
        try:
            W.prepare(registry.state, subject, args, normalize=None)
            result = await registry.write("schema_register", args)
        except E.SchemaRegistryError as e:
            raise V3SerializationError(f"Error serializing message. Error when registering schema. format = "
                                       f"{_V3_NAMES[kind]}, subject = {subject}: {e}") from None
        st = registry.state
        v = W.find_version(st, subject, st.schema(result["id"]), parsed)
        resolved = ResolvedSchema(result["id"], subject, v.version if v else result.get("version", 0),
                                  st.parsed(st.schema(result["id"])))
    else:
        subject = _subject(topic, part, field, strategy, None)
        try:
            v = st.version(subject, -1)
        except E.SchemaRegistryError as e:
            raise V3SerializationError(f"Error serializing message. Error when fetching latest schema version. "
                                       f"subject = {subject}\n{e}") from None
        resolved = ResolvedSchema(v.schema_id, subject, v.version, st.parsed(st.schema(v.schema_id)))
    if kind is not None and resolved.parsed.schema_type != kind:
        raise V3SerializationError(f"Error serializing message. Schema {resolved.schema_id} is "
                                   f"{_V3_NAMES[resolved.parsed.schema_type]}, not {_V3_NAMES[kind]}")
    if resolved.parsed.schema_type == PROTOBUF:
        try:
            await asyncio.to_thread(protobuf_values.descriptor_set, resolved.parsed)
        except E.SchemaRegistryError as e:
            raise V3SerializationError(f"Error serializing message. {e}") from None
    return resolved


class V3SchemaSerializer:
    """Serializes the schema-based key / value fields of one request's records (lookups cached per request)."""

    def __init__(self, node: Any, topic: str) -> None:
        self.registry = SchemaRegistry(node)
        self.topic = topic
        self._cache: dict[tuple[str, str], ResolvedSchema] = {}

    async def serialize(self, part: str, field: dict) -> tuple[bytes | None, dict[str, Any]]:
        """(wire-format bytes or None for null data, the delivery report's fields without size)."""
        key = (part, json.dumps({k: field.get(k) for k in ("type",) + SCHEMA_FIELDS}, sort_keys=True))
        resolved = self._cache.get(key)
        if resolved is None:
            resolved = await resolve(self.registry, self.topic, part, field)
            if len(self._cache) < MAX_CACHED_PER_REQUEST:
                self._cache[key] = resolved
        report = {"type": _V3_NAMES[resolved.parsed.schema_type], "subject": resolved.subject,
                  "schema_id": resolved.schema_id, "schema_version": resolved.version}
        data = field.get("data")
        if data is None:
            return None, report
        try:
            return encode_value(resolved.parsed, resolved.schema_id, data, part), report
        except SchemaValueError as e:
            raise V3SerializationError(f"Error serializing message. {e}") from None
