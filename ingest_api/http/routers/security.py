"""v3 endpoints for ACLs (Confluent REST Proxy's), users and API keys.

    GET    /v3/clusters/{id}/acls?resource_type=&resource_name=&pattern_type=&principal=&operation=&permission=
    POST   /v3/clusters/{id}/acls       {"resource_type", "resource_name", "pattern_type", "principal",
                                         "host": "*", "operation", "permission"}   -> 201
    DELETE /v3/clusters/{id}/acls?...   the same filter (every field required but may be ANY) -> the deleted
    GET    /v3/clusters/{id}/users                     names and mechanisms (never a credential)
    POST   /v3/clusters/{id}/users      {"name", "password"}   creates or changes a password -> 201
                                                           (a SCRAM-SHA-256 and a SCRAM-SHA-512 credential)
    DELETE /v3/clusters/{id}/users/{user}
    GET    /v3/clusters/{id}/api-keys                  ids and principals
    POST   /v3/clusters/{id}/api-keys   {"principal"}  -> 201 {"key_id", "principal", "api_key"} (shown once)
    DELETE /v3/clusters/{id}/api-keys/{key_id}
    GET    /v3/clusters/{id}/quotas                    overrides per principal
    PUT    /v3/clusters/{id}/quotas/{principal}  {"producer.byte.rate", "consumer.byte.rate", "request.rate"}
    DELETE /v3/clusters/{id}/quotas/{principal}        back to the node config's quotas

Thin: the password is hashed here (it never leaves this node, never enters the metadata log), the
change goes to the active controller as a metadata record (`records.py`), and the answer comes once
this node has applied it. Each change writes an audit line. Authorization is the middleware's
(`access.RULES`: DESCRIBE on the cluster to read, ALTER to change).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse

from lakelog.ingest_api.http.routers.deps import read_json_object
from lakelog.ingest_api.http.routers.v3_resources import ACL_SCHEMA, MAX_SECURITY_BODY_BYTES, cluster_node
from lakelog.ingest_api.http.security_middleware import request_principal
from lakelog.ingest_api.security.acl import AclBinding, AclFilter, check_principal
from lakelog.ingest_api.security.credentials import HASHES, make_credential, new_api_key
from lakelog.ingest_api.security.errors import InvalidSecurityRequestError, SecurityNotFoundError
from lakelog.ingest_api.security.audit import AuditLog
from lakelog.ingest_api.security.records import check_user_name

router = APIRouter(prefix="/v3", tags=["security"])

_ACL_QUERY = [{"name": k, "in": "query", "required": False, "schema": {"type": "string"}}
              for k in ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation",
                        "permission")]


def _body(schema: dict) -> dict:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def _acl_body(request: Request, cluster_id: str, b: AclBinding) -> dict[str, Any]:
    return {"kind": "KafkaAcl", "metadata": {"self": f"{request.base_url}v3/clusters/{cluster_id}/acls"},
            "cluster_id": cluster_id, **b.to_dict()}


def _filter(request: Request) -> AclFilter:
    try:
        return AclFilter.from_params(dict(request.query_params))
    except ValueError as e:
        raise InvalidSecurityRequestError(str(e)) from None


@router.get("/clusters/{cluster_id}/acls", summary="List ACLs matching a filter", openapi_extra={"parameters": _ACL_QUERY})
async def list_acls(cluster_id: str, request: Request):
    node = cluster_node(request, cluster_id)
    flt = _filter(request)
    data = [_acl_body(request, cluster_id, b) for b in node.image.security.sorted_acls() if flt.matches(b)]
    return JSONResponse({"kind": "KafkaAclList", "metadata": {"self": str(request.url), "next": None}, "data": data})


@router.post("/clusters/{cluster_id}/acls", status_code=201, summary="Create an ACL", openapi_extra=_body(ACL_SCHEMA))
async def create_acl(cluster_id: str, request: Request):
    node = cluster_node(request, cluster_id)
    doc = await read_json_object(request, MAX_SECURITY_BODY_BYTES)
    try:
        binding = AclBinding.from_dict(doc)
    except ValueError as e:
        raise InvalidSecurityRequestError(str(e)) from None
    await node.admin.submit("create_acls", {"acls": [binding.to_dict()]})
    AuditLog.change("acl_created", by=request_principal(request), acl=binding.to_dict())
    return Response(status_code=201)


@router.delete("/clusters/{cluster_id}/acls", summary="Delete the ACLs matching a filter",
               openapi_extra={"parameters": _ACL_QUERY})
async def delete_acls(cluster_id: str, request: Request):
    node = cluster_node(request, cluster_id)
    flt = _filter(request)
    res = await node.admin.submit("delete_acls", {"filter": {k: (v.value if hasattr(v, "value") else v)
                                                       for k, v in flt.__dict__.items() if v is not None}})
    deleted = res.get("deleted", [])
    for d in deleted:
        AuditLog.change("acl_deleted", by=request_principal(request), acl=d)
    return JSONResponse({"kind": "KafkaAclList", "metadata": {"self": str(request.url), "next": None},
                         "data": [{"kind": "KafkaAcl",
                                   "metadata": {"self": f"{request.base_url}v3/clusters/{cluster_id}/acls"},
                                   "cluster_id": cluster_id, **d} for d in deleted]})


@router.get("/clusters/{cluster_id}/users", summary="List users (names and mechanisms only)")
async def list_users(cluster_id: str, request: Request):
    node = cluster_node(request, cluster_id)
    users = node.image.security.users
    return JSONResponse({"data": [{"name": n, "mechanism": ", ".join(sorted(users[n])),
                                   "credentials": [{"mechanism": m, "iterations": users[n][m].iterations}
                                                   for m in sorted(users[n])]}
                                  for n in sorted(users)]})


@router.post("/clusters/{cluster_id}/users", status_code=201, summary="Create a user or change its password",
             openapi_extra=_body({"type": "object", "required": ["name", "password"], "properties": {
                 "name": {"type": "string"}, "password": {"type": "string"}}}))
async def upsert_user(cluster_id: str, request: Request):
    node = cluster_node(request, cluster_id)
    doc = await read_json_object(request, MAX_SECURITY_BODY_BYTES)
    name, password = doc.get("name"), doc.get("password")
    try:
        check_user_name(name)
        if not isinstance(password, str):
            raise ValueError("password must be a string")
        iterations = request.app.state.node.security.scram_iterations
        creds = [make_credential(password, iterations, mechanism=m) for m in sorted(HASHES)]
    except ValueError as e:
        raise InvalidSecurityRequestError(str(e)) from None
    await node.admin.submit("upsert_user", {"name": name, "credentials": [c.to_dict() for c in creds]})
    AuditLog.change("user_upserted", by=request_principal(request), user=name)
    return JSONResponse({"name": name, "mechanism": ", ".join(c.mechanism for c in creds)}, status_code=201)


@router.delete("/clusters/{cluster_id}/users/{user}", status_code=204, summary="Delete a user")
async def delete_user(cluster_id: str, user: str, request: Request):
    node = cluster_node(request, cluster_id)
    try:
        check_user_name(user)
    except ValueError as e:
        raise InvalidSecurityRequestError(str(e)) from None
    if user not in node.image.security.users:
        raise SecurityNotFoundError(f"User {user} not found.")
    await node.admin.submit("delete_user", {"name": user})
    AuditLog.change("user_deleted", by=request_principal(request), user=user)
    return Response(status_code=204)


@router.get("/clusters/{cluster_id}/api-keys", summary="List API keys (ids and principals)")
async def list_api_keys(cluster_id: str, request: Request):
    node = cluster_node(request, cluster_id)
    keys = node.image.security.api_keys
    return JSONResponse({"data": [{"key_id": k, "principal": keys[k].principal} for k in sorted(keys)]})


@router.post("/clusters/{cluster_id}/api-keys", status_code=201, summary="Create an API key for a principal",
             openapi_extra=_body({"type": "object", "required": ["principal"], "properties": {
                 "principal": {"type": "string"}}}))
async def create_api_key(cluster_id: str, request: Request):
    node = cluster_node(request, cluster_id)
    doc = await read_json_object(request, MAX_SECURITY_BODY_BYTES)
    try:
        principal = check_principal(doc.get("principal"))
    except ValueError as e:
        raise InvalidSecurityRequestError(str(e)) from None
    key_id, api_key, digest = new_api_key()
    await node.admin.submit("create_api_key", {"key_id": key_id, "principal": principal, "secret_sha256": digest.hex()})
    AuditLog.change("api_key_created", by=request_principal(request), key_id=key_id, principal=principal)
    return JSONResponse({"key_id": key_id, "principal": principal, "api_key": api_key}, status_code=201)


@router.delete("/clusters/{cluster_id}/api-keys/{key_id}", status_code=204, summary="Delete an API key")
async def delete_api_key(cluster_id: str, key_id: str, request: Request):
    node = cluster_node(request, cluster_id)
    if key_id not in node.image.security.api_keys:
        raise SecurityNotFoundError(f"API key {key_id} not found.")
    await node.admin.submit("delete_api_key", {"key_id": key_id})
    AuditLog.change("api_key_deleted", by=request_principal(request), key_id=key_id)
    return Response(status_code=204)


_QUOTA_SCHEMA = {"type": "object", "properties": {
    "producer.byte.rate": {"type": "number", "minimum": 0}, "consumer.byte.rate": {"type": "number", "minimum": 0},
    "request.rate": {"type": "number", "minimum": 0}}}


@router.get("/clusters/{cluster_id}/quotas", summary="Quota overrides per principal (from the cluster metadata)")
async def list_quotas(cluster_id: str, request: Request):
    node = cluster_node(request, cluster_id)
    quotas = node.image.security.quotas
    return JSONResponse({"data": [{"principal": p, "quotas": dict(quotas[p])} for p in sorted(quotas)]})


@router.put("/clusters/{cluster_id}/quotas/{principal}", summary="Set a principal's quota overrides (0 = unlimited)",
            openapi_extra=_body(_QUOTA_SCHEMA))
async def set_quotas(cluster_id: str, principal: str, request: Request):
    node = cluster_node(request, cluster_id)
    doc = await read_json_object(request, MAX_SECURITY_BODY_BYTES)
    await node.admin.submit("alter_quota", {"principal": principal, "quotas": doc})
    AuditLog.change("quota_set", by=request_principal(request), principal=principal, quotas=doc)
    return JSONResponse({"principal": principal, "quotas": dict(node.image.security.quotas.get(principal, {}))})


@router.delete("/clusters/{cluster_id}/quotas/{principal}", status_code=204,
               summary="Remove a principal's quota overrides (back to the node config's)")
async def delete_quotas(cluster_id: str, principal: str, request: Request):
    node = cluster_node(request, cluster_id)
    await node.admin.submit("alter_quota", {"principal": principal, "quotas": None})
    AuditLog.change("quota_removed", by=request_principal(request), principal=principal)
    return Response(status_code=204)
