"""Internal endpoints between nodes: replica fetch, OffsetsForLeaderEpoch, controller requests.

Every request must carry a valid cluster-secret signature (`ingest_api.security.cluster_auth`); an outside
process gets 401 and changes nothing. Not part of the public API (hidden from the OpenAPI schema).
"""

from __future__ import annotations

import json
import time

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from lakelog.ingest_api.security.cluster_auth import request_target, verify
from lakelog.ingest_api.error_table import error_body
from lakelog.ingest_api.errors import InvalidRequestError, NotReadyError
from lakelog.ingest_api.node import Node
from lakelog.ingest_api.replication import wire
from lakelog.ingest_api.http.routers.deps import read_body

router = APIRouter(prefix="/internal", include_in_schema=False)

#: Largest internal request body (controller requests and replica fetch requests are small).
MAX_INTERNAL_REQUEST_BYTES = 4 * 1024 * 1024


async def _authenticated_json(request: Request) -> tuple[Node, int, dict]:
    node: Node = request.app.state.node
    body = await read_body(request, MAX_INTERNAL_REQUEST_BYTES)
    path = request_target(request.scope.get("raw_path") or request.url.path.encode(), request.scope.get("query_string", b""))
    sender = verify(node.config.cluster_secret.encode(), request.method, path, request.headers, body,
                    int(time.time() * 1000), 30_000)
    try:
        doc = json.loads(body) if body else {}
    except ValueError:
        raise InvalidRequestError("internal request body is not JSON") from None
    if not isinstance(doc, dict):
        raise InvalidRequestError("internal request body must be a JSON object")
    return node, sender, doc


@router.post("/replication/fetch")
async def replica_fetch(request: Request):
    node, sender, doc = await _authenticated_json(request)
    if int(doc.get("replica_id", -1)) != sender:
        raise InvalidRequestError("replica_id does not match the signing node")
    if node.quorum is None:
        raise NotReadyError("node is starting")
    parts = await node.replicas.replica_fetch(doc)
    buffers = wire.encode_fetch_response(parts)
    return Response(b"".join(buffers), media_type="application/vnd.lakelog.replica-fetch")


@router.post("/replication/epoch_end_offsets")
async def epoch_end_offsets(request: Request):
    node, _, doc = await _authenticated_json(request)
    return JSONResponse({"partitions": node.replicas.epoch_end_offsets(doc)})


@router.post("/controller/{op}")
async def controller_request(op: str, request: Request):
    node, _, doc = await _authenticated_json(request)
    try:
        return JSONResponse(await node.controller_host.run_op(op, doc))
    except Exception as e:
        status, body = error_body(e)
        return JSONResponse(body, status_code=status)
