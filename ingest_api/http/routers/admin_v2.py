"""Confluent REST Proxy v2 metadata: `/topics`, `/topics/{topic}`, partitions, `/brokers`."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from lakelog.ingest_api.records.formats import V2
from lakelog.ingest_api.http.routers.deps import get_node

router = APIRouter(tags=["admin v2"])


def _partition_v2(node, topic, p: int) -> dict:
    st = node.admin.partition_state(topic.name, p)
    return {"partition": p, "leader": st.leader,
            "replicas": [{"broker": b, "leader": b == st.leader, "in_sync": b in st.isr} for b in st.replicas]}


@router.get("/topics", summary="List topic names")
async def list_topics(request: Request):
    node = get_node(request)
    return JSONResponse([t.name for t in node.admin.topics()], media_type=V2)


@router.get("/topics/{topic}", summary="Describe a topic")
async def get_topic(topic: str, request: Request):
    node = get_node(request)
    t = node.admin.topic(topic)
    configs = {k: str(v) for k, v in node.admin.topic_config(topic).items()}
    return JSONResponse({"name": t.name, "configs": configs,
                         "partitions": [_partition_v2(node, t, p) for p in range(t.partitions)]}, media_type=V2)


@router.get("/topics/{topic}/partitions", summary="List a topic's partitions")
async def list_partitions(topic: str, request: Request):
    node = get_node(request)
    t = node.admin.topic(topic)
    return JSONResponse([_partition_v2(node, t, p) for p in range(t.partitions)], media_type=V2)


@router.get("/topics/{topic}/partitions/{partition}", summary="Describe a partition")
async def get_partition(topic: str, partition: int, request: Request):
    node = get_node(request)
    node.admin.partition_state(topic, partition)  # 404 for an unknown partition
    return JSONResponse(_partition_v2(node, node.admin.topic(topic), partition), media_type=V2)


@router.get("/brokers", summary="List broker ids")
async def list_brokers(request: Request):
    node = get_node(request)
    return JSONResponse({"brokers": [b.node_id for b in node.admin.brokers()]}, media_type=V2)
