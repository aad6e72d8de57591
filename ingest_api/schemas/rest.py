"""Schema-aware REST produce and fetch (Confluent REST Proxy v2's Avro, JSON Schema and Protobuf embedded formats).

Produce (`POST /topics/{topic}` with `application/vnd.kafka.avro.v2+json`,
`application/vnd.kafka.jsonschema.v2+json` or `application/vnd.kafka.protobuf.v2+json`):

    {"key_schema": "...", "key_schema_id": N, "value_schema": "...", "value_schema_id": N,
     "records": [{"key": K, "value": V, "partition": P?}, ...]}

A `*_schema_id` names a registered schema; a `*_schema` text is registered first under the
TopicNameStrategy subject (`<topic>-key` / `<topic>-value`), as Confluent's REST Proxy does. Every
key and value is converted (`codec.encode_value`) before anything is appended: one that does not
match its schema refuses the whole request (422 42203) and nothing is written. A record with a
key (or value) needs a key (or value) schema (422 42201); null stays null (a tombstone).

Fetch (`Accept: application/vnd.kafka.avro.v2+json` / `jsonschema.v2+json` / `protobuf.v2+json`, and v2
consumers created with `"format": "avro"` / `"jsonschema"` / `"protobuf"`): each key and value
is split (`wire.decode`), its schema looked up by id in the registry, and the payload rendered as
JSON; bytes that are not in the wire format, or whose schema is unknown, answer 406 40602.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from lakelog.ingest_api.errors import InvalidRequestError, RecordDeserializationError, RequestTooLargeError
from lakelog.ingest_api.records.formats import parse_producer_fields
from lakelog.ingest_api.records.produce_columns import ProduceRecord
from lakelog.ingest_api.schemas import errors as E
from lakelog.ingest_api.schemas import state as S
from lakelog.ingest_api.schemas import state_writes as W
from lakelog.ingest_api.schemas import protobuf_values, wire
from lakelog.ingest_api.schemas.codec import decode_value, encode_values
from lakelog.ingest_api.schemas.parsed import AVRO, JSON, PROTOBUF, ParsedSchema
from lakelog.ingest_api.schemas.service import SchemaRegistry

AVRO_V2 = "application/vnd.kafka.avro.v2+json"
JSONSCHEMA_V2 = "application/vnd.kafka.jsonschema.v2+json"
PROTOBUF_V2 = "application/vnd.kafka.protobuf.v2+json"
SCHEMA_FORMATS = {AVRO_V2: AVRO, JSONSCHEMA_V2: JSON, PROTOBUF_V2: PROTOBUF}


async def _schema_for(registry: SchemaRegistry, topic: str, part: str, doc: dict, schema_type: str
                      ) -> tuple[int, ParsedSchema] | None:
    schema_id, text = doc.get(f"{part}_schema_id"), doc.get(f"{part}_schema")
    if schema_id is not None:
        if type(schema_id) is not int:
            raise InvalidRequestError(f"{part}_schema_id must be an integer")
        st = registry.state
        stored = st.schema(schema_id)
        if stored.schema_type != schema_type:
            raise InvalidRequestError(f"schema {schema_id} is {stored.schema_type}, not {schema_type}")
        parsed = st.parsed(stored)
        if schema_type == PROTOBUF:
            await asyncio.to_thread(protobuf_values.descriptor_set, parsed)  # protoc, once per schema
        return schema_id, parsed
    if text is None:
        return None
    if not isinstance(text, str):
        raise InvalidRequestError(f"{part}_schema must be a string")
    subject = f"{topic}-{part}"
    args = {"subject": subject, "schema": text, "schemaType": schema_type, "references": [], "normalize": None}
    _, parsed, _ = W.prepare(registry.state, subject, args, normalize=None)  # bad text refused here, before the controller
    if schema_type == PROTOBUF:  # and what protoc refuses (an undefined type), so nothing unusable is registered
        await asyncio.to_thread(protobuf_values.descriptor_set, parsed)
    result = await registry.write("schema_register", args)
    st = registry.state
    return result["id"], st.parsed(st.schema(result["id"]))


async def parse_schema_produce(registry: SchemaRegistry, topic: str, body: bytes, fmt: str, max_records: int
                               ) -> tuple[list[ProduceRecord], Any, int | None, int | None]:
    """(records with wire-format keys and values, producer fields, key schema id, value schema id)."""
    schema_type = SCHEMA_FORMATS[fmt]
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise InvalidRequestError("request body is not valid JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list) or not doc["records"]:
        raise InvalidRequestError('request body must be {"records": [...]} with at least one record')
    raw = doc["records"]
    if len(raw) > max_records:
        raise RequestTooLargeError(f"{len(raw)} records exceed max.records.per.request={max_records}")
    if not all(isinstance(r, dict) for r in raw):
        raise InvalidRequestError("every record must be an object")
    key_schema = await _schema_for(registry, topic, "key", doc, schema_type)
    value_schema = await _schema_for(registry, topic, "value", doc, schema_type)
    encoded: dict[str, list[bytes | None]] = {}
    for part, schema in (("key", key_schema), ("value", value_schema)):
        present = [i for i, r in enumerate(raw) if r.get(part) is not None]
        if present and schema is None:
            raise E.InvalidSchemaError(f"records[{present[0]}] has a {part} but the request has no {part}_schema "
                                       f"or {part}_schema_id")
        column: list[bytes | None] = [None] * len(raw)
        if present:
            assert schema is not None
            done = encode_values(schema[1], schema[0], [raw[i][part] for i in present],
                                 [f"{part} of records[{i}]" for i in present])
            for i, data in zip(present, done):
                column[i] = data
        encoded[part] = column
    out = []
    for i, r in enumerate(raw):
        partition = r.get("partition")
        if partition is not None and (type(partition) is not int or partition < 0):
            raise InvalidRequestError(f"records[{i}].partition must be a non-negative integer")
        out.append(ProduceRecord(encoded["key"][i], encoded["value"][i], partition, ()))
    return (out, parse_producer_fields(doc), key_schema[0] if key_schema else None,
            value_schema[0] if value_schema else None)


def render_schema_record(st: S.SchemaRegistryState, topic: str, partition: int, rec: Any, fmt: str,
                         *, timestamp: int | None = None) -> dict[str, Any]:
    """One fetched record with its key and value decoded by their schemas (`st`: the node's registry state)."""

    def decode(data: bytes | None, what: str) -> Any:
        if data is None:
            return None
        try:
            framed = wire.decode(data)
            stored = st.schema(framed.schema_id)
            if stored.schema_type != SCHEMA_FORMATS[fmt]:
                raise E.SchemaRegistryError(f"schema {framed.schema_id} is {stored.schema_type}")
            if stored.schema_type == PROTOBUF:
                framed = wire.decode(data, protobuf=True)
                return decode_value(st.parsed(stored), framed.payload, what, framed.message_indexes)
            return decode_value(st.parsed(stored), framed.payload, what)
        except (E.SchemaRegistryError, InvalidRequestError) as e:  # also WireFormatError, SchemaValueError
            raise RecordDeserializationError(f"the {what} of the record at offset {rec.offset} cannot be read as "
                                             f"{fmt}: {e}") from None

    return {"topic": topic, "key": decode(rec.key, "key"), "value": decode(rec.value, "value"),
            "partition": partition, "offset": rec.offset,
            "timestamp": rec.timestamp if timestamp is None else timestamp}
