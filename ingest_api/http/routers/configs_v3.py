"""Confluent REST Proxy v3 configs beyond one topic: broker configs, cluster-wide broker configs
(`broker-configs`), and the configs of every topic (`topics/-/configs`, `topics/-/configs:alter`).

A node's broker configuration is its `node.toml` (declared in `ingest_api/config/node.py`) overlaid with
the dynamic broker configs kept in the cluster metadata (ingest_api/cluster/broker_configs.py;
applied live by ingest_api/broker/dynamic_config.py). The keys Kafka lets `kafka-configs` change at
runtime and Lakelog applies live (the broker defaults of the topic keys: `log.retention.ms`,
`log.segment.bytes`, `message.max.bytes`, `min.insync.replicas`, ...) are `is_read_only: false`:
`PUT .../brokers/{b}/configs/{name}` sets broker b's value, `DELETE` resets it, `configs:alter`
does several at once (`validate_only` checks only); `broker-configs` are the cluster-wide dynamic
defaults (Kafka's `<default>` entity). Every write goes through the active controller and is in
force on every node once the metadata entry is applied (the answer waits for this node). A write
to any other key answers 400 / 40002 naming it ("Cannot update these configs dynamically"), as
Kafka refuses a dynamic update of a static config; a value that does not parse, 400 / 40002 too.
`source` and `synonyms` follow Kafka's precedence: DYNAMIC_BROKER_CONFIG > DYNAMIC_DEFAULT_BROKER_CONFIG
> STATIC_BROKER_CONFIG > DEFAULT_CONFIG. Secrets (`*secret*`, `*password*`, key files) are
`is_sensitive` with a null value. Another broker's configs are asked of that broker (one signed hop).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from lakelog.infra.errors import LakelogError
from lakelog.ingest_api.http import v3_errors
from lakelog.ingest_api.cluster.broker_configs import (
    CLUSTER_DEFAULT,
    DYNAMIC_BROKER_CONFIGS,
    InvalidBrokerConfigError,
    ReadOnlyBrokerConfigError,
    check_value,
)
from lakelog.ingest_api.cluster.throttles import RATE_KEYS
from lakelog.ingest_api.config.node import NODE_CONFIG
from lakelog.ingest_api.broker.dynamic_config import DYNAMIC_DEFAULT_BROKER_CONFIG
from lakelog.ingest_api.error_table import http_error
from lakelog.ingest_api.errors import BrokerNotFoundError, ConfigNotFoundError, InvalidTopicError
from lakelog.ingest_api.http.v3_errors import V3StaticConfigError
from lakelog.ingest_api.replication.peers import FORWARDED_HEADER
from lakelog.ingest_api.http.routers.v3_resources import AlterConfigEntry, base_url, cluster_node, list_body, resource_meta, topic_config_body, validate_topic_configs
from lakelog.ingest_api.http.security_middleware import authorize, request_principal
from lakelog.ingest_api.security.acl import Operation, ResourceType

router = APIRouter(prefix="/v3", tags=["configs v3"])

#: Most topics one `topics/-/configs:alter` may change.
MAX_ALTER_TOPICS = 1000


class ReadOnlyConfigError(V3StaticConfigError):
    """A broker config cannot be changed at runtime (it is static: node.toml), or its value is invalid."""


class UpdateConfigRequest(BaseModel):
    value: str = Field(max_length=4096)


class AlterConfigsRequest(BaseModel):
    data: list[AlterConfigEntry] = Field(max_length=200)
    validate_only: bool = False


class TopicAlterEntry(BaseModel):
    topic_name: str = Field(min_length=1, max_length=249)
    configs: list[AlterConfigEntry] = Field(max_length=200)


class AlterTopicsConfigsRequest(BaseModel):
    data: list[TopicAlterEntry] = Field(max_length=MAX_ALTER_TOPICS)
    validate_only: bool = False


def _sensitive(name: str) -> bool:
    return any(w in name for w in ("secret", "password", "keyfile"))


def _value(v: Any) -> str | None:
    if v is None:
        return None
    return str(v).lower() if isinstance(v, bool) else str(v)


def _broker_config_body(request: Request, node: Any, cluster_id: str, broker_id: int, name: str) -> dict[str, Any]:
    url = f"{base_url(request)}/clusters/{cluster_id}/brokers/{broker_id}/configs/{name}"
    sensitive = _sensitive(name)
    synonyms = node.dynamic_configs.synonyms(name)
    source = synonyms[0][0]
    return {"kind": "KafkaBrokerConfig",
            "metadata": resource_meta(url, f"crn:///kafka={cluster_id}/broker={broker_id}/config={name}"),
            "cluster_id": cluster_id, "broker_id": broker_id, "name": name,
            "value": None if sensitive else _value(node.config.get(name)), "is_default": source == "DEFAULT_CONFIG",
            "is_read_only": name not in DYNAMIC_BROKER_CONFIGS, "is_sensitive": sensitive, "source": source,
            "synonyms": [{"name": name, "value": None if sensitive else _value(v), "source": src}
                         for src, v in synonyms]}


def _local_broker_configs(request: Request, node: Any, cluster_id: str) -> list[dict[str, Any]]:
    return [_broker_config_body(request, node, cluster_id, node.node_id, k.name)
            for k in sorted(NODE_CONFIG, key=lambda k: k.name)]


def _check_broker(node: Any, broker_id: int) -> None:
    if broker_id not in node.image.brokers:
        raise BrokerNotFoundError(f"Broker {broker_id} cannot be found.")


async def _remote_configs(request: Request, node: Any, broker_id: int) -> list[dict[str, Any]]:
    """Another broker's configs, asked of it (its own node.toml)."""
    resp = await node.peers.request(broker_id, "GET", f"/v3/clusters/{node.cluster_id}/brokers/{broker_id}/configs",
                                    headers={FORWARDED_HEADER: str(node.node_id)}, timeout_s=10,
                                    principal=request_principal(request))
    doc = resp.json()
    if resp.status_code != 200:
        raise BrokerNotFoundError(str(doc.get("message", f"Broker {broker_id} did not answer")))
    return doc["data"]


