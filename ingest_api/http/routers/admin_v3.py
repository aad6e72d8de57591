"""Confluent REST Proxy v3 admin: clusters, topics, topic configs, partitions, brokers."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from lakelog.infra.config import LOG_CONFIG
from lakelog.ingest_api.errors import BrokerNotFoundError, ConfigNotFoundError
from lakelog.ingest_api.http.routers.deps import get_node
from lakelog.ingest_api.http.routers.v3_resources import (
    MAX_PAGE_SIZE,
    AlterConfigEntry,
    base_url,
    cluster_node,
    list_body,
    page_of,
    resource_meta,
    topic_config_body,
    validate_topic_configs,
)
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


class AlterConfigsRequest(BaseModel):
    data: list[AlterConfigEntry] = Field(max_length=200)
    validate_only: bool = False


def _cluster_body(request: Request, node) -> dict[str, Any]:
    url = f"{base_url(request)}/clusters/{node.cluster_id}"
    return {"kind": "KafkaCluster", "metadata": resource_meta(url, f"crn:///kafka={node.cluster_id}"),
            "cluster_id": node.cluster_id,
            "controller": {"related": f"{url}/brokers/{node.controller_id}"},
            "acls": {"related": f"{url}/acls"}, "brokers": {"related": f"{url}/brokers"},
            "broker_configs": {"related": f"{url}/broker-configs"},
            "consumer_groups": {"related": f"{url}/consumer-groups"},
            "topics": {"related": f"{url}/topics"},
            "partition_reassignments": {"related": f"{url}/topics/-/partitions/-/reassignment"}}


def _topic_body(request: Request, node, t) -> dict[str, Any]:
    url = f"{base_url(request)}/clusters/{node.cluster_id}/topics/{t.name}"
    return {"kind": "KafkaTopic", "metadata": resource_meta(url, f"crn:///kafka={node.cluster_id}/topic={t.name}"),
            "cluster_id": node.cluster_id, "topic_name": t.name, "topic_id": t.topic_id,
            "is_internal": t.name.startswith("__"), "replication_factor": t.replication_factor,
            "partitions_count": t.partitions, "partitions": {"related": f"{url}/partitions"},
            "configs": {"related": f"{url}/configs"},
            "partition_reassignments": {"related": f"{url}/partitions/-/reassignment"}}


def _partition_body(request: Request, node, t, p: int) -> dict[str, Any]:
    url = f"{base_url(request)}/clusters/{node.cluster_id}/topics/{t.name}/partitions/{p}"
    st = node.admin.partition_state(t.name, p)
    return {"kind": "KafkaPartition",
            "metadata": resource_meta(url, f"crn:///kafka={node.cluster_id}/topic={t.name}/partition={p}"),
            "cluster_id": node.cluster_id, "topic_name": t.name, "partition_id": p,
            "leader": None if st.leader < 0 else {
                "related": f"{base_url(request)}/clusters/{node.cluster_id}/brokers/{st.leader}"},
            "replicas": {"related": f"{url}/replicas"}, "reassignment": {"related": f"{url}/reassignment"}}


def _broker_body(request: Request, node, b) -> dict[str, Any]:
    url = f"{base_url(request)}/clusters/{node.cluster_id}/brokers/{b.node_id}"
    return {"kind": "KafkaBroker", "metadata": resource_meta(url, f"crn:///kafka={node.cluster_id}/broker={b.node_id}"),
            "cluster_id": node.cluster_id, "broker_id": b.node_id, "host": b.host, "port": b.port,
            "rack": b.rack, "fenced": b.fenced, "configs": {"related": f"{url}/configs"},
            "partition_replicas": {"related": f"{url}/partition-replicas"}}


@router.get("/clusters", summary="List clusters (this one)")
async def list_clusters(request: Request):
    node = get_node(request)
    return list_body("KafkaClusterList", f"{base_url(request)}/clusters", [_cluster_body(request, node)])


@router.get("/clusters/{cluster_id}", summary="Describe the cluster")
async def get_cluster(cluster_id: str, request: Request):
    node = cluster_node(request, cluster_id)
    return JSONResponse(_cluster_body(request, node))


_PAGE_SIZE = Query(None, ge=1, le=MAX_PAGE_SIZE, description="items per page (absent: the whole list)")
_PAGE_TOKEN = Query(None, max_length=1024, description="the `page_token` of the previous page's `metadata.next`")


@router.get("/clusters/{cluster_id}/topics", summary="List topics")
async def list_topics(cluster_id: str, request: Request, page_size: int | None = _PAGE_SIZE,
                      page_token: str | None = _PAGE_TOKEN):
    node = cluster_node(request, cluster_id)
    topics = {t.name: t for t in node.admin.topics()}  # sorted by name
    page = page_of(list(topics), request, page_size, page_token)
    return list_body("KafkaTopicList", f"{base_url(request)}/clusters/{cluster_id}/topics",
                     [_topic_body(request, node, topics[name]) for name in page.keys], page.next_url)


@router.post("/clusters/{cluster_id}/topics", status_code=201, summary="Create a topic")
async def create_topic(cluster_id: str, body: CreateTopicRequest, request: Request):
    # Authorization before existence: a made-up cluster id must not answer differently from the real one.
    if not allowed(request, Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME):  # Kafka: cluster or topic
        authorize(request, Operation.CREATE, ResourceType.TOPIC, body.topic_name)
    node = cluster_node(request, cluster_id)
    configs = {c.name: c.value for c in body.configs if c.value is not None}
    t = await node.admin.create_topic(body.topic_name, body.partitions_count, body.replication_factor, configs,
                                      validate_only=body.validate_only)
    # Confluent: 200 for a dry run (validate_only), 201 when the topic was created.
    return JSONResponse(_topic_body(request, node, t), status_code=200 if body.validate_only else 201)


@router.get("/clusters/{cluster_id}/topics/{topic}", summary="Describe a topic")
async def get_topic(cluster_id: str, topic: str, request: Request):
    node = cluster_node(request, cluster_id)
    return JSONResponse(_topic_body(request, node, node.admin.topic(topic)))


@router.patch("/clusters/{cluster_id}/topics/{topic}", summary="Increase a topic's partition count")
async def update_partition_count(cluster_id: str, topic: str, body: UpdatePartitionCountRequest, request: Request):
    node = cluster_node(request, cluster_id)
    return JSONResponse(_topic_body(request, node, await node.admin.create_partitions(topic, body.partitions_count)))


@router.delete("/clusters/{cluster_id}/topics/{topic}", status_code=204, summary="Delete a topic")
async def delete_topic(cluster_id: str, topic: str, request: Request):
    node = cluster_node(request, cluster_id)
    await node.admin.delete_topic(topic)
    return Response(status_code=204)


@router.get("/clusters/{cluster_id}/topics/{topic}/configs", summary="List a topic's configs")
async def list_topic_configs(cluster_id: str, topic: str, request: Request):
    node = cluster_node(request, cluster_id)
    overrides = node.admin.topic(topic).configs
    data = [topic_config_body(request, node, topic, k, v, overrides) for k, v in node.admin.topic_config(topic).items()]
    return list_body("KafkaTopicConfigList", f"{base_url(request)}/clusters/{cluster_id}/topics/{topic}/configs", data)


@router.get("/clusters/{cluster_id}/topics/{topic}/configs/{name}", summary="Get one topic config")
async def get_topic_config(cluster_id: str, topic: str, name: str, request: Request):
    node = cluster_node(request, cluster_id)
    values = node.admin.topic_config(topic)
    if name not in values:
        raise ConfigNotFoundError(f"Config {name} not found.")
    return JSONResponse(topic_config_body(request, node, topic, name, values[name], node.admin.topic(topic).configs))


@router.put("/clusters/{cluster_id}/topics/{topic}/configs/{name}", status_code=204, summary="Set one topic config")
async def update_topic_config(cluster_id: str, topic: str, name: str, body: UpdateConfigRequest, request: Request):
    node = cluster_node(request, cluster_id)
    if name not in LOG_CONFIG.keys:
        raise ConfigNotFoundError(f"Config {name} not found.")
    await node.admin.alter_topic_configs(topic, {name: body.value})
    return Response(status_code=204)


@router.delete("/clusters/{cluster_id}/topics/{topic}/configs/{name}", status_code=204,
               summary="Reset one topic config to its default")
async def reset_topic_config(cluster_id: str, topic: str, name: str, request: Request):
    node = cluster_node(request, cluster_id)
    if name not in LOG_CONFIG.keys:
        raise ConfigNotFoundError(f"Config {name} not found.")
    await node.admin.alter_topic_configs(topic, {}, delete=[name])
    return Response(status_code=204)


@router.post("/clusters/{cluster_id}/topics/{topic}/configs:alter", status_code=204,
             summary="Set or delete several topic configs at once")
async def alter_topic_configs(cluster_id: str, topic: str, body: AlterConfigsRequest, request: Request):
    node = cluster_node(request, cluster_id)
    set_configs = {e.name: e.value for e in body.data if (e.operation or "SET").upper() == "SET" and e.value is not None}
    delete = [e.name for e in body.data if (e.operation or "").upper() == "DELETE"]
    if body.validate_only:  # Confluent: a dry run, every check and no change
        validate_topic_configs(node, topic, set_configs, delete)
        return Response(status_code=204)
    await node.admin.alter_topic_configs(topic, set_configs, delete=delete)
    return Response(status_code=204)


@router.get("/clusters/{cluster_id}/topics/{topic}/partitions", summary="List a topic's partitions")
async def list_partitions(cluster_id: str, topic: str, request: Request, page_size: int | None = _PAGE_SIZE,
                          page_token: str | None = _PAGE_TOKEN):
    node = cluster_node(request, cluster_id)
    t = node.admin.topic(topic)
    page = page_of(range(t.partitions), request, page_size, page_token)
    return list_body("KafkaPartitionList", f"{base_url(request)}/clusters/{cluster_id}/topics/{topic}/partitions",
                     [_partition_body(request, node, t, p) for p in page.keys], page.next_url)


@router.get("/clusters/{cluster_id}/topics/{topic}/partitions/{partition}", summary="Describe a partition")
async def get_partition(cluster_id: str, topic: str, partition: int, request: Request):
    node = cluster_node(request, cluster_id)
    node.admin.partition_state(topic, partition)
    return JSONResponse(_partition_body(request, node, node.admin.topic(topic), partition))


@router.get("/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/replicas",
            summary="List a partition's replicas")
async def list_replicas(cluster_id: str, topic: str, partition: int, request: Request):
    node = cluster_node(request, cluster_id)
    st = node.admin.partition_state(topic, partition)
    replicas = st.replicas
    url = f"{base_url(request)}/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/replicas"
    data = [{"kind": "KafkaReplica",
             "metadata": resource_meta(f"{url}/{b}", f"crn:///kafka={cluster_id}/topic={topic}/partition={partition}/replica={b}"),
             "cluster_id": cluster_id, "topic_name": topic, "partition_id": partition, "broker_id": b,
             "is_leader": b == st.leader, "is_in_sync": b in st.isr,
             "broker": {"related": f"{base_url(request)}/clusters/{cluster_id}/brokers/{b}"}} for b in replicas]
    return list_body("KafkaReplicaList", url, data)


@router.get("/clusters/{cluster_id}/brokers", summary="List brokers")
async def list_brokers(cluster_id: str, request: Request):
    node = cluster_node(request, cluster_id)
    return list_body("KafkaBrokerList", f"{base_url(request)}/clusters/{cluster_id}/brokers",
                 [_broker_body(request, node, b) for b in node.admin.brokers()])


@router.get("/clusters/{cluster_id}/brokers/{broker_id}", summary="Describe a broker")
async def get_broker(cluster_id: str, broker_id: int, request: Request):
    node = cluster_node(request, cluster_id)
    for b in node.admin.brokers():
        if b.node_id == broker_id:
            return JSONResponse(_broker_body(request, node, b))
    raise BrokerNotFoundError(f"Broker {broker_id} not found.")
