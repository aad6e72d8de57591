"""The group coordinator on a node: the pure `GroupCoordinator` fed with requests and a clock, the
`__consumer_offsets` partitions it leads loaded and appended to, and the routing of group requests
from any node to the group's coordinator.

Which node coordinates group G: the leader of partition `abs(G.hashCode()) % offsets.topic.num.partitions`
of `__consumer_offsets` (ingest_api/groups/hashing.py). The topic is created on first use (a compacted
topic, replication factor min(offsets.topic.replication.factor, live nodes), like any other topic,
through the controller) — so its leaders move with node failures like any partition's.

Leadership, loading (`hosting`, replication/coordinator_partitions.py): a timer
(`group.coordinator.tick.ms`) compares the `__consumer_offsets` partitions this node leads with
those it has loaded. For a newly led partition (or a new leader epoch) it reads the local log from
the log start to the log end off the event loop and rebuilds the committed offsets of that
partition's groups; requests for those groups answer COORDINATOR_LOAD_IN_PROGRESS (retry)
meanwhile. Group membership is not stored: after a coordinator moves, members get UNKNOWN_MEMBER_ID
from the new one and rejoin. For a partition it no longer leads it forgets the groups (pending
answers fail NOT_COORDINATOR).

Commits: validated by the state machine, then written by `offsets` (groups/offsets_log.py): appended
with acks=all to the coordinator partition and put in the cache only once acknowledged, so a commit
that was answered survives the coordinator's node. Offsets of empty groups older than
`offsets.retention.minutes` get tombstones the local cleaner compacts away.

Routing: `call(group, op, args)` runs an operation on the coordinator — here, or as a signed
internal request `POST /internal/groups/{op}` to the coordinator's node. Answers are JSON with an
`error` field holding Kafka's error name (re-raised as the matching `GroupError` by the caller).

Concurrency: everything runs on the server's event loop; the log read of a load runs in a thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

from lakelog.infra import error_codes
from lakelog.ingest_api.errors import (
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    NotReadyError,
    PeerUnavailableError,
)
from lakelog.ingest_api.cluster.metadata_follower import cancel_task
from lakelog.ingest_api.groups.assignors import TopicPartition
from lakelog.ingest_api.groups.coordinator import CoordinatorConfig, Effect, GroupCoordinator, JoinResult
from lakelog.ingest_api.groups.errors import (
    BY_KAFKA_NAME,
    CoordinatorLoadInProgressError,
    GroupError,
    GroupNotFoundError,
    NonEmptyGroupError,
    NotCoordinatorError,
    OffsetMetadataTooLargeError,
    RebalanceInProgressError,
)
from lakelog.ingest_api.groups.hashing import OFFSETS_TOPIC, coordinator_partition
from lakelog.ingest_api.groups.subscriptions import subscribed_topics
from lakelog.ingest_api.groups.offsets_codec import CommittedOffset, OffsetKey
from lakelog.ingest_api.groups.offsets_log import OffsetsLog, OffsetsRead
from lakelog.ingest_api.errors import InvalidRequestError, NodeError
from lakelog.ingest_api.replication.coordinator_partitions import CoordinatorPartitions, Hosting, retry_until
from lakelog.ingest_api.replication.partition import monotonic_ms, now_ms

log = logging.getLogger("lakelog.groups")

#: Most partitions in one commit request.
MAX_COMMIT_PARTITIONS = 10_000
#: Extra wait beyond the rebalance timeout for a delayed JoinGroup / SyncGroup answer.
ANSWER_SLACK_S = 2.0
#: Errors after which a call is worth retrying (the coordinator moves, loads, or is unreachable).
RETRIABLE = (NotCoordinatorError, CoordinatorLoadInProgressError, LeaderNotAvailableError, NotReadyError,
             NotLeaderOrFollowerError)
#: Errors another node's coordinator answers that a caller re-raises as themselves, by `error_code`.
_RELAYED_BY_CODE: dict[int, type[NodeError]] = {
    error_codes.code(c.__name__).error_code: c for c in (*BY_KAFKA_NAME.values(), NotReadyError)}


def _effect_doc(e: Effect) -> dict[str, Any]:
    if isinstance(e, JoinResult):
        return {"error": e.error.kafka_name if e.error else None, "member_id": e.member_id,  # type: ignore[union-attr]
                "generation": e.generation, "protocol": e.protocol, "leader_id": e.leader_id,
                "members": [[m, meta] for m, meta in e.members]}
    return {"error": e.error.kafka_name if e.error else None, "member_id": e.member_id,  # type: ignore[union-attr]
            "generation": e.generation, "assignment": e.assignment}


def raise_group_error(doc: dict[str, Any]) -> dict[str, Any]:
    """The answer, or its `error` raised as the matching GroupError."""
    name = doc.get("error")
    if name:
        exc = BY_KAFKA_NAME.get(name, GroupError)(str(doc.get("message") or name))
        exc.doc = doc  # type: ignore[attr-defined]  # e.g. the member id of a join still in progress
        raise exc
    return doc


class GroupService:
    def __init__(self, node: Any) -> None:
        self.node = node
        cfg = node.config
        self.config = cfg
        self.coordinator = GroupCoordinator(CoordinatorConfig.from_keys(cfg), self._new_member_id)
        #: The __consumer_offsets partitions this node leads and has loaded.
        self.hosting: CoordinatorPartitions[OffsetsRead] = CoordinatorPartitions(
            node, OFFSETS_TOPIC, cfg.offsets_topic_num_partitions, what="groups", read=OffsetsLog.read,
            replay=self._replay, reset=self._forget_partition)
        #: The committed offsets' records in those partitions.
        self.offsets = OffsetsLog(node, self.coordinator, self.hosting)
        #: (group, member id, "join" | "sync") -> the HTTP request waiting for that answer.
        self._waiters: dict[tuple[str, str, str], asyncio.Future] = {}
        self._task: asyncio.Task | None = None
        self._next_expiry = 0.0

    @staticmethod
    def _new_member_id(client_id: str) -> str:
        return f"{client_id or 'consumer'}-{uuid.uuid4()}"

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._next_expiry = time.monotonic() + self.config.offsets_retention_check_interval_ms / 1000
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="group-coordinator")

    async def stop(self) -> None:
        await cancel_task(self._task)
        await self.hosting.stop()
        self._deliver(self.coordinator.remove_groups(lambda g: True))
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(NotCoordinatorError("the node is shutting down"))
        self._waiters.clear()

    async def _loop(self) -> None:
        interval = self.config.group_coordinator_tick_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.hosting.check_leadership()
                self._deliver(self.coordinator.tick(monotonic_ms()))
                if time.monotonic() >= self._next_expiry:
                    self._next_expiry = time.monotonic() + self.config.offsets_retention_check_interval_ms / 1000
                    await self.offsets.expire()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("group coordinator tick failed")

    # ------------------------------------------------------------------ partitions led and loaded

    def num_partitions(self) -> int:
        return self.hosting.num_partitions()

    def partition_for(self, group_id: str) -> int:
        return coordinator_partition(group_id, self.num_partitions())

    def coordinator_node(self, group_id: str) -> int:
        """The node coordinating the group (-1 while its partition has no leader or the topic is missing)."""
        return self.hosting.leader(self.partition_for(group_id))

    def _replay(self, p: int, epoch: int, loaded: OffsetsRead) -> int:
        """Partition `p` loaded: its groups rebuilt from what was read (the hosting's replay)."""
        self._forget_partition(p)
        return self.offsets.replay(loaded)

    def _forget_partition(self, p: int) -> None:
        """Partition `p` is no longer coordinated here: its groups forgotten (the hosting's reset)."""
        n = self.num_partitions()
        self._deliver(self.coordinator.remove_groups(lambda g: coordinator_partition(g, n) == p))
        self.offsets.forget(p)

    def _require(self, group_id: str) -> int:
        """The group's partition, if this node coordinates it and has loaded it."""
        if not group_id:
            raise InvalidRequestError("the group id must not be empty")
        p = self.partition_for(group_id)
        hosting = self.hosting.state(p)
        if hosting is Hosting.LOADED:
            return p
        if hosting is Hosting.LOADING:
            raise CoordinatorLoadInProgressError(f"node {self.node.node_id} is loading the offsets of group "
                                                 f"{group_id}; retry")
        raise NotCoordinatorError(f"node {self.node.node_id} is not the coordinator of group {group_id}")

    # ------------------------------------------------------------------ delayed answers

    def _deliver(self, effects: list[Effect]) -> None:
        for e in effects:
            kind = "join" if isinstance(e, JoinResult) else "sync"
            fut = self._waiters.pop((e.group_id, e.member_id, kind), None)
            if fut is not None and not fut.done():
                fut.set_result(e)

    async def _await_answer(self, key: tuple[str, str, str], effects: list[Effect], timeout_s: float) -> Effect | None:
        old = self._waiters.pop(key, None)
        if old is not None and not old.done():
            old.set_exception(RebalanceInProgressError("superseded by a newer request of the same member"))
        fut = asyncio.get_running_loop().create_future()
        self._waiters[key] = fut
        self._deliver(effects)
        try:
            return await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            return None
        finally:
            if self._waiters.get(key) is fut:
                del self._waiters[key]

    # ------------------------------------------------------------------ operations on the coordinator

    async def handle(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run one operation here, the coordinator; group errors are answered in the `error` field."""
        handler = _OPS.get(op)
        if handler is None:
            raise InvalidRequestError(f"unknown group operation {op!r}")
        try:
            return await handler(self, args)
        except GroupError as e:
            return {"error": e.kafka_name, "message": str(e)}

    async def _op_join(self, a: dict[str, Any]) -> dict[str, Any]:
        group = str(a["group_id"])
        self._require(group)
        protocols = [(str(p[0]), p[1]) for p in a["protocols"]]
        rebalance_ms = int(a.get("rebalance_timeout_ms") or a["session_timeout_ms"])
        mid, effects = self.coordinator.join(
            group, str(a.get("member_id") or ""), client_id=str(a.get("client_id", "")),
            client_host=str(a.get("client_host", "")), session_timeout_ms=int(a["session_timeout_ms"]),
            rebalance_timeout_ms=rebalance_ms, protocol_type=str(a.get("protocol_type", "consumer")),
            protocols=protocols, now_ms=monotonic_ms())
        if not a.get("member_id") and a.get("require_known_member_id"):
            # Kafka's two-step join (KIP-394): the new member learns its id before it waits, so a
            # client that stops during the rebalance can leave instead of holding the group up.
            self._deliver(effects)
            return {"error": RebalanceInProgressError.kafka_name, "message": "rejoin with the member id",
                    "member_id": mid}
        wait = (max(rebalance_ms, int(a["session_timeout_ms"])) + self.config.group_initial_rebalance_delay_ms) / 1000
        res = await self._await_answer((group, mid, "join"), effects, wait + ANSWER_SLACK_S)
        if res is None:  # still rebalancing: the member rejoins with its id
            return {"error": RebalanceInProgressError.kafka_name, "message": "the rebalance is still going on; rejoin",
                    "member_id": mid}
        return _effect_doc(res)

    async def _op_sync(self, a: dict[str, Any]) -> dict[str, Any]:
        group, mid = str(a["group_id"]), str(a["member_id"])
        self._require(group)
        assignments = a.get("assignments")
        effects = self.coordinator.sync(group, mid, int(a["generation"]),
                                        dict(assignments) if assignments is not None else None, monotonic_ms())
        member = self.coordinator.groups[group].members.get(mid)
        wait = (member.rebalance_timeout_ms if member else self.config.group_max_session_timeout_ms) / 1000
        res = await self._await_answer((group, mid, "sync"), effects, wait + ANSWER_SLACK_S)
        if res is None:
            return {"error": RebalanceInProgressError.kafka_name, "message": "no assignment yet; rejoin"}
        return _effect_doc(res)

    async def _op_heartbeat(self, a: dict[str, Any]) -> dict[str, Any]:
        group = str(a["group_id"])
        self._require(group)
        self.coordinator.heartbeat(group, str(a["member_id"]), int(a["generation"]), monotonic_ms())
        return {"error": None}

    async def _op_leave(self, a: dict[str, Any]) -> dict[str, Any]:
        group = str(a["group_id"])
        self._require(group)
        self._deliver(self.coordinator.leave(group, str(a["member_id"]), monotonic_ms()))
        return {"error": None}

    async def _op_commit(self, a: dict[str, Any]) -> dict[str, Any]:
        group = str(a["group_id"])
        p = self._require(group)
        member_id, generation = str(a.get("member_id") or ""), int(a.get("generation", -1))
        offsets = a.get("offsets") or []
        if not isinstance(offsets, list) or len(offsets) > MAX_COMMIT_PARTITIONS:
            raise InvalidRequestError(f"offsets must be a list of at most {MAX_COMMIT_PARTITIONS} entries")
        self.coordinator.check_commit(group, member_id, generation)
        now = now_ms()
        parsed: list[tuple[TopicPartition, CommittedOffset]] = []
        for o in offsets:
            metadata = str(o.get("metadata") or "")
            if len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                raise OffsetMetadataTooLargeError(f"metadata of {o['topic']}-{o['partition']} is longer than "
                                                  f"offset.metadata.max.bytes={self.config.offset_metadata_max_bytes}")
            parsed.append((TopicPartition(str(o["topic"]), int(o["partition"])),
                           CommittedOffset(int(o["offset"]), metadata, now, int(o.get("leader_epoch", -1)))))
        if not parsed:
            return {"error": None, "offsets": []}
        await self.offsets.append(p, [(OffsetKey(group, tp.topic, tp.partition), v) for tp, v in parsed], now)
        return {"error": None, "offsets": [{"topic": tp.topic, "partition": tp.partition, "offset": v.offset}
                                           for tp, v in parsed]}

    async def _op_txn_commit(self, a: dict[str, Any]) -> dict[str, Any]:
        """TxnOffsetCommit: the commits go to the log as a transactional batch of the producer
        (the partition's producer state fences an older epoch), and stay pending until the
        transaction's marker lands here (`complete_txn`)."""
        group = str(a["group_id"])
        p = self._require(group)
        member_id, generation = str(a.get("member_id") or ""), int(a.get("generation", -1))
        if member_id or generation >= 0:  # KIP-447: a member of the current generation (v3+)
            self.coordinator.check_commit(group, member_id, generation)
        pid, epoch = int(a["producer_id"]), int(a["producer_epoch"])
        offsets = a.get("offsets") or []
        if not isinstance(offsets, list) or len(offsets) > MAX_COMMIT_PARTITIONS:
            raise InvalidRequestError(f"offsets must be a list of at most {MAX_COMMIT_PARTITIONS} entries")
        now = now_ms()
        parsed = [(OffsetKey(group, str(o["topic"]), int(o["partition"])),
                   CommittedOffset(int(o["offset"]), str(o.get("metadata") or ""), now, int(o.get("leader_epoch", -1))))
                  for o in offsets]
        for k, v in parsed:
            if len(v.metadata.encode()) > self.config.offset_metadata_max_bytes:
                raise OffsetMetadataTooLargeError(f"metadata of {k.topic}-{k.partition} is longer than "
                                                  f"offset.metadata.max.bytes={self.config.offset_metadata_max_bytes}")
        if not parsed:
            return {"error": None, "offsets": []}
        await self.offsets.append_txn(p, group, pid, epoch, parsed, now)
        return {"error": None, "offsets": [{"topic": k.topic, "partition": k.partition, "offset": v.offset}
                                           for k, v in parsed]}

    def complete_txn(self, p: int, producer_id: int, commit: bool) -> None:
        """The producer's COMMIT / ABORT marker is in `__consumer_offsets` partition `p` (appended
        here, the leader, with acks=all): its pending commits of p's groups are decided."""
        self.offsets.complete_txn(p, producer_id, commit)

    async def _op_offset_fetch(self, a: dict[str, Any]) -> dict[str, Any]:
        group = str(a["group_id"])
        self._require(group)
        committed = self.coordinator.committed(group)
        unstable = self.coordinator.pending_txn_partitions(group)
        wanted = a.get("partitions")
        if wanted is not None:
            keys = [TopicPartition(str(x[0]), int(x[1])) for x in wanted]
        else:
            keys = sorted(committed)
        return {"error": None, "offsets": [
            {"topic": tp.topic, "partition": tp.partition,
             "offset": committed[tp].offset if tp in committed else -1,
             "metadata": committed[tp].metadata if tp in committed else "",
             "commit_timestamp": committed[tp].commit_timestamp_ms if tp in committed else None,
             "unstable": tp in unstable}
            for tp in keys]}

    async def _op_describe(self, a: dict[str, Any]) -> dict[str, Any]:
        group_id = str(a["group_id"])
        self._require(group_id)
        g = self.coordinator.describe(group_id)
        out: dict[str, Any] = {"error": None, "group_id": group_id, "coordinator": self.node.node_id,
                               "state": "Dead", "protocol_type": "consumer", "protocol": None, "generation": -1,
                               "leader_id": None, "members": [], "offsets": []}
        if g is not None:
            out.update({"state": g.state.value, "protocol_type": g.protocol_type, "protocol": g.protocol,
                        "generation": g.generation, "leader_id": g.leader_id,
                        "members": [{"member_id": m.member_id, "client_id": m.client_id, "client_host": m.client_host,
                                     "assignment": m.assignment} for m in g.members.values()],
                        "topics": sorted({str(t) for m in g.members.values() for _, meta in m.protocols[:1]
                                          if isinstance(meta, dict) for t in (meta.get("topics") or [])})})
            out["offsets"] = (await self._op_offset_fetch({"group_id": group_id}))["offsets"]
        return out

    async def _op_list(self, a: dict[str, Any]) -> dict[str, Any]:
        n = self.num_partitions()
        return {"error": None, "groups": [
            {"group_id": g.group_id, "state": g.state.value, "protocol_type": g.protocol_type,
             "members": len(g.members), "coordinator": self.node.node_id}
            for g in sorted(self.coordinator.groups.values(), key=lambda g: g.group_id)
            if self.hosting.is_loaded(coordinator_partition(g.group_id, n))]}

    async def _op_delete(self, a: dict[str, Any]) -> dict[str, Any]:
        """Delete a group without members (Kafka's DeleteGroups): tombstones for its committed
        offsets (acks=all, as commits), then the coordinator forgets it."""
        group = str(a["group_id"])
        p = self._require(group)
        g = self.coordinator.describe(group)
        if g is None:
            raise GroupNotFoundError(f"group {group} has no members and no committed offsets")
        if g.members:
            raise NonEmptyGroupError(f"group {group} has {len(g.members)} members; only an empty group is deleted")
        committed = sorted(self.coordinator.committed(group))
        if committed:
            tombstones = [(OffsetKey(group, tp.topic, tp.partition), None) for tp in committed]
            await self.offsets.append(p, tombstones, now_ms())  # type: ignore[arg-type]
        self._deliver(self.coordinator.remove_groups(lambda gid: gid == group))
        return {"error": None}

    async def _op_delete_offsets(self, a: dict[str, Any]) -> dict[str, Any]:
        """Kafka's OffsetDelete: tombstones (acks=all) for the named partitions' committed offsets,
        except on topics a member of the group is subscribed to (`subscribed`: Kafka's
        GROUP_SUBSCRIBED_TO_TOPIC). A member whose subscription cannot be read protects every topic."""
        group = str(a["group_id"])
        p = self._require(group)
        wanted = a.get("partitions") or []
        if not isinstance(wanted, list) or len(wanted) > MAX_COMMIT_PARTITIONS:
            raise InvalidRequestError(f"partitions must be a list of at most {MAX_COMMIT_PARTITIONS} entries")
        g = self.coordinator.describe(group)
        if g is None:
            raise GroupNotFoundError(f"group {group} has no members and no committed offsets")
        busy = subscribed_topics(m.protocols for m in g.members.values()) if g.members else set()
        committed = self.coordinator.committed(group)
        out, doomed = [], []
        for topic, partition in wanted:
            tp = TopicPartition(str(topic), int(partition))
            refused = busy is None or tp.topic in busy
            out.append({"topic": tp.topic, "partition": tp.partition, "error": "subscribed" if refused else None})
            if not refused and tp in committed:
                doomed.append((OffsetKey(group, tp.topic, tp.partition), None))
        if doomed:
            await self.offsets.append(p, doomed, now_ms())
        return {"error": None, "partitions": out}

    # ------------------------------------------------------------------ routing from any node

    async def ensure_offsets_topic(self) -> None:
        """Create `__consumer_offsets` (compacted) if it does not exist yet. An acknowledged commit
        must outlive its coordinator's node: at least two in-sync copies whenever there are two
        replicas (more if the broker's default asks for more)."""
        await self.hosting.ensure_topic(
            replication_factor=self.config.offsets_topic_replication_factor,
            min_insync=lambda rf: min(rf, max(2, self.config.min_insync_replicas)),
            segment_bytes=self.config.offsets_topic_segment_bytes)

    async def call(self, group_id: str, op: str, args: dict[str, Any], *, timeout_s: float | None = None) -> dict[str, Any]:
        """Run `op` on the group's coordinator (one attempt); group errors raised as GroupError."""
        await self.ensure_offsets_topic()
        leader = self.coordinator_node(group_id)
        if leader < 0:
            raise LeaderNotAvailableError(f"the coordinator of group {group_id} is not available yet "
                                          f"({OFFSETS_TOPIC} partition {self.partition_for(group_id)} has no leader)")
        body = {**args, "group_id": group_id}
        if leader == self.node.node_id:
            return raise_group_error(await self.handle(op, body))
        return raise_group_error(await self.hosting.relay(
            leader, f"/internal/groups/{op}", body, relayed_by_code=_RELAYED_BY_CODE,
            timeout_s=timeout_s or self.config.request_timeout_ms / 1000 + 5))

    async def call_with_retry(self, group_id: str, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """`call`, retried while the coordinator moves or loads, up to request.timeout.ms."""
        return await retry_until(time.monotonic() + self.config.request_timeout_ms / 1000,
                                 lambda: self.call(group_id, op, args), (*RETRIABLE, PeerUnavailableError))

    async def list_all_groups(self) -> list[dict[str, Any]]:
        """Groups of every coordinator in the cluster (each live node is asked for its own)."""
        out = (await self.handle("list", {}))["groups"]
        others = [b for b in self.node.image.brokers if b != self.node.node_id and not self.node.image.brokers[b].fenced]

        async def ask(b: int) -> list[dict[str, Any]]:
            try:
                resp = await self.node.peers.post_json(b, "/internal/groups/list", {}, timeout_s=5)
                return resp.json().get("groups", []) if resp.status_code == 200 else []
            except Exception as e:  # a node that cannot answer: list what the others know
                log.info("listing the groups of node %d failed: %s", b, e)
                return []

        for groups in await asyncio.gather(*(ask(b) for b in others)):
            out.extend(groups)
        return sorted(out, key=lambda g: g["group_id"])


_OPS = {
    "join": GroupService._op_join,
    "sync": GroupService._op_sync,
    "heartbeat": GroupService._op_heartbeat,
    "leave": GroupService._op_leave,
    "commit": GroupService._op_commit,
    "txn_commit": GroupService._op_txn_commit,
    "offset_fetch": GroupService._op_offset_fetch,
    "describe": GroupService._op_describe,
    "list": GroupService._op_list,
    "delete": GroupService._op_delete,
    "delete_offsets": GroupService._op_delete_offsets,
}
