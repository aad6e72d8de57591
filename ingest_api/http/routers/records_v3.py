"""Confluent REST Proxy v3 produce: `POST /v3/clusters/{c}/topics/{t}/records` and `records:batch`.

`records` takes one record (`ProduceRequest`: `partition_id`, `headers` [{name, value: base64}],
`key` / `value` as {type: BINARY | JSON | STRING, data}, `timestamp` RFC 3339) or, in streaming
mode, any number of them concatenated in one request body (`Transfer-Encoding: chunked`), and answers
one delivery report per record, in order, concatenated JSON (one per line): `{"error_code": 200,
"cluster_id", "topic_name", "partition_id", "offset", "timestamp", "key": {"type", "size"}, "value"}`
or `{"error_code": 4xx|5xx, "message"}`. The HTTP status is 200 once the stream is accepted.

Rules:
1. A record is produced only once its whole JSON text has arrived and parsed: a connection dropped
   halfway leaves the records answered so far (each acknowledged with acks=all) and nothing of
   the cut one.
2. Records are produced in arrival order; those parsed from the same chunk go in one produce call
   (one batch per partition) so a fast stream is not one batch per record.
3. The unparsed tail of the stream is bounded by `max.request.bytes` (one record larger than that is
   413 and ends the stream); the whole stream by `request.body.timeout.ms` (the body deadline).
4. A single record sent whole (with Content-Length) that fails is answered with its HTTP status
   (400 malformed, 404 unknown partition, 413, 422 empty), as Confluent's non-streaming mode.

`records:batch` (`{"entries": [{"id", ...}]}`) answers 207 with `successes` and `failures`.
Schema-based keys and values (`type` AVRO / JSONSCHEMA / PROTOBUF, `schema_id`, `schema_version`,
`schema`, `subject`, `subject_name_strategy`) are serialized into Confluent's wire format by the
node's Schema Registry: `ingest_api/schemas/rest_v3.py` has the rules and the errors.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from lakelog.infra.errors import LakelogError
from lakelog.ingest_api.http import v3_errors
from lakelog.ingest_api.http.v3_errors import V3BadRequestError
from lakelog.ingest_api.error_table import http_error
from lakelog.ingest_api.errors import (
    InvalidRequestError,
    PartitionNotFoundError,
    RequestTooLargeError,
    UnsupportedMediaTypeError,
)
from lakelog.ingest_api.records.formats import JSON, media_type
from lakelog.ingest_api.records.produce_columns import ProduceRecord
from lakelog.ingest_api.http.routers.v3_resources import cluster_node_per_partition
from lakelog.ingest_api.http.routers.deps import read_body
from lakelog.ingest_api.schemas.rest_v3 import V3SchemaSerializer, wants_schema

router = APIRouter(prefix="/v3", tags=["records v3"])

_INT32_MAX = 2**31 - 1
#: Longest batch entry id (Confluent's ProduceBatchRequestEntry.id).
MAX_ENTRY_ID_CHARS = 80
_DECODER = json.JSONDecoder()
_WS = b" \t\r\n"


class BadRecordError(V3BadRequestError):
    """A v3 produce record is malformed: not JSON, or a field of the wrong type (Confluent: 400)."""


class EmptyPayloadError(InvalidRequestError):
    """A v3 produce request without a record (Confluent: 422, 'Payload error')."""


@dataclass(frozen=True)
class V3Record:
    """One parsed v3 record: what is stored, and what the delivery report tells about it."""

    record: ProduceRecord
    timestamp_ms: int | None
    key_type: str | None
    value_type: str | None
    schema_fields: tuple[tuple[str, dict], ...] = ()  # ("key" | "value", field) still to serialize by schema
    schema_reports: tuple[tuple[str, dict], ...] = ()  # ("key" | "value", type/subject/schema_id/schema_version)


def _data(field: Any, what: str) -> tuple[bytes | None, str | None]:
    """(bytes, type) of a `key` / `value` ProduceRequestData; (None, None) when absent or null."""
    if field is None:
        return None, None
    if not isinstance(field, dict):
        raise BadRecordError(f"{what} must be an object {{\"type\", \"data\"}} or null")
    kind = field.get("type", "JSON")
    if not isinstance(kind, str):
        raise BadRecordError(f"{what}.type must be a string")
    kind = kind.upper()
    data = field.get("data")
    if kind not in ("BINARY", "JSON", "STRING"):
        raise BadRecordError(f"{what}.type must be BINARY, JSON or STRING")
    if data is None:
        return None, kind
    if kind == "BINARY":
        if not isinstance(data, str):
            raise BadRecordError(f"{what}.data must be a base64 string")
        try:
            return base64.b64decode(data, validate=True), kind
        except (binascii.Error, ValueError):
            raise BadRecordError(f"data={data[:40]} is not a base64 string.") from None
    if kind == "STRING":
        if not isinstance(data, str):
            raise BadRecordError(f"{what}.data must be a string")
        return data.encode("utf-8"), kind
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8"), kind


def _timestamp(value: Any) -> int | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise BadRecordError("timestamp must be an RFC 3339 date-time string")
    try:
        dt = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise BadRecordError(f"timestamp {value[:40]!r} is not an RFC 3339 date-time") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    ms = int(dt.timestamp() * 1000)
    if ms < 0:
        raise BadRecordError("timestamp must not be before 1970")
    return ms


def parse_record(doc: Any, partitions: int) -> V3Record:
    """A v3 ProduceRequest (or batch entry) object -> V3Record; raises BadRecordError / PartitionNotFoundError."""
    if not isinstance(doc, dict):
        raise BadRecordError("a record must be a JSON object")
    partition = doc.get("partition_id")
    if partition is not None:
        if not isinstance(partition, int) or isinstance(partition, bool) or not 0 <= partition <= _INT32_MAX:
            raise BadRecordError("partition_id must be a non-negative 32-bit integer")
        if partition >= partitions:
            raise PartitionNotFoundError("This server does not host this topic-partition.")
    headers = doc.get("headers") or []
    if not isinstance(headers, list):
        raise BadRecordError("headers must be a list")
    parsed = []
    for j, h in enumerate(headers):
        if not isinstance(h, dict) or not isinstance(h.get("name"), str):
            raise BadRecordError(f"headers[{j}] must be {{\"name\": string, \"value\": base64}}")
        v = h.get("value")
        if v is not None:
            if not isinstance(v, str):
                raise BadRecordError(f"headers[{j}].value must be a base64 string")
            try:
                v = base64.b64decode(v, validate=True)
            except (binascii.Error, ValueError):
                raise BadRecordError(f"headers[{j}].value is not base64") from None
        parsed.append((h["name"], v))
    by_schema = tuple((p, doc[p]) for p in ("key", "value") if isinstance(doc.get(p), dict) and wants_schema(doc[p]))
    schema_parts = {p for p, _ in by_schema}
    key, key_type = _data(None if "key" in schema_parts else doc.get("key"), "key")
    value, value_type = _data(None if "value" in schema_parts else doc.get("value"), "value")
    return V3Record(ProduceRecord(key, value, partition, tuple(parsed)), _timestamp(doc.get("timestamp")),
                    key_type, value_type, by_schema)


async def with_schemas(rec: V3Record, serializer: V3SchemaSerializer) -> V3Record:
    """The record with its schema-based key / value serialized into Confluent's wire format."""
    if not rec.schema_fields:
        return rec
    data = {"key": rec.record.key, "value": rec.record.value}
    reports = []
    for part, field in rec.schema_fields:
        data[part], report = await serializer.serialize(part, field)
        reports.append((part, report))
    r = rec.record
    return V3Record(ProduceRecord(data["key"], data["value"], r.partition, r.headers), rec.timestamp_ms,
                    rec.key_type, rec.value_type, (), tuple(reports))


