"""Media types of the HTTP API and the conversions between JSON bodies and records.

Produce bodies (Confluent REST Proxy v2):
    {"records": [{"key": K, "value": V, "partition": P?, "headers": [{"key": name, "value": B64|null}]?}]}
  - `application/vnd.kafka.json.v2+json`: K and V are any JSON; stored as their compact UTF-8 JSON.
  - `application/vnd.kafka.binary.v2+json`: K and V are base64 strings (or null).
  A null value is a tombstone. Header values are base64 in both formats.
Fetch bodies (as Redpanda's HTTP proxy): a JSON array of
    {"topic", "key", "value", "partition", "offset", "timestamp", "headers"} in the asked format.
`application/vnd.kafka.recordbatch` carries raw RecordBatch v2 bytes both ways (the binary path).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from lakelog.ingest_api.errors import InvalidRequestError, RecordDeserializationError
from lakelog.ingest_api.node import ProduceRecord
from lakelog.logstore.record_batch import Record

JSON_V2 = "application/vnd.kafka.json.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
V2 = "application/vnd.kafka.v2+json"
RECORDBATCH = "application/vnd.kafka.recordbatch"
JSON = "application/json"

EMBEDDED_FORMATS = (JSON_V2, BINARY_V2)


def media_type(header: str | None) -> str:
    """The bare media type of a Content-Type / single Accept value (parameters dropped)."""
    return (header or "").split(";", 1)[0].strip().lower()


def _accept_entries(accept_header: str) -> list[str]:
    """The media types of an Accept header with q > 0, most preferred first (stable for equal q)."""
    entries = []
    for i, part in enumerate(accept_header.split(",")):
        fields = part.split(";")
        mt = fields[0].strip().lower()
        q = 1.0
        for param in fields[1:]:
            name, _, value = param.strip().partition("=")
            if name.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if mt and q > 0:
            entries.append((-q, i, mt))
    return [mt for _, _, mt in sorted(entries)]


def accepted(accept_header: str | None, offered: tuple[str, ...], default: str) -> str | None:
    """Pick the offered type the Accept header prefers (q-values honoured); `default` for a missing
    header or a wildcard; JSON v2 for a bare `application/json` (plain JSON, as on produce); None
    when nothing offered is acceptable."""
    if not accept_header or not accept_header.strip():
        return default
    for w in _accept_entries(accept_header):
        if w in offered:
            return w
        if w == JSON and JSON_V2 in offered:
            return JSON_V2
        if w in ("*/*", "application/*", JSON):
            return default
    return None


def records_format(accept_header: str | None) -> str | None:
    """The embedded format a v2 consumer `records` request asks for, as Confluent's ConsumersResource
    declares it: the binary reader produces `binary.v2+json` and `application/vnd.kafka.v2+json`, the
    JSON reader `json.v2+json`. None when the header leaves the choice open (missing, a wildcard,
    `application/json`): the instance's own format is served. "" when nothing servable is asked."""
    if not accept_header or not accept_header.strip():
        return None
    for w in _accept_entries(accept_header):
        if w in (BINARY_V2, V2):
            return BINARY_V2
        if w == JSON_V2:
            return JSON_V2
        if w in ("*/*", "application/*", JSON):
            return None
    return ""


def _b64(value: Any, what: str) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidRequestError(f"{what} must be a base64 string or null")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequestError(f"{what} is not valid base64") from None


_compact_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _json_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    return _compact_json(value).encode("utf-8")


def _reject_constant(token: str) -> Any:
    # NaN / Infinity are not JSON (RFC 8259); stored, they could never be fetched as JSON again.
    raise ValueError(f"{token} is not valid JSON")


@dataclass(frozen=True)
class ProducerFields:
    """Idempotent produce: the producer id and epoch from POST /producers, and the batch's first sequence."""

    producer_id: int
    producer_epoch: int
    sequence: int


_INT32_MAX = 2**31 - 1
_INT16_MAX = 2**15 - 1


