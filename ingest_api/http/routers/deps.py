"""Helpers shared by the routers: the node, bounded body reading."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request, Response

from lakelog.ingest_api.errors import InvalidRequestError, LeaderNotAvailableError
from lakelog.ingest_api.node import Node
from lakelog.ingest_api.replication.peers import FORWARDED_HEADER
from lakelog.ingest_api.http.request_body import read_body_buffer
from lakelog.ingest_api.http.security_middleware import request_principal

#: Request headers passed on when a request is forwarded to the partition's leader.
_FORWARD_REQUEST_HEADERS = ("content-type", "accept")


def get_node(request: Request) -> Node:
    node: Node = request.app.state.node
    node.check_ready()
    return node


def get_node_per_partition(request: Request) -> Node:
    """The node, for a route about one topic's partitions that checks readiness per partition
    (`Node.leader_of`): a node catching up still forwards to a live leader elsewhere."""
    return request.app.state.node


async def read_body(request: Request, limit: int) -> bytes:
    """The request body as bytes, refused with 413 over `limit` bytes (request_body.py)."""
    body = await read_body_buffer(request, limit)
    return body if body.__class__ is bytes else bytes(body)


async def read_json_object(request: Request, limit: int) -> dict[str, Any]:
    """The request body as a JSON object, refused with 400 when it is not one (413 over `limit` bytes)."""
    raw = await read_body(request, limit)
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        raise InvalidRequestError("the body is not JSON") from None
    if not isinstance(doc, dict):
        raise InvalidRequestError("the body must be a JSON object")
    return doc


async def forward_to_leader(request: Request, node: Node, topic: str, partition: int,
                            body: bytes | bytearray = b"",
                            *, wait_ms: int = 0) -> Response | None:
    """When another node leads the partition, send the request there (one hop) and relay its answer.

    Returns None when this node is the leader, or when the request was already forwarded once
    (then this node serves it or answers NOT_LEADER_OR_FOLLOWER itself).
    """
    if request.headers.get(FORWARDED_HEADER):
        return None
    leader = node.leader_of(topic, partition)
    if leader == node.node_id:
        return None
    if leader < 0:
        raise LeaderNotAvailableError(f"partition {topic}-{partition} has no leader")
    path = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    headers = {h: request.headers[h] for h in _FORWARD_REQUEST_HEADERS if h in request.headers}
    headers[FORWARDED_HEADER] = str(node.node_id)
    assert node.peers is not None
    resp = await node.peers.request(leader, request.method, path, bytes(body) if body.__class__ is bytearray else body,
                                    headers=headers,
                                    timeout_s=(wait_ms + node.config.request_timeout_ms) / 1000 + 5,
                                    principal=request_principal(request))
    relay = {k: v for k, v in resp.headers.items() if k.lower().startswith("x-lakelog-") or k.lower() == "retry-after"}
    return Response(resp.content, status_code=resp.status_code, media_type=resp.headers.get("content-type"),
                    headers=relay)
