"""The classic group protocol on the Kafka door: JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups.

Every request goes to the same group coordinator and `__consumer_offsets` the HTTP consumers use
(`GroupService.call`, which reaches the group's coordinator on whichever node it runs): an offset
committed over HTTP is the one a Kafka consumer of that group resumes from, and the reverse.
Protocol metadata and assignments are Kafka's opaque bytes; they travel to the coordinator as
base64 text (its requests may cross nodes as JSON) and come back as bytes.

Authorization (the node's authorizer, the ACLs HTTP checks), as Kafka decides it: JoinGroup,
SyncGroup, Heartbeat, LeaveGroup and OffsetCommit need READ on the group, OffsetCommit also READ on
each topic; OffsetFetch and DescribeGroups DESCRIBE on the group (OffsetFetch DESCRIBE on each topic:
a listing of every committed offset leaves out the rest); DeleteGroups DELETE on the group;
ListGroups lists the groups the principal may DESCRIBE (all of them with DESCRIBE on the cluster).
A refusal is GROUP_AUTHORIZATION_FAILED, or TOPIC_AUTHORIZATION_FAILED for a topic's partitions.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from kio.schema.errors import ErrorCode

from lakelog.ingest_api.groups.errors import GroupError, RebalanceInProgressError
from lakelog.ingest_api.kafka.codec import Request, field_of, ms
from lakelog.ingest_api.kafka.context import REFUSED, KafkaContext
from lakelog.ingest_api.error_table import coordinator_code
from lakelog.ingest_api.kafka.server import Connection
from lakelog.ingest_api.security.acl import CLUSTER_NAME, Operation, ResourceType

NONE = ErrorCode.none.value
GROUP_REFUSED = REFUSED[ResourceType.GROUP]
TOPIC_REFUSED = REFUSED[ResourceType.TOPIC]
NO_OPERATIONS = -2147483648
UNSTABLE = ErrorCode.unstable_offset_commit.value


def _may(ctx: KafkaContext, conn: Connection, operation: Operation, rtype: ResourceType, name: str, api: str,
         audit: bool = True) -> bool:
    return ctx.allowed(conn.principal, operation, rtype, name, api, conn.client_host, audit=audit)


def _b64(data: bytes | None) -> str:
    return base64.b64encode(data or b"").decode()


def _unb64(text: Any) -> bytes:
    if not isinstance(text, str):
        return b""  # an HTTP consumer's assignment (JSON), which a Kafka client cannot read
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return b""


async def join_group(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    b = req.body
    session_ms = ms(b.session_timeout)
    rebalance_ms = ms(field_of(b, "rebalance_timeout", session_ms))
    member_id = b.member_id or ""
    args = {"member_id": member_id, "client_id": req.client_id or "", "client_host": conn.client_host,
            "session_timeout_ms": session_ms, "rebalance_timeout_ms": rebalance_ms, "protocol_type": b.protocol_type,
            "protocols": [[p.name, _b64(p.metadata)] for p in b.protocols],
            # KIP-394: from v4 a new member first learns its id (MEMBER_ID_REQUIRED), then joins with it.
            "require_known_member_id": req.api_version >= 4 and not member_id}
    out: dict[str, Any] = {"throttle_time": 0, "generation_id": -1, "protocol_type": b.protocol_type,
                           "protocol_name": None, "leader": "", "skip_assignment": False, "member_id": member_id,
                           "members": []}
    if not _may(ctx, conn, Operation.READ, ResourceType.GROUP, b.group_id, "JoinGroup"):
        return {**out, "error_code": GROUP_REFUSED}
    try:
        doc = await ctx.groups.call(b.group_id, "join", args)
    except RebalanceInProgressError as e:
        mid = (getattr(e, "doc", None) or {}).get("member_id") or member_id
        code = ErrorCode.member_id_required if not member_id and req.api_version >= 4 else ErrorCode.rebalance_in_progress
        return {**out, "error_code": code.value, "member_id": mid}
    except Exception as e:
        return {**out, "error_code": coordinator_code(e).value}
    members = [{"member_id": m, "group_instance_id": None, "metadata": _unb64(meta)} for m, meta in doc["members"]]
    return {**out, "error_code": NONE, "generation_id": doc["generation"], "protocol_name": doc["protocol"],
            "leader": doc["leader_id"] or "", "member_id": doc["member_id"], "members": members}


async def sync_group(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    b = req.body
    assignments = {a.member_id: _b64(a.assignment) for a in b.assignments} if b.assignments else None
    out: dict[str, Any] = {"throttle_time": 0, "protocol_type": field_of(b, "protocol_type"),
                           "protocol_name": field_of(b, "protocol_name"), "assignment": b""}
    if not _may(ctx, conn, Operation.READ, ResourceType.GROUP, b.group_id, "SyncGroup"):
        return {**out, "error_code": GROUP_REFUSED}
    try:
        doc = await ctx.groups.call(b.group_id, "sync", {"member_id": b.member_id, "generation": int(b.generation_id),
                                                        "assignments": assignments})
    except Exception as e:
        return {**out, "error_code": coordinator_code(e).value}
    return {**out, "error_code": NONE, "assignment": _unb64(doc.get("assignment"))}


async def heartbeat(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    b = req.body
    if not _may(ctx, conn, Operation.READ, ResourceType.GROUP, b.group_id, "Heartbeat"):
        return {"throttle_time": 0, "error_code": GROUP_REFUSED}
    try:
        await ctx.groups.call(b.group_id, "heartbeat", {"member_id": b.member_id, "generation": int(b.generation_id)})
    except Exception as e:
        return {"throttle_time": 0, "error_code": coordinator_code(e).value}
    return {"throttle_time": 0, "error_code": NONE}


async def leave_group(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    b = req.body
    ids = [m.member_id for m in b.members] if req.api_version >= 3 else [b.member_id]
    if not _may(ctx, conn, Operation.READ, ResourceType.GROUP, b.group_id, "LeaveGroup"):
        return {"throttle_time": 0, "error_code": GROUP_REFUSED, "members": []}
    results = []
    for mid in ids:
        try:
            await ctx.groups.call(b.group_id, "leave", {"member_id": mid})
            results.append({"member_id": mid, "group_instance_id": None, "error_code": NONE})
        except Exception as e:
            results.append({"member_id": mid, "group_instance_id": None, "error_code": coordinator_code(e).value})
    top = results[0]["error_code"] if req.api_version < 3 and results else NONE
    return {"throttle_time": 0, "error_code": top, "members": results}


async def offset_commit(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    b = req.body
    if not _may(ctx, conn, Operation.READ, ResourceType.GROUP, b.group_id, "OffsetCommit"):
        codes = {t.name: GROUP_REFUSED for t in b.topics}
    else:
        codes = {t.name: NONE if _may(ctx, conn, Operation.READ, ResourceType.TOPIC, t.name, "OffsetCommit")
                 else TOPIC_REFUSED for t in b.topics}
    offsets = [{"topic": t.name, "partition": int(p.partition_index), "offset": int(p.committed_offset),
                "metadata": p.committed_metadata or "", "leader_epoch": int(field_of(p, "committed_leader_epoch", -1))}
               for t in b.topics if codes[t.name] == NONE for p in t.partitions]
    if offsets:
        try:
            await ctx.groups.call(b.group_id, "commit", {"member_id": b.member_id,
                                                        "generation": int(b.generation_id_or_member_epoch),
                                                        "offsets": offsets})
        except Exception as e:
            codes = {n: coordinator_code(e).value if c == NONE else c for n, c in codes.items()}
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": codes[t.name]}
                                        for p in t.partitions]} for t in b.topics]}


async def _fetch_group(ctx: KafkaContext, conn: Connection, group_id: str, topics: Any, require_stable: bool = False
                       ) -> tuple[list[dict[str, Any]], int]:
    """(topics with their committed offsets, group error code) of one group. With `require_stable`
    (KIP-447, a read_committed consumer), a partition whose transactional commit is not decided yet
    answers UNSTABLE_OFFSET_COMMIT, which the client retries."""
    if not _may(ctx, conn, Operation.DESCRIBE, ResourceType.GROUP, group_id, "OffsetFetch"):
        return [], GROUP_REFUSED
    refused = [] if topics is None else [
        t for t in topics if not _may(ctx, conn, Operation.DESCRIBE, ResourceType.TOPIC, t.name, "OffsetFetch")]
    wanted = None if topics is None else [[t.name, int(p)] for t in topics if t not in refused for p in _indexes(t)]
    by_topic: dict[str, list[dict[str, Any]]] = {
        t.name: [{"partition_index": int(p), "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "",
                  "error_code": TOPIC_REFUSED} for p in _indexes(t)] for t in refused}
    if wanted == []:
        return [{"name": n, "partitions": ps} for n, ps in by_topic.items()], NONE
    try:
        doc = await ctx.groups.call(group_id, "offset_fetch", {"partitions": wanted})
    except Exception as e:
        return [], coordinator_code(e).value
    for o in doc["offsets"]:
        if topics is None and not _may(ctx, conn, Operation.DESCRIBE, ResourceType.TOPIC, o["topic"], "OffsetFetch",
                                       audit=False):
            continue
        by_topic.setdefault(o["topic"], []).append({
            "partition_index": o["partition"], "committed_offset": o["offset"], "committed_leader_epoch": -1,
            "metadata": o.get("metadata") or "",
            "error_code": UNSTABLE if require_stable and o.get("unstable") else NONE})
    return [{"name": n, "partitions": ps} for n, ps in by_topic.items()], NONE


def _indexes(t: Any) -> tuple[int, ...]:
    return tuple(field_of(t, "partition_indexes", ()))


async def offset_fetch(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    b = req.body
    if req.api_version >= 8:
        groups = []
        for g in b.groups:
            topics, code = await _fetch_group(ctx, conn, g.group_id, g.topics, bool(field_of(b, "require_stable", False)))
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": code})
        return {"throttle_time": 0, "groups": groups}
    topics, code = await _fetch_group(ctx, conn, b.group_id, b.topics, bool(field_of(b, "require_stable", False)))
    return {"throttle_time": 0, "topics": topics, "error_code": code}


async def describe_groups(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    out = []
    for group_id in req.body.groups:
        base = {"group_id": group_id, "group_state": "Dead", "protocol_type": "", "protocol_data": "",
                "members": [], "authorized_operations": NO_OPERATIONS}
        if not _may(ctx, conn, Operation.DESCRIBE, ResourceType.GROUP, group_id, "DescribeGroups"):
            out.append({**base, "error_code": GROUP_REFUSED})
            continue
        try:
            doc = await ctx.groups.call(group_id, "describe", {})
        except Exception as e:
            out.append({**base, "error_code": coordinator_code(e).value})
            continue
        members = [{"member_id": m["member_id"], "group_instance_id": None, "client_id": m.get("client_id") or "",
                    "client_host": m.get("client_host") or "", "member_metadata": b"",
                    "member_assignment": _unb64(m.get("assignment"))} for m in doc.get("members", [])]
        out.append({**base, "error_code": NONE, "group_state": doc["state"],
                    "protocol_type": doc.get("protocol_type") or "", "protocol_data": doc.get("protocol") or "",
                    "members": members})
    return {"throttle_time": 0, "groups": out}


async def delete_groups(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    results = []
    for group_id in req.body.groups_names:
        if not _may(ctx, conn, Operation.DELETE, ResourceType.GROUP, group_id, "DeleteGroups"):
            results.append({"group_id": group_id, "error_code": GROUP_REFUSED})
            continue
        try:
            await ctx.groups.call(group_id, "delete", {})
            results.append({"group_id": group_id, "error_code": NONE})
        except Exception as e:
            results.append({"group_id": group_id, "error_code": coordinator_code(e).value})
    return {"throttle_time": 0, "results": results}


async def list_groups(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    states = {s.lower() for s in field_of(req.body, "states_filter", ()) or ()}
    try:
        groups = await ctx.groups.list_all_groups()
    except GroupError as e:
        return {"throttle_time": 0, "error_code": coordinator_code(e).value, "groups": []}
    every = _may(ctx, conn, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME, "ListGroups", False)
    return {"throttle_time": 0, "error_code": NONE, "groups": [
        {"group_id": g["group_id"], "protocol_type": g.get("protocol_type") or "", "group_state": g["state"]}
        for g in groups if (not states or str(g["state"]).lower() in states)
        and (every or _may(ctx, conn, Operation.DESCRIBE, ResourceType.GROUP, g["group_id"], "ListGroups", False))]}
