"""Confluent REST Proxy v3 consumer groups (read-only): groups, consumers, assignments, lags and
the lag summary, under `/v3/clusters/{c}/consumer-groups`. Thin: `ingest_api/groups/lag.py`
gathers the group from its coordinator and the end offsets from the partition leaders."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from lakelog.infra.errors import LakelogError
from lakelog.ingest_api.groups.consumer_config import validate_name
from lakelog.ingest_api.groups.errors import ConsumerInstanceNotFoundError
from lakelog.ingest_api.groups.lag import STATES, GroupLagView, PartitionLag, describe
from lakelog.ingest_api.errors import NotFoundError
from lakelog.ingest_api.http.routers.v3_resources import base_url, cluster_node, list_body, resource_meta

router = APIRouter(prefix="/v3", tags=["consumer groups v3"])


class AssignmentNotFoundError(NotFoundError):
    """The consumer is not assigned that partition."""


class LagNotFoundError(NotFoundError):
    """The group has no committed offset for that partition."""


def _group_url(request: Request, cluster_id: str, group: str) -> str:
    return f"{base_url(request)}/clusters/{cluster_id}/consumer-groups/{group}"


def _group_body(request: Request, cluster_id: str, v: GroupLagView) -> dict[str, Any]:
    url = _group_url(request, cluster_id, v.group_id)
    return {"kind": "KafkaConsumerGroup",
            "metadata": resource_meta(url, f"crn:///kafka={cluster_id}/consumer-group={v.group_id}"),
            "cluster_id": cluster_id, "consumer_group_id": v.group_id, "is_simple": v.is_simple,
            "partition_assignor": v.protocol or "", "state": v.state, "type": "CLASSIC",
            "is_mixed_consumer_group": False,
            "coordinator": {"related": f"{base_url(request)}/clusters/{cluster_id}/brokers/{v.coordinator}"},
            "consumers": {"related": f"{url}/consumers"}, "lag_summary": {"related": f"{url}/lag-summary"}}


def _consumer_body(request: Request, cluster_id: str, group: str, m: dict[str, Any]) -> dict[str, Any]:
    url = f"{_group_url(request, cluster_id, group)}/consumers/{m['member_id']}"
    return {"kind": "KafkaConsumer",
            "metadata": resource_meta(url, f"crn:///kafka={cluster_id}/consumer-group={group}/consumer={m['member_id']}"),
            "cluster_id": cluster_id, "consumer_group_id": group, "consumer_id": m["member_id"],
            "instance_id": None, "client_id": m["client_id"], "assignments": {"related": f"{url}/assignments"}}


def _assignment_body(request: Request, cluster_id: str, group: str, member_id: str, topic: str,
                     partition: int) -> dict[str, Any]:
    url = (f"{_group_url(request, cluster_id, group)}/consumers/{member_id}/assignments/{topic}"
           f"/partitions/{partition}")
    return {"kind": "KafkaConsumerAssignment",
            "metadata": resource_meta(url, f"crn:///kafka={cluster_id}/consumer-group={group}/consumer={member_id}"
                                   f"/assignment={topic}/partition={partition}"),
            "cluster_id": cluster_id, "consumer_group_id": group, "consumer_id": member_id,
            "topic_name": topic, "partition_id": partition,
            "partition": {"related": f"{base_url(request)}/clusters/{cluster_id}/topics/{topic}/partitions/{partition}"},
            "lag": {"related": f"{_group_url(request, cluster_id, group)}/lags/{topic}/partitions/{partition}"}}


def _lag_body(request: Request, cluster_id: str, group: str, lag: PartitionLag) -> dict[str, Any]:
    url = f"{_group_url(request, cluster_id, group)}/lags/{lag.topic}/partitions/{lag.partition}"
    return {"kind": "KafkaConsumerLag",
            "metadata": resource_meta(url, f"crn:///kafka={cluster_id}/consumer-group={group}/lag={lag.topic}"
                                   f"/partition={lag.partition}"),
            "cluster_id": cluster_id, "consumer_group_id": group, "topic_name": lag.topic,
            "partition_id": lag.partition, "current_offset": lag.current_offset,
            "log_end_offset": lag.log_end_offset, "lag": lag.lag, "consumer_id": lag.consumer_id,
            "instance_id": None, "client_id": lag.client_id}


async def _view(request: Request, cluster_id: str, group: str, *, with_lag: bool = True) -> GroupLagView:
    node = cluster_node(request, cluster_id)
    validate_name(group, "group")
    return await describe(node, request.app.state.node.groups, group, with_lag=with_lag)


def _member(v: GroupLagView, consumer_id: str) -> dict[str, Any]:
    m = v.member(consumer_id)
    if m is None:
        raise ConsumerInstanceNotFoundError(f"Consumer {consumer_id} cannot be found.")
    return m


@router.get("/clusters/{cluster_id}/consumer-groups", summary="List consumer groups")
async def list_consumer_groups(cluster_id: str, request: Request):
    node = cluster_node(request, cluster_id)
    groups = request.app.state.node.groups
    listed = await groups.list_all_groups()

    async def one(group_id: str) -> GroupLagView | None:
        try:
            return await describe(node, groups, group_id, with_lag=False)
        except LakelogError:
            return None  # gone meanwhile, or its coordinator is moving

    views = await asyncio.gather(*(one(g["group_id"]) for g in listed))
    data = [_group_body(request, cluster_id, v) for v in views if v is not None]
    return list_body("KafkaConsumerGroupList", f"{base_url(request)}/clusters/{node.cluster_id}/consumer-groups", data)


@router.get("/clusters/{cluster_id}/consumer-groups/{consumer_group_id}", summary="Describe a consumer group")
async def get_consumer_group(cluster_id: str, consumer_group_id: str, request: Request):
    v = await _view(request, cluster_id, consumer_group_id, with_lag=False)
    return JSONResponse(_group_body(request, cluster_id, v))


@router.get("/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/consumers", summary="List a group's consumers")
async def list_consumers(cluster_id: str, consumer_group_id: str, request: Request):
    v = await _view(request, cluster_id, consumer_group_id, with_lag=False)
    return list_body("KafkaConsumerList", f"{_group_url(request, cluster_id, consumer_group_id)}/consumers",
                 [_consumer_body(request, cluster_id, consumer_group_id, m) for m in v.members])


@router.get("/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/consumers/{consumer_id}",
            summary="Describe a consumer of a group")
async def get_consumer(cluster_id: str, consumer_group_id: str, consumer_id: str, request: Request):
    v = await _view(request, cluster_id, consumer_group_id, with_lag=False)
    return JSONResponse(_consumer_body(request, cluster_id, consumer_group_id, _member(v, consumer_id)))


@router.get("/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/consumers/{consumer_id}/assignments",
            summary="List a consumer's assigned partitions")
async def list_consumer_assignments(cluster_id: str, consumer_group_id: str, consumer_id: str, request: Request):
    v = await _view(request, cluster_id, consumer_group_id, with_lag=False)
    m = _member(v, consumer_id)
    url = f"{_group_url(request, cluster_id, consumer_group_id)}/consumers/{consumer_id}/assignments"
    return list_body("KafkaConsumerAssignmentList", url,
                 [_assignment_body(request, cluster_id, consumer_group_id, consumer_id, tp.topic, tp.partition)
                  for tp in sorted(m["assignment"])])


@router.get("/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/consumers/{consumer_id}/assignments"
            "/{topic_name}/partitions/{partition_id}", summary="Describe one assignment of a consumer")
async def get_consumer_assignment(cluster_id: str, consumer_group_id: str, consumer_id: str, topic_name: str,
                                  partition_id: int, request: Request):
    v = await _view(request, cluster_id, consumer_group_id, with_lag=False)
    m = _member(v, consumer_id)
    if not any(tp.topic == topic_name and tp.partition == partition_id for tp in m["assignment"]):
        raise AssignmentNotFoundError(f"Consumer assignment {topic_name}-{partition_id} cannot be found.")
    return JSONResponse(_assignment_body(request, cluster_id, consumer_group_id, consumer_id, topic_name, partition_id))


@router.get("/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/lags",
            summary="List the lag of each partition the group committed offsets for")
async def list_consumer_lags(cluster_id: str, consumer_group_id: str, request: Request):
    v = await _view(request, cluster_id, consumer_group_id)
    return list_body("KafkaConsumerLagList", f"{_group_url(request, cluster_id, consumer_group_id)}/lags",
                 [_lag_body(request, cluster_id, consumer_group_id, lag) for lag in v.lags])


@router.get("/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/lags/{topic_name}/partitions/{partition_id}",
            summary="The group's lag on one partition")
async def get_consumer_lag(cluster_id: str, consumer_group_id: str, topic_name: str, partition_id: int,
                           request: Request):
    v = await _view(request, cluster_id, consumer_group_id)
    for lag in v.lags:
        if lag.topic == topic_name and lag.partition == partition_id:
            return JSONResponse(_lag_body(request, cluster_id, consumer_group_id, lag))
    raise LagNotFoundError(f"Consumer lag for {topic_name}-{partition_id} cannot be found.")


@router.get("/clusters/{cluster_id}/consumer-groups/{consumer_group_id}/lag-summary",
            summary="The group's largest and total lag")
async def get_lag_summary(cluster_id: str, consumer_group_id: str, request: Request):
    v = await _view(request, cluster_id, consumer_group_id)
    url = _group_url(request, cluster_id, consumer_group_id)
    top = max(v.lags, key=lambda lag: lag.lag, default=None)
    body: dict[str, Any] = {
        "kind": "KafkaConsumerGroupLagSummary",
        "metadata": resource_meta(f"{url}/lag-summary", f"crn:///kafka={cluster_id}/consumer-group={consumer_group_id}"
                                                "/lag-summary"),
        "cluster_id": cluster_id, "consumer_group_id": consumer_group_id,
        "max_lag_consumer_id": top.consumer_id if top else "", "max_lag_instance_id": None,
        "max_lag_client_id": top.client_id if top else "", "max_lag_topic_name": top.topic if top else "",
        "max_lag_partition_id": top.partition if top else 0, "max_lag": top.lag if top else 0,
        "total_lag": sum(lag.lag for lag in v.lags),
        "max_lag_consumer": {"related": f"{url}/consumers/{top.consumer_id if top else ''}"},
        "max_lag_partition": {"related": f"{base_url(request)}/clusters/{cluster_id}/topics/"
                                         f"{top.topic if top else ''}/partitions/{top.partition if top else 0}"}}
    return JSONResponse(body)
