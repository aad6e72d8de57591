"""Consumer groups over HTTP: the Confluent REST Proxy v2 consumer API (`/consumers/...`), a stateless
group API (`/groups/...`), and the node-to-node group calls (`/internal/groups/...`).

Thin: the logic is in ingest_api/groups/ (`ConsumerManager` as `node.consumers`, `GroupService`
as `node.groups`, and `ConsumerInstanceService` as `node.consumer_instances`: where an
instance is held, who may use it and which topic ACLs each operation needs, and a group's lag).
A forwarded request (`X-Lakelog-Forwarded`) must carry a valid cluster signature here.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse

from lakelog.ingest_api.errors import InvalidRequestError, UnsupportedMediaTypeError
from lakelog.ingest_api.schemas.rest import SCHEMA_FORMATS
from lakelog.ingest_api.records.formats import BINARY_V2, JSON, JSON_V2, V2, media_type, records_format
from lakelog.ingest_api.groups.assignors import TopicPartition
from lakelog.ingest_api.groups.consumer import ConsumerInstance, ConsumerManager
from lakelog.ingest_api.groups.consumer_config import FORMATS, validate_name
from lakelog.ingest_api.groups.errors import ConsumerFormatMismatchError, ConsumerInstanceNotFoundError
from lakelog.ingest_api.groups.instances import Caller, ConsumerInstanceService, Forwarded
from lakelog.ingest_api.groups.service import GroupService
from lakelog.ingest_api.replication.peers import FORWARDED_HEADER
from lakelog.ingest_api.security.acl import Operation, ResourceType
from lakelog.ingest_api.http.security_middleware import authorize, request_principal
from lakelog.ingest_api.http.routers.deps import get_node, read_body
from lakelog.ingest_api.http.routers.internal import VerifiedRequest, get_authenticator, verified_request

router = APIRouter(tags=["consumers"])
internal_router = APIRouter(prefix="/internal", tags=["internal"], include_in_schema=False)

#: Largest JSON body of a consumer API request.
MAX_BODY_BYTES = 1024 * 1024
_JSON_TYPES = ("", V2, JSON, JSON_V2, BINARY_V2)

_TP_SCHEMA = {"type": "object", "required": ["topic", "partition"],
              "properties": {"topic": {"type": "string"}, "partition": {"type": "integer", "minimum": 0}}}
_OFFSET_SCHEMA = {"type": "object", "required": ["topic", "partition", "offset"],
                  "properties": {"topic": {"type": "string"}, "partition": {"type": "integer", "minimum": 0},
                                 "offset": {"type": "integer", "minimum": 0}, "metadata": {"type": "string"}}}


def _body(schema: dict, required: bool = True) -> dict:
    return {"requestBody": {"required": required, "content": {V2: {"schema": schema}}}}


def _state(request: Request) -> tuple[Any, GroupService, ConsumerManager]:
    node = get_node(request)
    return node, request.app.state.node.groups, request.app.state.node.consumers


async def _json_body(request: Request, body: bytes | None = None) -> dict[str, Any]:
    if media_type(request.headers.get("content-type")) not in _JSON_TYPES:
        raise UnsupportedMediaTypeError(f"Content-Type must be {V2}")
    if body is None:
        body = await read_body(request, MAX_BODY_BYTES)
    if not body.strip():
        return {}
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise InvalidRequestError("request body is not valid JSON") from None
    if not isinstance(doc, dict):
        raise InvalidRequestError("request body must be a JSON object")
    return doc


def _int(v: Any, what: str, lo: int = 0) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < lo or v > 2**63 - 1:
        raise InvalidRequestError(f"{what} must be an integer >= {lo}")
    return v


def _partitions(doc: dict[str, Any], key: str = "partitions") -> list[TopicPartition]:
    items = doc.get(key)
    if not isinstance(items, list):
        raise InvalidRequestError(f'request body must be {{"{key}": [{{"topic": ..., "partition": ...}}]}}')
    out = []
    for i, e in enumerate(items):
        if not isinstance(e, dict) or not isinstance(e.get("topic"), str) or not e["topic"]:
            raise InvalidRequestError(f"{key}[{i}] must be {{\"topic\": string, \"partition\": integer}}")
        out.append(TopicPartition(e["topic"], _int(e.get("partition"), f"{key}[{i}].partition")))
    return out


def _offsets(doc: dict[str, Any]) -> list[dict[str, Any]]:
    items = doc.get("offsets")
    if not isinstance(items, list):
        raise InvalidRequestError('request body must be {"offsets": [{"topic", "partition", "offset"}]}')
    out = []
    for i, e in enumerate(items):
        if not isinstance(e, dict) or not isinstance(e.get("topic"), str) or not e["topic"]:
            raise InvalidRequestError(f"offsets[{i}] must be {{\"topic\", \"partition\", \"offset\"}}")
        md = e.get("metadata", "")
        if md is not None and not isinstance(md, str):
            raise InvalidRequestError(f"offsets[{i}].metadata must be a string")
        out.append({"topic": e["topic"], "partition": _int(e.get("partition"), f"offsets[{i}].partition"),
                    "offset": _int(e.get("offset"), f"offsets[{i}].offset"), "metadata": md or ""})
    return out


def _no_content() -> Response:
    return Response(status_code=204)


# ---------------------------------------------------------------------------- the instance of a request


def _service(request: Request) -> ConsumerInstanceService:
    return request.app.state.node.consumer_instances


def _caller(request: Request) -> Caller:
    principal = request_principal(request)
    ctx = getattr(request.app.state.node, "security", None)
    return Caller(principal, ctx is not None and principal in ctx.super_users,
                  lambda op, topic: authorize(request, op, ResourceType.TOPIC, topic))


async def _route(request: Request, group: str, instance: str, body: bytes = b"") -> ConsumerInstance | Response:
    """The local instance, if the caller may use it, or the holder's answer to the forwarded request."""
    validate_name(group, "group")
    validate_name(instance, "instance")
    service, caller = _service(request), _caller(request)
    if request.headers.get(FORWARDED_HEADER):
        get_authenticator(request).verify_scope(request.scope, request.headers, body)
        return service.local(group, instance, caller)
    target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    headers = {h: request.headers[h] for h in ("content-type", "accept") if h in request.headers}
    found = await service.route(group, instance, caller, method=request.method, target=target, body=body,
                                headers=headers)
    if isinstance(found, Forwarded):
        return Response(found.content, status_code=found.status_code, media_type=found.content_type)
    return found


