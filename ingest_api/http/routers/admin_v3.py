"""Confluent REST Proxy v3 admin: clusters, topics, topic configs, partitions, brokers."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from lakelog.infra.config import LOG_CONFIG
from lakelog.ingest_api.errors import BrokerNotFoundError, ClusterNotFoundError, ConfigNotFoundError
from lakelog.ingest_api.http.routers.deps import get_node
from lakelog.ingest_api.security.acl import CLUSTER_NAME, Operation, ResourceType
from lakelog.ingest_api.http.security_middleware import allowed, authorize

router = APIRouter(prefix="/v3", tags=["admin v3"])


class ConfigEntry(BaseModel):
    name: str = Field(min_length=1, max_length=255)
    value: str | None = Field(default=None, max_length=4096)


class CreateTopicRequest(BaseModel):
    topic_name: str = Field(min_length=1, max_length=249)
    partitions_count: int | None = Field(default=None, ge=1)
    replication_factor: int | None = Field(default=None, ge=1)
    configs: list[ConfigEntry] = Field(default_factory=list, max_length=200)
    validate_only: bool = False


class UpdatePartitionCountRequest(BaseModel):
    partitions_count: int = Field(ge=1, le=2**31 - 1)


class UpdateConfigRequest(BaseModel):
    value: str = Field(max_length=4096)


class AlterConfigEntry(BaseModel):
    name: str = Field(min_length=1, max_length=255)
    value: str | None = Field(default=None, max_length=4096)
    operation: str | None = Field(default=None, pattern="^(SET|DELETE|set|delete)$")


class AlterConfigsRequest(BaseModel):
    data: list[AlterConfigEntry] = Field(max_length=200)
    validate_only: bool = False


def validate_topic_configs(node: Any, topic: str, set_configs: dict[str, str], delete: list[str]) -> None:
    """Every check an alter would make, changing nothing (validate_only)."""
    t = node.admin.topic(topic)
    for name in [*set_configs, *delete]:
        if name not in LOG_CONFIG.keys:
            raise ConfigNotFoundError(f"Config {name} cannot be found.")
    merged = {k: v for k, v in t.configs.items() if k not in delete}
    merged.update(set_configs)
    node.config.log_config(merged)  # raises on a bad value


def _base(request: Request) -> str:
    return str(request.base_url).rstrip("/") + "/v3"


def _cluster(request: Request, cluster_id: str):
    node = get_node(request)
    if cluster_id != node.cluster_id:
        raise ClusterNotFoundError(f"Cluster {cluster_id} not found.")
    return node


def _meta(self_url: str, resource: str) -> dict[str, Any]:
    return {"self": self_url, "resource_name": resource}


def _cluster_body(request: Request, node) -> dict[str, Any]:
    url = f"{_base(request)}/clusters/{node.cluster_id}"
    return {"kind": "KafkaCluster", "metadata": _meta(url, f"crn:///kafka={node.cluster_id}"),
            "cluster_id": node.cluster_id,
            "controller": {"related": f"{url}/brokers/{node.controller_id}"},
            "acls": {"related": f"{url}/acls"}, "brokers": {"related": f"{url}/brokers"},
            "broker_configs": {"related": f"{url}/broker-configs"},
            "consumer_groups": {"related": f"{url}/consumer-groups"},
            "topics": {"related": f"{url}/topics"},
            "partition_reassignments": {"related": f"{url}/topics/-/partitions/-/reassignment"}}


def _topic_body(request: Request, node, t) -> dict[str, Any]:
    url = f"{_base(request)}/clusters/{node.cluster_id}/topics/{t.name}"
    return {"kind": "KafkaTopic", "metadata": _meta(url, f"crn:///kafka={node.cluster_id}/topic={t.name}"),
            "cluster_id": node.cluster_id, "topic_name": t.name, "topic_id": t.topic_id,
            "is_internal": t.name.startswith("__"), "replication_factor": t.replication_factor,
            "partitions_count": t.partitions, "partitions": {"related": f"{url}/partitions"},
            "configs": {"related": f"{url}/configs"},
            "partition_reassignments": {"related": f"{url}/partitions/-/reassignment"}}


def _config_body(request: Request, node, topic: str, name: str, value: Any, overrides: dict) -> dict[str, Any]:
    url = f"{_base(request)}/clusters/{node.cluster_id}/topics/{topic}/configs/{name}"
    is_default = name not in overrides
    return {"kind": "KafkaTopicConfig",
            "metadata": _meta(url, f"crn:///kafka={node.cluster_id}/topic={topic}/config={name}"),
            "cluster_id": node.cluster_id, "topic_name": topic, "name": name,
            "value": None if value is None else (str(value).lower() if isinstance(value, bool) else str(value)),
            "is_default": is_default, "is_read_only": False, "is_sensitive": False,
            "source": "DEFAULT_CONFIG" if is_default else "DYNAMIC_TOPIC_CONFIG", "synonyms": []}


def _partition_body(request: Request, node, t, p: int) -> dict[str, Any]:
    url = f"{_base(request)}/clusters/{node.cluster_id}/topics/{t.name}/partitions/{p}"
    st = node.admin.partition_state(t.name, p)
    return {"kind": "KafkaPartition",
            "metadata": _meta(url, f"crn:///kafka={node.cluster_id}/topic={t.name}/partition={p}"),
            "cluster_id": node.cluster_id, "topic_name": t.name, "partition_id": p,
            "leader": None if st.leader < 0 else {
                "related": f"{_base(request)}/clusters/{node.cluster_id}/brokers/{st.leader}"},
            "replicas": {"related": f"{url}/replicas"}, "reassignment": {"related": f"{url}/reassignment"}}


def _broker_body(request: Request, node, b) -> dict[str, Any]:
    url = f"{_base(request)}/clusters/{node.cluster_id}/brokers/{b.node_id}"
    return {"kind": "KafkaBroker", "metadata": _meta(url, f"crn:///kafka={node.cluster_id}/broker={b.node_id}"),
            "cluster_id": node.cluster_id, "broker_id": b.node_id, "host": b.host, "port": b.port,
            "rack": b.rack, "fenced": b.fenced, "configs": {"related": f"{url}/configs"},
            "partition_replicas": {"related": f"{url}/partition-replicas"}}


def _list(kind: str, self_url: str, data: list) -> JSONResponse:
    return JSONResponse({"kind": kind, "metadata": {"self": self_url, "next": None}, "data": data})


@router.get("/clusters", summary="List clusters (this one)")
async def list_clusters(request: Request):
    node = get_node(request)
    return _list("KafkaClusterList", f"{_base(request)}/clusters", [_cluster_body(request, node)])


@router.get("/clusters/{cluster_id}", summary="Describe the cluster")
async def get_cluster(cluster_id: str, request: Request):
    node = _cluster(request, cluster_id)
    return JSONResponse(_cluster_body(request, node))


@router.get("/clusters/{cluster_id}/topics", summary="List topics")
async def list_topics(cluster_id: str, request: Request):
    node = _cluster(request, cluster_id)
    return _list("KafkaTopicList", f"{_base(request)}/clusters/{cluster_id}/topics",
                 [_topic_body(request, node, t) for t in node.admin.topics()])


@router.post("/clusters/{cluster_id}/topics", status_code=201, summary="Create a topic")
async def create_topic(cluster_id: str, body: CreateTopicRequest, request: Request):
    # Authorization before existence: a made-up cluster id must not answer differently from the real one.
    if not allowed(request, Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME):  # Kafka: cluster or topic
        authorize(request, Operation.CREATE, ResourceType.TOPIC, body.topic_name)
    node = _cluster(request, cluster_id)
    configs = {c.name: c.value for c in body.configs if c.value is not None}
    t = await node.admin.create_topic(body.topic_name, body.partitions_count, body.replication_factor, configs,
                                      validate_only=body.validate_only)
    # Confluent: 200 for a dry run (validate_only), 201 when the topic was created.
    return JSONResponse(_topic_body(request, node, t), status_code=200 if body.validate_only else 201)


@router.get("/clusters/{cluster_id}/topics/{topic}", summary="Describe a topic")
async def get_topic(cluster_id: str, topic: str, request: Request):
    node = _cluster(request, cluster_id)
    return JSONResponse(_topic_body(request, node, node.admin.topic(topic)))


@router.patch("/clusters/{cluster_id}/topics/{topic}", summary="Increase a topic's partition count")
async def update_partition_count(cluster_id: str, topic: str, body: UpdatePartitionCountRequest, request: Request):
    node = _cluster(request, cluster_id)
    return JSONResponse(_topic_body(request, node, await node.admin.create_partitions(topic, body.partitions_count)))


@router.delete("/clusters/{cluster_id}/topics/{topic}", status_code=204, summary="Delete a topic")
async def delete_topic(cluster_id: str, topic: str, request: Request):
    node = _cluster(request, cluster_id)
    await node.admin.delete_topic(topic)
    return Response(status_code=204)


@router.get("/clusters/{cluster_id}/topics/{topic}/configs", summary="List a topic's configs")
async def list_topic_configs(cluster_id: str, topic: str, request: Request):
    node = _cluster(request, cluster_id)
    overrides = node.admin.topic(topic).configs
    data = [_config_body(request, node, topic, k, v, overrides) for k, v in node.admin.topic_config(topic).items()]
    return _list("KafkaTopicConfigList", f"{_base(request)}/clusters/{cluster_id}/topics/{topic}/configs", data)


@router.get("/clusters/{cluster_id}/topics/{topic}/configs/{name}", summary="Get one topic config")
async def get_topic_config(cluster_id: str, topic: str, name: str, request: Request):
    node = _cluster(request, cluster_id)
    values = node.admin.topic_config(topic)
    if name not in values:
        raise ConfigNotFoundError(f"Config {name} not found.")
    return JSONResponse(_config_body(request, node, topic, name, values[name], node.admin.topic(topic).configs))


@router.put("/clusters/{cluster_id}/topics/{topic}/configs/{name}", status_code=204, summary="Set one topic config")
async def update_topic_config(cluster_id: str, topic: str, name: str, body: UpdateConfigRequest, request: Request):
    node = _cluster(request, cluster_id)
    if name not in LOG_CONFIG.keys:
        raise ConfigNotFoundError(f"Config {name} not found.")
    await node.admin.alter_topic_configs(topic, {name: body.value})
    return Response(status_code=204)


@router.delete("/clusters/{cluster_id}/topics/{topic}/configs/{name}", status_code=204,
               summary="Reset one topic config to its default")
async def reset_topic_config(cluster_id: str, topic: str, name: str, request: Request):
    node = _cluster(request, cluster_id)
    if name not in LOG_CONFIG.keys:
        raise ConfigNotFoundError(f"Config {name} not found.")
    await node.admin.alter_topic_configs(topic, {}, delete=[name])
    return Response(status_code=204)


@router.post("/clusters/{cluster_id}/topics/{topic}/configs:alter", status_code=204,
             summary="Set or delete several topic configs at once")
async def alter_topic_configs(cluster_id: str, topic: str, body: AlterConfigsRequest, request: Request):
    node = _cluster(request, cluster_id)
    set_configs = {e.name: e.value for e in body.data if (e.operation or "SET").upper() == "SET" and e.value is not None}
    delete = [e.name for e in body.data if (e.operation or "").upper() == "DELETE"]
    if body.validate_only:  # Confluent: a dry run, every check and no change
        validate_topic_configs(node, topic, set_configs, delete)
        return Response(status_code=204)
    await node.admin.alter_topic_configs(topic, set_configs, delete=delete)
    return Response(status_code=204)


@router.get("/clusters/{cluster_id}/topics/{topic}/partitions", summary="List a topic's partitions")
async def list_partitions(cluster_id: str, topic: str, request: Request):
    node = _cluster(request, cluster_id)
    t = node.admin.topic(topic)
    return _list("KafkaPartitionList", f"{_base(request)}/clusters/{cluster_id}/topics/{topic}/partitions",
                 [_partition_body(request, node, t, p) for p in range(t.partitions)])


@router.get("/clusters/{cluster_id}/topics/{topic}/partitions/{partition}", summary="Describe a partition")
async def get_partition(cluster_id: str, topic: str, partition: int, request: Request):
    node = _cluster(request, cluster_id)
    node.admin.partition_state(topic, partition)
    return JSONResponse(_partition_body(request, node, node.admin.topic(topic), partition))


@router.get("/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/replicas",
            summary="List a partition's replicas")
async def list_replicas(cluster_id: str, topic: str, partition: int, request: Request):
    node = _cluster(request, cluster_id)
    st = node.admin.partition_state(topic, partition)
    replicas = st.replicas
    url = f"{_base(request)}/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/replicas"
    data = [{"kind": "KafkaReplica",
             "metadata": _meta(f"{url}/{b}", f"crn:///kafka={cluster_id}/topic={topic}/partition={partition}/replica={b}"),
             "cluster_id": cluster_id, "topic_name": topic, "partition_id": partition, "broker_id": b,
             "is_leader": b == st.leader, "is_in_sync": b in st.isr,
             "broker": {"related": f"{_base(request)}/clusters/{cluster_id}/brokers/{b}"}} for b in replicas]
    return _list("KafkaReplicaList", url, data)


@router.get("/clusters/{cluster_id}/brokers", summary="List brokers")
async def list_brokers(cluster_id: str, request: Request):
    node = _cluster(request, cluster_id)
    return _list("KafkaBrokerList", f"{_base(request)}/clusters/{cluster_id}/brokers",
                 [_broker_body(request, node, b) for b in node.admin.brokers()])


@router.get("/clusters/{cluster_id}/brokers/{broker_id}", summary="Describe a broker")
async def get_broker(cluster_id: str, broker_id: int, request: Request):
    node = _cluster(request, cluster_id)
    for b in node.admin.brokers():
        if b.node_id == broker_id:
            return JSONResponse(_broker_body(request, node, b))
    raise BrokerNotFoundError(f"Broker {broker_id} not found.")