def parse_producer_fields(doc: dict) -> ProducerFields | None:
    """The optional top-level `producer_id`, `producer_epoch`, `sequence` of a produce body (all or none)."""
    present = [k for k in ("producer_id", "producer_epoch", "sequence") if doc.get(k) is not None]
    if not present:
        return None
    if len(present) != 3:
        raise InvalidRequestError("producer_id, producer_epoch and sequence go together")
    values = [doc[k] for k in ("producer_id", "producer_epoch", "sequence")]
    if any(not isinstance(v, int) or isinstance(v, bool) for v in values):
        raise InvalidRequestError("producer_id, producer_epoch and sequence must be integers")
    pid, epoch, seq = values
    if not 0 <= pid < 2**63 or not 0 <= epoch <= _INT16_MAX or not 0 <= seq <= _INT32_MAX:
        raise InvalidRequestError("producer_id must be in [0, 2^63), producer_epoch in [0, 32767], "
                                  "sequence in [0, 2^31)")
    return ProducerFields(pid, epoch, seq)


def parse_produce_body(body: bytes, fmt: str, max_records: int) -> list[ProduceRecord]:
    return parse_produce_request(body, fmt, max_records)[0]


def parse_produce_request(body: bytes, fmt: str, max_records: int) -> tuple[list[ProduceRecord], ProducerFields | None]:
    try:
        doc = json.loads(body, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nesting too deep
        raise InvalidRequestError("request body is not valid JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
        raise InvalidRequestError('request body must be {"records": [...]}')
    raw = doc["records"]
    if not raw:
        raise InvalidRequestError("records must not be empty")
    if len(raw) > max_records:
        from lakelog.ingest_api.errors import RequestTooLargeError
        raise RequestTooLargeError(f"{len(raw)} records exceed max.records.per.request={max_records}")
    out = []
    for i, r in enumerate(raw):
        if not isinstance(r, dict):
            raise InvalidRequestError(f"records[{i}] must be an object")
        if fmt == BINARY_V2:
            key, value = _b64(r.get("key"), f"records[{i}].key"), _b64(r.get("value"), f"records[{i}].value")
        else:
            key, value = _json_bytes(r.get("key")), _json_bytes(r.get("value"))
        partition = r.get("partition")
        if partition is not None and (not isinstance(partition, int) or isinstance(partition, bool) or partition < 0):
            raise InvalidRequestError(f"records[{i}].partition must be a non-negative integer")
        headers = r.get("headers") or []
        if not isinstance(headers, list):
            raise InvalidRequestError(f"records[{i}].headers must be a list")
        parsed_headers = []
        for j, h in enumerate(headers):
            if not isinstance(h, dict) or not isinstance(h.get("key", h.get("name")), str):
                raise InvalidRequestError(f"records[{i}].headers[{j}] must be {{\"key\": string, \"value\": base64}}")
            parsed_headers.append((h.get("key", h.get("name")), _b64(h.get("value"), f"records[{i}].headers[{j}].value")))
        out.append(ProduceRecord(key, value, partition, tuple(parsed_headers)))
    return out, parse_producer_fields(doc)


def render_record(topic: str, partition: int, rec: Record, fmt: str, *, timestamp: int | None = None) -> dict[str, Any]:
    """One fetched record as JSON; `timestamp` overrides the record's (LogAppendTime batches)."""
    if fmt == BINARY_V2:
        key = None if rec.key is None else base64.b64encode(rec.key).decode("ascii")
        value = None if rec.value is None else base64.b64encode(rec.value).decode("ascii")
    else:
        key, value = _from_json(rec.key, rec.offset, "key"), _from_json(rec.value, rec.offset, "value")
    return {"topic": topic, "key": key, "value": value, "partition": partition, "offset": rec.offset,
            "timestamp": rec.timestamp if timestamp is None else timestamp,
            "headers": [{"key": k, "value": None if v is None else base64.b64encode(v).decode("ascii")}
                        for k, v in rec.headers]}


def _from_json(data: bytes | None, offset: int, what: str) -> Any:
    if data is None:
        return None
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise RecordDeserializationError(
            f"the {what} of the record at offset {offset} is not JSON; fetch it with Accept: {BINARY_V2}") from None