async def _broker_configs(request: Request, node: Any, cluster_id: str, broker_id: int) -> list[dict[str, Any]]:
    _check_broker(node, broker_id)
    if broker_id == node.node_id:
        return _local_broker_configs(request, node, cluster_id)
    if request.headers.get(FORWARDED_HEADER):
        raise BrokerNotFoundError(f"Broker {broker_id} is not this node.")
    return await _remote_configs(request, node, broker_id)


def _checked(set_configs: dict[str, Any], delete: list[str]) -> dict[str, str]:
    """The values to store; every name must be a node key (else 404) and dynamic, every value valid
    (else 400 / 40002, all names refused at once as Kafka lists them)."""
    for name in [*set_configs, *delete]:
        if name not in NODE_CONFIG.keys and name not in RATE_KEYS:  # the rates: dynamic only, no node key
            raise ConfigNotFoundError(f"Config {name} cannot be found.")
    read_only = [n for n in [*set_configs, *delete] if n not in DYNAMIC_BROKER_CONFIGS]
    if read_only:
        raise ReadOnlyConfigError(f"Cannot update these configs dynamically: {', '.join(sorted(set(read_only)))} "
                                  "(read-only: set them in node.toml and restart the node).")
    try:
        return {n: check_value(n, v) for n, v in set_configs.items()}
    except (ReadOnlyBrokerConfigError, InvalidBrokerConfigError) as e:
        raise ReadOnlyConfigError(str(e)) from None


async def _alter(node: Any, entity: int, set_configs: dict[str, Any], delete: list[str],
                 validate_only: bool = False) -> None:
    values = _checked(set_configs, delete)
    if validate_only:
        return
    await node.admin.submit("alter_dynamic_broker_configs", {"broker": entity, "set": values, "delete": list(delete)})


def _split_alter(entries: list[AlterConfigEntry]) -> tuple[dict[str, Any], list[str]]:
    names = [e.name for e in entries]
    if len(set(names)) != len(names):
        raise ReadOnlyConfigError("each config may appear once in one request")
    for e in entries:
        if (e.operation or "SET").upper() not in ("SET", "DELETE"):
            raise ReadOnlyConfigError(f"operation must be SET or DELETE, not {e.operation!r}")
        if (e.operation or "SET").upper() == "SET" and e.value is None:
            raise ReadOnlyConfigError(f"SET of {e.name} needs a value")
    return _split(entries)


# ---------------------------------------------------------------------------- broker configs


