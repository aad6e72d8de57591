"""Confluent REST Proxy v3 configs beyond one topic: broker configs, cluster-wide broker configs
(`broker-configs`), and the configs of every topic (`topics/-/configs`, `topics/-/configs:alter`).

A node's broker configuration is its `node.toml` (declared in `ingest_api/config.py`): it is listed
with `source: STATIC_BROKER_CONFIG` and `is_read_only: true`. Lakelog has no dynamic broker
configuration yet, so `PUT`, `DELETE` and `configs:alter` on broker and cluster configs answer
400 / 40002 naming the config (Kafka refuses a dynamic update of a static config the same way), and
the cluster-wide list (`DYNAMIC_DEFAULT_BROKER_CONFIG`) is empty. Secrets (`*secret*`, `*password*`,
key files) are `is_sensitive` with a null value. Another broker's configs are asked of that broker
(one signed hop).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from lakelog.infra.errors import LakelogError
from lakelog.ingest_api import v3_errors
from lakelog.ingest_api.config import NODE_CONFIG
from lakelog.ingest_api.error_table import http_error
from lakelog.ingest_api.errors import BrokerNotFoundError, ConfigNotFoundError, InvalidTopicError
from lakelog.ingest_api.v3_errors import V3StaticConfigError
from lakelog.ingest_api.node import FORWARDED_HEADER
from lakelog.ingest_api.routers.admin_v3 import (
    AlterConfigEntry,
    _base,
    _cluster,
    _config_body,
    _list,
    _meta,
    validate_topic_configs,
)
from lakelog.ingest_api.security.middleware import authorize, request_principal
from lakelog.ingest_api.security.acl import Operation, ResourceType

router = APIRouter(prefix="/v3", tags=["configs v3"])

#: Most topics one `topics/-/configs:alter` may change.
MAX_ALTER_TOPICS = 1000


class ReadOnlyConfigError(V3StaticConfigError):
    """A broker config cannot be changed at runtime (it is static: node.toml)."""


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


def _broker_config_body(request: Request, cluster_id: str, broker_id: int, name: str, value: Any,
                        default: Any) -> dict[str, Any]:
    url = f"{_base(request)}/clusters/{cluster_id}/brokers/{broker_id}/configs/{name}"
    sensitive = _sensitive(name)
    is_default = value == default
    return {"kind": "KafkaBrokerConfig",
            "metadata": _meta(url, f"crn:///kafka={cluster_id}/broker={broker_id}/config={name}"),
            "cluster_id": cluster_id, "broker_id": broker_id, "name": name,
            "value": None if sensitive else _value(value), "is_default": is_default, "is_read_only": True,
            "is_sensitive": sensitive, "source": "DEFAULT_CONFIG" if is_default else "STATIC_BROKER_CONFIG",
            "synonyms": [{"name": name, "value": None if sensitive else _value(value),
                          "source": "DEFAULT_CONFIG" if is_default else "STATIC_BROKER_CONFIG"}]}


def _local_broker_configs(request: Request, node: Any, cluster_id: str) -> list[dict[str, Any]]:
    values = node.config.to_dict()
    return [_broker_config_body(request, cluster_id, node.node_id, k.name, values.get(k.name), k.default)
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


def _read_only(names: list[str], what: str) -> ReadOnlyConfigError:
    return ReadOnlyConfigError(f"Cannot update {what} config(s) {', '.join(names)} dynamically: Lakelog's broker "
                               "configs are static (node.toml); change them there and restart the node.")


# ---------------------------------------------------------------------------- broker configs


@router.get("/clusters/{cluster_id}/brokers/-/configs", summary="List the configs of every broker")
async def list_all_broker_configs(cluster_id: str, request: Request):
    node = _cluster(request, cluster_id)
    data: list[dict[str, Any]] = []
    for b in sorted(node.image.brokers):
        if node.image.brokers[b].fenced and b != node.node_id:
            continue
        try:
            data.extend(await _broker_configs(request, node, cluster_id, b))
        except Exception:
            continue  # a broker that cannot answer: list the others
    return _list("KafkaBrokerConfigList", f"{_base(request)}/clusters/{cluster_id}/brokers/-/configs", data)


@router.get("/clusters/{cluster_id}/brokers/{broker_id}/configs", summary="List a broker's configs")
async def list_broker_configs(cluster_id: str, broker_id: int, request: Request):
    node = _cluster(request, cluster_id)
    data = await _broker_configs(request, node, cluster_id, broker_id)
    return _list("KafkaBrokerConfigList", f"{_base(request)}/clusters/{cluster_id}/brokers/{broker_id}/configs", data)


@router.get("/clusters/{cluster_id}/brokers/{broker_id}/configs/{name}", summary="Get one broker config")
async def get_broker_config(cluster_id: str, broker_id: int, name: str, request: Request):
    node = _cluster(request, cluster_id)
    for c in await _broker_configs(request, node, cluster_id, broker_id):
        if c["name"] == name:
            return JSONResponse(c)
    raise ConfigNotFoundError(f"Config {name} cannot be found.")


def _check_broker_config_name(node: Any, broker_id: int, name: str) -> None:
    _check_broker(node, broker_id)
    if name not in NODE_CONFIG.keys:
        raise ConfigNotFoundError(f"Config {name} cannot be found.")


@router.put("/clusters/{cluster_id}/brokers/{broker_id}/configs/{name}", status_code=204,
            summary="Set one broker config (static configs are refused: 400 40002)")
async def update_broker_config(cluster_id: str, broker_id: int, name: str, body: UpdateConfigRequest,
                               request: Request):
    node = _cluster(request, cluster_id)
    _check_broker_config_name(node, broker_id, name)
    raise _read_only([name], "broker")


@router.delete("/clusters/{cluster_id}/brokers/{broker_id}/configs/{name}", status_code=204,
               summary="Reset one broker config (static configs are refused: 400 40002)")
async def reset_broker_config(cluster_id: str, broker_id: int, name: str, request: Request):
    node = _cluster(request, cluster_id)
    _check_broker_config_name(node, broker_id, name)
    raise _read_only([name], "broker")


@router.post("/clusters/{cluster_id}/brokers/{broker_id}/configs:alter", status_code=204,
             summary="Set or delete several broker configs (static configs are refused: 400 40002)")
async def alter_broker_configs(cluster_id: str, broker_id: int, body: AlterConfigsRequest, request: Request):
    node = _cluster(request, cluster_id)
    _check_broker(node, broker_id)
    for e in body.data:
        _check_broker_config_name(node, broker_id, e.name)
    if body.data:
        raise _read_only([e.name for e in body.data], "broker")
    return Response(status_code=204)


# ---------------------------------------------------------------------------- cluster-wide broker configs


@router.get("/clusters/{cluster_id}/broker-configs", summary="List the cluster-wide dynamic broker configs")
async def list_cluster_configs(cluster_id: str, request: Request):
    _cluster(request, cluster_id)
    return _list("KafkaClusterConfigList", f"{_base(request)}/clusters/{cluster_id}/broker-configs", [])


@router.get("/clusters/{cluster_id}/broker-configs/{name}", summary="Get one cluster-wide dynamic broker config")
async def get_cluster_config(cluster_id: str, name: str, request: Request):
    _cluster(request, cluster_id)
    raise ConfigNotFoundError(f"Config {name} cannot be found.")


def _check_cluster_config_name(name: str) -> None:
    if name not in NODE_CONFIG.keys:
        raise ConfigNotFoundError(f"Config {name} cannot be found.")


@router.put("/clusters/{cluster_id}/broker-configs/{name}", status_code=204,
            summary="Set one cluster-wide broker config (refused: 400 40002, configs are static)")
async def update_cluster_config(cluster_id: str, name: str, body: UpdateConfigRequest, request: Request):
    _cluster(request, cluster_id)
    _check_cluster_config_name(name)
    raise _read_only([name], "cluster")


@router.delete("/clusters/{cluster_id}/broker-configs/{name}", status_code=204,
               summary="Reset one cluster-wide broker config (refused: 400 40002, configs are static)")
async def delete_cluster_config(cluster_id: str, name: str, request: Request):
    _cluster(request, cluster_id)
    _check_cluster_config_name(name)
    raise _read_only([name], "cluster")


@router.post("/clusters/{cluster_id}/broker-configs:alter", status_code=204,
             summary="Set or delete several cluster-wide broker configs (refused: 400 40002)")
async def alter_cluster_configs(cluster_id: str, body: AlterConfigsRequest, request: Request):
    _cluster(request, cluster_id)
    for e in body.data:
        _check_cluster_config_name(e.name)
    if body.data:
        raise _read_only([e.name for e in body.data], "cluster")
    return Response(status_code=204)


# ---------------------------------------------------------------------------- every topic's configs


@router.get("/clusters/{cluster_id}/topics/-/configs", summary="List the configs of every topic")
async def list_all_topic_configs(cluster_id: str, request: Request):
    node = _cluster(request, cluster_id)
    data = []
    for t in node.admin.topics():
        overrides = t.configs
        data.extend(_config_body(request, node, t.name, k, v, overrides) for k, v in node.admin.topic_config(t.name).items())
    return _list("KafkaTopicConfigList", f"{_base(request)}/clusters/{cluster_id}/topics/-/configs", data)


def _split(entries: list[AlterConfigEntry]) -> tuple[dict[str, str], list[str]]:
    set_configs = {e.name: e.value for e in entries
                   if (e.operation or "SET").upper() == "SET" and e.value is not None}
    delete = [e.name for e in entries if (e.operation or "").upper() == "DELETE"]
    return set_configs, delete  # type: ignore[return-value]


@router.post("/clusters/{cluster_id}/topics/-/configs:alter", status_code=204,
             summary="Set or delete configs of several topics; 207 with the topics that failed")
async def alter_all_topic_configs(cluster_id: str, body: AlterTopicsConfigsRequest, request: Request):
    node = _cluster(request, cluster_id)
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


