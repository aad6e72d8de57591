"""DescribeAcls, CreateAcls and DeleteAcls on the Kafka door: the cluster's one ACL store (the
metadata records `create_acls` / `delete_acls`) and the authorizer HTTP uses.

Kafka's enums map by name onto the ACL model of `security/acl.py`:

    resource type   2 TOPIC, 3 GROUP, 4 CLUSTER (named "kafka-cluster"), 5 TRANSACTIONAL_ID; 1 ANY in
                    filters. Kafka's other types (DELEGATION_TOKEN, USER) are refused on creation
                    unless the model has a member of that name. SUBJECT bindings (Schema Registry
                    subjects) have no Kafka type: DescribeAcls leaves them out, DeleteAcls keeps them.
    pattern type    3 LITERAL, 4 PREFIXED; in filters also 1 ANY and 2 MATCH (every binding that
                    applies to the named resource: the literal name, the wildcard "*", prefixes of it)
    operation       2 ALL, 3 READ, 4 WRITE, 5 CREATE, 6 DELETE, 7 ALTER, 8 DESCRIBE; 1 ANY in filters.
                    Kafka's CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE and the
                    token operations are not in the model (configs take DESCRIBE / ALTER): refused.
    permission      2 DENY, 3 ALLOW; 1 ANY in filters
    host            "*" only (bindings are not limited by client address)

Authorization, as Kafka and the HTTP ACL routes: DescribeAcls needs DESCRIBE on the cluster,
CreateAcls and DeleteAcls ALTER on it (CLUSTER_AUTHORIZATION_FAILED otherwise). The ACLs of one
request are created in one metadata change; the bindings every filter of a DeleteAcls matches are
deleted in one. Changes are audited as the HTTP door audits them. Malformed bindings answer
INVALID_REQUEST (the error table's row of `InvalidSecurityRequestError`) with the reason.
"""

from __future__ import annotations

import enum
from typing import Any

from kio.schema.errors import ErrorCode

from lakelog.ingest_api.error_table import kafka_code
from lakelog.ingest_api.kafka.codec import Request, field_of
from lakelog.ingest_api.kafka.context import REFUSED, KafkaContext
from lakelog.ingest_api.kafka.server import Connection
from lakelog.ingest_api.security.acl import (CLUSTER_NAME, WILDCARD, AclBinding, Operation, PatternType, Permission,
                                             ResourceType)
from lakelog.ingest_api.security.audit import AuditLog
from lakelog.ingest_api.security.errors import InvalidSecurityRequestError

NONE = ErrorCode.none.value
ANY = 1
MATCH = 2
#: Kafka's codes (its org.apache.kafka.common.resource / acl enums) -> names of the ACL model's members.
RESOURCE_TYPES = {2: "TOPIC", 3: "GROUP", 4: "CLUSTER", 5: "TRANSACTIONAL_ID", 6: "DELEGATION_TOKEN", 7: "USER"}
PATTERN_TYPES = {3: "LITERAL", 4: "PREFIXED"}
OPERATIONS = {2: "ALL", 3: "READ", 4: "WRITE", 5: "CREATE", 6: "DELETE", 7: "ALTER", 8: "DESCRIBE",
              9: "CLUSTER_ACTION", 10: "DESCRIBE_CONFIGS", 11: "ALTER_CONFIGS", 12: "IDEMPOTENT_WRITE",
              13: "CREATE_TOKENS", 14: "DESCRIBE_TOKENS", 15: "TWO_PHASE_COMMIT"}
PERMISSIONS = {2: "DENY", 3: "ALLOW"}


def _code_of(table: dict[int, str], member: enum.Enum) -> int | None:
    return next((code for code, name in table.items() if name == member.value), None)


def _member(enum_cls: type[enum.Enum], table: dict[int, str], code: int, what: str) -> Any:
    """The model's member for a Kafka code; InvalidSecurityRequestError when it has none."""
    name = table.get(int(code))
    if name is None or name not in enum_cls.__members__:
        raise InvalidSecurityRequestError(f"{what} {name or code} is not in the ACL model")
    return enum_cls[name]


def binding_of(c: Any) -> AclBinding:
    """A CreateAcls creation -> the model's binding (validated as the HTTP door validates)."""
    try:
        return AclBinding.from_dict({
            "principal": c.principal, "host": c.host, "resource_name": c.resource_name,
            "resource_type": _member(ResourceType, RESOURCE_TYPES, c.resource_type, "resource type"),
            "pattern_type": _member(PatternType, PATTERN_TYPES, field_of(c, "resource_pattern_type", 3),
                                    "pattern type"),
            "operation": _member(Operation, OPERATIONS, c.operation, "operation"),
            "permission": _member(Permission, PERMISSIONS, c.permission_type, "permission")})
    except ValueError as e:
        raise InvalidSecurityRequestError(str(e)) from None


def kafka_fields(b: AclBinding) -> dict[str, Any] | None:
    """A binding in Kafka's codes, or None when Kafka has no code for its resource type."""
    rtype = _code_of(RESOURCE_TYPES, b.resource_type)
    if rtype is None:
        return None
    return {"resource_type": rtype, "resource_name": b.resource_name,
            "pattern_type": _code_of(PATTERN_TYPES, b.pattern_type), "principal": b.principal, "host": b.host,
            "operation": _code_of(OPERATIONS, b.operation), "permission_type": _code_of(PERMISSIONS, b.permission)}


