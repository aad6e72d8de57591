"""The classic group protocol on the Kafka door: JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, DescribeGroups, ListGroups, DeleteGroups.

Every request goes to the same group coordinator and `__consumer_offsets` the HTTP consumers use
(`GroupService.call`, which reaches the group's coordinator on whichever node it runs): an offset
committed over HTTP is the one a Kafka consumer of that group resumes from, and the reverse.
Protocol metadata and assignments are Kafka's opaque bytes; they travel to the coordinator as
base64 text (its requests may cross nodes as JSON) and come back as bytes.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from kio.schema.errors import ErrorCode

from lakelog.ingest_api.groups.errors import GroupError, RebalanceInProgressError
from lakelog.ingest_api.kafka.codec import Request, field_of, ms
from lakelog.ingest_api.kafka.context import KafkaContext
from lakelog.ingest_api.error_table import kafka_code
from lakelog.ingest_api.kafka.server import Connection

NONE = ErrorCode.none.value
NO_OPERATIONS = -2147483648


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
    try:
        doc = await ctx.groups.call(b.group_id, "join", args)
    except RebalanceInProgressError as e:
        mid = (getattr(e, "doc", None) or {}).get("member_id") or member_id
        code = ErrorCode.member_id_required if not member_id and req.api_version >= 4 else ErrorCode.rebalance_in_progress
        return {**out, "error_code": code.value, "member_id": mid}
    except Exception as e:
        return {**out, "error_code": kafka_code(e).value}
    members = [{"member_id": m, "group_instance_id": None, "metadata": _unb64(meta)} for m, meta in doc["members"]]
    return {**out, "error_code": NONE, "generation_id": doc["generation"], "protocol_name": doc["protocol"],
            "leader": doc["leader_id"] or "", "member_id": doc["member_id"], "members": members}


async def sync_group(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    b = req.body
    assignments = {a.member_id: _b64(a.assignment) for a in b.assignments} if b.assignments else None
    out: dict[str, Any] = {"throttle_time": 0, "protocol_type": field_of(b, "protocol_type"),
                           "protocol_name": field_of(b, "protocol_name"), "assignment": b""}
    try:
        doc = await ctx.groups.call(b.group_id, "sync", {"member_id": b.member_id, "generation": int(b.generation_id),
                                                        "assignments": assignments})
    except Exception as e:
        return {**out, "error_code": kafka_code(e).value}
    return {**out, "error_code": NONE, "assignment": _unb64(doc.get("assignment"))}


async def heartbeat(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    b = req.body
    try:
        await ctx.groups.call(b.group_id, "heartbeat", {"member_id": b.member_id, "generation": int(b.generation_id)})
    except Exception as e:
        return {"throttle_time": 0, "error_code": kafka_code(e).value}
    return {"throttle_time": 0, "error_code": NONE}


async def leave_group(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    b = req.body
    ids = [m.member_id for m in b.members] if req.api_version >= 3 else [b.member_id]
    results = []
    for mid in ids:
        try:
            await ctx.groups.call(b.group_id, "leave", {"member_id": mid})
            results.append({"member_id": mid, "group_instance_id": None, "error_code": NONE})
        except Exception as e:
            results.append({"member_id": mid, "group_instance_id": None, "error_code": kafka_code(e).value})
    top = results[0]["error_code"] if req.api_version < 3 and results else NONE
    return {"throttle_time": 0, "error_code": top, "members": results}


async def offset_commit(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    b = req.body
    offsets = [{"topic": t.name, "partition": int(p.partition_index), "offset": int(p.committed_offset),
                "metadata": p.committed_metadata or "", "leader_epoch": int(field_of(p, "committed_leader_epoch", -1))}
               for t in b.topics for p in t.partitions]
    code = NONE
    try:
        await ctx.groups.call(b.group_id, "commit", {"member_id": b.member_id,
                                                    "generation": int(b.generation_id_or_member_epoch),
                                                    "offsets": offsets})
    except Exception as e:
        code = kafka_code(e).value
    return {"throttle_time": 0, "topics": [
        {"name": t.name, "partitions": [{"partition_index": p.partition_index, "error_code": code}
                                        for p in t.partitions]} for t in b.topics]}


async def _fetch_group(ctx: KafkaContext, group_id: str, topics: Any) -> tuple[list[dict[str, Any]], int]:
    """(topics with their committed offsets, group error code) of one group."""
    wanted = None if topics is None else [[t.name, int(p)] for t in topics for p in _indexes(t)]
    try:
        doc = await ctx.groups.call(group_id, "offset_fetch", {"partitions": wanted})
    except Exception as e:
        return [], kafka_code(e).value
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for o in doc["offsets"]:
        by_topic.setdefault(o["topic"], []).append({
            "partition_index": o["partition"], "committed_offset": o["offset"], "committed_leader_epoch": -1,
            "metadata": o.get("metadata") or "", "error_code": NONE})
    return [{"name": n, "partitions": ps} for n, ps in by_topic.items()], NONE


def _indexes(t: Any) -> tuple[int, ...]:
    return tuple(field_of(t, "partition_indexes", ()))


async def offset_fetch(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    b = req.body
    if req.api_version >= 8:
        groups = []
        for g in b.groups:
            topics, code = await _fetch_group(ctx, g.group_id, g.topics)
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": code})
        return {"throttle_time": 0, "groups": groups}
    topics, code = await _fetch_group(ctx, b.group_id, b.topics)
    return {"throttle_time": 0, "topics": topics, "error_code": code}


async def describe_groups(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    out = []
    for group_id in req.body.groups:
        base = {"group_id": group_id, "group_state": "Dead", "protocol_type": "", "protocol_data": "",
                "members": [], "authorized_operations": NO_OPERATIONS}
        try:
            doc = await ctx.groups.call(group_id, "describe", {})
        except Exception as e:
            out.append({**base, "error_code": kafka_code(e).value})
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
        try:
            await ctx.groups.call(group_id, "delete", {})
            results.append({"group_id": group_id, "error_code": NONE})
        except Exception as e:
            results.append({"group_id": group_id, "error_code": kafka_code(e).value})
    return {"throttle_time": 0, "results": results}


async def list_groups(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    states = {s.lower() for s in field_of(req.body, "states_filter", ()) or ()}
    try:
        groups = await ctx.groups.list_all_groups()
    except GroupError as e:
        return {"throttle_time": 0, "error_code": kafka_code(e).value, "groups": []}
    return {"throttle_time": 0, "error_code": NONE, "groups": [
        {"group_id": g["group_id"], "protocol_type": g.get("protocol_type") or "", "group_state": g["state"]}
        for g in groups if not states or str(g["state"]).lower() in states]}
