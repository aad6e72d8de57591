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
import math
from dataclasses import dataclass
from typing import Any

import orjson

from lakelog.ingest_api.errors import InvalidRequestError, RecordDeserializationError
from lakelog.ingest_api.records.produce_columns import ProduceColumns
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


_dumps = orjson.dumps
_compact_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _json_bytes(value: Any) -> bytes | None:
    """Compact UTF-8 JSON of a value (orjson, in C; the standard library for what orjson cannot
    write: integers beyond 64 bits, nesting deeper than 255)."""
    if value is None:
        return None
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError
        pass
    try:
        return _compact_json(value).encode("utf-8")
    except (UnicodeEncodeError, RecursionError):
        raise InvalidRequestError("a key or value cannot be stored as UTF-8 JSON") from None


def _reject_constant(token: str) -> Any:
    # NaN / Infinity are not JSON (RFC 8259); stored, they could never be fetched as JSON again.
    raise ValueError(f"{token} is not valid JSON")


@dataclass(frozen=True)
class ProducerFields:
    """Idempotent produce: the producer id and epoch from POST /producers, and the batch's first sequence."""

    producer_id: int
    producer_epoch: int
    sequence: int
    #: The transaction the records belong to (HTTP transactions, docs/transactions.md); None: idempotent only.
    transactional_id: str | None = None


_INT32_MAX = 2**31 - 1
#: Longest transactional id a produce body may name.
MAX_TRANSACTIONAL_ID_CHARS = 255
#: The header naming the transaction of raw transactional batches (Content-Type RECORDBATCH), as
#: Produce's transactional_id does over Kafka: the partition must be in that transaction.
TRANSACTIONAL_ID_HEADER = "X-Lakelog-Transactional-Id"
_INT16_MAX = 2**15 - 1


def parse_producer_fields(doc: dict) -> ProducerFields | None:
    """The optional top-level `producer_id`, `producer_epoch`, `sequence` of a produce body (all or none)."""
    present = [k for k in ("producer_id", "producer_epoch", "sequence") if doc.get(k) is not None]
    tid = doc.get("transactional_id")
    if tid is not None and (not isinstance(tid, str) or not 1 <= len(tid) <= MAX_TRANSACTIONAL_ID_CHARS
                            or len(present) != 3):
        raise InvalidRequestError(f"transactional_id must be a string of 1 to {MAX_TRANSACTIONAL_ID_CHARS} "
                                  f"characters, with producer_id, producer_epoch and sequence")
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
    return ProducerFields(pid, epoch, seq, tid)


def parse_produce_body(body: bytes, fmt: str, max_records: int) -> ProduceColumns:
    return parse_produce_request(body, fmt, max_records)[0]


def _loads(body: bytes, exact: bool = False) -> Any:
    """The parsed body: orjson (C) first; what it refuses goes through the standard library, whose
    answer stands (UTF-16/32 bodies, a BOM, lone surrogates, 1e400). `exact`: the standard library
    only (orjson turns integers beyond 64 bits into floats: see _may_hold_big_integers)."""
    if not exact:
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
    try:
        return json.loads(body, parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, UnicodeDecodeError, RecursionError):  # RecursionError: nesting too deep
        raise InvalidRequestError("request body is not valid JSON") from None


def _finite_float(token: str) -> float:
    # 1e400 reads as infinity, which JSON cannot write back (orjson refuses it from the start).
    value = float(token)
    if value in (math.inf, -math.inf):
        raise ValueError(f"{token} is out of a double's range")
    return value


#: Every digit to "0", every other byte to " ": a run of 19 zeros after translate() is a run of 19
#: digits in the body, the shortest integer orjson may not hold exactly (below -2^63 or from 2^64).
_DIGIT_RUNS = bytes(0x30 if 0x30 <= i <= 0x39 else 0x20 for i in range(256))


def _may_hold_big_integers(body: bytes) -> bool:
    return b"0" * 19 in body.translate(_DIGIT_RUNS)


def parse_produce_request(body: bytes, fmt: str, max_records: int) -> tuple[ProduceColumns, ProducerFields | None]:
    """The records of a v2 produce body as columns (one pass over the records, no object per
    record), and its producer fields."""
    cols, producer, numbers = _parse_produce(_loads(body), fmt, max_records)
    if numbers and _may_hold_big_integers(body):
        # A number that orjson may have read as a float: read the body again exactly.
        cols, producer, _ = _parse_produce(_loads(body, exact=True), fmt, max_records)
    return cols, producer


def _parse_produce(doc: Any, fmt: str, max_records: int) -> tuple[ProduceColumns, ProducerFields | None, bool]:
    """(columns, producer fields, whether a key or value holds something other than a string)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
        raise InvalidRequestError('request body must be {"records": [...]}')
    raw = doc["records"]
    if not raw:
        raise InvalidRequestError("records must not be empty")
    n = len(raw)
    if n > max_records:
        from lakelog.ingest_api.errors import RequestTooLargeError
        raise RequestTooLargeError(f"{n} records exceed max.records.per.request={max_records}")
    binary = fmt == BINARY_V2
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    partitions: list[int | None] | None = None
    headers: list[tuple] | None = None
    any_key = numbers = False
    for i, r in enumerate(raw):
        if type(r) is not dict:
            raise InvalidRequestError(f"records[{i}] must be an object")
        key, value = r.get("key"), r.get("value")
        if key is not None:
            if binary:
                key = _b64(key, f"records[{i}].key")
            else:
                numbers = numbers or type(key) is not str
                key = _json_bytes(key)
            any_key = True
        if value is not None:
            if binary:
                value = _b64(value, f"records[{i}].value")
            else:
                numbers = numbers or type(value) is not str
                try:  # _json_bytes inlined: the one call made for every record
                    value = _dumps(value)
                except TypeError:
                    value = _json_bytes(value)
        keys.append(key)
        values.append(value)
        partition = r.get("partition")
        if partition is not None:
            if type(partition) is not int or partition < 0:
                raise InvalidRequestError(f"records[{i}].partition must be a non-negative integer")
            if partitions is None:
                partitions = [None] * n
            partitions[i] = partition
        hs = r.get("headers")
        if hs:
            if not isinstance(hs, list):
                raise InvalidRequestError(f"records[{i}].headers must be a list")
            if headers is None:
                headers = [()] * n
            headers[i] = _parse_headers(hs, i)
    return ProduceColumns(values, keys if any_key else None, partitions, headers), parse_producer_fields(doc), numbers


def _parse_headers(headers: list, i: int) -> tuple[tuple[str, bytes | None], ...]:
    parsed = []
    for j, h in enumerate(headers):
        if not isinstance(h, dict) or not isinstance(h.get("key", h.get("name")), str):
            raise InvalidRequestError(f"records[{i}].headers[{j}] must be {{\"key\": string, \"value\": base64}}")
        parsed.append((h.get("key", h.get("name")), _b64(h.get("value"), f"records[{i}].headers[{j}].value")))
    return tuple(parsed)


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
