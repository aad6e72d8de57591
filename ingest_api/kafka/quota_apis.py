"""DescribeClientQuotas and AlterClientQuotas on the Kafka door: the per-principal quota overrides the
cluster metadata stores (`alter_quota` records; the ones HTTP's /v3/.../quotas and `lakelog quotas`
change), as Kafka's `kafka-configs --entity-type users` reads and writes them.

A stored override of `User:NAME` is Kafka's entity {user: NAME}. Its keys under Kafka's names:

    stored                 Kafka
    producer.byte.rate     producer_byte_rate
    consumer.byte.rate     consumer_byte_rate
    request.rate           request.rate   (requests per second; Kafka's request_percentage measures
                                           something else, so it is not offered under that name)

Client-id and IP entities, and default entities (the node config's `quota.*` keys are the
defaults), are not stored: a DescribeClientQuotas filter on them matches nothing, and
AlterClientQuotas answers INVALID_REQUEST for them, as for any other key. An alteration sets or
removes keys of the entity's overrides; removing the last removes the override. Each entry is one
controller request (`alter_quota`), audited as HTTP's are.

Authorization, as Kafka's DESCRIBE_CONFIGS / ALTER_CONFIGS on the cluster, in the ACL model's
operations: DESCRIBE on the cluster to read, ALTER to change; a refusal answers
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from lakelog.ingest_api.error_table import kafka_code
from lakelog.ingest_api.kafka.codec import Request
from lakelog.ingest_api.kafka.context import REFUSED, KafkaContext
from lakelog.ingest_api.kafka.server import Connection
from lakelog.ingest_api.security.acl import CLUSTER_NAME, Operation, ResourceType
from lakelog.ingest_api.security.audit import AuditLog
from lakelog.ingest_api.security.errors import InvalidSecurityRequestError
from lakelog.ingest_api.security.records import check_quotas, check_user_name

NONE = ErrorCode.none.value
#: Quota keys stored -> the names Kafka's tools show and send.
QUOTA_NAMES = {"producer.byte.rate": "producer_byte_rate", "consumer.byte.rate": "consumer_byte_rate",
               "request.rate": "request.rate"}
STORED_KEYS = {kafka: stored for stored, kafka in QUOTA_NAMES.items()}
USER_ENTITY = "user"
#: DescribeClientQuotas match types.
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2


def _cluster_refusal(ctx: KafkaContext, conn: Connection, operation: Operation, api: str) -> tuple[int, str] | None:
    if ctx.allowed(conn.principal, operation, ResourceType.CLUSTER, CLUSTER_NAME, api, conn.client_host):
        return None
    return REFUSED[ResourceType.CLUSTER], f"not authorized to {operation.value} the cluster's quotas"


def entity_matches(components: Any, strict: bool, user: str) -> bool:
    """Whether the stored entity {user: name} matches a DescribeClientQuotas filter."""
    for c in components:
        if c.entity_type != USER_ENTITY:
            return False  # no client-id or ip entities are stored
        if int(c.match_type) == MATCH_EXACT and c.match != user:
            return False
        if int(c.match_type) not in (MATCH_EXACT, MATCH_SPECIFIED):
            return False  # the default user's quotas are the node config's, not an entity
    return not strict or [c.entity_type for c in components] == [USER_ENTITY]


async def describe_client_quotas(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    out: dict[str, Any] = {"throttle_time": 0, "error_code": NONE, "error_message": None, "entries": []}
    refused = _cluster_refusal(ctx, conn, Operation.DESCRIBE, "DescribeClientQuotas")
    if refused:
        return {**out, "error_code": refused[0], "error_message": refused[1], "entries": None}
    quotas = ctx.node.image.security.quotas
    entries = []
    for principal in sorted(quotas):
        user = principal.partition(":")[2]
        if entity_matches(req.body.components, bool(req.body.strict), user):
            entries.append({"entity": [{"entity_type": USER_ENTITY, "entity_name": user}],
                            "values": [{"key": QUOTA_NAMES.get(k, k), "value": float(v)}
                                       for k, v in sorted(quotas[principal].items())]})
    return {**out, "entries": entries}


def _new_quotas(entry: Any, current: dict[str, float]) -> tuple[str, dict[str, float] | None]:
    """(principal, its overrides after the entry's ops: None for none); ValueError when refused."""
    entity = [(e.entity_type, e.entity_name) for e in entry.entity]
    if len(entity) != 1 or entity[0][0] != USER_ENTITY or entity[0][1] is None:
        raise ValueError("only named user entities are stored (no client-id, ip or default entities)")
    principal = f"User:{check_user_name(entity[0][1])}"
    new = dict(current)
    for op in entry.ops:
        key = STORED_KEYS.get(op.key)
        if key is None:
            raise ValueError(f"quota {op.key!r} is not one of {', '.join(STORED_KEYS)}")
        if op.remove:
            new.pop(key, None)
        else:
            new[key] = float(op.value)
    return principal, (check_quotas(new) if new else None)


async def alter_client_quotas(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    refused = _cluster_refusal(ctx, conn, Operation.ALTER, "AlterClientQuotas")
    results = []
    for entry in req.body.entries:
        doc = {"error_code": NONE, "error_message": None,
               "entity": [{"entity_type": e.entity_type, "entity_name": e.entity_name} for e in entry.entity]}
        if refused:
            results.append({**doc, "error_code": refused[0], "error_message": refused[1]})
            continue
        try:
            names = [(e.entity_type, e.entity_name) for e in entry.entity]
            current = dict(ctx.node.image.security.quotas.get(f"User:{names[0][1]}", {})) if names else {}
            principal, new = _new_quotas(entry, current)
        except ValueError as e:  # answered as the HTTP quota route answers it: the error table's row
            refusal = InvalidSecurityRequestError(str(e)[:500])
            results.append({**doc, "error_code": int(kafka_code(refusal)), "error_message": str(refusal)})
            continue
        if not req.body.validate_only and (new is not None or current):
            try:
                await ctx.node.admin.submit("alter_quota", {"principal": principal, "quotas": new})
                AuditLog.change("quota_set" if new else "quota_removed", by=conn.principal, principal=principal,
                                quotas=new, door="kafka")
            except Exception as e:
                doc.update(error_code=int(kafka_code(e)), error_message=str(e)[:500])
        results.append(doc)
    return {"throttle_time": 0, "entries": results}
