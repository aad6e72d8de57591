"""ApiVersions, Metadata, DescribeCluster, FindCoordinator and InitProducerId on the Kafka door.

Metadata advertises each node's own Kafka address on the listener the client connected to, so a
client sends each partition's requests to its leader; a node without a door on that listener is
left out (as Kafka leaves out brokers without the listener).

Authorization (the node's authorizer): Metadata needs DESCRIBE on each topic — a topic asked for by
name answers TOPIC_AUTHORIZATION_FAILED, a listing of every topic leaves it out, as Kafka does;
DescribeCluster needs DESCRIBE on the cluster; FindCoordinator DESCRIBE on the group, or for a
transaction coordinator (key type 1) DESCRIBE on the TransactionalId (TRANSACTIONAL_ID_AUTHORIZATION_FAILED
otherwise). ApiVersions is answered to anyone (before authentication too). InitProducerId without a
transactional id is answered to any authenticated principal (Produce checks WRITE on each topic); with
one, it goes to the transaction coordinator (txn_apis.py, which checks WRITE on the TransactionalId).
"""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from lakelog.ingest_api.groups.hashing import OFFSETS_TOPIC
from lakelog.ingest_api.kafka.codec import Request, field_of
from lakelog.ingest_api.kafka.context import REFUSED, KafkaContext, kafka_topic_id
from lakelog.ingest_api.error_table import kafka_code
from lakelog.ingest_api.kafka.server import Connection
from lakelog.ingest_api.kafka.txn_apis import init_transactional
from lakelog.ingest_api.kafka.versions import SUPPORTED
from lakelog.ingest_api.security.acl import CLUSTER_NAME, Operation, ResourceType

NONE = ErrorCode.none.value
#: Kafka's "no authorized operations given" marker (KIP-430).
NO_OPERATIONS = -2147483648


def api_versions_table() -> list[dict[str, int]]:
    return [{"api_key": k, "min_version": low, "max_version": high} for k, (_, low, high) in sorted(SUPPORTED.items())]


