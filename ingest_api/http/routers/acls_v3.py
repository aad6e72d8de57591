"""Confluent REST Proxy v3 `POST /v3/clusters/{c}/acls:batch`: create several ACLs in one metadata
change (all or none), 201. Each entry is the body of `POST .../acls`."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from lakelog.ingest_api.security.acl import AclBinding
from lakelog.ingest_api.security.errors import InvalidSecurityRequestError
from lakelog.ingest_api.security.audit import AuditLog
from lakelog.ingest_api.http.routers.deps import read_json_object
from lakelog.ingest_api.http.routers.v3_resources import ACL_SCHEMA, MAX_SECURITY_BODY_BYTES, cluster_node
from lakelog.ingest_api.http.security_middleware import request_principal

router = APIRouter(prefix="/v3", tags=["security"])

#: Most ACLs one batch may create.
MAX_BATCH_ACLS = 1000


@router.post("/clusters/{cluster_id}/acls:batch", status_code=201, summary="Create several ACLs",
             openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": {
                 "type": "object", "required": ["data"], "properties": {
                     "data": {"type": "array", "items": ACL_SCHEMA, "maxItems": MAX_BATCH_ACLS}}}}}}})
async def batch_create_acls(cluster_id: str, request: Request):
    node = cluster_node(request, cluster_id)
    doc = await read_json_object(request, MAX_SECURITY_BODY_BYTES)
    entries = doc.get("data")
    if not isinstance(entries, list) or not entries:
        raise InvalidSecurityRequestError('the body must be {"data": [ACL, ...]} with at least one ACL')
    if len(entries) > MAX_BATCH_ACLS:
        raise InvalidSecurityRequestError(f"at most {MAX_BATCH_ACLS} ACLs per batch")
    bindings = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict):
            raise InvalidSecurityRequestError(f"data[{i}] must be an object")
        try:
            bindings.append(AclBinding.from_dict(e))
        except ValueError as exc:
            raise InvalidSecurityRequestError(f"data[{i}]: {exc}") from None
    await node.admin.submit("create_acls", {"acls": [b.to_dict() for b in bindings]})
    for b in bindings:
        AuditLog.change("acl_created", by=request_principal(request), acl=b.to_dict())
    return Response(status_code=201)
