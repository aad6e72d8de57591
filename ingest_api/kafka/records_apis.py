"""Produce, Fetch, ListOffsets and OffsetForLeaderEpoch on the Kafka door.

Produce appends the client's RecordBatch bytes as they came (`Node.produce_batches`, the binary
HTTP path's entry point: CRC and producer state checked, nothing re-encoded). Fetch answers the
stored batch bytes unchanged (`Node.fetch_wait`, which reads the remote tier below the local log
start); on a plain-TCP listener the batches in the local log are answered as file ranges that the
listener sends with sendfile (`fetch.zero.copy.enable`). A partition this node does not lead
answers NOT_LEADER_OR_FOLLOWER: the client refreshes its metadata and goes to the leader (the Kafka
door never forwards). A transactional Produce is appended only after the transaction coordinator
confirmed the partition is in the producer's ongoing transaction (KIP-890 part 1,
`TransactionService.verify_raw_produce`); otherwise, and for a transactional batch without a
transactional_id, INVALID_TXN_STATE.

Authorization (the node's authorizer, the ACLs HTTP checks): Produce needs WRITE on the topic (and a
transactional Produce WRITE on its TransactionalId: TRANSACTIONAL_ID_AUTHORIZATION_FAILED otherwise), Fetch
READ; ListOffsets and OffsetForLeaderEpoch DESCRIBE (which READ or WRITE imply), as Kafka and the
HTTP offsets route require. A refused topic's partitions answer TOPIC_AUTHORIZATION_FAILED.

Isolation (KIP-98): every Fetch answer carries the partition's last stable offset (LSO). A fetch
with isolation_level 1 (READ_COMMITTED) answers only whole batches below the LSO, with the aborted
transactions (producer id, first offset) overlapping what it returns, from the `.txnindex`
files; the client drops their records and the control batches itself. In the local log of a
plain-TCP listener it reads as read_uncommitted does — file ranges up to the LSO instead of the HW,
sent with sendfile — and the aborted transactions are looked up for exactly the offsets those
ranges hold (`FileSlices.next_offset`); elsewhere (TLS, the remote tier) the batches are read into
memory and cut at the LSO (`Node.read_committed_view`). ListOffsets with
isolation_level 1 answers LATEST with the LSO. A new leader answers LATEST (either isolation) with
OFFSET_NOT_AVAILABLE, which clients retry, until its HW reaches the start of its leader epoch
(KIP-207), so neither the end offset nor the LSO a client is told ever goes backwards.

Fetch sessions (KIP-227): `fetch_sessions.py` decides from the request's session id and epoch what
is fetched (the request's partitions, or the session's) and which partitions the answer carries
(all, or for an incremental fetch those with something new). Fetch v13+ and Produce v13 name
topics by id (the id the controller gave the topic, which Metadata answers); an id this node does
not know answers UNKNOWN_TOPIC_ID.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from lakelog.ingest_api.config.kafka import TLS_PROTOCOLS
from lakelog.ingest_api.kafka.codec import Request, field_of, ms
from lakelog.ingest_api.kafka.context import REFUSED, KafkaContext
from lakelog.ingest_api.error_table import kafka_code
from lakelog.ingest_api.kafka.server import Connection
from lakelog.ingest_api.replication.partition import PartitionKey
from lakelog.ingest_api.security.acl import Operation, ResourceType
from lakelog.logstore.errors import OffsetOutOfRangeError
from lakelog.logstore.file_records import FileSlices

NONE = ErrorCode.none.value
TOPIC_REFUSED = REFUSED[ResourceType.TOPIC]
ACKS = {0: "0", 1: "1", -1: "all"}
EARLIEST, LATEST, MAX_TIMESTAMP, EARLIEST_LOCAL = -2, -1, -3, -4
READ_COMMITTED = 1


# ---------------------------------------------------------------------- Produce


async def _produce_one(ctx: KafkaContext, topic: str, index: int, records: bytes | None, acks: str,
                       transactional_id: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"index": index, "base_offset": -1, "log_start_offset": -1, "record_errors": [],
                           "error_message": None}
    if not records:
        return {**out, "error_code": ErrorCode.corrupt_message.value, "error_message": "no record batch"}
    try:
        await ctx.node.transactions.verify_raw_produce(records, transactional_id, topic, index)
        info = await ctx.node.produce_batches(topic, index, records, acks)
    except Exception as e:
        code = kafka_code(e).value
        if code == ErrorCode.not_leader_or_follower.value:  # KIP-951: where the leader is now
            leader = _current_leader(ctx, topic, index)
            if leader is not None:
                out["current_leader"] = leader
        return {**out, "error_code": code, "error_message": str(e)[:500]}
    return {**out, "error_code": NONE, "base_offset": info.first_offset, "log_append_time": info.log_append_time,
            "log_start_offset": info.log_start_offset}


async def produce(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any] | None:
    body = req.body
    acks = ACKS.get(int(body.acks))
    transactional_id = body.transactional_id
    txn_ok = transactional_id is None or ctx.allowed(
        conn.principal, Operation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id, "Produce", conn.client_host)
    jobs, names = [], []
    for t in body.topic_data:
        name = field_of(t, "name")  # Produce v13+ names the topic by id
        topic_key = name if name is not None else t.topic_id
        if name is None:
            name = ctx.topic_name(t.topic_id)
        allowed = name is not None and _may(ctx, conn, Operation.WRITE, name, "Produce")
        for p in t.partition_data:
            names.append(topic_key)
            if name is None:
                jobs.append(_invalid(p.index, ErrorCode.unknown_topic_id.value))
            elif not txn_ok:
                jobs.append(_invalid(p.index, REFUSED[ResourceType.TRANSACTIONAL_ID]))
            elif not allowed:
                jobs.append(_invalid(p.index, TOPIC_REFUSED))
            elif acks is None:
                jobs.append(_invalid(p.index, ErrorCode.invalid_required_acks.value))
            else:
                jobs.append(_produce_one(ctx, name, int(p.index), p.records, acks, transactional_id))
    results = await asyncio.gather(*jobs)
    if acks == "0":
        return None  # acks=0: no answer at all
    by_topic: dict[Any, list[dict[str, Any]]] = {}
    for key, r in zip(names, results):
        by_topic.setdefault(key, []).append(r)
    return {"throttle_time": 0, "node_endpoints": _node_endpoints(ctx, results, conn),
            "responses": [{"topic_id": k, "partition_responses": rs} if isinstance(k, uuid.UUID)
                          else {"name": k, "topic_id": ctx.topic_id(k), "partition_responses": rs}
                          for k, rs in by_topic.items()]}


def _may(ctx: KafkaContext, conn: Connection, operation: Operation, topic: str, api: str) -> bool:
    return ctx.allowed(conn.principal, operation, ResourceType.TOPIC, topic, api, conn.client_host)


def _current_leader(ctx: KafkaContext, topic: str, index: int) -> dict[str, int] | None:
    t = ctx.node.image.topics.get(topic)
    if t is None or not 0 <= index < len(t.partitions) or t.partitions[index].leader < 0:
        return None
    st = t.partitions[index]
    return {"leader_id": st.leader, "leader_epoch": st.leader_epoch}


def _node_endpoints(ctx: KafkaContext, results: list[dict[str, Any]], conn: Connection) -> list[dict[str, Any]]:
    """The endpoints of the leaders named in `current_leader` hints (KIP-951)."""
    ids = {r["current_leader"]["leader_id"] for r in results if "current_leader" in r}
    out = []
    for node_id in sorted(ids):
        ep = ctx.endpoint(node_id, conn.listener.name)
        if ep is not None:
            reg = ctx.node.image.brokers.get(node_id)
            out.append({"node_id": node_id, "host": ep[0], "port": ep[1], "rack": reg.rack if reg else None})
    return out


async def _invalid(index: int, code: int) -> dict[str, Any]:
    return {"index": index, "error_code": code, "base_offset": -1, "record_errors": []}


# ---------------------------------------------------------------------- Fetch


def _read(ctx: KafkaContext, topic: str, partition: int) -> Any:
    return ctx.node.local_partition(PartitionKey(topic, partition))


async def _read_records(ctx: KafkaContext, p: Any, topic: str, index: int, offset: int, limit: int,
                        zero_copy: bool) -> Any:
    """The records from `offset`: as file ranges (FileSlices, sent with sendfile) when `zero_copy`
    and they are in the local log; else read into memory by the node's fetch path (TLS, and the
    remote tier below the local log start)."""
    if zero_copy and offset >= p.log.log_start_offset:
        try:
            return p.log.read_slices(offset, limit, max_offset=p.high_watermark)
        except OffsetOutOfRangeError:
            pass  # retention moved the local start meanwhile, or past the end: the node's path answers
    return await ctx.node.fetch_wait(topic, index, offset, limit, 0)


async def _read_committed(ctx: KafkaContext, p: Any, topic: str, index: int, offset: int, limit: int,
                          zero_copy: bool) -> tuple[Any, Any, list[Any]]:
    """(the read, the records answered, the aborted transactions they overlap) of a read_committed
    fetch: file ranges below the LSO when `zero_copy` and they are in the local log, else the
    batches read into memory and cut at the LSO."""
    if zero_copy and offset >= p.log.log_start_offset:
        lso = p.last_stable_offset  # before the read: the LSO only grows, and lies on a batch boundary
        try:
            result = p.log.read_slices(offset, limit, max_offset=lso)
        except OffsetOutOfRangeError:
            pass  # retention moved the local start meanwhile, or past the end: the node's path answers
        else:
            data = result.records
            found = await ctx.node.aborted_transactions(p, offset, data.next_offset) if len(data) else []
            return result, data, found
    result = await ctx.node.fetch_wait(topic, index, offset, limit, 0)
    data, found = await ctx.node.read_committed_view(p, offset, bytes(result.records))
    return result, data, found


async def _fetch_one(ctx: KafkaContext, topic: str, fp: Any, budget: int,
                     isolation: int = 0, zero_copy: bool = False) -> tuple[dict[str, Any], int]:
    index = int(fp.partition)
    out: dict[str, Any] = {"partition_index": index, "high_watermark": -1, "last_stable_offset": -1,
                           "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1,
                           "records": b""}
    try:
        p = ctx.node.partition(topic, index)  # raises unless this node leads it
        limit = max(1, min(int(fp.partition_max_bytes), budget))
        aborted = None
        if isolation == READ_COMMITTED:
            result, data, found = await _read_committed(ctx, p, topic, index, int(fp.fetch_offset), limit, zero_copy)
            hw, lso = p.high_watermark, p.last_stable_offset
            aborted = [{"producer_id": a.producer_id, "first_offset": a.first_offset} for a in found]
        else:
            result = await _read_records(ctx, p, topic, index, int(fp.fetch_offset), limit, zero_copy)
            hw, lso = p.high_watermark, p.last_stable_offset
            data = result.records if isinstance(result.records, FileSlices) else bytes(result.records)
    except Exception as e:
        leader = _current_leader(ctx, topic, index)
        if leader is not None:
            out["current_leader"] = leader
        return {**out, "error_code": kafka_code(e).value}, 0
    return {**out, "error_code": NONE, "high_watermark": hw, "last_stable_offset": lso,
            "log_start_offset": result.log_start_offset, "aborted_transactions": aborted,
            "records": data}, len(data)


async def _fetch_all(ctx: KafkaContext, topics: list[tuple[str, list[Any]]], max_bytes: int,
                     isolation: int = 0, zero_copy: bool = False) -> tuple[list[dict[str, Any]], int]:
    budget, total, responses = max_bytes, 0, []
    for topic, parts in topics:
        docs = []
        for fp in parts:
            doc, n = await _fetch_one(ctx, topic, fp, budget if total == 0 else max(0, budget), isolation, zero_copy)
            if total and n > budget:  # over the response's max.bytes: leave it for the next fetch
                doc, n = {**doc, "records": b""}, 0
            budget -= n
            total += n
            docs.append(doc)
        responses.append({"topic": topic, "partitions": docs})
    return responses, total


async def fetch(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    body = req.body
    requested, unknown = _requested_topics(ctx, body.topics)
    forgotten = _forgotten(ctx, field_of(body, "forgotten_topics_data", ()) or ())
    session = ctx.fetch_sessions.open(int(field_of(body, "session_id", 0)), int(field_of(body, "session_epoch", -1)),
                                      requested, forgotten)
    if session.error_code != NONE:
        return {"throttle_time": 0, "error_code": session.error_code, "session_id": 0, "responses": []}
    cfg = ctx.node.config
    max_bytes = max(1, min(int(field_of(body, "max_bytes", cfg.fetch_max_bytes)), cfg.fetch_max_bytes))
    wait_s = min(ms(body.max_wait), cfg.fetch_max_wait_ms) / 1000
    min_bytes = int(body.min_bytes)
    isolation = int(field_of(body, "isolation_level", 0))
    topics, refused = [], []
    for topic, parts in session.topics:
        if _may(ctx, conn, Operation.READ, topic, "Fetch"):
            topics.append((topic, parts))
        else:
            refused.append({"topic": topic, "partitions": [_refused_fetch(int(fp.partition)) for fp in parts]})
    # Plain TCP: record bytes go from the segment files to the socket with sendfile (server.py).
    zero_copy = cfg.fetch_zero_copy_enable and conn.listener.security_protocol not in TLS_PROTOCOLS
    deadline = time.monotonic() + wait_s
    while True:
        responses, total = await _fetch_all(ctx, topics, max_bytes, isolation, zero_copy)
        left = deadline - time.monotonic()
        if total >= min_bytes or left <= 0 or _any_error(responses) or not topics:
            break
        await _wait_for_any(ctx, topics, responses, left)
        if time.monotonic() >= deadline:
            responses, total = await _fetch_all(ctx, topics, max_bytes, isolation, zero_copy)
            break
    answered = [{**t, "topic_id": ctx.topic_id(t["topic"])} for t in session.answer(responses + refused)]
    return {"throttle_time": 0, "error_code": NONE, "session_id": session.session_id,
            "responses": answered + unknown}


def _requested_topics(ctx: KafkaContext, fetch_topics: Any) -> tuple[list[tuple[str, list[Any]]], list[dict[str, Any]]]:
    """The request's (topic name, partitions), and the answers for topic ids this node does not know
    (Fetch v13+ names topics by id; earlier versions by name)."""
    named, unknown = [], []
    for t in fetch_topics:
        name = field_of(t, "topic")
        if name is None:
            name = ctx.topic_name(t.topic_id)
        if name is None:
            unknown.append({"topic_id": t.topic_id, "partitions": [
                {**_refused_fetch(int(fp.partition)), "error_code": ErrorCode.unknown_topic_id.value}
                for fp in t.partitions]})
        else:
            named.append((name, list(t.partitions)))
    return named, unknown


def _forgotten(ctx: KafkaContext, forgotten_topics: Any) -> list[tuple[str, int]]:
    out = []
    for t in forgotten_topics:
        name = field_of(t, "topic")
        if name is None:
            name = ctx.topic_name(t.topic_id)
        if name is not None:
            out.extend((name, int(p)) for p in t.partitions)
    return out


def _refused_fetch(index: int) -> dict[str, Any]:
    return {"partition_index": index, "error_code": TOPIC_REFUSED, "high_watermark": -1, "last_stable_offset": -1,
            "log_start_offset": -1, "aborted_transactions": None, "preferred_read_replica": -1, "records": b""}


def _any_error(responses: list[dict[str, Any]]) -> bool:
    return any(p["error_code"] != NONE for t in responses for p in t["partitions"])


async def _wait_for_any(ctx: KafkaContext, topics: list[tuple[str, list[Any]]], responses: list[dict[str, Any]],
                        timeout_s: float) -> None:
    """Until some fetched partition's HW passes both its fetch offset and the HW just answered (new
    data since the last read, so a fetch short of min.bytes does not spin), or `timeout_s`."""
    waits = []
    for (topic, parts), answered in zip(topics, responses):
        for fp, doc in zip(parts, answered["partitions"]):
            p = _read(ctx, topic, int(fp.partition))
            if p is not None:
                seen = max(int(fp.fetch_offset), int(doc["high_watermark"]))
                waits.append(asyncio.ensure_future(p.wait_for_data(seen, timeout_s)))
    if not waits:
        await asyncio.sleep(timeout_s)
        return
    try:
        await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


# ---------------------------------------------------------------------- ListOffsets and OffsetForLeaderEpoch


async def _list_one(ctx: KafkaContext, topic: str, lp: Any, isolation: int = 0) -> dict[str, Any]:
    index, ts = int(lp.partition_index), int(lp.timestamp)
    out: dict[str, Any] = {"partition_index": index, "timestamp": -1, "offset": -1, "leader_epoch": -1}
    try:
        p = ctx.node.partition(topic, index)
        out["leader_epoch"] = p.leader_epoch
        if ts in (EARLIEST, LATEST):
            beginning, end = await ctx.node.offsets(topic, index)
            if ts == LATEST and isolation == READ_COMMITTED:
                end = p.consumer_stable_offset()
            out["offset"] = beginning if ts == EARLIEST else end
        elif ts == EARLIEST_LOCAL:
            out["offset"] = p.log_start_offset
        elif ts < 0:
            return {**out, "error_code": ErrorCode.invalid_request.value}
        else:
            found = await ctx.node.offset_for_timestamp(topic, index, ts)
            if found is not None:
                out["offset"], out["timestamp"] = found
    except Exception as e:
        return {**out, "error_code": kafka_code(e).value}
    return {**out, "error_code": NONE}


async def list_offsets(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    isolation = int(field_of(req.body, "isolation_level", 0))
    topics = []
    for t in req.body.topics:
        if not _may(ctx, conn, Operation.DESCRIBE, t.name, "ListOffsets"):
            topics.append({"name": t.name, "partitions": [
                {"partition_index": int(lp.partition_index), "error_code": TOPIC_REFUSED, "timestamp": -1,
                 "offset": -1, "leader_epoch": -1} for lp in t.partitions]})
            continue
        topics.append({"name": t.name, "partitions": [await _list_one(ctx, t.name, lp, isolation)
                                                      for lp in t.partitions]})
    return {"throttle_time": 0, "topics": topics}


def _epoch_one(ctx: KafkaContext, topic: str, ep: Any) -> dict[str, Any]:
    index = int(ep.partition)
    out: dict[str, Any] = {"partition": index, "leader_epoch": -1, "end_offset": -1}
    try:
        p = ctx.node.partition(topic, index)
        current = int(field_of(ep, "current_leader_epoch", -1))
        if current >= 0 and current < p.leader_epoch:
            return {**out, "error_code": ErrorCode.fenced_leader_epoch.value}
        if current > p.leader_epoch:
            return {**out, "error_code": ErrorCode.unknown_leader_epoch.value}
        epoch, end = p.log.end_offset_for_epoch(int(ep.leader_epoch))
    except Exception as e:
        return {**out, "error_code": kafka_code(e).value}
    return {**out, "error_code": NONE, "leader_epoch": epoch, "end_offset": end}


async def offset_for_leader_epoch(ctx: KafkaContext, req: Request, conn: Connection) -> dict[str, Any]:
    out = []
    for t in req.body.topics:
        if _may(ctx, conn, Operation.DESCRIBE, t.topic, "OffsetForLeaderEpoch"):
            out.append({"topic": t.topic, "partitions": [_epoch_one(ctx, t.topic, ep) for ep in t.partitions]})
        else:
            out.append({"topic": t.topic, "partitions": [
                {"partition": int(ep.partition), "error_code": TOPIC_REFUSED, "leader_epoch": -1, "end_offset": -1}
                for ep in t.partitions]})
    return {"throttle_time": 0, "topics": out}
