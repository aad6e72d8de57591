"""Transactions on the Kafka door: InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn, WriteTxnMarkers, DescribeTransactions, ListTransactions,
DescribeProducers. (The KIP-890 check of a transactional Produce is records_apis.py's.)

A client finds its transaction coordinator with FindCoordinator (key type 1, metadata_apis.py) and
sends these requests there: a node that does not coordinate the id answers NOT_COORDINATOR (the
client looks it up again), one loading it COORDINATOR_LOAD_IN_PROGRESS. The coordinator is
`node.transactions` (ingest_api/transactions/service.py), the same one any other front door uses.

Versions (versions.py): the transaction protocol of KIP-98 with KIP-360 (InitProducerId with the
current producer id and epoch), KIP-447 (TxnOffsetCommit with the group's generation and member) and
KIP-890 part 1 (the leader verifies a transactional batch's partition with the coordinator). The
versions of KIP-890 part 2 (EndTxn v5, AddPartitionsToTxn v4+, TxnOffsetCommit v5, InitProducerId
v6) are not served, and `transaction.version` is not advertised, so clients run transactions
version 1. A stale epoch answers PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH to versions older than
KIP-588's (InitProducerId < 4, AddPartitionsToTxn / AddOffsetsToTxn / EndTxn < 2).

Authorization (the node's authorizer), as Kafka's: InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn and TxnOffsetCommit need WRITE on the TransactionalId (refused:
TRANSACTIONAL_ID_AUTHORIZATION_FAILED for the whole request); besides, AddPartitionsToTxn needs
WRITE on each topic, AddOffsetsToTxn READ on the group, TxnOffsetCommit READ on the group and on each
topic. DescribeTransactions needs DESCRIBE on each TransactionalId (which WRITE implies) and leaves
out the partitions of topics the principal may not DESCRIBE; ListTransactions lists only the ids the
principal may DESCRIBE. DescribeProducers needs READ on each topic, WriteTxnMarkers ALTER on the
cluster (the node's markers travel between nodes on the signed internal channel). A transactional
Produce's WRITE on its TransactionalId is records_apis.py's check.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.schema.errors import ErrorCode

from lakelog.ingest_api.error_table import coordinator_code, kafka_code
from lakelog.ingest_api.kafka.codec import Request, field_of, ms
from lakelog.ingest_api.kafka.context import REFUSED, KafkaContext
from lakelog.ingest_api.kafka.server import Connection
from lakelog.ingest_api.security.acl import CLUSTER_NAME, Operation, ResourceType

NONE = ErrorCode.none.value
FENCED, OLD_FENCED = ErrorCode.producer_fenced.value, ErrorCode.invalid_producer_epoch.value
NOT_ATTEMPTED = ErrorCode.operation_not_attempted.value
TXN_REFUSED = REFUSED[ResourceType.TRANSACTIONAL_ID]
#: api_key -> the first version that knows PRODUCER_FENCED (KIP-588); older ones get INVALID_PRODUCER_EPOCH.
_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2}


def _code(e: BaseException, req: Request) -> int:
    code = int(coordinator_code(e))
    if code == FENCED and req.api_version < _FENCED_SINCE.get(req.api_key, 0):
        return OLD_FENCED
    return code


def _instant(ms_since_epoch: int) -> datetime.datetime:
    """A timestamp field that is never null on the wire (-1: none) as the codec's datetime."""
    return datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(milliseconds=ms_since_epoch)


def _may(ctx: KafkaContext, conn: Connection, operation: Operation, rtype: ResourceType, name: str, api: str) -> bool:
    return ctx.allowed(conn.principal, operation, rtype, name, api, conn.client_host)


def may_write_txn(ctx: KafkaContext, conn: Connection, transactional_id: str, api: str) -> bool:
    """WRITE on the TransactionalId: what every request of a transaction's producer needs."""
    return _may(ctx, conn, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id, api)


