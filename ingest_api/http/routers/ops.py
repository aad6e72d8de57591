"""Operations: liveness, readiness, Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from lakelog.ingest_api.error_table import error_body
from lakelog.ingest_api.errors import NotReadyError

router = APIRouter(tags=["operations"])


@router.head("/healthz", include_in_schema=False)
@router.get("/healthz", summary="Liveness: the process answers")
async def healthz():
    return {"status": "ok"}


@router.head("/readyz", include_in_schema=False)
@router.get("/readyz", summary="Readiness: the node serves client requests")
async def readyz(request: Request):
    node = request.app.state.node
    if not node.ready:
        status, body = error_body(NotReadyError("node is not ready"))
        body["log_dir"] = node.replicas.log_dir.status()  # offline: the node asked to be fenced
        return JSONResponse(body, status_code=status, headers={"Retry-After": "1"})
    body = {"status": "ready", "node_id": node.node_id, "cluster_id": node.cluster_id,
            "log_dir": node.replicas.log_dir.status()}  # offline: writes refused, reads and the rest served
    remote = node.remote_logs.status()
    if remote is not None:  # a degraded remote tier does not make the node unready: local data is served
        body["remote_tier"] = remote
    return body


@router.get("/metrics", summary="Prometheus metrics")
async def metrics(request: Request):
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