@router.get("/clusters/{cluster_id}/brokers/-/configs", summary="List the configs of every broker")
async def list_all_broker_configs(cluster_id: str, request: Request):
    node = cluster_node(request, cluster_id)
    data: list[dict[str, Any]] = []
    for b in sorted(node.image.brokers):
        if node.image.brokers[b].fenced and b != node.node_id:
            continue
        try:
            data.extend(await _broker_configs(request, node, cluster_id, b))
        except Exception:
            continue  # a broker that cannot answer: list the others
    return list_body("KafkaBrokerConfigList", f"{base_url(request)}/clusters/{cluster_id}/brokers/-/configs", data)


@router.get("/clusters/{cluster_id}/brokers/{broker_id}/configs", summary="List a broker's configs")
async def list_broker_configs(cluster_id: str, broker_id: int, request: Request):
    node = cluster_node(request, cluster_id)
    data = await _broker_configs(request, node, cluster_id, broker_id)
    return list_body("KafkaBrokerConfigList", f"{base_url(request)}/clusters/{cluster_id}/brokers/{broker_id}/configs", data)


@router.get("/clusters/{cluster_id}/brokers/{broker_id}/configs/{name}", summary="Get one broker config")
async def get_broker_config(cluster_id: str, broker_id: int, name: str, request: Request):
    node = cluster_node(request, cluster_id)
    for c in await _broker_configs(request, node, cluster_id, broker_id):
        if c["name"] == name:
            return JSONResponse(c)
    raise ConfigNotFoundError(f"Config {name} cannot be found.")


def _check_broker_config_name(node: Any, broker_id: int, name: str) -> None:
    _check_broker(node, broker_id)
    if name not in NODE_CONFIG.keys:
        raise ConfigNotFoundError(f"Config {name} cannot be found.")


@router.put("/clusters/{cluster_id}/brokers/{broker_id}/configs/{name}", status_code=204,
            summary="Set one dynamic broker config of one broker (read-only configs: 400 40002)")
async def update_broker_config(cluster_id: str, broker_id: int, name: str, body: UpdateConfigRequest,
                               request: Request):
    node = cluster_node(request, cluster_id)
    _check_broker_config_name(node, broker_id, name)
    await _alter(node, broker_id, {name: body.value}, [])
    return Response(status_code=204)


@router.delete("/clusters/{cluster_id}/brokers/{broker_id}/configs/{name}", status_code=204,
               summary="Reset one dynamic broker config of one broker (read-only configs: 400 40002)")
async def reset_broker_config(cluster_id: str, broker_id: int, name: str, request: Request):
    node = cluster_node(request, cluster_id)
    _check_broker_config_name(node, broker_id, name)
    await _alter(node, broker_id, {}, [name])
    return Response(status_code=204)


@router.post("/clusters/{cluster_id}/brokers/{broker_id}/configs:alter", status_code=204,
             summary="Set or delete several dynamic broker configs of one broker (read-only configs: 400 40002)")
async def alter_broker_configs(cluster_id: str, broker_id: int, body: AlterConfigsRequest, request: Request):
    node = cluster_node(request, cluster_id)
    _check_broker(node, broker_id)
    set_configs, delete = _split_alter(body.data)
    await _alter(node, broker_id, set_configs, delete, body.validate_only)
    return Response(status_code=204)


# ---------------------------------------------------------------------------- cluster-wide broker configs


def _cluster_config_body(request: Request, cluster_id: str, name: str, value: str) -> dict[str, Any]:
    url = f"{base_url(request)}/clusters/{cluster_id}/broker-configs/{name}"
    sensitive = _sensitive(name)
    shown = None if sensitive else value
    return {"kind": "KafkaClusterConfig", "metadata": resource_meta(url, f"crn:///kafka={cluster_id}/broker-config={name}"),
            "cluster_id": cluster_id, "config_type": "BROKER", "name": name, "value": shown, "is_default": False,
            "is_read_only": False, "is_sensitive": sensitive, "source": DYNAMIC_DEFAULT_BROKER_CONFIG,
            "synonyms": [{"name": name, "value": shown, "source": DYNAMIC_DEFAULT_BROKER_CONFIG}]}


@router.get("/clusters/{cluster_id}/broker-configs", summary="List the cluster-wide dynamic broker configs")
async def list_cluster_configs(cluster_id: str, request: Request):
    node = cluster_node(request, cluster_id)
    data = [_cluster_config_body(request, cluster_id, n, v)
            for n, v in sorted(node.image.broker_configs.of(CLUSTER_DEFAULT).items())]
    return list_body("KafkaClusterConfigList", f"{base_url(request)}/clusters/{cluster_id}/broker-configs", data)


