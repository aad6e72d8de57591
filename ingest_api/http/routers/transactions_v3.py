"""Transactions over HTTP, as a Confluent-v3-style resource (docs/transactions.md, docs/http-api.md).

  POST /v3/clusters/{c}/transactions                  {"transactional_id", "transaction_timeout_ms"?}
        -> the producer id and epoch (Kafka's InitProducerId: the epoch moves on and fences an older
           holder of the id; its open transaction is aborted first)
  produce: the v2 / v3 produce bodies with `transactional_id`, `producer_id`, `producer_epoch` and
           `sequence` (the idempotent fields): the partition joins the transaction, the batch is
           a transaction's batch (ingest_api/node.py)
  POST /v3/clusters/{c}/transactions/{id}/partitions  {"producer_id", "producer_epoch", "partitions":
        [{"topic", "partition"}]}: Kafka's AddPartitionsToTxn, for raw transactional batches (RECORDBATCH
        with the X-Lakelog-Transactional-Id header), which are appended only to partitions added first
  POST /v3/clusters/{c}/transactions/{id}/offsets     {"producer_id", "producer_epoch", "group_id",
        "offsets": [{"topic", "partition", "offset", "metadata"?}]}: a group's offsets committed
        inside the transaction (AddOffsetsToTxn + TxnOffsetCommit)
  POST /v3/clusters/{c}/transactions/{id}:commit      {"producer_id", "producer_epoch"}
  POST /v3/clusters/{c}/transactions/{id}:abort       {"producer_id", "producer_epoch"}
  GET  /v3/clusters/{c}/transactions/{id}             the coordinator's view (state, partitions, epoch)

Authorization, as Kafka's transaction APIs: WRITE on the TransactionalId to begin, produce into,
add partitions or offsets to, commit or abort a transaction; DESCRIBE (implied by WRITE) to read it;
a refusal is a 403 TRANSACTIONAL_ID_AUTHORIZATION_FAILED (ingest_api/http/access.py has the rules).

Thin: the coordinator is `node.transactions` (reached on whichever node coordinates the id, with
the retries a Kafka client would make while it moves, loads or completes the previous transaction).
Errors are the one table's: PRODUCER_FENCED and INVALID_PRODUCER_EPOCH are 409s, CONCURRENT_TRANSACTIONS
a 503 to retry.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from lakelog.ingest_api.errors import InvalidRequestError
from lakelog.ingest_api.http.routers.deps import read_body
from lakelog.ingest_api.http.routers.v3_resources import base_url, cluster_node, resource_meta
from lakelog.ingest_api.http.security_middleware import authorize
from lakelog.ingest_api.records.formats import MAX_TRANSACTIONAL_ID_CHARS
from lakelog.ingest_api.security.acl import Operation, ResourceType

router = APIRouter(prefix="/v3", tags=["transactions v3"])

#: Largest JSON body of a transaction request.
MAX_BODY_BYTES = 1024 * 1024
#: The transaction timeout of a begin that names none (Kafka's producer default).
DEFAULT_TIMEOUT_MS = 60_000

_IDS = {"producer_id": {"type": "integer", "minimum": 0}, "producer_epoch": {"type": "integer", "minimum": 0,
                                                                            "maximum": 32767}}
_TP = {"type": "object", "required": ["topic", "partition"],
       "properties": {"topic": {"type": "string"}, "partition": {"type": "integer", "minimum": 0}}}


def _body(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": {
        "type": "object", "required": required, "properties": properties}}}}}


async def _doc(request: Request) -> dict[str, Any]:
    body = await read_body(request, MAX_BODY_BYTES)
    try:
        doc = json.loads(body or b"{}")
    except ValueError:
        raise InvalidRequestError("body is not JSON") from None
    if not isinstance(doc, dict):
        raise InvalidRequestError("body must be a JSON object")
    return doc


def _int(doc: dict[str, Any], key: str, low: int, high: int) -> int:
    v = doc.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
        raise InvalidRequestError(f"{key} must be an integer in [{low}, {high}]")
    return v


def _tid(value: Any) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_TRANSACTIONAL_ID_CHARS:
        raise InvalidRequestError(f"transactional_id must be a string of 1 to {MAX_TRANSACTIONAL_ID_CHARS} characters")
    return value


def _producer(doc: dict[str, Any]) -> dict[str, int]:
    return {"producer_id": _int(doc, "producer_id", 0, 2**63 - 1), "producer_epoch": _int(doc, "producer_epoch", 0, 32767)}


def _resource(request: Request, cluster_id: str, doc: dict[str, Any]) -> dict[str, Any]:
    tid = doc["transactional_id"]
    url = f"{base_url(request)}/clusters/{cluster_id}/transactions/{tid}"
    return {"kind": "KafkaTransaction", "metadata": resource_meta(url, f"crn:///kafka={cluster_id}/transaction={tid}"),
            "cluster_id": cluster_id, **doc}


@router.post("/clusters/{cluster_id}/transactions", summary="Start using a transactional id (Kafka's InitProducerId)",
             openapi_extra=_body({"transactional_id": {"type": "string", "minLength": 1},
                                  "transaction_timeout_ms": {"type": "integer", "minimum": 1}}, ["transactional_id"]))
async def init_transactions(cluster_id: str, request: Request):
    node = cluster_node(request, cluster_id)
    doc = await _doc(request)
    if isinstance(doc.get("transactional_id"), str):  # authorization before validation
        authorize(request, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, doc["transactional_id"])
    tid = _tid(doc.get("transactional_id"))
    timeout_ms = doc.get("transaction_timeout_ms", DEFAULT_TIMEOUT_MS)
    if not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool):
        raise InvalidRequestError("transaction_timeout_ms must be an integer")
    await node.transactions.ensure_state_topic()
    res = await node.transactions.call_with_retry(tid, "init", {"timeout_ms": timeout_ms})
    return JSONResponse(_resource(request, cluster_id, {"transactional_id": tid, "producer_id": res["producer_id"],
                                                        "producer_epoch": res["producer_epoch"]}))


@router.get("/clusters/{cluster_id}/transactions/{transactional_id}", summary="A transaction as its coordinator sees it")
async def describe_transaction(cluster_id: str, transactional_id: str, request: Request):
    node = cluster_node(request, cluster_id)
    res = await node.transactions.call_with_retry(_tid(transactional_id), "describe", {})
    res.pop("error", None)
    res["partitions"] = [{"topic": t, "partition": p} for t, p in res["partitions"]]
    return JSONResponse(_resource(request, cluster_id, res))


@router.post("/clusters/{cluster_id}/transactions/{name}", summary="Commit (`{id}:commit`) or abort (`{id}:abort`)",
             openapi_extra=_body(_IDS, ["producer_id", "producer_epoch"]))
async def end_transaction(cluster_id: str, name: str, request: Request):
    node = cluster_node(request, cluster_id)
    tid, _, action = name.rpartition(":")
    authorize(request, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, tid or name)  # before validation
    if action not in ("commit", "abort"):
        raise InvalidRequestError("POST .../transactions/{transactional_id}:commit or :abort")
    args = {**_producer(await _doc(request)), "commit": action == "commit"}
    await node.transactions.call_with_retry(_tid(tid), "end", args)
    return JSONResponse(_resource(request, cluster_id, {"transactional_id": tid, "result": action}))


@router.post("/clusters/{cluster_id}/transactions/{transactional_id}/partitions",
             summary="Add partitions to the transaction (Kafka's AddPartitionsToTxn), before raw batches go to them",
             openapi_extra=_body({**_IDS, "partitions": {"type": "array", "items": _TP}},
                                 ["producer_id", "producer_epoch", "partitions"]))
async def add_partitions(cluster_id: str, transactional_id: str, request: Request):
    node = cluster_node(request, cluster_id)
    tid = _tid(transactional_id)
    doc = await _doc(request)
    ids = _producer(doc)
    parts = doc.get("partitions")
    if not isinstance(parts, list) or not parts:
        raise InvalidRequestError("partitions must be a non-empty list of {topic, partition}")
    wanted = []
    for p in parts:
        if not isinstance(p, dict) or not isinstance(p.get("topic"), str):
            raise InvalidRequestError("each partition needs topic and partition")
        authorize(request, Operation.WRITE, ResourceType.TOPIC, p["topic"])
        wanted.append([p["topic"], _int(p, "partition", 0, 2**31 - 1)])
    await node.transactions.call_with_retry(tid, "add_partitions", {**ids, "partitions": wanted})
    return JSONResponse(_resource(request, cluster_id, {"transactional_id": tid, "partitions": [
        {"topic": t, "partition": p} for t, p in wanted]}))


@router.post("/clusters/{cluster_id}/transactions/{transactional_id}/offsets",
             summary="Commit a consumer group's offsets inside the transaction",
             openapi_extra=_body({**_IDS, "group_id": {"type": "string"}, "offsets": {"type": "array", "items": {
                 **_TP, "required": ["topic", "partition", "offset"],
                 "properties": {**_TP["properties"], "offset": {"type": "integer", "minimum": 0},
                                "metadata": {"type": "string"}}}}},
                 ["producer_id", "producer_epoch", "group_id", "offsets"]))
async def send_offsets(cluster_id: str, transactional_id: str, request: Request):
    node = cluster_node(request, cluster_id)
    tid = _tid(transactional_id)
    doc = await _doc(request)
    ids = _producer(doc)
    group = doc.get("group_id")
    offsets = doc.get("offsets")
    if not isinstance(group, str) or not group or not isinstance(offsets, list):
        raise InvalidRequestError("group_id (a string) and offsets (a list) are required")
    authorize(request, Operation.READ, ResourceType.GROUP, group)
    for o in offsets:
        if not isinstance(o, dict) or not isinstance(o.get("topic"), str):
            raise InvalidRequestError("each offset needs topic, partition and offset")
        authorize(request, Operation.READ, ResourceType.TOPIC, o["topic"])
        _int(o, "partition", 0, 2**31 - 1)
        _int(o, "offset", 0, 2**63 - 1)
    await node.transactions.call_with_retry(tid, "add_offsets", {**ids, "group_id": group})
    res = await node.groups.call_with_retry(group, "txn_commit", {**ids, "transactional_id": tid, "offsets": offsets})
    return JSONResponse(_resource(request, cluster_id, {"transactional_id": tid, "group_id": group,
                                                        "offsets": res["offsets"]}))