async def init_transactional(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    """InitProducerId with a transactional id (metadata_apis.init_producer_id hands it over)."""
    b = req.body
    out = {"throttle_time": 0, "producer_id": -1, "producer_epoch": -1}
    if not may_write_txn(ctx, conn, b.transactional_id, "InitProducerId"):
        return {**out, "error_code": TXN_REFUSED}
    try:
        await ctx.node.transactions.ensure_state_topic()  # a client that skipped FindCoordinator
        doc = await ctx.node.transactions.run("init", {
            "transactional_id": b.transactional_id, "timeout_ms": ms(b.transaction_timeout),
            "producer_id": int(field_of(b, "producer_id", -1)), "producer_epoch": int(field_of(b, "producer_epoch", -1))})
    except Exception as e:
        return {**out, "error_code": _code(e, req)}
    return {**out, "error_code": NONE, "producer_id": doc["producer_id"], "producer_epoch": doc["producer_epoch"]}


async def add_partitions_to_txn(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    b = req.body
    wanted = [(t.name, int(p)) for t in b.v3_and_below_topics for p in t.partitions]
    txn_ok = may_write_txn(ctx, conn, b.v3_and_below_transactional_id, "AddPartitionsToTxn")
    refused = {tp for tp in wanted if not _may(ctx, conn, Operation.WRITE, ResourceType.TOPIC, tp[0],
                                               "AddPartitionsToTxn")}
    unknown = {tp for tp in wanted if tp not in refused and not _exists(ctx, *tp)}
    codes: dict[tuple[str, int], int] = {}
    if not txn_ok:
        codes = {tp: TXN_REFUSED for tp in wanted}
    elif refused or unknown:  # nothing is added: the others were not attempted
        for tp in wanted:
            codes[tp] = (REFUSED[ResourceType.TOPIC] if tp in refused else
                         ErrorCode.unknown_topic_or_partition.value if tp in unknown else NOT_ATTEMPTED)
    else:
        try:
            await ctx.node.transactions.run("add_partitions", {
                "transactional_id": b.v3_and_below_transactional_id, "producer_id": int(b.v3_and_below_producer_id),
                "producer_epoch": int(b.v3_and_below_producer_epoch), "partitions": [list(tp) for tp in wanted]})
            code = NONE
        except Exception as e:
            code = _code(e, req)
        codes = {tp: code for tp in wanted}
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, p), code in codes.items():
        by_topic.setdefault(topic, []).append({"partition_index": p, "partition_error_code": code})
    return {"throttle_time": 0, "results_by_topic_v3_and_below": [
        {"name": t, "results_by_partition": rs} for t, rs in by_topic.items()]}


def _exists(ctx: KafkaContext, topic: str, partition: int) -> bool:
    t = ctx.node.image.topics.get(topic)
    return t is not None and 0 <= partition < len(t.partitions)


async def add_offsets_to_txn(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    b = req.body
    if not may_write_txn(ctx, conn, b.transactional_id, "AddOffsetsToTxn"):
        return {"throttle_time": 0, "error_code": TXN_REFUSED}
    if not _may(ctx, conn, Operation.READ, ResourceType.GROUP, b.group_id, "AddOffsetsToTxn"):
        return {"throttle_time": 0, "error_code": REFUSED[ResourceType.GROUP]}
    try:
        await ctx.node.transactions.run("add_offsets", {
            "transactional_id": b.transactional_id, "producer_id": int(b.producer_id),
            "producer_epoch": int(b.producer_epoch), "group_id": b.group_id})
    except Exception as e:
        return {"throttle_time": 0, "error_code": _code(e, req)}
    return {"throttle_time": 0, "error_code": NONE}


async def end_txn(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    b = req.body
    if not may_write_txn(ctx, conn, b.transactional_id, "EndTxn"):
        return {"throttle_time": 0, "error_code": TXN_REFUSED}
    try:
        await ctx.node.transactions.run("end", {
            "transactional_id": b.transactional_id, "producer_id": int(b.producer_id),
            "producer_epoch": int(b.producer_epoch), "commit": bool(b.committed)})
    except Exception as e:
        return {"throttle_time": 0, "error_code": _code(e, req)}
    return {"throttle_time": 0, "error_code": NONE}


async def txn_offset_commit(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    b = req.body
    txn_ok = may_write_txn(ctx, conn, b.transactional_id, "TxnOffsetCommit")
    group_ok = txn_ok and _may(ctx, conn, Operation.READ, ResourceType.GROUP, b.group_id, "TxnOffsetCommit")
    offsets, codes = [], {}
    for t in b.topics:
        topic_ok = group_ok and _may(ctx, conn, Operation.READ, ResourceType.TOPIC, t.name, "TxnOffsetCommit")
        for p in t.partitions:
            key = (t.name, int(p.partition_index))
            if not txn_ok:
                codes[key] = TXN_REFUSED
            elif not group_ok:
                codes[key] = REFUSED[ResourceType.GROUP]
            elif not topic_ok:
                codes[key] = REFUSED[ResourceType.TOPIC]
            else:
                offsets.append({"topic": t.name, "partition": key[1], "offset": int(p.committed_offset),
                                "leader_epoch": int(field_of(p, "committed_leader_epoch", -1)),
                                "metadata": p.committed_metadata or ""})
    if offsets:
        try:
            await ctx.groups.call(b.group_id, "txn_commit", {
                "transactional_id": b.transactional_id, "producer_id": int(b.producer_id),
                "producer_epoch": int(b.producer_epoch), "generation": int(field_of(b, "generation_id", -1)),
                "member_id": field_of(b, "member_id", "") or "", "offsets": offsets})
            code = NONE
        except Exception as e:
            code = _code(e, req)
        for o in offsets:
            codes[(o["topic"], o["partition"])] = code
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, p), code in codes.items():
        by_topic.setdefault(topic, []).append({"partition_index": p, "error_code": code})
    return {"throttle_time": 0, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}


async def write_txn_markers(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    allowed = _may(ctx, conn, Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME, "WriteTxnMarkers")
    out = []
    for m in req.body.markers:
        wanted = [{"topic": t.name, "partition": int(p), "producer_id": int(m.producer_id),
                   "producer_epoch": int(m.producer_epoch), "commit": bool(m.transaction_result),
                   "coordinator_epoch": int(m.coordinator_epoch)} for t in m.topics for p in t.partition_indexes]
        if allowed:
            results = [{**r, "code": NONE if r["error"] is None else ErrorCode.not_leader_or_follower.value}
                       for r in await ctx.node.transactions.write_markers_here(wanted)]
        else:
            results = [{**w, "code": REFUSED[ResourceType.CLUSTER]} for w in wanted]
        by_topic: dict[str, list[dict[str, Any]]] = {}
        for r in results:
            by_topic.setdefault(r["topic"], []).append({"partition_index": r["partition"], "error_code": r["code"]})
        out.append({"producer_id": int(m.producer_id),
                    "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]})
    return {"markers": out}


async def describe_transactions(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    states = []
    for tid in req.body.transactional_ids:
        base = {"transactional_id": tid, "transaction_state": "", "transaction_timeout": 0,
                "transaction_start_time": _instant(-1), "producer_id": -1, "producer_epoch": -1, "topics": []}
        if not _may(ctx, conn, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid, "DescribeTransactions"):
            states.append({**base, "error_code": TXN_REFUSED})
            continue
        try:
            d = ctx.node.transactions.describe_here(tid)
        except Exception as e:
            states.append({**base, "error_code": _code(e, req)})
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, p in d["partitions"]:
            if ctx.allowed(conn.principal, Operation.DESCRIBE, ResourceType.TOPIC, topic, "DescribeTransactions",
                           conn.client_host, audit=False):
                by_topic.setdefault(topic, []).append(p)
        states.append({**base, "error_code": NONE, "transaction_state": d["state"],
                       "transaction_timeout": d["timeout_ms"], "transaction_start_time": _instant(d["start_ms"]),
                       "producer_id": d["producer_id"], "producer_epoch": d["producer_epoch"],
                       "topics": [{"topic": t, "partitions": ps} for t, ps in sorted(by_topic.items())]})
    return {"throttle_time": 0, "transaction_states": states}


async def list_transactions(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    b = req.body
    known = {"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
             "PrepareEpochFence"}
    filters = list(b.state_filters)
    doc = await ctx.node.transactions.handle("list", {
        "states": [s for s in filters if s in known], "producer_ids": [int(p) for p in b.producer_id_filters],
        "min_duration_ms": int(field_of(b, "duration_filter", -1))})
    unknown = [s for s in filters if s not in known]
    # Only unknown states asked for: nothing matches (an empty filter would mean "all").
    txns = [] if filters and len(unknown) == len(filters) else doc["transactions"]
    txns = [t for t in txns if ctx.allowed(conn.principal, Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                                           t["transactional_id"], "ListTransactions", conn.client_host, audit=False)]
    return {"throttle_time": 0, "error_code": NONE, "unknown_state_filters": unknown, "transaction_states": [
        {"transactional_id": t["transactional_id"], "producer_id": t["producer_id"], "transaction_state": t["state"]}
        for t in txns]}


async def describe_producers(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    topics = []
    for t in req.body.topics:
        allowed = _may(ctx, conn, Operation.READ, ResourceType.TOPIC, t.name, "DescribeProducers")
        parts = []
        for index in t.partition_indexes:
            base = {"partition_index": int(index), "error_message": None, "active_producers": []}
            if not allowed:
                parts.append({**base, "error_code": REFUSED[ResourceType.TOPIC]})
                continue
            try:
                p = ctx.node.partition(t.name, int(index))
                producers = _active_producers(p)
            except Exception as e:
                parts.append({**base, "error_code": int(kafka_code(e)), "error_message": str(e)[:300]})
                continue
            parts.append({**base, "error_code": NONE, "active_producers": producers})
        topics.append({"name": t.name, "partitions": parts})
    return {"throttle_time": 0, "topics": topics}


def _active_producers(partition: Any) -> list[dict[str, Any]]:
    """The producers the partition's log tracks (idempotent and transactional)."""
    out = []
    for pid, entry in partition.log.producer_state.items():
        out.append({"producer_id": pid, "producer_epoch": entry.producer_epoch, "last_sequence": entry.last_seq,
                    "last_timestamp": entry.last_timestamp, "coordinator_epoch": entry.coordinator_epoch,
                    "current_txn_start_offset": entry.current_txn_first_offset})
    return out