def _rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _report(node: Any, topic: str, rec: V3Record, partition: int, offset: int, ts: int) -> dict[str, Any]:
    schema = dict(rec.schema_reports)

    def size(part: str, data: bytes | None, kind: str | None) -> dict[str, Any] | None:
        if part in schema:  # type, subject, schema_id, schema_version (Confluent's ProduceResponseData)
            return {**schema[part], "size": len(data or b"")}
        return None if kind is None and data is None else {"type": kind, "size": len(data or b"")}

    return {"error_code": 200, "cluster_id": node.cluster_id, "topic_name": topic, "partition_id": partition,
            "offset": offset, "timestamp": _rfc3339(ts),
            "key": size("key", rec.record.key, rec.key_type), "value": size("value", rec.record.value, rec.value_type)}


def _error_report(path: str, exc: BaseException) -> dict[str, Any]:
    status, code, message = http_error(exc)
    _, code, _ = v3_errors.shape(path, exc, status, code)
    return {"error_code": code, "message": message}


async def _produce(node: Any, topic: str, recs: list[V3Record]) -> list[dict[str, Any]]:
    """Produce records in order: runs of records without their own timestamp go in one call."""
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(recs):
        j = i + 1
        if recs[i].timestamp_ms is None:
            while j < len(recs) and recs[j].timestamp_ms is None:
                j += 1
        run = recs[i:j]
        ts = run[0].timestamp_ms if run[0].timestamp_ms is not None else int(time.time() * 1000)
        results = await node.produce_records(topic, [r.record for r in run], timestamp_ms=ts, acks="all")
        out.extend(_report(node, topic, r, res.partition, res.offset, ts) for r, res in zip(run, results))
        i = j
    return out