# ---------------------------------------------------------------------------- REST Proxy v2 consumers


@router.post("/consumers/{group}", summary="Create a consumer instance in a group",
             openapi_extra=_body({"type": "object", "properties": {
                 "name": {"type": "string"}, "id": {"type": "string", "description": "names the instance; overrides name"},
                 "format": {"type": "string", "enum": ["binary", "json", "avro", "jsonschema", "protobuf"]},
                 "auto.offset.reset": {"type": "string", "enum": ["earliest", "latest", "none"]},
                 "auto.commit.enable": {"type": ["string", "boolean"]},
                 "auto.commit.interval.ms": {"type": "integer"}, "session.timeout.ms": {"type": "integer"},
                 "heartbeat.interval.ms": {"type": "integer"}, "max.poll.records": {"type": "integer"},
                 "partition.assignment.strategy": {"type": "string"},
                 "isolation.level": {"type": "string", "enum": ["read_uncommitted", "read_committed"]}}},
                 required=False),
             responses={200: {"description": "the instance", "content": {V2: {"schema": {"type": "object", "properties": {
                 "instance_id": {"type": "string"}, "base_uri": {"type": "string"}}}}}}})
async def create_instance(group: str, request: Request):
    node, _, consumers = _state(request)
    validate_name(group, "group")
    doc = await _json_body(request)
    # Confluent: an explicit `id` names the instance and overrides `name` (KafkaConsumerManager).
    name = doc.get("id") or doc.get("name") or consumers.new_name()
    if not isinstance(name, str):
        raise InvalidRequestError("id and name must be strings")
    validate_name(name, "instance name")
    await _service(request).create(group, name, consumers.parse_config(doc), _caller(request))
    return JSONResponse({"instance_id": name, "base_uri": f"{node.config.advertised_url}/consumers/{group}/instances/{name}"},
                        media_type=V2)


