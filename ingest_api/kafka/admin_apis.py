"""Topic and config administration on the Kafka door: CreateTopics (with validate_only), DeleteTopics,
CreatePartitions, DescribeConfigs, AlterConfigs and IncrementalAlterConfigs.

They call `node.admin` (AdminService), as the HTTP admin routers do; every change goes through the
controller. Config resources are topics (resource type 2) and, for DescribeConfigs, this node's
broker keys (type 4, read-only here; sensitive keys without their value).

Authorization (the node's authorizer, as for HTTP): CreateTopics needs CREATE on the cluster or the
topic, DeleteTopics DELETE and CreatePartitions ALTER on the topic; configs need DESCRIBE (to read)
or ALTER (to change) on the topic, or on the cluster for broker configs — the ACL model's operations,
which the HTTP config routes require too. A refusal is TOPIC_ / CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from lakelog.infra.config import ConfigError
from lakelog.ingest_api.config.node import NODE_CONFIG
from lakelog.ingest_api.kafka.codec import Request, field_of
from lakelog.ingest_api.kafka.context import REFUSED, KafkaContext, kafka_topic_id
from lakelog.ingest_api.error_table import kafka_code
from lakelog.ingest_api.kafka.server import Connection
from lakelog.ingest_api.security.acl import CLUSTER_NAME, Operation, ResourceType

NONE = ErrorCode.none.value
TOPIC, BROKER = 2, 4
#: DescribeConfigs config_source values (Kafka's ConfigSource).
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
#: IncrementalAlterConfigs operations.
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _error(e: BaseException) -> tuple[int, str]:
    return kafka_code(e).value, str(e)[:500]


def _may(ctx: KafkaContext, conn: Connection, operation: Operation, rtype: ResourceType, name: str,
         api: str) -> bool:
    return ctx.allowed(conn.principal, operation, rtype, name, api, conn.client_host)


def _refused(rtype: ResourceType, operation: Operation, name: str) -> tuple[int, str]:
    return REFUSED[rtype], f"not authorized to {operation.value} {rtype.value} {name!r}"


def _text(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return str(v)


async def create_topics(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    b = req.body
    validate_only = bool(field_of(b, "validate_only", False))
    out = []
    for t in b.topics:
        doc: dict[str, Any] = {"name": t.name, "topic_id": None, "error_message": None, "topic_config_error_code": 0,
                               "num_partitions": -1, "replication_factor": -1, "configs": None}
        if not (_may(ctx, conn, Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, "CreateTopics")
                or _may(ctx, conn, Operation.CREATE, ResourceType.TOPIC, t.name, "CreateTopics")):
            code, msg = _refused(ResourceType.TOPIC, Operation.CREATE, t.name)
            out.append({**doc, "error_code": code, "error_message": msg})
            continue
        try:
            if t.assignments:
                raise ConfigError("manual replica assignments are not supported on the Kafka door; "
                                  "use the HTTP reassignment API")
            configs = {c.name: c.value for c in t.configs if c.value is not None}
            meta = await ctx.node.admin.create_topic(
                t.name, partitions=None if t.num_partitions < 0 else int(t.num_partitions),
                replication_factor=None if t.replication_factor < 0 else int(t.replication_factor),
                configs=configs, validate_only=validate_only)
            doc.update({"error_code": NONE, "num_partitions": meta.partitions,
                        "replication_factor": meta.replication_factor,
                        "topic_id": kafka_topic_id(meta.topic_id) if meta.topic_id else None})
        except Exception as e:
            code, msg = _error(e)
            doc.update({"error_code": code, "error_message": msg})
        out.append(doc)
    return {"throttle_time": 0, "topics": out}


async def delete_topics(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    out = []
    for name in req.body.topic_names:
        if not _may(ctx, conn, Operation.DELETE, ResourceType.TOPIC, name, "DeleteTopics"):
            code, msg = _refused(ResourceType.TOPIC, Operation.DELETE, name)
            out.append({"name": name, "error_code": code, "error_message": msg})
            continue
        try:
            await ctx.node.admin.delete_topic(name)
            out.append({"name": name, "error_code": NONE, "error_message": None})
        except Exception as e:
            code, msg = _error(e)
            out.append({"name": name, "error_code": code, "error_message": msg})
    return {"throttle_time": 0, "responses": out}


async def create_partitions(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    b = req.body
    out = []
    for t in b.topics:
        if not _may(ctx, conn, Operation.ALTER, ResourceType.TOPIC, t.name, "CreatePartitions"):
            code, msg = _refused(ResourceType.TOPIC, Operation.ALTER, t.name)
            out.append({"name": t.name, "error_code": code, "error_message": msg})
            continue
        try:
            if t.assignments:
                raise ConfigError("manual replica assignments are not supported on the Kafka door")
            current = ctx.node.admin.topic(t.name).partitions
            if int(t.count) <= current:
                out.append({"name": t.name, "error_code": ErrorCode.invalid_partitions.value,
                            "error_message": f"topic {t.name} has {current} partitions; it can only grow"})
                continue
            if not b.validate_only:
                await ctx.node.admin.create_partitions(t.name, int(t.count))
            out.append({"name": t.name, "error_code": NONE, "error_message": None})
        except Exception as e:
            code, msg = _error(e)
            out.append({"name": t.name, "error_code": code, "error_message": msg})
    return {"throttle_time": 0, "results": out}


def _sensitive(name: str) -> bool:
    return "secret" in name or "password" in name


def _describe_one(ctx: KafkaContext, res: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"resource_type": res.resource_type, "resource_name": res.resource_name,
                           "error_message": None, "configs": []}
    keys = set(res.configuration_keys) if res.configuration_keys else None
    configs = []
    try:
        if res.resource_type == TOPIC:
            overrides = ctx.node.admin.topic(res.resource_name).configs
            for name, value in sorted(ctx.node.admin.topic_config(res.resource_name).items()):
                configs.append((name, _text(value), DYNAMIC_TOPIC_CONFIG if name in overrides else DEFAULT_CONFIG,
                                False))
        elif res.resource_type == BROKER:
            if res.resource_name not in ("", str(ctx.node.node_id)):
                raise ConfigError(f"node {ctx.node.node_id} describes its own configs, not broker {res.resource_name}")
            for key in NODE_CONFIG:
                value = ctx.node.config.get(key.name)
                source = DEFAULT_CONFIG if value == key.default else STATIC_BROKER_CONFIG
                configs.append((key.name, None if _sensitive(key.name) else _text(value), source,
                                _sensitive(key.name)))
        else:
            return {**doc, "error_code": ErrorCode.invalid_request.value,
                    "error_message": f"resource type {res.resource_type} is not described here"}
    except Exception as e:
        code, msg = _error(e)
        return {**doc, "error_code": code, "error_message": msg}
    doc["configs"] = [{"name": n, "value": v, "read_only": res.resource_type == BROKER, "config_source": src,
                       "is_default": src == DEFAULT_CONFIG, "is_sensitive": sens, "synonyms": [], "config_type": 0,
                       "documentation": None}
                      for n, v, src, sens in configs if keys is None or n in keys]
    return {**doc, "error_code": NONE}


def _config_refusal(ctx: KafkaContext, conn: Connection, res: Any, operation: Operation, api: str
                    ) -> dict[str, Any] | None:
    """The answer refusing a config resource to this principal, or None when allowed."""
    rtype, name = (ResourceType.TOPIC, res.resource_name) if res.resource_type == TOPIC else \
        (ResourceType.CLUSTER, CLUSTER_NAME)
    if _may(ctx, conn, operation, rtype, name, api):
        return None
    code, msg = _refused(rtype, operation, res.resource_name)
    return {"resource_type": res.resource_type, "resource_name": res.resource_name, "error_code": code,
            "error_message": msg, "configs": []}


async def describe_configs(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    return {"throttle_time": 0, "results": [
        _config_refusal(ctx, conn, r, Operation.DESCRIBE, "DescribeConfigs") or _describe_one(ctx, r)
        for r in req.body.resources]}


async def _alter(ctx: KafkaContext, res: Any, validate_only: bool, incremental: bool) -> dict[str, Any]:
    doc = {"resource_type": res.resource_type, "resource_name": res.resource_name, "error_message": None}
    if res.resource_type != TOPIC:
        return {**doc, "error_code": ErrorCode.invalid_request.value,
                "error_message": "only topic configs are altered on the Kafka door (broker configs: the HTTP API)"}
    try:
        current = dict(ctx.node.admin.topic(res.resource_name).configs)
        if incremental:
            new = dict(current)
            for c in res.configs:
                op = int(c.config_operation)
                if op == SET:
                    new[c.name] = c.value or ""
                elif op == DELETE:
                    new.pop(c.name, None)
                else:
                    items = [x for x in (new.get(c.name) or "").split(",") if x]
                    values = [x for x in (c.value or "").split(",") if x]
                    items = items + [v for v in values if v not in items] if op == APPEND else \
                        [x for x in items if x not in values]
                    new[c.name] = ",".join(items)
        else:  # AlterConfigs replaces the whole set of overrides
            new = {c.name: c.value for c in res.configs if c.value is not None}
        deleted = [k for k in current if k not in new]
        if validate_only:
            ctx.node.config.log_config(new)  # raises on a bad value
        else:
            await ctx.node.admin.alter_topic_configs(res.resource_name, new, deleted)
    except Exception as e:
        code, msg = _error(e)
        return {**doc, "error_code": code, "error_message": msg}
    return {**doc, "error_code": NONE}


async def _alter_all(ctx: KafkaContext, req: Request, conn: Connection, incremental: bool, api: str
                     ) -> dict[str, Any]:
    out = []
    for r in req.body.resources:
        refused = _config_refusal(ctx, conn, r, Operation.ALTER, api)
        out.append(refused or await _alter(ctx, r, bool(req.body.validate_only), incremental))
    return {"throttle_time": 0, "responses": out}


async def alter_configs(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    return await _alter_all(ctx, req, conn, False, "AlterConfigs")


async def incremental_alter_configs(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    return await _alter_all(ctx, req, conn, True, "IncrementalAlterConfigs")