async def api_versions(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    return {"error_code": NONE, "api_keys": api_versions_table(), "throttle_time": 0}


def _topic_doc(ctx: KafkaContext, name: str) -> dict[str, Any]:
    t = ctx.node.image.topics.get(name)
    if t is None:
        return {"error_code": ErrorCode.unknown_topic_or_partition.value, "name": name, "topic_id": None,
                "is_internal": False, "partitions": [], "topic_authorized_operations": NO_OPERATIONS}
    live = {i for i, b in ctx.node.image.brokers.items() if not b.fenced}
    parts = []
    for i, st in enumerate(t.partitions):
        offline = [r for r in st.replicas if r not in live]
        parts.append({"error_code": NONE if st.leader >= 0 else ErrorCode.leader_not_available.value,
                      "partition_index": i, "leader_id": st.leader, "leader_epoch": st.leader_epoch,
                      "replica_nodes": list(st.replicas), "isr_nodes": list(st.isr), "offline_replicas": offline})
    return {"error_code": NONE, "name": name, "topic_id": kafka_topic_id(t.topic_id),
            "is_internal": name == OFFSETS_TOPIC, "partitions": parts,
            "topic_authorized_operations": NO_OPERATIONS}


def _refused_doc(name: str) -> dict[str, Any]:
    return {"error_code": REFUSED[ResourceType.TOPIC], "name": name, "topic_id": None, "is_internal": False,
            "partitions": [], "topic_authorized_operations": NO_OPERATIONS}


async def metadata(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    node = ctx.node
    topics = req.body.topics
    refused: list[str] = []
    if topics is None or (req.api_version == 0 and not topics):
        names = [n for n in sorted(node.image.topics)
                 if ctx.allowed(conn.principal, Operation.DESCRIBE, ResourceType.TOPIC, n, "Metadata",
                                conn.client_host, audit=False)]
    else:
        names = []
        for t in topics:
            name = field_of(t, "name")
            if name is None:  # asked by topic id
                tid = field_of(t, "topic_id")
                name = next((n for n, ti in node.image.topics.items() if kafka_topic_id(ti.topic_id) == tid), None)
            if name is None:
                continue
            if ctx.allowed(conn.principal, Operation.DESCRIBE, ResourceType.TOPIC, name, "Metadata", conn.client_host):
                names.append(name)
            else:
                refused.append(name)
    return {"throttle_time": 0, "brokers": ctx.live_brokers(conn.listener), "cluster_id": node.cluster_id,
            "controller_id": node.controller_id, "topics": [_topic_doc(ctx, n) for n in names] + [_refused_doc(n) for n in refused],
            "cluster_authorized_operations": NO_OPERATIONS}


async def describe_cluster(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    node = ctx.node
    if not ctx.allowed(conn.principal, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, "DescribeCluster",
                       conn.client_host):
        return {"throttle_time": 0, "error_code": REFUSED[ResourceType.CLUSTER],
                "error_message": "not authorized to DESCRIBE the cluster", "cluster_id": node.cluster_id,
                "controller_id": -1, "brokers": [], "cluster_authorized_operations": NO_OPERATIONS}
    brokers = [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"], "rack": b["rack"]}
               for b in ctx.live_brokers(conn.listener)]
    return {"throttle_time": 0, "error_code": NONE, "error_message": None, "cluster_id": node.cluster_id,
            "controller_id": node.controller_id, "brokers": brokers, "cluster_authorized_operations": NO_OPERATIONS}


async def _coordinator(ctx: KafkaContext, key: str, key_type: int, conn: Connection) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1, "error_message": None}
    if key_type == 1:
        return await _txn_coordinator(ctx, key, conn, out)
    if key_type != 0:
        return {**out, "error_code": ErrorCode.invalid_request.value, "error_message": f"key type {key_type}"}
    if not ctx.allowed(conn.principal, Operation.DESCRIBE, ResourceType.GROUP, key, "FindCoordinator",
                       conn.client_host):
        return {**out, "error_code": REFUSED[ResourceType.GROUP], "error_message": f"not authorized to DESCRIBE "
                f"GROUP {key!r}"}
    try:
        await ctx.groups.ensure_offsets_topic()
    except Exception as e:
        return {**out, "error_code": ErrorCode.coordinator_not_available.value, "error_message": str(e)}
    node_id = ctx.groups.coordinator_node(key)
    ep = ctx.endpoint(node_id, conn.listener.name) if node_id >= 0 else None
    if ep is None:
        return {**out, "error_code": ErrorCode.coordinator_not_available.value,
                "error_message": f"the coordinator of {key} is not available yet"}
    return {**out, "error_code": NONE, "node_id": node_id, "host": ep[0], "port": ep[1]}


async def _txn_coordinator(ctx: KafkaContext, key: str, conn: Connection, out: dict[str, Any]) -> dict[str, Any]:
    """The transaction coordinator of transactional id `key` (the leader of its __transaction_state partition)."""
    if not ctx.allowed(conn.principal, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key, "FindCoordinator",
                       conn.client_host):
        return {**out, "error_code": REFUSED[ResourceType.TRANSACTIONAL_ID],
                "error_message": f"not authorized to DESCRIBE TRANSACTIONAL_ID {key!r}"}
    try:
        await ctx.node.transactions.ensure_state_topic()
    except Exception as e:
        return {**out, "error_code": ErrorCode.coordinator_not_available.value, "error_message": str(e)}
    node_id = ctx.node.transactions.coordinator_node(key)
    ep = ctx.endpoint(node_id, conn.listener.name) if node_id >= 0 else None
    if ep is None:
        return {**out, "error_code": ErrorCode.coordinator_not_available.value,
                "error_message": f"the transaction coordinator of {key} is not available yet"}
    return {**out, "error_code": NONE, "node_id": node_id, "host": ep[0], "port": ep[1]}


async def find_coordinator(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    key_type = int(field_of(req.body, "key_type", 0))
    if req.api_version >= 4:
        return {"throttle_time": 0, "coordinators": [
            await _coordinator(ctx, k, key_type, conn) for k in req.body.coordinator_keys]}
    return {"throttle_time": 0, **await _coordinator(ctx, req.body.key, key_type, conn)}


async def init_producer_id(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    if req.body.transactional_id is not None:
        return await init_transactional(ctx, req, conn)
    try:
        pid, epoch = await ctx.node.init_producer_id()
    except Exception as e:
        return {"throttle_time": 0, "error_code": kafka_code(e).value, "producer_id": -1, "producer_epoch": -1}
    return {"throttle_time": 0, "error_code": NONE, "producer_id": pid, "producer_epoch": epoch}
