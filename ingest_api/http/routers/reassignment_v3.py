"""Confluent REST Proxy v3: partition reassignments (`.../partitions/.../reassignment`).

The three GETs are Confluent's (`listKafkaAllReassignments`, `searchKafkaReassignmentsByTopic`,
`getKafkaReassignment`), with its shapes: `KafkaReassignment` with `adding_replicas`,
`removing_replicas` and a `replicas` relationship; a topic that does not exist lists nothing (as
Confluent filters); a partition not being moved is 404. Changing reassignments is Lakelog's
addition, in the same style (Kafka's AlterPartitionReassignments underneath):

  PATCH  .../topics/{t}/partitions/{p}/reassignment   {"replicas": [3, 1, 2]}   202, the reassignment
  DELETE .../topics/{t}/partitions/{p}/reassignment                             204 (cancel; 404 if none)
  POST   .../topics/-/partitions/-/reassignment:alter
         {"data": [{"topic_name": t, "partition_id": p, "replicas": [...] | null}, ...]}
                                                    202, all or none; null cancels that partition

  POST   .../topics/-/partitions/-/preferred-leader:elect
         {"data": [{"topic_name": t, "partition_id": p}, ...]}
                                                    200: leadership to each partition's first replica
                                                    where it is in sync (Kafka's ElectLeaders, PREFERRED)
  DELETE .../brokers/{b}                           204: unregister a stopped broker holding no replica
                                                    (409 while it runs or holds replicas)

Reading needs DESCRIBE on the cluster, changing ALTER on the cluster (Kafka's ACLs for these APIs).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from lakelog.ingest_api.cluster.errors import BrokerInUseError
from lakelog.ingest_api.errors import BrokerNotFoundError
from lakelog.ingest_api.broker.reassignments import MAX_REASSIGNMENTS_PER_REQUEST, Reassignment, ReassignmentService
from lakelog.ingest_api.http.routers.v3_resources import base_url, cluster_node, list_body, resource_meta

router = APIRouter(prefix="/v3", tags=["reassignments v3"])

MAX_TARGET_REPLICAS = 64


class AlterReassignmentRequest(BaseModel):
    replicas: list[int] = Field(min_length=1, max_length=MAX_TARGET_REPLICAS)


class AlterReassignmentEntry(BaseModel):
    topic_name: str = Field(min_length=1, max_length=249)
    partition_id: int = Field(ge=0, le=2**31 - 1)
    replicas: list[int] | None = Field(default=None, max_length=MAX_TARGET_REPLICAS)


class AlterReassignmentsRequest(BaseModel):
    data: list[AlterReassignmentEntry] = Field(max_length=MAX_REASSIGNMENTS_PER_REQUEST)


class ElectPartition(BaseModel):
    topic_name: str = Field(min_length=1, max_length=249)
    partition_id: int = Field(ge=0, le=2**31 - 1)


class ElectLeadersRequest(BaseModel):
    data: list[ElectPartition] = Field(max_length=MAX_REASSIGNMENTS_PER_REQUEST)


def reassignment_body(request: Request, cluster_id: str, r: Reassignment) -> dict[str, Any]:
    url = f"{base_url(request)}/clusters/{cluster_id}/topics/{r.topic}/partitions/{r.partition}"
    return {"kind": "KafkaReassignment",
            "metadata": resource_meta(f"{url}/reassignment",
                              f"crn:///kafka={cluster_id}/topic={r.topic}/partition={r.partition}/reassignment"),
            "cluster_id": cluster_id, "topic_name": r.topic, "partition_id": r.partition,
            "adding_replicas": list(r.adding), "removing_replicas": list(r.removing),
            "replicas": {"related": f"{url}/replicas"}}


def _service(request: Request, cluster_id: str) -> tuple[Any, ReassignmentService]:
    node = cluster_node(request, cluster_id)
    return node, ReassignmentService(node.admin)


def _current(request: Request, cluster_id: str, svc: ReassignmentService, topic: str, partition: int) -> dict:
    """The partition's reassignment now; empty lists when it already completed (or moved nothing)."""
    found = [r for r in svc.list(topic) if r.partition == partition]
    if found:
        return reassignment_body(request, cluster_id, found[0])
    st = svc.admin.partition_state(topic, partition)
    return reassignment_body(request, cluster_id, Reassignment(topic, partition, st.replicas, [], []))


@router.get("/clusters/{cluster_id}/topics/-/partitions/-/reassignment",
            summary="List every partition reassignment in progress")
async def list_all_reassignments(cluster_id: str, request: Request):
    node, svc = _service(request, cluster_id)
    return list_body("KafkaReassignmentList", f"{base_url(request)}/clusters/{cluster_id}/topics/-/partitions/-/reassignment",
                 [reassignment_body(request, cluster_id, r) for r in svc.list()])


