"""`GET /sql/access`: who the caller is and which topics it may READ — asked by the SQL server
(`lakelog sql-server`, spark_log/) with a Spark Connect client's own credentials, so that the SQL
endpoint admits the cluster's users and applies their topic READ ACLs without holding any
privilege of its own for the check.

Any authenticated principal may ask about itself (an unauthenticated caller gets the middleware's
401 first), unless it may READ no topic and not DESCRIBE the cluster: it has nothing to query, and
is refused (403 `40301`) as every other endpoint refuses it. The answer:

    {"principal": "User:alice", "authentication": true, "authorizer": true, "super_user": false,
     "read_topics": ["orders", ...], "describe_cluster": false}

`read_topics` lists the topics of the cluster metadata (internal `__*` topics left out) the
principal may READ now; with the authorizer off, every topic. `describe_cluster` is DESCRIBE on
the cluster (the SQL server's `_remote_index` table needs it).
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from lakelog.ingest_api.http.routers.deps import get_node
from lakelog.ingest_api.security.acl import CLUSTER_NAME, Operation, ResourceType
from lakelog.ingest_api.security.errors import AuthorizationFailedError
from lakelog.ingest_api.http.security_middleware import allowed, request_principal

router = APIRouter(tags=["sql"])


@router.get("/sql/access", summary="The caller's principal and the topics it may READ (for the SQL server)")
async def sql_access(request: Request, node=Depends(get_node)):
    ctx = getattr(request.app.state.node, "security", None)
    principal = request_principal(request)
    topics = sorted(t for t in node.image.topics if not t.startswith("__"))
    readable = [t for t in topics if allowed(request, Operation.READ, ResourceType.TOPIC, t)]
    describe = allowed(request, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
    if not readable and not describe and ctx is not None and ctx.authorizer_enabled:
        raise AuthorizationFailedError(f"{principal} may read no topic and not describe the cluster")
    return {
        "principal": principal,
        "authentication": bool(ctx is not None and ctx.authentication),
        "authorizer": bool(ctx is not None and ctx.authorizer_enabled),
        "super_user": bool(ctx is not None and principal in ctx.super_users),
        "read_topics": readable,
        "describe_cluster": describe,
    }