@router.get("/clusters/{cluster_id}/broker-configs/{name}", summary="Get one cluster-wide dynamic broker config")
async def get_cluster_config(cluster_id: str, name: str, request: Request):
    node = cluster_node(request, cluster_id)
    value = node.image.broker_configs.of(CLUSTER_DEFAULT).get(name)
    if value is None:
        raise ConfigNotFoundError(f"Config {name} cannot be found.")
    return JSONResponse(_cluster_config_body(request, cluster_id, name, value))


def _check_cluster_config_name(name: str) -> None:
    if name not in NODE_CONFIG.keys:
        raise ConfigNotFoundError(f"Config {name} cannot be found.")


@router.put("/clusters/{cluster_id}/broker-configs/{name}", status_code=204,
            summary="Set one cluster-wide dynamic broker config (read-only configs: 400 40002)")
async def update_cluster_config(cluster_id: str, name: str, body: UpdateConfigRequest, request: Request):
    node = cluster_node(request, cluster_id)
    _check_cluster_config_name(name)
    await _alter(node, CLUSTER_DEFAULT, {name: body.value}, [])
    return Response(status_code=204)


@router.delete("/clusters/{cluster_id}/broker-configs/{name}", status_code=204,
               summary="Reset one cluster-wide dynamic broker config (read-only configs: 400 40002)")
async def delete_cluster_config(cluster_id: str, name: str, request: Request):
    node = cluster_node(request, cluster_id)
    _check_cluster_config_name(name)
    await _alter(node, CLUSTER_DEFAULT, {}, [name])
    return Response(status_code=204)


@router.post("/clusters/{cluster_id}/broker-configs:alter", status_code=204,
             summary="Set or delete several cluster-wide dynamic broker configs (read-only configs: 400 40002)")
async def alter_cluster_configs(cluster_id: str, body: AlterConfigsRequest, request: Request):
    node = cluster_node(request, cluster_id)
    set_configs, delete = _split_alter(body.data)
    await _alter(node, CLUSTER_DEFAULT, set_configs, delete, body.validate_only)
    return Response(status_code=204)


# ---------------------------------------------------------------------------- every topic's configs


@router.get("/clusters/{cluster_id}/topics/-/configs", summary="List the configs of every topic")
async def list_all_topic_configs(cluster_id: str, request: Request):
    node = cluster_node(request, cluster_id)
    data = []
    for t in node.admin.topics():
        overrides = t.configs
        data.extend(topic_config_body(request, node, t.name, k, v, overrides) for k, v in node.admin.topic_config(t.name).items())
    return list_body("KafkaTopicConfigList", f"{base_url(request)}/clusters/{cluster_id}/topics/-/configs", data)


def _split(entries: list[AlterConfigEntry]) -> tuple[dict[str, str], list[str]]:
    set_configs = {e.name: e.value for e in entries
                   if (e.operation or "SET").upper() == "SET" and e.value is not None}
    delete = [e.name for e in entries if (e.operation or "").upper() == "DELETE"]
    return set_configs, delete  # type: ignore[return-value]


@router.post("/clusters/{cluster_id}/topics/-/configs:alter", status_code=204,
             summary="Set or delete configs of several topics; 207 with the topics that failed")
async def alter_all_topic_configs(cluster_id: str, body: AlterTopicsConfigsRequest, request: Request):
    node = cluster_node(request, cluster_id)
    names = [e.topic_name for e in body.data]
    if len(set(names)) != len(names):
        raise InvalidTopicError("each topic may appear once")
    failures: list[dict[str, Any]] = []
    path = request.url.path
    for e in body.data:
        try:
            authorize(request, Operation.ALTER, ResourceType.TOPIC, e.topic_name)
            set_configs, delete = _split(e.configs)
            validate_topic_configs(node, e.topic_name, set_configs, delete)
            if not body.validate_only:
                await node.admin.alter_topic_configs(e.topic_name, set_configs, delete=delete)
        except LakelogError as exc:
            status, code, message = http_error(exc)
            _, code, _ = v3_errors.shape(path, exc, status, code)
            failures.append({"topic_name": e.topic_name, "error_code": code, "message": message})
    if failures:
        return JSONResponse({"failures": failures}, status_code=207)
    return Response(status_code=204)


