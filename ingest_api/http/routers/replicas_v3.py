"""Confluent REST Proxy v3: one replica of a partition, the replicas a broker holds, and a
partition's earliest / latest offsets (`.../partitions/{p}/offset`)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from lakelog.ingest_api.errors import BrokerNotFoundError, InvalidRequestError, NotFoundError
from lakelog.ingest_api.groups.assignors import TopicPartition
from lakelog.ingest_api.groups.consumer_fetch import partition_bounds
from lakelog.ingest_api.http.routers.v3_resources import base_url, cluster_node, list_body, resource_meta

router = APIRouter(prefix="/v3", tags=["replicas v3"])


class ReplicaNotFoundError(NotFoundError):
    """The broker holds no replica of that partition."""


def replica_body(request: Request, cluster_id: str, topic: str, partition: int, broker: int, leader: int,
                 isr: list[int]) -> dict[str, Any]:
    url = f"{base_url(request)}/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/replicas/{broker}"
    return {"kind": "KafkaReplica",
            "metadata": resource_meta(url, f"crn:///kafka={cluster_id}/topic={topic}/partition={partition}/replica={broker}"),
            "cluster_id": cluster_id, "topic_name": topic, "partition_id": partition, "broker_id": broker,
            "is_leader": broker == leader, "is_in_sync": broker in isr,
            "broker": {"related": f"{base_url(request)}/clusters/{cluster_id}/brokers/{broker}"}}


@router.get("/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/replicas/{broker_id}",
            summary="Describe one replica of a partition")
async def get_replica(cluster_id: str, topic_name: str, partition_id: int, broker_id: int, request: Request):
    node = cluster_node(request, cluster_id)
    st = node.partition_state(topic_name, partition_id)
    if broker_id not in st.replicas:
        raise ReplicaNotFoundError(f"Replica {broker_id} of {topic_name}-{partition_id} cannot be found.")
    return JSONResponse(replica_body(request, cluster_id, topic_name, partition_id, broker_id, st.leader, st.isr))


@router.get("/clusters/{cluster_id}/brokers/{broker_id}/partition-replicas",
            summary="List the partition replicas a broker holds")
async def list_broker_replicas(cluster_id: str, broker_id: int, request: Request):
    node = cluster_node(request, cluster_id)
    if broker_id not in node.image.brokers:
        raise BrokerNotFoundError(f"Broker {broker_id} cannot be found.")
    data = []
    for t in node.admin.topics():
        for p in range(t.partitions):
            st = node.partition_state(t.name, p)
            if broker_id in st.replicas:
                data.append(replica_body(request, cluster_id, t.name, p, broker_id, st.leader, st.isr))
    return list_body("KafkaReplicaList", f"{base_url(request)}/clusters/{cluster_id}/brokers/{broker_id}/partition-replicas",
                 data)


@router.get("/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/offset",
            summary="The earliest and latest offsets of a partition")
async def get_partition_offsets(cluster_id: str, topic_name: str, partition_id: int, request: Request,
                                offset_type: str | None = Query(None, description="earliest, latest or both")):
    node = cluster_node(request, cluster_id)
    node.partition_state(topic_name, partition_id)  # 404 for an unknown topic / partition
    if offset_type is not None and offset_type.lower() not in ("earliest", "latest", "earliest_and_latest"):
        raise InvalidRequestError("offset_type must be earliest, latest or earliest_and_latest")
    earliest, latest = await partition_bounds(node, TopicPartition(topic_name, partition_id))
    url = f"{base_url(request)}/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/offset"
    return JSONResponse({"kind": "KafkaPartitionWithOffsets",
                         "metadata": resource_meta(url, f"crn:///kafka={cluster_id}/topic={topic_name}"
                                                f"/partition={partition_id}/offset"),
                         "cluster_id": cluster_id, "topic_name": topic_name, "partition_id": partition_id,
                         "earliest_offset": earliest, "latest_offset": latest})