@router.post("/clusters/{cluster_id}/topics/-/partitions/-/reassignment:alter",
             summary="Start, change or cancel several partition reassignments at once")
async def alter_reassignments(cluster_id: str, body: AlterReassignmentsRequest, request: Request):
    node, svc = _service(request, cluster_id)
    await svc.alter((e.topic_name, e.partition_id, e.replicas) for e in body.data)
    return JSONResponse(status_code=202, content={
        "kind": "KafkaReassignmentList", "metadata": {"self": str(request.url), "next": None},
        "data": [_current(request, cluster_id, svc, e.topic_name, e.partition_id) for e in body.data]})


@router.post("/clusters/{cluster_id}/topics/-/partitions/-/preferred-leader:elect",
             summary="Move leadership to each partition's first replica (where it is in sync)")
async def elect_preferred_leaders(cluster_id: str, body: ElectLeadersRequest, request: Request):
    node, svc = _service(request, cluster_id)
    await svc.elect_preferred_leaders((e.topic_name, e.partition_id) for e in body.data)
    data = []
    for e in body.data:
        st = node.admin.partition_state(e.topic_name, e.partition_id)
        url = f"{base_url(request)}/clusters/{cluster_id}/topics/{e.topic_name}/partitions/{e.partition_id}"
        data.append({"kind": "KafkaPartition", "metadata": resource_meta(url, f"crn:///kafka={cluster_id}/topic={e.topic_name}"
                                                                      f"/partition={e.partition_id}"),
                     "cluster_id": cluster_id, "topic_name": e.topic_name, "partition_id": e.partition_id,
                     "leader": None if st.leader < 0 else {
                         "related": f"{base_url(request)}/clusters/{cluster_id}/brokers/{st.leader}"},
                     "preferred_leader_elected": bool(st.replicas) and st.leader == st.replicas[0]})
    return list_body("KafkaPartitionList", str(request.url), data)


@router.get("/clusters/{cluster_id}/topics/{topic_name}/partitions/-/reassignment",
            summary="List the reassignments in progress of a topic's partitions")
async def search_reassignments_by_topic(cluster_id: str, topic_name: str, request: Request):
    node, svc = _service(request, cluster_id)
    url = f"{base_url(request)}/clusters/{cluster_id}/topics/{topic_name}/partitions/-/reassignment"
    return list_body("KafkaReassignmentList", url, [reassignment_body(request, cluster_id, r) for r in svc.list(topic_name)])


@router.get("/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/reassignment",
            summary="Describe a partition's reassignment in progress")
async def get_reassignment(cluster_id: str, topic_name: str, partition_id: int, request: Request):
    node, svc = _service(request, cluster_id)
    return JSONResponse(reassignment_body(request, cluster_id, svc.get(topic_name, partition_id)))


@router.patch("/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/reassignment",
              summary="Move a partition to new replicas (the first is the preferred leader)")
async def alter_reassignment(cluster_id: str, topic_name: str, partition_id: int, body: AlterReassignmentRequest,
                             request: Request):
    node, svc = _service(request, cluster_id)
    await svc.alter([(topic_name, partition_id, list(body.replicas))])
    return JSONResponse(status_code=202, content=_current(request, cluster_id, svc, topic_name, partition_id))


@router.delete("/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/reassignment",
               summary="Cancel a partition's reassignment (back to its original replicas)")
async def cancel_reassignment(cluster_id: str, topic_name: str, partition_id: int, request: Request):
    node, svc = _service(request, cluster_id)
    svc.get(topic_name, partition_id)  # 404 when there is nothing to cancel
    await svc.alter([(topic_name, partition_id, None)])
    return Response(status_code=204)


@router.delete("/clusters/{cluster_id}/brokers/{broker_id}",
               summary="Unregister a stopped broker that holds no replicas (decommission)")
async def unregister_broker(cluster_id: str, broker_id: int, request: Request):
    node = cluster_node(request, cluster_id)
    node.admin.check_ready()
    reg = node.image.brokers.get(broker_id)
    if reg is None:
        raise BrokerNotFoundError(f"Broker {broker_id} cannot be found.")
    held = [f"{t.name}-{p}" for t, p, st in node.image.iter_partitions() if broker_id in st.replicas]
    if held:
        raise BrokerInUseError(f"Broker {broker_id} still holds {len(held)} replica(s) ({', '.join(held[:5])}"
                                f"{', ...' if len(held) > 5 else ''}); drain it first")
    if not reg.fenced:
        raise BrokerInUseError(f"Broker {broker_id} is running; stop its process first (a running broker "
                                f"registers again)")
    await node.admin.submit("unregister_broker", {"node_id": broker_id})
    return Response(status_code=204)