def _check_content_type(request: Request) -> None:
    if media_type(request.headers.get("content-type")) != JSON:
        raise UnsupportedMediaTypeError("HTTP 415 Unsupported Media Type: Content-Type must be application/json")


class _StreamingProduce(Response):
    """The ASGI answer of a streaming produce: reads the body as it arrives, produces each record
    once parsed and sends its delivery report. Reading and writing interleave on one connection."""

    def __init__(self, node: Any, topic: str, partitions: int, path: str, first: bytes, done: bool) -> None:
        super().__init__(status_code=200, media_type=JSON)
        self.node, self.topic, self.partitions, self.path = node, topic, partitions, path
        self.buf = bytearray(first)
        self.done = done
        self.limit = node.config.max_request_bytes
        self.pending: tuple[list[Any], BaseException | None] | None = None
        self.serializer = V3SchemaSerializer(node, topic)

    def _parse_available(self) -> tuple[list[Any], BaseException | None]:
        """Whole JSON values at the front of the buffer (removed from it), and the error that stops
        the stream, if any. An incomplete tail stays in the buffer. The buffer is decoded once."""
        raw = bytes(self.buf)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            if self.done or e.start < len(raw) - 3:  # not just a character cut by the chunking
                text = raw[:e.start].decode("utf-8")
                bad: BaseException | None = BadRecordError("the request body is not UTF-8")
            else:
                text, bad = raw[:e.start].decode("utf-8"), None
        else:
            bad = None
        docs: list[Any] = []
        pos = 0
        stop: BaseException | None = None
        while True:
            while pos < len(text) and text[pos] in " \t\r\n":
                pos += 1
            if pos >= len(text):
                stop = bad
                break
            try:
                doc, end = _DECODER.raw_decode(text, pos)
            except (ValueError, RecursionError):
                if len(text) - pos > self.limit:
                    stop = RequestTooLargeError(f"a record is larger than max.request.bytes={self.limit}")
                elif self.done or bad is not None:
                    stop = bad or BadRecordError("the request body is not valid concatenated JSON")
                break  # else: wait for more bytes
            if end - pos > self.limit:
                stop = RequestTooLargeError(f"a record is larger than max.request.bytes={self.limit}")
                break
            docs.append(doc)
            pos = end
        del self.buf[:len(text[:pos].encode("utf-8"))]
        return docs, stop

    async def __call__(self, scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", JSON.encode())]})
        while True:
            docs, stop = self.pending if self.pending is not None else self._parse_available()
            self.pending = None
            recs: list[V3Record] = []
            reports: list[dict[str, Any]] = []
            for d in docs:
                try:
                    recs.append(await with_schemas(parse_record(d, self.partitions), self.serializer))
                except LakelogError as e:  # a bad record is reported; the stream goes on
                    if recs:
                        reports.extend(await self._produce_reports(recs))
                        recs = []
                    reports.append(_error_report(self.path, e))
            if recs:
                reports.extend(await self._produce_reports(recs))
            if stop is not None:
                reports.append(_error_report(self.path, stop))
            if reports:
                await send({"type": "http.response.body", "more_body": True,
                            "body": b"".join(json.dumps(r, separators=(",", ":")).encode() + b"\n" for r in reports)})
            if stop is not None or self.done:
                break
            try:
                message = await receive()
            except LakelogError as e:  # the body deadline (request.body.timeout.ms)
                await send({"type": "http.response.body", "more_body": True,
                            "body": json.dumps(_error_report(self.path, e)).encode() + b"\n"})
                break
            if message["type"] == "http.disconnect":
                return  # what was answered stays; the cut record was never produced
            self.buf += message.get("body", b"")
            self.done = not message.get("more_body", False)
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _produce_reports(self, recs: list[V3Record]) -> list[dict[str, Any]]:
        try:
            return await _produce(self.node, self.topic, recs)
        except LakelogError as e:
            return [_error_report(self.path, e)] * len(recs)


@router.post("/clusters/{cluster_id}/topics/{topic_name}/records", summary="Produce records (one, or a stream)",
             openapi_extra={"requestBody": {"required": True, "content": {JSON: {"schema": {
                 "type": "object", "properties": {
                     "partition_id": {"type": ["integer", "null"], "minimum": 0},
                     "headers": {"type": "array", "items": {"type": "object", "required": ["name"], "properties": {
                         "name": {"type": "string"}, "value": {"type": ["string", "null"], "format": "byte"}}}},
                     "key": {"type": ["object", "null"]}, "value": {"type": ["object", "null"]},
                     "timestamp": {"type": ["string", "null"], "format": "date-time"}}}}}},
                 "responses": {"200": {"description": "one delivery report per record, in order"}}})
async def produce_record(cluster_id: str, topic_name: str, request: Request):
    node = cluster_node_per_partition(request, cluster_id)
    meta = node.producible_topic(topic_name)
    _check_content_type(request)
    if request.headers.get("content-length") is None:  # streaming mode (chunked)
        return _StreamingProduce(node, topic_name, meta.partitions, request.url.path, b"", False)
    body = await read_body(request, node.config.max_request_bytes)
    if not body.strip(_WS):
        raise EmptyPayloadError("Payload error. Request body is empty. Data is required.")
    answer = _StreamingProduce(node, topic_name, meta.partitions, request.url.path, body, True)
    docs, stop = answer._parse_available()
    if stop is not None and not docs:
        raise stop  # rule 4: nothing usable -> the HTTP status
    if len(docs) == 1 and stop is None:  # rule 4: one whole record -> its own HTTP status
        rec = await with_schemas(parse_record(docs[0], meta.partitions), answer.serializer)
        return JSONResponse((await _produce(node, topic_name, [rec]))[0], media_type=JSON)
    answer.pending = (docs, stop)
    return answer


@router.post("/clusters/{cluster_id}/topics/{topic_name}/records:batch", status_code=207,
             summary="Produce a batch of records; 207 with successes and failures",
             openapi_extra={"requestBody": {"required": True, "content": {JSON: {"schema": {
                 "type": "object", "required": ["entries"], "properties": {"entries": {"type": "array", "items": {
                     "type": "object", "required": ["id"], "properties": {
                         "id": {"type": "string", "minLength": 1, "maxLength": MAX_ENTRY_ID_CHARS},
                         "partition_id": {"type": ["integer", "null"], "minimum": 0},
                         "key": {"type": ["object", "null"]}, "value": {"type": ["object", "null"]},
                         "timestamp": {"type": ["string", "null"], "format": "date-time"}}}}}}}}}})
async def produce_records_batch(cluster_id: str, topic_name: str, request: Request):
    node = cluster_node_per_partition(request, cluster_id)
    meta = node.producible_topic(topic_name)
    _check_content_type(request)
    body = await read_body(request, node.config.max_request_bytes)
    if not body.strip(_WS):
        raise EmptyPayloadError("Payload error. Request body is empty. Data is required.")
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise BadRecordError("the request body is not valid JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
        raise BadRecordError('the request body must be {"entries": [...]}')
    entries = doc["entries"]
    if not entries:
        raise EmptyPayloadError("Payload error. The batch must hold at least one entry.")
    if len(entries) > node.config.max_records_per_request:
        raise RequestTooLargeError(f"{len(entries)} entries exceed max.records.per.request="
                                   f"{node.config.max_records_per_request}")
    ids: list[str] = []
    for i, e in enumerate(entries):
        eid = e.get("id") if isinstance(e, dict) else None
        if not isinstance(eid, str) or not 1 <= len(eid) <= MAX_ENTRY_ID_CHARS:
            raise BadRecordError(f"entries[{i}].id must be a string of 1 to {MAX_ENTRY_ID_CHARS} characters")
        ids.append(eid)
    if len(set(ids)) != len(ids):
        raise BadRecordError("Batch entry IDs must be distinct.")
    path = request.url.path
    successes: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    good: list[tuple[str, V3Record]] = []
    serializer = V3SchemaSerializer(node, topic_name)
    for eid, e in zip(ids, entries):
        try:
            good.append((eid, await with_schemas(parse_record(e, meta.partitions), serializer)))
        except LakelogError as exc:
            failures.append({"id": eid, **_error_report(path, exc)})
    if good:
        try:
            reports = await _produce(node, topic_name, [r for _, r in good])
            for (eid, _), rep in zip(good, reports):
                rep.pop("error_code")
                successes.append({"id": eid, **rep})
        except LakelogError as exc:
            failures.extend({"id": eid, **_error_report(path, exc)} for eid, _ in good)
    return JSONResponse({"successes": successes, "failures": failures}, status_code=207, media_type=JSON)