def filter_matches(f: Any, b: AclBinding) -> bool:
    """Whether a DescribeAcls request or a DeleteAcls filter (Kafka's AclBindingFilter) matches `b`."""
    fields = kafka_fields(b)
    if fields is None:
        return False
    pattern, name = int(field_of(f, "pattern_type_filter", 3)), f.resource_name_filter
    if int(f.resource_type_filter) not in (ANY, fields["resource_type"]):
        return False
    if pattern == MATCH:
        if name is not None and not (
                (b.pattern_type is PatternType.LITERAL and b.resource_name in (name, WILDCARD))
                or (b.pattern_type is PatternType.PREFIXED and name.startswith(b.resource_name))):
            return False
    elif pattern != ANY and pattern != fields["pattern_type"]:
        return False
    elif name is not None and name != b.resource_name:
        return False
    return ((f.principal_filter is None or f.principal_filter == b.principal)
            and (f.host_filter is None or f.host_filter == b.host)
            and int(f.operation) in (ANY, fields["operation"])
            and int(f.permission_type) in (ANY, fields["permission_type"]))


def check_filter(f: Any) -> None:
    """Refuse a filter with a code Kafka itself would not accept (UNKNOWN, or out of range)."""
    pattern = int(field_of(f, "pattern_type_filter", 3))
    if int(f.resource_type_filter) not in (ANY, *RESOURCE_TYPES) or pattern not in (ANY, MATCH, *PATTERN_TYPES) \
            or int(f.operation) not in (ANY, *OPERATIONS) or int(f.permission_type) not in (ANY, *PERMISSIONS):
        raise InvalidSecurityRequestError("an ACL filter with an unknown resource type, pattern type, operation "
                                          "or permission")


def _cluster_refusal(ctx: KafkaContext, conn: Connection, operation: Operation, api: str) -> tuple[int, str] | None:
    if ctx.allowed(conn.principal, operation, ResourceType.CLUSTER, CLUSTER_NAME, api, conn.client_host):
        return None
    return REFUSED[ResourceType.CLUSTER], f"not authorized to {operation.value} the cluster's ACLs"


def _error(e: BaseException) -> tuple[int, str]:
    return int(kafka_code(e)), str(e)[:500]


async def describe_acls(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    out: dict[str, Any] = {"throttle_time": 0, "error_code": NONE, "error_message": None, "resources": []}
    refused = _cluster_refusal(ctx, conn, Operation.DESCRIBE, "DescribeAcls")
    if refused:
        return {**out, "error_code": refused[0], "error_message": refused[1]}
    try:
        check_filter(req.body)
    except InvalidSecurityRequestError as e:
        code, msg = _error(e)
        return {**out, "error_code": code, "error_message": msg}
    resources: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for b in ctx.node.image.security.sorted_acls():
        if filter_matches(req.body, b):
            k = kafka_fields(b)
            assert k is not None  # filter_matches is False for bindings Kafka has no code for
            resources.setdefault((k["resource_type"], k["resource_name"], k["pattern_type"]), []).append(
                {"principal": k["principal"], "host": k["host"], "operation": k["operation"],
                 "permission_type": k["permission_type"]})
    out["resources"] = [{"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
                        for (t, n, p), acls in resources.items()]
    return out


async def create_acls(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    creations = req.body.creations
    refused = _cluster_refusal(ctx, conn, Operation.ALTER, "CreateAcls")
    if refused:
        return {"throttle_time": 0, "results": [{"error_code": refused[0], "error_message": refused[1]}
                                                for _ in creations]}
    results: list[dict[str, Any]] = []
    valid: dict[int, AclBinding] = {}
    for i, c in enumerate(creations):
        try:
            valid[i] = binding_of(c)
            results.append({"error_code": NONE, "error_message": None})
        except InvalidSecurityRequestError as e:
            code, msg = _error(e)
            results.append({"error_code": code, "error_message": msg})
    if valid:
        try:
            await ctx.node.admin.submit("create_acls", {"acls": [b.to_dict() for b in valid.values()]})
            for b in valid.values():
                AuditLog.change("acl_created", by=conn.principal, acl=b.to_dict(), door="kafka")
        except Exception as e:
            code, msg = _error(e)
            for i in valid:
                results[i] = {"error_code": code, "error_message": msg}
    return {"throttle_time": 0, "results": results}


async def delete_acls(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    filters = req.body.filters
    refused = _cluster_refusal(ctx, conn, Operation.ALTER, "DeleteAcls")
    if refused:
        return {"throttle_time": 0, "filter_results": [
            {"error_code": refused[0], "error_message": refused[1], "matching_acls": []} for _ in filters]}
    acls = ctx.node.image.security.sorted_acls()
    matched: list[list[AclBinding] | tuple[int, str]] = []
    for f in filters:
        try:
            check_filter(f)
            matched.append([b for b in acls if filter_matches(f, b)])
        except InvalidSecurityRequestError as e:
            matched.append(_error(e))
    doomed = {b for m in matched if isinstance(m, list) for b in m}
    failure: tuple[int, str] | None = None
    if doomed:
        try:
            res = await ctx.node.admin.submit("delete_acls", {"acls": [b.to_dict() for b in doomed]})
            for d in res.get("deleted", []):
                AuditLog.change("acl_deleted", by=conn.principal, acl=d, door="kafka")
        except Exception as e:
            failure = _error(e)
    results = []
    for m in matched:
        if isinstance(m, tuple) or failure is not None:
            code, msg = m if isinstance(m, tuple) else failure  # type: ignore[misc]
            results.append({"error_code": code, "error_message": msg, "matching_acls": []})
            continue
        results.append({"error_code": NONE, "error_message": None, "matching_acls": [
            {"error_code": NONE, "error_message": None, **kafka_fields(b)} for b in m]})  # type: ignore[arg-type]
    return {"throttle_time": 0, "filter_results": results}
