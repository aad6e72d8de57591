"""Produce, fetch and offsets: `/topics/{topic}[/partitions/{partition}]...`."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from lakelog.ingest_api.errors import InvalidRequestError, NotAcceptableError, UnsupportedMediaTypeError
from lakelog.ingest_api.records.formats import (
    BINARY_V2,
    EMBEDDED_FORMATS,
    JSON,
    JSON_V2,
    RECORDBATCH,
    TRANSACTIONAL_ID_HEADER,
    V2,
    accepted,
    media_type,
    parse_produce_request,
    render_record,
)
from lakelog.ingest_api.replication.partition import PartitionKey
from lakelog.ingest_api.replication.peers import FORWARDED_HEADER
from lakelog.ingest_api.records.produce_columns import ProduceColumns, ProduceResults
from lakelog.ingest_api.http.request_body import read_body_buffer
from lakelog.ingest_api.http.routers.deps import forward_to_leader, get_node, get_node_per_partition, read_body
from lakelog.ingest_api.schemas.rest import SCHEMA_FORMATS, parse_schema_produce, render_schema_record
from lakelog.ingest_api.http.routers.schemas import registry_of as schema_registry
from lakelog.ingest_api.http.security_middleware import authorize, request_principal
from lakelog.ingest_api.security.acl import Operation, ResourceType
from lakelog.logstore.read_committed import committed_batches, data_batches, next_offset_after
from lakelog.logstore.record_batch import RecordBatch, TimestampType, iter_batches

router = APIRouter(tags=["records"])

READ_COMMITTED, READ_UNCOMMITTED = "read_committed", "read_uncommitted"
ISOLATION_PATTERN = f"^({READ_UNCOMMITTED}|{READ_COMMITTED})$"

_PRODUCER_PROPERTIES = {
    "producer_id": {"type": "integer", "minimum": 0, "description": "from POST /producers (idempotent produce)"},
    "producer_epoch": {"type": "integer", "minimum": 0, "maximum": 32767},
    "sequence": {"type": "integer", "minimum": 0, "maximum": 2147483647,
                 "description": "sequence of the first record; the next request continues after the last one"},
}
_RECORD_SCHEMA = {
    "type": "object",
    "properties": {
        "key": {}, "value": {},
        "partition": {"type": "integer", "minimum": 0},
        "headers": {"type": "array", "items": {"type": "object", "properties": {
            "key": {"type": "string"}, "value": {"type": ["string", "null"], "format": "byte"}},
            "required": ["key"]}},
    },
}
_PRODUCE_BODY = {
    "required": True,
    "content": {
        JSON_V2: {"schema": {"type": "object", "required": ["records"],
                             "properties": {"records": {"type": "array", "items": _RECORD_SCHEMA},
                                            **_PRODUCER_PROPERTIES}}},
        BINARY_V2: {"schema": {"type": "object", "required": ["records"],
                               "properties": {"records": {"type": "array", "items": {
                                   **_RECORD_SCHEMA, "properties": {
                                       **_RECORD_SCHEMA["properties"],
                                       "key": {"type": ["string", "null"], "format": "byte"},
                                       "value": {"type": ["string", "null"], "format": "byte"}}}},
                                   **_PRODUCER_PROPERTIES}}},
    },
}
_OFFSETS_RESPONSE = {
    "200": {"description": "offset of each record, in request order", "content": {V2: {"schema": {
        "type": "object", "properties": {"offsets": {"type": "array", "items": {"type": "object", "properties": {
            "partition": {"type": "integer"}, "offset": {"type": "integer"},
            "error_code": {"type": ["integer", "null"]}, "error": {"type": ["string", "null"]}}}}}}}}},
}


def _produce_response(results: ProduceResults, acks: str, schema_ids: tuple = (None, None)) -> Response:
    # Written as text: the answer of a 500-record produce holds 500 offsets, and a dict per record
    # through a JSON encoder took longer than parsing the request did.
    body = (f'{{"key_schema_id":{_json_int(schema_ids[0])},"value_schema_id":{_json_int(schema_ids[1])},'
            f'"offsets":{results.offsets_json(acks == "0")}}}')
    return Response(body.encode(), media_type=V2)


def _json_int(v: int | None) -> str:
    return "null" if v is None else str(int(v))


def _payload_bytes(records: ProduceColumns | list) -> int:
    if isinstance(records, ProduceColumns):
        return records.payload_bytes()
    return sum(len(r.value or b"") + len(r.key or b"") for r in records)


def _authorize_transaction(request: Request, transactional_id: str | None) -> None:
    """A transaction's records also need WRITE on its TransactionalId (Kafka's rule for a transactional Produce)."""
    if transactional_id is not None:
        authorize(request, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


def _check_acks(acks: str) -> str:
    if acks not in ("0", "1", "all", "-1"):
        raise InvalidRequestError("acks must be 0, 1 or all")
    return "all" if acks == "-1" else acks


@router.post("/topics/{topic}", summary="Produce records to a topic (partition chosen per record)",
             openapi_extra={"requestBody": _PRODUCE_BODY, "responses": _OFFSETS_RESPONSE})
async def produce_to_topic(topic: str, request: Request, acks: str = Query("all", description="0, 1 or all")):
    node = get_node_per_partition(request)
    acks = _check_acks(acks)
    fmt = media_type(request.headers.get("content-type"))
    if fmt == JSON:
        fmt = JSON_V2
    if fmt not in EMBEDDED_FORMATS + tuple(SCHEMA_FORMATS):
        raise UnsupportedMediaTypeError(f"Content-Type must be {JSON_V2}, {BINARY_V2} or {', '.join(SCHEMA_FORMATS)}")
    body = await read_body(request, node.config.max_request_bytes)
    schema_ids: tuple = (None, None)
    if fmt in SCHEMA_FORMATS:  # Avro / JSON Schema values, in Confluent's wire format (ingest_api/schemas/rest.py)
        records, producer, *schema_ids = await parse_schema_produce(schema_registry(request), topic, body, fmt,
                                                                    node.config.max_records_per_request)
    else:
        records, producer = parse_produce_request(body, fmt, node.config.max_records_per_request)
    _authorize_transaction(request, producer.transactional_id if producer is not None else None)
    results = await node.produce_records(topic, records, acks=acks, producer=producer,
                                         principal=request_principal(request))
    _count(request, topic, _payload_bytes(records), len(records))
    return _produce_response(results, acks, tuple(schema_ids))


@router.post("/topics/{topic}/partitions/{partition}",
             summary="Produce records, or raw RecordBatch v2 bytes, to one partition",
             openapi_extra={"requestBody": {**_PRODUCE_BODY, "content": {
                 **_PRODUCE_BODY["content"],
                 RECORDBATCH: {"schema": {"type": "string", "format": "binary"}}}},
                 "responses": _OFFSETS_RESPONSE})
async def produce_to_partition(topic: str, partition: int, request: Request,
                               acks: str = Query("all", description="0, 1 or all")):
    node = get_node_per_partition(request)
    acks = _check_acks(acks)
    fmt = media_type(request.headers.get("content-type"))
    if fmt == JSON:
        fmt = JSON_V2
    if fmt not in EMBEDDED_FORMATS + (RECORDBATCH,) + tuple(SCHEMA_FORMATS):
        raise UnsupportedMediaTypeError(f"Content-Type must be {JSON_V2}, {BINARY_V2}, {RECORDBATCH} or "
                                        f"{', '.join(SCHEMA_FORMATS)}")
    if fmt == RECORDBATCH:  # one buffer of the declared length, not a join of 64 KiB pieces (request_body.py)
        body = await read_body_buffer(request, node.config.max_request_bytes)
    else:
        body = await read_body(request, node.config.max_request_bytes)
    if fmt == RECORDBATCH:
        _authorize_transaction(request, request.headers.get(TRANSACTIONAL_ID_HEADER))
    if fmt == RECORDBATCH and not request.headers.get(FORWARDED_HEADER):  # a forwarding node checked it
        await node.transactions.verify_raw_produce(body, request.headers.get(TRANSACTIONAL_ID_HEADER), topic, partition)
    forwarded = await forward_to_leader(request, node, topic, partition, body)
    if forwarded is not None:
        return forwarded
    if fmt == RECORDBATCH:
        info = await node.produce_batches(topic, partition, body if body.__class__ is bytes else memoryview(body), acks)
        _count(request, topic, info.size_in_bytes, info.record_count)
        return _produce_response(ProduceResults(partition, info.base_offsets), acks)
    schema_ids: tuple = (None, None)
    if fmt in SCHEMA_FORMATS:
        records, producer, *schema_ids = await parse_schema_produce(schema_registry(request), topic, body, fmt,
                                                                    node.config.max_records_per_request)
    else:
        records, producer = parse_produce_request(body, fmt, node.config.max_records_per_request)
    _authorize_transaction(request, producer.transactional_id if producer is not None else None)
    results = await node.produce_records(topic, records, partition=partition, acks=acks, producer=producer,
                                         principal=request_principal(request))
    _count(request, topic, _payload_bytes(records), len(records))
    return _produce_response(results, acks, tuple(schema_ids))


@router.post("/producers", summary="Get a producer id for idempotent produce (Kafka's InitProducerId)",
             responses={200: {"description": "a new producer id, epoch 0", "content": {V2: {"schema": {
                 "type": "object", "properties": {"producer_id": {"type": "integer"},
                                                  "producer_epoch": {"type": "integer"}}}}}}})
async def init_producer(request: Request):
    node = get_node(request)
    producer_id, epoch = await node.init_producer_id()
    return JSONResponse({"producer_id": producer_id, "producer_epoch": epoch}, media_type=V2)


def _count(request: Request, topic: str, nbytes: int, nrecords: int) -> None:
    m = request.app.state.metrics
    m.produce_bytes.labels(topic).inc(nbytes)
    m.produce_records.labels(topic).inc(nrecords)


@router.get("/topics/{topic}/partitions/{partition}/records",
            summary="Fetch records from an offset (below the high watermark, or the last stable offset with "
                    "isolation=read_committed), waiting up to `timeout` ms",
            responses={200: {"description": "records", "content": {
                JSON_V2: {"schema": {"type": "array", "items": {"type": "object"}}},
                BINARY_V2: {"schema": {"type": "array", "items": {"type": "object"}}},
                RECORDBATCH: {"schema": {"type": "string", "format": "binary"}}}}})
async def fetch_records(topic: str, partition: int, request: Request,
                        offset: int = Query(..., ge=0, description="first offset to return"),
                        max_bytes: int | None = Query(None, ge=1, description="most bytes of batches to return"),
                        timeout: int = Query(1000, ge=0, description="ms to wait when no record is there yet"),
                        isolation: str = Query(READ_UNCOMMITTED, pattern=ISOLATION_PATTERN,
                                               description="read_committed: only committed records, below the "
                                                           "last stable offset")):
    node = get_node_per_partition(request)
    # A wildcard (curl's `*/*`) or no Accept gets base64 keys and values: every record can be
    # rendered that way, and Confluent's resources weight the binary format above JSON.
    fmt = accepted(request.headers.get("accept"), (JSON_V2, BINARY_V2, RECORDBATCH, *SCHEMA_FORMATS), BINARY_V2)
    if fmt is None:
        raise NotAcceptableError(f"Accept must allow {JSON_V2}, {BINARY_V2} or {RECORDBATCH}")
    limit = min(max_bytes or node.config.fetch_default_bytes, node.config.fetch_max_bytes)
    forwarded = await forward_to_leader(request, node, topic, partition, wait_ms=min(timeout, node.config.fetch_max_wait_ms))
    if forwarded is not None:
        return forwarded
    result = await node.fetch_wait(topic, partition, offset, limit, timeout)
    request.app.state.metrics.fetch_bytes.labels(topic).inc(len(result.records))
    # The local replica (it may have stopped leading during a long-poll; the answer is then empty).
    p = node.local_partition(PartitionKey(topic, partition))
    records = bytes(result.records)
    if isolation == READ_COMMITTED:
        if p is None:
            records, kept = b"", []
        else:
            records, aborted = await node.read_committed_view(p, offset, records)
            kept = list(committed_batches(_batches(records), aborted, keep_control=fmt == RECORDBATCH))
    else:
        kept = list(data_batches(_batches(records))) if fmt != RECORDBATCH else []
    headers = {"X-Lakelog-High-Watermark": str(p.high_watermark if p is not None else -1),
               "X-Lakelog-Last-Stable-Offset": str(p.last_stable_offset if p is not None else -1),
               "X-Lakelog-Log-Start-Offset": str(result.log_start_offset),
               "X-Lakelog-Next-Offset": str(next_offset_after(records, offset))}
    if fmt == RECORDBATCH:
        body = records if isolation != READ_COMMITTED else b"".join(bytes(b.buffer) for b in kept)
        return Response(body, media_type=RECORDBATCH, headers=headers)
    out = []
    for batch in kept:
        log_append_time = batch.max_timestamp if batch.timestamp_type == TimestampType.LOG_APPEND_TIME else None
        for rec in batch.records():
            if rec.offset >= offset:
                if fmt in SCHEMA_FORMATS:
                    out.append(render_schema_record(schema_registry(request).state, topic, partition, rec, fmt,
                                                    timestamp=log_append_time))
                else:
                    out.append(render_record(topic, partition, rec, fmt, timestamp=log_append_time))
    return JSONResponse(out, media_type=fmt, headers=headers)


def _batches(records: bytes) -> list[RecordBatch]:
    return [batch for _, batch in iter_batches(records)]


@router.get("/topics/{topic}/partitions/{partition}/offsets",
            summary="Beginning and end offsets and the last stable offset; with `timestamp`, the first offset "
                    "at or after it")
async def partition_offsets(topic: str, partition: int, request: Request,
                            timestamp: int | None = Query(None, description="ms since the epoch")):
    node = get_node_per_partition(request)
    forwarded = await forward_to_leader(request, node, topic, partition)
    if forwarded is not None:
        return forwarded
    beginning, end = await node.offsets(topic, partition)
    lso = node.partition(topic, partition).consumer_stable_offset()
    body: dict = {"beginning_offset": beginning, "end_offset": end, "last_stable_offset": lso}
    if timestamp is not None:
        found = await node.offset_for_timestamp(topic, partition, timestamp)
        body["offset"], body["timestamp"] = (found if found else (None, None))
    return JSONResponse(body, media_type=V2)
