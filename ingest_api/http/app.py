"""The FastAPI application of an ingest node: error mapping, request metrics, routers."""

from __future__ import annotations

import logging
import math
from contextlib import asynccontextmanager
import time

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from lakelog.infra.errors import LakelogError
from lakelog.ingest_api.http import v3_errors
from lakelog.ingest_api.error_table import http_error
from lakelog.ingest_api.errors import InternalServerError, InvalidRequestError, RouteError
from lakelog.ingest_api.http.body_limit import BodyLimitMiddleware
from lakelog.ingest_api.http.forwarded import ForwardedCatchUpMiddleware
from lakelog.ingest_api.http.internal_fast_path import InternalFastPath, hot_routes_table
from lakelog.ingest_api.http.metrics import NodeMetrics
from lakelog.ingest_api.http.routers import (
    acls_v3,
    admin_v2,
    admin_v3,
    configs_v3,
    console_sql,
    consumer_groups_v3,
    consumers,
    decode,
    docs,
    internal,
    jobs,
    ops,
    reassignment_v3,
    records,
    records_v3,
    replicas_v3,
    replication,
    root,
    schemas,
    security,
    sql_access,
    stats,
    throttles_v3,
    transactions_internal,
    transactions_v3,
)
from lakelog.ingest_api.http.security_middleware import SecurityMiddleware
from lakelog.ingest_api.http.webconsole import ConsoleMiddleware
from lakelog.ingest_api.node import Node

log = logging.getLogger("lakelog.http")


def error_response(exc: BaseException, path: str = "") -> JSONResponse:
    """The Confluent-style answer to an error, by `ingest_api.error_table`; under /v3 in Confluent
    v3's shape (`ingest_api.http.v3_errors`)."""
    status, error_code, message = http_error(exc)
    headers = None
    if status in (503, 429):  # an error that knows when to come back says so (a degraded store's next probe)
        headers = {"Retry-After": str(max(1, math.ceil(getattr(exc, "retry_after_s", 1))))}
    status, error_code, media = v3_errors.shape(path, exc, status, error_code)
    return JSONResponse({"error_code": error_code, "message": message}, status_code=status,
                        media_type=media, headers=headers)


class ObserveMiddleware:
    """Counts and times every HTTP request, and answers an unhandled exception with a 500.

    A plain ASGI middleware: it only watches ``send`` for the status line, so the body is
    never copied or re-streamed (Starlette's ``BaseHTTPMiddleware`` costs about a millisecond
    per request). The 500 is sent here rather than by an exception handler, which would
    re-raise after responding and make the server drop the keep-alive connection.
    """

    def __init__(self, app, metrics: NodeMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500
        started = False

        async def observed_send(message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                status = message["status"]
                started = True
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        except ClientDisconnect:  # the client went away mid-request (a peer that stopped, a timeout): no answer
            status = 499
        except Exception:
            log.exception("%s %s failed", scope.get("method"), scope.get("path"))
            if started:
                raise
            status = 500
            await error_response(InternalServerError("internal error"))(scope, receive, send)
        finally:
            path = getattr(scope.get("route"), "path", "unmatched")
            method = scope.get("method", "")
            self.metrics.requests.labels(method, path, str(status)).inc()
            self.metrics.latency.labels(method, path).observe(time.perf_counter() - start)


def create_app(node: Node) -> FastAPI:
    """The HTTP door over `node`: its services are the node's (built by `Node`), the app adds the
    middlewares and the routers."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await node.start_cluster()
        await node.groups.start()
        await node.transactions.start()
        await node.consumers.start()
        try:
            yield
        finally:
            await node.consumers.stop()  # instances leave their groups while the cluster is up
            await node.transactions.stop()
            await node.groups.stop()
            await node.stop_cluster()

    app = FastAPI(title="Lakelog ingest node", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None,  # routers/docs.py: no CDN
                  description="Produce, fetch and administer topics over HTTP (Confluent REST Proxy conventions).")
    app.state.node = node
    app.state.metrics = NodeMetrics(node)
    _add_error_handlers(app)
    _add_middlewares(app, node)
    _include_routers(app)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(LakelogError)
    async def _lakelog_error(request: Request, exc: LakelogError):
        response = error_response(exc, request.url.path)
        if response.status_code >= 500:
            log.warning("%s %s failed: %s", request.method, request.url.path, exc)
        return response

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        details = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors())
        if v3_errors.is_v3(request.url.path):
            return error_response(v3_errors.validation_error(exc.errors(), f"invalid request: {details}"),
                                  request.url.path)
        return error_response(InvalidRequestError(f"invalid request: {details}"))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        return error_response(RouteError(exc.status_code, str(exc.detail)), request.url.path)


def _add_middlewares(app: FastAPI, node: Node) -> None:
    """Added innermost first: each one added later wraps the ones before it."""
    # Innermost: the node-to-node requests of an idle cluster skip the router's matching (internal_fast_path.py).
    app.add_middleware(InternalFastPath, table=hot_routes_table(), exception_handlers=app.exception_handlers)
    # Inside the security checks: only a request they let through as forwarded by a node waits.
    app.add_middleware(ForwardedCatchUpMiddleware, waiters=node.metadata_waiters,
                       timeout_ms=node.config.request_timeout_ms)
    app.add_middleware(SecurityMiddleware, context=node.security, error_response=error_response)
    app.add_middleware(BodyLimitMiddleware, limit_bytes=node.config.max_request_bytes, error_response=error_response)
    app.add_middleware(ConsoleMiddleware, security=node.security,
                       downloads={"max_records": node.config.get("console.download.max.records"),
                                  "max_bytes": node.config.get("console.download.max.bytes")})  # the console's files: public, in front of the security checks
    app.add_middleware(ObserveMiddleware, metrics=app.state.metrics)  # outermost: counts refusals too


def _include_routers(app: FastAPI) -> None:
    """In this order: the first route that matches a path answers it."""
    app.include_router(ops.router)
    app.include_router(docs.router)  # Swagger UI from the node's own files
    app.include_router(root.router)
    app.include_router(records.router)
    app.include_router(admin_v2.router)
    app.include_router(throttles_v3.router)  # before configs_v3: the two dynamic broker configs by name
    app.include_router(configs_v3.router)  # before admin_v3: `topics/-/configs` is not a topic named "-"
    app.include_router(reassignment_v3.router)  # likewise `topics/-/partitions/-/reassignment`
    app.include_router(admin_v3.router)
    app.include_router(records_v3.router)
    app.include_router(consumer_groups_v3.router)
    app.include_router(transactions_v3.router)  # transactions over HTTP (docs/transactions.md)
    app.include_router(replicas_v3.router)
    app.include_router(acls_v3.router)
    app.include_router(internal.router)
    app.include_router(replication.router)
    app.include_router(consumers.router)
    app.include_router(consumers.internal_router)
    app.include_router(transactions_internal.router)  # the transaction coordinator's node-to-node calls
    app.include_router(security.router)
    app.include_router(stats.router)
    app.include_router(jobs.router)  # the Spark job runs the remote tier records (console)
    app.include_router(decode.router)  # values decoded by the Schema Registry (console)
    app.include_router(sql_access.router)  # the SQL server's check of a client's principal and topic READ ACLs
    app.include_router(console_sql.router)  # the console's SQL page, relayed to the SQL server
    app.include_router(schemas.router)  # the Schema Registry at /subjects, /schemas, /config, /mode
