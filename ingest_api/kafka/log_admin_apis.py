"""Log administration on the Kafka door: DeleteRecords, DescribeLogDirs, ElectLeaders,
AlterPartitionReassignments, ListPartitionReassignments and OffsetDelete.

They call the node's core services, as the HTTP routers do: `broker/log_admin.py` (DeleteRecords on
the partitions this node leads, its log directory), `ReassignmentService` (`broker/reassignments.py`:
elections and reassignments go to the active controller, which this node forwards to) and the group
coordinator's `delete_offsets` (OffsetDelete, from any node: the service calls the coordinator).

Answers per partition, as Kafka does:
- DeleteRecords: a partition this node does not lead answers NOT_LEADER_OR_FOLLOWER (the client
  sends each partition to its leader); an offset above the high watermark OFFSET_OUT_OF_RANGE.
- ElectLeaders: NONE when the election moved leadership to where it was asked; ELECTION_NOT_NEEDED
  when it already was there (PREFERRED: the first replica leads; UNCLEAN: the partition has a
  leader); PREFERRED_LEADER_NOT_AVAILABLE / ELIGIBLE_LEADERS_NOT_AVAILABLE when nobody could take it.
  A request naming no partitions (null) elects every partition that needs it and answers those.
- AlterPartitionReassignments: all partitions are submitted together; if that fails, each one is
  submitted alone, so every partition gets its own answer (null replicas cancel a reassignment).
- OffsetDelete: GROUP_SUBSCRIBED_TO_TOPIC for a topic a member of the group is subscribed to.

Authorization (Kafka's, in the ACL model's operations): DeleteRecords DELETE on the topic;
DescribeLogDirs DESCRIBE on the cluster; ElectLeaders and AlterPartitionReassignments ALTER on the
cluster; ListPartitionReassignments DESCRIBE on the cluster; OffsetDelete DELETE on the group and
READ on each topic.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kio.schema.errors import ErrorCode

from lakelog.ingest_api.broker.log_admin import delete_records_before, describe_log_dir
from lakelog.ingest_api.broker.reassignments import ReassignmentService
from lakelog.ingest_api.error_table import kafka_code
from lakelog.ingest_api.kafka.codec import Request, field_of
from lakelog.ingest_api.kafka.context import REFUSED, KafkaContext
from lakelog.ingest_api.kafka.server import Connection
from lakelog.ingest_api.security.acl import CLUSTER_NAME, Operation, ResourceType

NONE = ErrorCode.none.value
PREFERRED, UNCLEAN = 0, 1
#: Most partitions one of these requests may name.
MAX_PARTITIONS_PER_REQUEST = 10_000


def _may(ctx: KafkaContext, conn: Connection, operation: Operation, rtype: ResourceType, name: str,
         api: str) -> bool:
    return ctx.allowed(conn.principal, operation, rtype, name, api, conn.client_host)


def _cluster_refused(ctx: KafkaContext, conn: Connection, operation: Operation, api: str) -> bool:
    return not _may(ctx, conn, operation, ResourceType.CLUSTER, CLUSTER_NAME, api)


def _error(e: BaseException) -> tuple[int, str]:
    return kafka_code(e).value, str(e)[:500]


# ---------------------------------------------------------------------- DeleteRecords


async def _delete_one(ctx: KafkaContext, topic: str, dp: Any) -> dict[str, Any]:
    index = int(dp.partition_index)
    try:
        p = ctx.node.partition(topic, index)  # raises unless this node leads it
        low = await delete_records_before(p, int(dp.offset), tiered=ctx.node.remote_logs.tiered(p))
    except Exception as e:
        return {"partition_index": index, "low_watermark": -1, "error_code": kafka_code(e).value}
    return {"partition_index": index, "low_watermark": low, "error_code": NONE}


async def delete_records(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    out = []
    for t in req.body.topics:
        if not _may(ctx, conn, Operation.DELETE, ResourceType.TOPIC, t.name, "DeleteRecords"):
            out.append({"name": t.name, "partitions": [
                {"partition_index": int(dp.partition_index), "low_watermark": -1,
                 "error_code": REFUSED[ResourceType.TOPIC]} for dp in t.partitions]})
            continue
        parts = await asyncio.gather(*(_delete_one(ctx, t.name, dp) for dp in t.partitions))
        out.append({"name": t.name, "partitions": list(parts)})
    return {"throttle_time": 0, "topics": out}


# ---------------------------------------------------------------------- DescribeLogDirs


async def describe_log_dirs(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    if _cluster_refused(ctx, conn, Operation.DESCRIBE, "DescribeLogDirs"):
        return {"throttle_time": 0, "error_code": REFUSED[ResourceType.CLUSTER], "results": []}
    wanted = req.body.topics
    only = None if wanted is None else {(t.topic, int(p)) for t in wanted for p in t.partitions}
    d = describe_log_dir(ctx.node.replicas.log_dir, ctx.node.partitions())
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, index, size in d.partitions:
        if only is None or (topic, index) in only:
            topics.setdefault(topic, []).append({"partition_index": index, "partition_size": size, "offset_lag": 0,
                                                 "is_future_key": False})
    code = NONE if d.online else ErrorCode.kafka_storage_error.value
    return {"throttle_time": 0, "error_code": NONE, "results": [
        {"error_code": code, "log_dir": d.path, "total_bytes": d.total_bytes, "usable_bytes": d.usable_bytes,
         "topics": [{"name": n, "partitions": ps} for n, ps in topics.items()]}]}


# ---------------------------------------------------------------------- ElectLeaders


def _known(ctx: KafkaContext, topic: str, index: int) -> Any:
    t = ctx.node.image.topics.get(topic)
    return t.partitions[index] if t is not None and 0 <= index < len(t.partitions) else None


def _elected(state: Any, unclean: bool) -> bool:
    return state.leader >= 0 if unclean else bool(state.replicas) and state.leader == state.replicas[0]


async def elect_leaders(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    body = req.body
    unclean = int(field_of(body, "election_type", PREFERRED)) == UNCLEAN
    if _cluster_refused(ctx, conn, Operation.ALTER, "ElectLeaders"):
        return {"throttle_time": 0, "error_code": REFUSED[ResourceType.CLUSTER], "replica_election_results": []}
    every = body.topic_partitions is None
    if every:
        named = [(n, i) for n, t in sorted(ctx.node.image.topics.items()) for i in range(len(t.partitions))]
    else:
        named = [(t.topic, int(p)) for t in body.topic_partitions for p in t.partitions]
    if len(named) > MAX_PARTITIONS_PER_REQUEST:
        return {"throttle_time": 0, "error_code": ErrorCode.invalid_request.value, "replica_election_results": []}
    results: dict[tuple[str, int], tuple[int, str | None]] = {}
    todo = []
    for key in named:
        state = _known(ctx, *key)
        if state is None:
            results[key] = (ErrorCode.unknown_topic_or_partition.value, "no such topic or partition")
        elif _elected(state, unclean):
            results[key] = (ErrorCode.election_not_needed.value, "leadership is already where asked")
        else:
            todo.append(key)
    if todo:
        try:
            await ReassignmentService(ctx.node.admin).elect_leaders(todo, unclean=unclean)
        except Exception as e:
            for key in todo:
                results[key] = _error(e)
    for key in todo:
        if key in results:
            continue
        state = _known(ctx, *key)
        if state is not None and _elected(state, unclean):
            results[key] = (NONE, None)
        elif unclean:
            results[key] = (ErrorCode.eligible_leaders_not_available.value, "no live replica may lead")
        else:
            results[key] = (ErrorCode.preferred_leader_not_available.value,
                            "the preferred replica is not alive or not in the ISR")
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), (code, message) in results.items():
        if every and code == ErrorCode.election_not_needed.value:
            continue
        by_topic.setdefault(topic, []).append({"partition_id": index, "error_code": code, "error_message": message})
    return {"throttle_time": 0, "error_code": NONE, "replica_election_results": [
        {"topic": t, "partition_result": ps} for t, ps in by_topic.items()]}


# ---------------------------------------------------------------------- reassignments


async def alter_partition_reassignments(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    body = req.body
    if _cluster_refused(ctx, conn, Operation.ALTER, "AlterPartitionReassignments"):
        return {"throttle_time": 0, "error_code": REFUSED[ResourceType.CLUSTER], "error_message": "not authorized",
                "responses": []}
    allow_rf_change = bool(field_of(body, "allow_replication_factor_change", True))
    changes, answers = [], {}
    for t in body.topics:
        for rp in t.partitions:
            key = (t.name, int(rp.partition_index))
            target = None if rp.replicas is None else [int(r) for r in rp.replicas]
            state = _known(ctx, *key)
            if state is not None and target is not None and not allow_rf_change and len(target) != len(state.target):
                answers[key] = (ErrorCode.invalid_replication_factor.value,
                                f"{len(target)} replicas where the partition has {len(state.target)}")
            else:
                changes.append((key[0], key[1], target))
    if len(changes) > MAX_PARTITIONS_PER_REQUEST:
        return {"throttle_time": 0, "error_code": ErrorCode.invalid_request.value, "error_message": "too many partitions",
                "responses": []}
    svc = ReassignmentService(ctx.node.admin)
    try:
        await svc.alter(changes)
        answers.update({(t, p): (NONE, None) for t, p, _ in changes})
    except Exception:
        for t, p, target in changes:  # one by one, so each partition gets its own answer
            try:
                await svc.alter([(t, p, target)])
                answers[(t, p)] = (NONE, None)
            except Exception as e:
                answers[(t, p)] = _error(e)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), (code, message) in answers.items():
        by_topic.setdefault(topic, []).append({"partition_index": index, "error_code": code, "error_message": message})
    return {"throttle_time": 0, "error_code": NONE, "error_message": None, "allow_replication_factor_change": allow_rf_change,
            "responses": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}


async def list_partition_reassignments(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    if _cluster_refused(ctx, conn, Operation.DESCRIBE, "ListPartitionReassignments"):
        return {"throttle_time": 0, "error_code": REFUSED[ResourceType.CLUSTER], "error_message": "not authorized",
                "topics": []}
    wanted = req.body.topics
    only = None if wanted is None else {(t.name, int(p)) for t in wanted for p in t.partition_indexes}
    try:
        moving = ReassignmentService(ctx.node.admin).list()
    except Exception as e:
        code, message = _error(e)
        return {"throttle_time": 0, "error_code": code, "error_message": message, "topics": []}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for r in moving:
        if only is None or (r.topic, r.partition) in only:
            by_topic.setdefault(r.topic, []).append({"partition_index": r.partition, "replicas": r.replicas,
                                                     "adding_replicas": r.adding, "removing_replicas": r.removing})
    return {"throttle_time": 0, "error_code": NONE, "error_message": None,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}


# ---------------------------------------------------------------------- OffsetDelete


async def offset_delete(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    body = req.body
    group_id = body.group_id
    if not _may(ctx, conn, Operation.DELETE, ResourceType.GROUP, group_id, "OffsetDelete"):
        return {"error_code": REFUSED[ResourceType.GROUP], "throttle_time": 0, "topics": []}
    answers: dict[tuple[str, int], int] = {}
    wanted = []
    for t in body.topics:
        allowed = _may(ctx, conn, Operation.READ, ResourceType.TOPIC, t.name, "OffsetDelete")
        for p in t.partitions:
            key = (t.name, int(p.partition_index))
            if allowed:
                wanted.append(list(key))
            else:
                answers[key] = REFUSED[ResourceType.TOPIC]
    if wanted:
        try:
            doc = await ctx.groups.call(group_id, "delete_offsets", {"partitions": wanted})
        except Exception as e:
            return {"error_code": kafka_code(e).value, "throttle_time": 0, "topics": []}
        for r in doc["partitions"]:
            answers[(r["topic"], int(r["partition"]))] = (ErrorCode.group_subscribed_to_topic.value
                                                         if r.get("error") == "subscribed" else NONE)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, index), code in answers.items():
        by_topic.setdefault(topic, []).append({"partition_index": index, "error_code": code})
    return {"error_code": NONE, "throttle_time": 0, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}
