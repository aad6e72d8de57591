"""The FastAPI application of an ingest node: error mapping, request metrics, routers."""

from __future__ import annotations

import logging
import time

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from infra.errors import LakelogError
from ingest_api.errors import http_error
from ingest_api.formats import V2
from ingest_api.metrics import NodeMetrics
from ingest_api.node import Node

log = logging.getLogger("lakelog.http")


def error_response(status: int, error_code: int, message: str) -> JSONResponse:
    headers = {"Retry-After": "1"} if status == 503 else None
    return JSONResponse({"error_code": error_code, "message": message}, status_code=status,
                        media_type=V2, headers=headers)


def create_app(node: Node) -> FastAPI:
    app = FastAPI(title="Lakelog ingest node", version="0.1.0",
                  description="Produce, fetch and administer topics over HTTP (Confluent REST Proxy conventions).")
    app.state.node = node
    app.state.metrics = NodeMetrics(node)

    @app.exception_handler(LakelogError)
    async def _lakelog_error(request: Request, exc: LakelogError):
        status, code, message = http_error(exc)
        if status >= 500:
            log.warning("%s %s failed: %s", request.method, request.url.path, exc)
        return error_response(status, code, message)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        details = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors())
        return error_response(422, 42201, f"invalid request: {details}")

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        return error_response(exc.status_code, exc.status_code, str(exc.detail))

    @app.middleware("http")
    async def _observe(request: Request, call_next):
        start = time.perf_counter()
        try:
            response = await call_next(request)
        except Exception:
            # Answered here rather than by an exception handler, which would re-raise after
            # responding and make the server drop the keep-alive connection.
            log.exception("%s %s failed", request.method, request.url.path)
            response = error_response(500, 50001, "internal error")
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        metrics: NodeMetrics = app.state.metrics
        metrics.requests.labels(request.method, path, str(response.status_code)).inc()
        metrics.latency.labels(request.method, path).observe(time.perf_counter() - start)
        return response

    from ingest_api.routers import admin_v2, admin_v3, ops, records

    app.include_router(ops.router)
    app.include_router(records.router)
    app.include_router(admin_v2.router)
    app.include_router(admin_v3.router)
    return app
