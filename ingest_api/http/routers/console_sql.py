"""`POST /console/sql`: the console's SQL page, relayed to the SQL server (`ingest_api/http/console_sql.py`).

Authenticated as every endpoint; the views the query reads are checked against the principal's
ACLs (READ on each topic they show, DESCRIBE on the cluster for a table of no topic) before it runs.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from lakelog.ingest_api.http.console_sql import MAX_QUERY_CHARS, ConsoleSql, required_reads
from lakelog.ingest_api.http.routers.deps import get_node
from lakelog.ingest_api.security.acl import CLUSTER_NAME, Operation, ResourceType
from lakelog.ingest_api.security.errors import AuthorizationFailedError
from lakelog.ingest_api.http.security_middleware import allowed, authorize

router = APIRouter(prefix="/console", tags=["console"])


class SqlRequest(BaseModel):
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS, description="one SQL query (SELECT, WITH, VALUES)")
    max_rows: int | None = Field(None, ge=1, le=10_000, description="most rows (at most console.sql.max.rows)")


def may_query_something(request: Request) -> None:
    """A principal that may read no topic and not describe the cluster is refused before its body is
    read, as every other endpoint refuses it; the per-view checks follow."""
    if allowed(request, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return
    if any(allowed(request, Operation.READ, ResourceType.TOPIC, t) for t in get_node(request).image.topics):
        return
    raise AuthorizationFailedError("not authorized to read any topic")


@router.post("/sql", summary="Run a SQL query over lakelog.<topic> through the SQL server (the console's SQL page)",
             dependencies=[Depends(may_query_something)])
async def run_sql(body: SqlRequest, request: Request):
    node = get_node(request)
    relay = getattr(request.app.state, "console_sql", None)
    if relay is None:
        relay = request.app.state.console_sql = ConsoleSql(node.config)

    def check(views: list[str]) -> None:
        topics = set(node.image.topics)
        for view in views:
            names, cluster = required_reads(view, topics)
            for t in names:
                authorize(request, Operation.READ, ResourceType.TOPIC, t)
            if cluster:
                authorize(request, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)

    return JSONResponse(await relay.run(body.query, body.max_rows, check))