@router.delete("/consumers/{group}/instances/{instance}", status_code=204, summary="Delete a consumer instance")
async def delete_instance(group: str, instance: str, request: Request):
    inst = await _route(request, group, instance)
    if isinstance(inst, Response):
        return inst
    _, _, consumers = _state(request)
    await consumers.delete(group, instance)
    return _no_content()


@router.post("/consumers/{group}/instances/{instance}/subscription", status_code=204,
             summary="Subscribe to topics (a list or a pattern); the group assigns partitions",
             openapi_extra=_body({"type": "object", "properties": {
                 "topics": {"type": "array", "items": {"type": "string"}}, "topic_pattern": {"type": "string"}}}))
async def subscribe(group: str, instance: str, request: Request):
    body = await read_body(request, MAX_BODY_BYTES)
    inst = await _route(request, group, instance, body)
    if isinstance(inst, Response):
        return inst
    doc = await _json_body(request, body)
    topics, pattern = doc.get("topics"), doc.get("topic_pattern")
    if (topics is None) == (pattern is None):
        raise InvalidRequestError('give either "topics" or "topic_pattern"')
    if pattern is not None and not isinstance(pattern, str):
        raise InvalidRequestError("topic_pattern must be a string")
    if topics is not None and not isinstance(topics, list):
        raise InvalidRequestError("topics must be a list of strings")
    _service(request).subscribe(inst, _caller(request), topics, pattern)
    return _no_content()


@router.get("/consumers/{group}/instances/{instance}/subscription", summary="The subscribed topics")
async def get_subscription(group: str, instance: str, request: Request):
    inst = await _route(request, group, instance)
    if isinstance(inst, Response):
        return inst
    return JSONResponse({"topics": inst.subscribed_topics() if inst.subscription is not None else []}, media_type=V2)


@router.delete("/consumers/{group}/instances/{instance}/subscription", status_code=204, summary="Unsubscribe")
async def unsubscribe(group: str, instance: str, request: Request):
    inst = await _route(request, group, instance)
    if isinstance(inst, Response):
        return inst
    await inst.unsubscribe()
    return _no_content()


@router.post("/consumers/{group}/instances/{instance}/assignments", status_code=204,
             summary="Assign partitions manually (no group membership)",
             openapi_extra=_body({"type": "object", "properties": {"partitions": {"type": "array", "items": _TP_SCHEMA}}}))
async def assign(group: str, instance: str, request: Request):
    body = await read_body(request, MAX_BODY_BYTES)
    inst = await _route(request, group, instance, body)
    if isinstance(inst, Response):
        return inst
    _service(request).assign(inst, _caller(request), _partitions(await _json_body(request, body)))
    return _no_content()


