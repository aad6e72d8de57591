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
        return JSONResponse(body, status_code=status, headers={"Retry-After": "1"})
    return {"status": "ready", "node_id": node.node_id, "cluster_id": node.cluster_id}


@router.get("/metrics", summary="Prometheus metrics")
async def metrics(request: Request):
    return Response(generate_latest(request.app.state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