@router.get("/consumers/{group}/instances/{instance}/assignments", summary="The partitions assigned to the instance")
async def get_assignments(group: str, instance: str, request: Request):
    inst = await _route(request, group, instance)
    if isinstance(inst, Response):
        return inst
    return JSONResponse({"partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in inst.assignment]},
                        media_type=V2)


@router.get("/consumers/{group}/instances/{instance}/records",
            summary="Records from the assigned partitions' positions, waiting up to `timeout` ms",
            responses={200: {"description": "records", "content": {
                JSON_V2: {"schema": {"type": "array", "items": {"type": "object"}}},
                BINARY_V2: {"schema": {"type": "array", "items": {"type": "object"}}}}}})
async def records(group: str, instance: str, request: Request,
                  timeout: int | None = Query(None, ge=0, description="ms to wait when no record is there yet"),
                  max_bytes: int | None = Query(None, ge=1, description="most bytes of keys and values to return")):
    inst = await _route(request, group, instance)
    if isinstance(inst, Response):
        return inst
    node = get_node(request)
    want = FORMATS[inst.cfg.format]
    asked = records_format(request.headers.get("accept"))
    if want in SCHEMA_FORMATS and want in (request.headers.get("accept") or ""):
        asked = want  # an avro / jsonschema instance asked for its own format (ingest_api/schemas/rest.py)
    if asked is not None and asked != want:
        raise ConsumerFormatMismatchError("The requested embedded data format does not match the deserializer "
                                          f"for this consumer instance ({want})")
    cfg = node.config
    wait = min(cfg.consumer_request_timeout_ms if timeout is None else timeout, cfg.fetch_max_wait_ms)
    limit = min(max_bytes or cfg.consumer_request_max_bytes, cfg.consumer_request_max_bytes)
    out = await _service(request).records(inst, _caller(request), wait, limit)
    return JSONResponse(out, media_type=want)


@router.post("/consumers/{group}/instances/{instance}/offsets",
             summary="Commit offsets: each entry names the last record consumed and offset + 1 is stored "
                     "(without a body: the positions, i.e. every record returned so far)",
             openapi_extra=_body({"type": "object", "properties": {"offsets": {"type": "array", "items": _OFFSET_SCHEMA}}},
                                 required=False))
async def commit_offsets(group: str, instance: str, request: Request):
    body = await read_body(request, MAX_BODY_BYTES)
    inst = await _route(request, group, instance, body)
    if isinstance(inst, Response):
        return inst
    doc = await _json_body(request, body)
    offsets = _offsets(doc) if doc.get("offsets") is not None else None
    if offsets is not None:
        # Confluent's KafkaConsumerState.commitOffsets: each entry names the last record consumed,
        # and the group stores the next offset to read (offset + 1), as Kafka's consumers do.
        if any(o["offset"] >= 2**63 - 1 for o in offsets):
            raise InvalidRequestError("offset must be below 2^63 - 1")
        offsets = [{**o, "offset": o["offset"] + 1} for o in offsets]
    committed = await _service(request).commit(inst, _caller(request), offsets)
    return JSONResponse({"offsets": committed}, media_type=V2)


@router.get("/consumers/{group}/instances/{instance}/offsets",
            summary="Committed offsets of the given partitions (default: the assigned ones)")
async def committed_offsets(group: str, instance: str, request: Request):
    body = await read_body(request, MAX_BODY_BYTES)
    inst = await _route(request, group, instance, body)
    if isinstance(inst, Response):
        return inst
    doc = await _json_body(request, body)
    partitions = _partitions(doc) if doc.get("partitions") is not None else None
    return JSONResponse({"offsets": await _service(request).committed(inst, _caller(request), partitions)},
                        media_type=V2)


@router.post("/consumers/{group}/instances/{instance}/positions", status_code=204,
             summary="Seek: the next offsets to fetch",
             openapi_extra=_body({"type": "object", "properties": {"offsets": {"type": "array", "items": _OFFSET_SCHEMA}}}))
async def seek(group: str, instance: str, request: Request):
    body = await read_body(request, MAX_BODY_BYTES)
    inst = await _route(request, group, instance, body)
    if isinstance(inst, Response):
        return inst
    _service(request).seek(inst, _caller(request), _offsets(await _json_body(request, body)))
    return _no_content()


async def _seek_to(group: str, instance: str, request: Request, end: bool) -> Response:
    body = await read_body(request, MAX_BODY_BYTES)
    inst = await _route(request, group, instance, body)
    if isinstance(inst, Response):
        return inst
    await _service(request).seek_to(inst, _caller(request), _partitions(await _json_body(request, body)), end)
    return _no_content()


@router.post("/consumers/{group}/instances/{instance}/positions/beginning", status_code=204,
             summary="Seek to the log start offset",
             openapi_extra=_body({"type": "object", "properties": {"partitions": {"type": "array", "items": _TP_SCHEMA}}}))
async def seek_to_beginning(group: str, instance: str, request: Request):
    return await _seek_to(group, instance, request, end=False)


@router.post("/consumers/{group}/instances/{instance}/positions/end", status_code=204,
             summary="Seek to the end (the high watermark)",
             openapi_extra=_body({"type": "object", "properties": {"partitions": {"type": "array", "items": _TP_SCHEMA}}}))
async def seek_to_end(group: str, instance: str, request: Request):
    return await _seek_to(group, instance, request, end=True)


# ---------------------------------------------------------------------------- stateless group API


@router.get("/groups", summary="List the consumer groups of the cluster")
async def list_groups(request: Request):
    _, groups, _ = _state(request)
    return JSONResponse({"groups": await groups.list_all_groups()}, media_type=V2)


@router.get("/groups/{group}", summary="Describe a group: members, assignment, committed offsets and lag")
async def describe_group(group: str, request: Request):
    validate_name(group, "group")
    return JSONResponse(await _service(request).describe_group(group), media_type=V2)


@router.get("/groups/{group}/offsets", summary="The group's committed offsets")
async def group_offsets(group: str, request: Request):
    _, groups, _ = _state(request)
    validate_name(group, "group")
    doc = await groups.call_with_retry(group, "offset_fetch", {})
    return JSONResponse({"offsets": [{k: o[k] for k in ("topic", "partition", "offset", "metadata")}
                                     for o in doc["offsets"]]}, media_type=V2)


@router.post("/groups/{group}/offsets",
             summary="Commit offsets for a group without members (consumers that track their own position)",
             openapi_extra=_body({"type": "object", "properties": {"offsets": {"type": "array", "items": _OFFSET_SCHEMA}}}))
async def commit_group_offsets(group: str, request: Request):
    node, groups, _ = _state(request)
    validate_name(group, "group")
    offsets = _offsets(await _json_body(request))
    for name in {o["topic"] for o in offsets}:
        authorize(request, Operation.READ, ResourceType.TOPIC, name)
    for o in offsets:
        t = node.image.topics.get(o["topic"])
        if t is None or o["partition"] >= len(t.partitions):
            from lakelog.ingest_api.errors import PartitionNotFoundError, TopicNotFoundError
            if t is None:
                raise TopicNotFoundError(f"Topic {o['topic']} not found.")
            raise PartitionNotFoundError(f"Partition {o['partition']} of topic {o['topic']} not found.")
    doc = await groups.call_with_retry(group, "commit", {"member_id": "", "generation": -1, "offsets": offsets})
    return JSONResponse({"offsets": doc["offsets"]}, media_type=V2)


# ---------------------------------------------------------------------------- node to node


@internal_router.post("/groups/{op}", summary="Run a group operation on this node, the group's coordinator")
async def group_op(op: str, request: Request, verified: VerifiedRequest = Depends(verified_request)):
    groups: GroupService = request.app.state.node.groups
    request.app.state.node.check_ready()
    try:
        args = json.loads(verified.body or b"{}")
    except ValueError:
        raise InvalidRequestError("body is not JSON") from None
    if not isinstance(args, dict):
        raise InvalidRequestError("body must be a JSON object")
    return JSONResponse(await groups.handle(op, args))


@internal_router.get("/consumers/{group}/{instance}", summary="Whether this node holds a consumer instance")
async def holds_instance(group: str, instance: str, request: Request,
                         verified: VerifiedRequest = Depends(verified_request)):
    consumers: ConsumerManager = request.app.state.node.consumers
    if (group, instance) not in consumers.instances:
        raise ConsumerInstanceNotFoundError("Consumer instance not found.")
    return JSONResponse({"group": group, "instance": instance})
