"""HTTP consumer instances (the Confluent REST Proxy v2 consumer API), held in memory on one node.

A consumer instance is to the group coordinator what the REST Proxy's embedded Kafka consumer is to
Kafka: a client. It lives on the node that created it; any other node forwards requests for it there
(routers/consumers.py). With a subscription it is a member of its group: a background task joins the
group (JoinGroup, then SyncGroup; when the coordinator names it the group leader it runs the agreed
assignor over the members' subscriptions and the topics' partition counts), heartbeats every
`heartbeat.interval.ms`, and rejoins when the coordinator says the group is rebalancing, when its
pattern subscription matches other topics, or — as the leader — when a subscribed topic's partition
count changes. With a manual assignment it is no member and commits as a simple consumer.

Positions: each assigned partition has a position, the next offset `records` returns. A new
partition starts at the group's committed offset, or per `auto.offset.reset` (earliest, latest,
none) when there is none or it is out of range. A member keeps the positions of the partitions it
keeps across a rebalance; after losing its membership (session expired, coordinator moved) it
starts every partition from the committed offsets again. Records are read through the node's normal fetch
path: the local replica when this node leads the partition, else a signed request to the leader.

Commits: `commit()` without offsets commits the positions (everything returned so far). With
`auto.commit.enable`, positions are committed every `auto.commit.interval.ms` when the client asks
for records (so records are committed once the client came back for more), before the instance
rejoins a rebalance (its partitions may move), and when it is deleted. A client that dies between
two commits gets the uncommitted records again from whoever owns the partitions next.

Concurrency: everything on the server's event loop. An assignment change bumps `assignment_version`;
a `records` call that raced with one drops what it fetched for partitions no longer assigned.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

from lakelog.ingest_api.errors import (
    InvalidRequestError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    NotReadyError,
    PartitionNotFoundError,
    TopicNotFoundError,
)
from lakelog.ingest_api.formats import BINARY_V2, JSON_V2, RECORDBATCH, render_record
from lakelog.ingest_api.schemas.rest import AVRO_V2, JSONSCHEMA_V2, PROTOBUF_V2, SCHEMA_FORMATS, render_schema_record
from lakelog.ingest_api.groups.assignors import ASSIGNORS, Subscription, TopicPartition
from lakelog.ingest_api.groups.errors import (
    ConsumerAlreadyExistsError,
    ConsumerInstanceNotFoundError,
    CoordinatorLoadInProgressError,
    IllegalGenerationError,
    IllegalStateError,
    NoOffsetForPartitionError,
    NotCoordinatorError,
    RebalanceInProgressError,
    TooManyInstancesError,
    UnknownMemberIdError,
)
from lakelog.ingest_api.groups.service import GroupService
from lakelog.ingest_api.replication.peers import PeerUnavailableError
from lakelog.logstore.errors import OffsetOutOfRangeError
from lakelog.logstore.record_batch import iter_batches

log = logging.getLogger("lakelog.consumers")

FORMATS = {"json": JSON_V2, "binary": BINARY_V2, "avro": AVRO_V2, "jsonschema": JSONSCHEMA_V2,
           "protobuf": PROTOBUF_V2}
#: Longest wait of one fetch round of `records` (then the round is repeated until the timeout).
FETCH_ROUND_MS = 200
#: Most topics of one subscription / partitions of one assignment.
MAX_TOPICS = 1000
MAX_PARTITIONS = 10_000
MAX_PATTERN_CHARS = 1000
#: Most time the node's shutdown waits for its instances to commit and leave their groups.
STOP_TIMEOUT_S = 2.0
_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def validate_name(name: str, what: str) -> str:
    if not _NAME.match(name or "") or name in (".", ".."):
        raise InvalidRequestError(f"{what} {name!r} must be 1 to 249 of ASCII letters, digits, '.', '_' and '-'")
    return name


@dataclass(frozen=True)
class InstanceConfig:
    format: str
    auto_offset_reset: str
    auto_commit_enable: bool
    auto_commit_interval_ms: int
    session_timeout_ms: int
    heartbeat_interval_ms: int
    strategies: tuple[str, ...]
    max_poll_records: int


class ConsumerInstance:
    def __init__(self, manager: "ConsumerManager", group: str, name: str, cfg: InstanceConfig,
                 owner: str | None = None) -> None:
        self.manager = manager
        #: The principal that created the instance (None when security is off): see groups/instances.py.
        self.owner = owner
        self.node = manager.node
        self.groups: GroupService = manager.groups
        self.group, self.name, self.cfg = group, name, cfg
        self.subscription: list[str] | None = None
        self.pattern: re.Pattern | None = None
        self.manual: list[TopicPartition] | None = None
        self.member_id = ""
        self.generation = -1
        self.leader = False
        self.assignment: list[TopicPartition] = []
        self.assignment_version = 0
        self.positions: dict[TopicPartition, int] = {}
        self.closed = False
        self.last_used = time.monotonic()
        self._rejoin = True
        #: No membership yet, or it was lost: the next completed join starts every position afresh.
        self._new_member = True
        self._joined_topics: list[str] = []
        self._assigned_counts: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._next_auto_commit = time.monotonic() + cfg.auto_commit_interval_ms / 1000

    def touch(self) -> None:
        self.last_used = time.monotonic()

    # ------------------------------------------------------------------ subscription and assignment

    def subscribe(self, topics: list[str] | None, pattern: str | None) -> None:
        if self.manual is not None:
            raise IllegalStateError("Subscription to topics, partitions and pattern are mutually exclusive: "
                                    "this instance has a manual assignment")
        if pattern is not None:
            if len(pattern) > MAX_PATTERN_CHARS:
                raise InvalidRequestError(f"topic_pattern is longer than {MAX_PATTERN_CHARS} characters")
            try:
                self.pattern, self.subscription = re.compile(pattern), []
            except re.error as e:
                raise InvalidRequestError(f"topic_pattern is not a valid regular expression: {e}") from None
        else:
            if not topics or len(topics) > MAX_TOPICS or not all(isinstance(t, str) and t for t in topics):
                raise InvalidRequestError(f"topics must be a list of 1 to {MAX_TOPICS} topic names")
            self.pattern, self.subscription = None, sorted(set(topics))
        self._rejoin = True
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"consumer-{self.group}-{self.name}")
        self._wake.set()

    def subscribed_topics(self) -> list[str]:
        if self.pattern is not None:
            return sorted(t for t in self.node.image.topics if not t.startswith("__") and self.pattern.fullmatch(t))
        return list(self.subscription or [])

    async def unsubscribe(self) -> None:
        await self._stop_membership()
        self.subscription, self.pattern = None, None
        self._set_assignment([])

    def assign(self, partitions: list[TopicPartition]) -> None:
        if self.subscription is not None:
            raise IllegalStateError("Subscription to topics, partitions and pattern are mutually exclusive: "
                                    "this instance has a subscription")
        if len(partitions) > MAX_PARTITIONS:
            raise InvalidRequestError(f"at most {MAX_PARTITIONS} partitions")
        for tp in partitions:
            self._check_partition(tp)
        self.manual = list(dict.fromkeys(partitions))
        self._set_assignment(self.manual)

    def _check_partition(self, tp: TopicPartition) -> None:
        t = self.node.image.topics.get(tp.topic)
        if t is None:
            raise TopicNotFoundError(f"Topic {tp.topic} not found.")
        if not 0 <= tp.partition < len(t.partitions):
            raise PartitionNotFoundError(f"Partition {tp.partition} of topic {tp.topic} not found.")

    def _set_assignment(self, new: list[TopicPartition]) -> None:
        keep = set(new)
        self.positions = {tp: o for tp, o in self.positions.items() if tp in keep}
        self.assignment = list(new)
        self.assignment_version += 1

    def _check_assigned(self, tp: TopicPartition) -> None:
        if tp not in self.assignment:
            raise IllegalStateError(f"No current assignment for partition {tp}")

    # ------------------------------------------------------------------ group membership (background)

    async def _run(self) -> None:
        delay = 0.1
        while not self.closed and self.subscription is not None:
            try:
                if self._rejoin:
                    await self._join_and_sync()
                    delay = 0.1
                try:
                    await asyncio.wait_for(self._wake.wait(), self.cfg.heartbeat_interval_ms / 1000)
                except asyncio.TimeoutError:
                    pass
                self._wake.clear()
                if self._rejoin or self.closed or self.subscription is None:
                    continue
                self._check_metadata()
                if self._rejoin:
                    continue
                await self.groups.call(self.group, "heartbeat", {"member_id": self.member_id,
                                                                 "generation": self.generation},
                                       timeout_s=self.cfg.session_timeout_ms / 2000)
            except (RebalanceInProgressError, IllegalGenerationError):
                self._rejoin = True
                await asyncio.sleep(0.02)
            except UnknownMemberIdError:
                self.member_id, self.generation, self._rejoin, self._new_member = "", -1, True, True
            except asyncio.CancelledError:
                raise
            except Exception as e:  # coordinator moving or unreachable: retry with backoff
                log.info("consumer %s/%s: %s; retrying", self.group, self.name, e)
                self._rejoin = self._rejoin or not self.member_id
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    async def _join_and_sync(self) -> None:
        if self.cfg.auto_commit_enable and self.member_id and self.assignment:
            await self._auto_commit("before rejoining")
        topics = self.subscribed_topics()
        meta = {"topics": topics, "owned": [[tp.topic, tp.partition] for tp in self.assignment]}
        session = self.cfg.session_timeout_ms
        args = {"member_id": self.member_id, "client_id": self.name, "client_host": self.node.config.advertised_url,
                "session_timeout_ms": session, "rebalance_timeout_ms": session, "protocol_type": "consumer",
                "protocols": [[s, meta] for s in self.cfg.strategies], "require_known_member_id": True}
        wait_s = (session + self.node.config.group_initial_rebalance_delay_ms) / 1000 + 10
        try:
            res = await self.groups.call(self.group, "join", args, timeout_s=wait_s)
        except RebalanceInProgressError as e:
            self.member_id = str(getattr(e, "doc", {}).get("member_id") or self.member_id)
            raise
        if self._new_member or str(res["member_id"]) != self.member_id:
            # A new membership: the partitions may have had other owners meanwhile, so every position
            # comes from the committed offsets again. (A member that stayed in the group took part in
            # every generation: the positions of partitions it keeps are still its own.)
            self.positions.clear()
            self._new_member = False
        self.member_id, self.generation = str(res["member_id"]), int(res["generation"])
        self._joined_topics = topics
        self.leader = res["leader_id"] == self.member_id
        assignments = self._assign(str(res["protocol"]), res["members"]) if self.leader else None
        sres = await self.groups.call(self.group, "sync", {"member_id": self.member_id, "generation": self.generation,
                                                           "assignments": assignments}, timeout_s=wait_s)
        new = [TopicPartition(str(t), int(p)) for t, p in (sres.get("assignment") or [])]
        self._set_assignment(new)
        self._rejoin = False
        log.info("consumer %s/%s: generation %d, %s, assigned %s", self.group, self.name, self.generation,
                 "leader" if self.leader else "follower", [str(tp) for tp in new])

    def _assign(self, protocol: str, members: list) -> dict[str, list[list[Any]]]:
        subs = {str(mid): Subscription(tuple(meta.get("topics", [])),
                                       tuple(TopicPartition(str(t), int(p)) for t, p in meta.get("owned", [])))
                for mid, meta in members}
        topics = {t for s in subs.values() for t in s.topics}
        counts = {t: len(self.node.image.topics[t].partitions) for t in topics if t in self.node.image.topics}
        self._assigned_counts = counts
        assignor = ASSIGNORS.get(protocol)
        if assignor is None:
            raise InvalidRequestError(f"the group agreed on an unknown strategy {protocol!r}")
        return {mid: [[tp.topic, tp.partition] for tp in tps] for mid, tps in assignor(subs, counts).items()}

    def _check_metadata(self) -> None:
        if self.subscribed_topics() != self._joined_topics:
            self._rejoin = True
        elif self.leader:
            counts = {t: len(self.node.image.topics[t].partitions)
                      for t in self._assigned_counts if t in self.node.image.topics}
            if counts != self._assigned_counts:
                log.info("consumer %s/%s: partition counts changed %s -> %s; rebalancing", self.group, self.name,
                         self._assigned_counts, counts)
                self._rejoin = True

    async def _stop_membership(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
        if self.member_id:
            if self.cfg.auto_commit_enable and self.assignment:
                await self._auto_commit("on leaving")
            try:
                await self.groups.call(self.group, "leave", {"member_id": self.member_id}, timeout_s=5)
            except Exception as e:
                log.info("consumer %s/%s: leaving the group failed (its session will expire): %s",
                         self.group, self.name, e)
        self.member_id, self.generation, self.leader, self._new_member = "", -1, False, True

    async def close(self) -> None:
        if self.closed:
            return
        if self.manual is not None and self.cfg.auto_commit_enable and self.positions:
            await self._auto_commit("on close")
        await self._stop_membership()
        self.closed = True

    # ------------------------------------------------------------------ offsets

    def _commit_identity(self) -> dict[str, Any]:
        if self.subscription is not None:
            return {"member_id": self.member_id, "generation": self.generation}
        return {"member_id": "", "generation": -1}

    async def commit(self, offsets: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        if offsets is None:
            offsets = [{"topic": tp.topic, "partition": tp.partition, "offset": o}
                       for tp, o in self.positions.items() if tp in self.assignment]
        if not offsets:
            return []
        if self.subscription is not None and not self.member_id:
            raise RebalanceInProgressError("the instance is joining its group; commit after it has an assignment")
        doc = await self.groups.call_with_retry(self.group, "commit", {**self._commit_identity(), "offsets": offsets})
        return doc["offsets"]

    async def _auto_commit(self, why: str) -> None:
        self._next_auto_commit = time.monotonic() + self.cfg.auto_commit_interval_ms / 1000
        try:
            await self.commit(None)
        except Exception as e:
            log.info("consumer %s/%s: auto-commit %s failed: %s", self.group, self.name, why, e)

    async def committed(self, partitions: list[TopicPartition] | None) -> list[dict[str, Any]]:
        wanted = partitions if partitions is not None else list(self.assignment)
        if not wanted:
            return []
        doc = await self.groups.call_with_retry(self.group, "offset_fetch", {
            "partitions": [[tp.topic, tp.partition] for tp in wanted]})
        return [{"topic": o["topic"], "partition": o["partition"], "offset": o["offset"], "metadata": o["metadata"]}
                for o in doc["offsets"]]

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self._check_assigned(tp)
        if offset < 0:
            raise InvalidRequestError("offset must be >= 0")
        self.positions[tp] = offset

    async def seek_to(self, tps: list[TopicPartition], end: bool) -> None:
        for tp in tps:
            self._check_assigned(tp)
        for tp, bounds in zip(tps, await asyncio.gather(*(partition_bounds(self.node, tp) for tp in tps))):
            self.positions[tp] = bounds[1] if end else bounds[0]

    async def _resolve_positions(self, tps: list[TopicPartition]) -> None:
        """Positions of newly assigned partitions: the committed offsets, else auto.offset.reset. While
        the coordinator cannot answer, those partitions wait (never reset: that could skip commits)."""
        missing = [tp for tp in tps if tp not in self.positions]
        if not missing:
            return
        version = self.assignment_version
        try:
            doc = await self.groups.call(self.group, "offset_fetch", {
                "partitions": [[tp.topic, tp.partition] for tp in missing]}, timeout_s=5)
        except (NotCoordinatorError, CoordinatorLoadInProgressError, LeaderNotAvailableError, NotReadyError,
                NotLeaderOrFollowerError, PeerUnavailableError) as e:
            log.info("consumer %s/%s: committed offsets not available yet (%s)", self.group, self.name, e)
            return
        found = {(o["topic"], o["partition"]): o["offset"] for o in doc["offsets"]}
        resets = [tp for tp in missing if found.get((tp.topic, tp.partition), -1) < 0]
        reset_to = await self._reset_offsets(resets)
        if version != self.assignment_version:
            return
        for tp in missing:
            if tp not in self.positions:
                committed = found.get((tp.topic, tp.partition), -1)
                self.positions[tp] = committed if committed >= 0 else reset_to[tp]

    async def _reset_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        if not tps:
            return {}
        if self.cfg.auto_offset_reset == "none":
            raise NoOffsetForPartitionError(f"no committed offset for {[str(tp) for tp in tps]} and "
                                            f"auto.offset.reset=none")
        end = self.cfg.auto_offset_reset == "latest"
        bounds = await asyncio.gather(*(partition_bounds(self.node, tp) for tp in tps))
        return {tp: (b[1] if end else b[0]) for tp, b in zip(tps, bounds)}

    # ------------------------------------------------------------------ records

    async def records(self, timeout_ms: int, max_bytes: int) -> list[dict[str, Any]]:
        if self.cfg.auto_commit_enable and time.monotonic() >= self._next_auto_commit and self.positions:
            await self._auto_commit("on schedule")
        deadline = time.monotonic() + timeout_ms / 1000
        first = True
        while True:
            tps, version = list(self.assignment), self.assignment_version
            if tps:
                await self._resolve_positions(tps)
                remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
                wait_ms = 0 if first else min(remaining_ms, FETCH_ROUND_MS)
                first = False
                out = await self._fetch_round([tp for tp in tps if tp in self.positions], wait_ms, max_bytes, version)
                if out:
                    return out
            if time.monotonic() >= deadline:
                return []
            if not tps:
                await asyncio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    async def _fetch_round(self, tps: list[TopicPartition], wait_ms: int, max_bytes: int,
                           version: int) -> list[dict[str, Any]]:
        fetch_bytes = min(max_bytes, self.node.config.fetch_max_bytes)
        starts = {tp: self.positions[tp] for tp in tps}
        results = await asyncio.gather(*(fetch_partition(self.node, tp, starts[tp], fetch_bytes, wait_ms,
                                                         self.owner or "User:ANONYMOUS")
                                         for tp in tps), return_exceptions=True)
        if version != self.assignment_version:
            return []  # the assignment changed while fetching: positions of kept partitions stay as they were
        fmt = FORMATS[self.cfg.format]
        out: list[dict[str, Any]] = []
        budget_bytes, budget_records = max_bytes, self.cfg.max_poll_records
        for tp, res in zip(tps, results):
            if isinstance(res, OffsetOutOfRangeError):
                reset = await self._reset_offsets([tp])
                if version == self.assignment_version and self.positions.get(tp) == starts[tp]:
                    log.info("consumer %s/%s: %s offset %d out of range; reset to %d", self.group, self.name, tp,
                             starts[tp], reset[tp])
                    self.positions[tp] = reset[tp]
                continue
            if isinstance(res, BaseException):
                log.info("consumer %s/%s: fetch of %s failed: %s", self.group, self.name, tp, res)
                continue
            if self.positions.get(tp) != starts[tp]:
                continue  # a seek happened meanwhile
            pos = starts[tp]
            full = False
            for _, batch in iter_batches(res):
                if batch.is_control:
                    pos = max(pos, batch.next_offset)
                    continue
                for rec in batch.records():
                    if rec.offset < pos:
                        continue
                    size = len(rec.key or b"") + len(rec.value or b"")
                    if out and (budget_records <= 0 or size > budget_bytes):
                        full = True
                        break
                    if fmt in SCHEMA_FORMATS:  # decoded by the schema its wire-format id names
                        out.append(render_schema_record(self.node.image.schemas, tp.topic, tp.partition, rec, fmt))
                    else:
                        out.append(render_record(tp.topic, tp.partition, rec, fmt))
                    budget_records -= 1
                    budget_bytes -= size
                    pos = rec.offset + 1
                if full:
                    break
                pos = max(pos, batch.next_offset)
            self.positions[tp] = pos
            if full or budget_records <= 0 or budget_bytes <= 0:
                break
        return out


async def fetch_partition(node: Any, tp: TopicPartition, offset: int, max_bytes: int, wait_ms: int,
                          principal: str | None = None) -> bytes:
    """RecordBatch bytes from `offset` (below the HW), through the leader: local, or one signed hop
    acting for `principal` (the instance's owner: the leader checks its READ too)."""
    leader = node.leader_of(tp.topic, tp.partition)
    if leader == node.node_id:
        res = await node.fetch_wait(tp.topic, tp.partition, offset, max_bytes, wait_ms)
        return bytes(res.records)
    if leader < 0:
        raise LeaderNotAvailableError(f"partition {tp} has no leader")
    from lakelog.ingest_api.errors import RemoteError
    from lakelog.ingest_api.node import FORWARDED_HEADER
    path = f"/topics/{tp.topic}/partitions/{tp.partition}/records?offset={offset}&max_bytes={max_bytes}&timeout={wait_ms}"
    resp = await node.peers.request(leader, "GET", path, headers={"Accept": RECORDBATCH,
                                                                  FORWARDED_HEADER: str(node.node_id)},
                                    timeout_s=(wait_ms + node.config.request_timeout_ms) / 1000 + 5,
                                    principal=principal)
    if resp.status_code == 416:
        raise OffsetOutOfRangeError(f"offset {offset} of {tp} is out of range")
    if resp.status_code != 200:
        raise RemoteError(resp.status_code, resp.status_code * 100, resp.text[:200])
    return resp.content


async def partition_bounds(node: Any, tp: TopicPartition) -> tuple[int, int]:
    """(beginning offset, end offset = HW) of a partition, from its leader (asked as the node itself:
    offsets for positions and lag, no records)."""
    leader = node.leader_of(tp.topic, tp.partition)
    if leader == node.node_id:
        return await node.offsets(tp.topic, tp.partition)
    if leader < 0:
        raise LeaderNotAvailableError(f"partition {tp} has no leader")
    from lakelog.ingest_api.errors import RemoteError
    from lakelog.ingest_api.node import FORWARDED_HEADER
    from lakelog.ingest_api.security.middleware import CLUSTER_PRINCIPAL
    resp = await node.peers.request(leader, "GET", f"/topics/{tp.topic}/partitions/{tp.partition}/offsets",
                                    headers={FORWARDED_HEADER: str(node.node_id)}, timeout_s=10,
                                    principal=CLUSTER_PRINCIPAL)
    if resp.status_code != 200:
        raise RemoteError(resp.status_code, resp.status_code * 100, resp.text[:200])
    doc = resp.json()
    return int(doc["beginning_offset"]), int(doc["end_offset"])


class ConsumerManager:
    """The consumer instances of this node, their limits and their expiry."""

    def __init__(self, node: Any, groups: GroupService) -> None:
        self.node, self.groups = node, groups
        self.config = node.config
        self.instances: dict[tuple[str, str], ConsumerInstance] = {}
        #: (group, instance) -> the node found holding it (a hint; checked by the forwarded request).
        self.owners: dict[tuple[str, str], int] = {}
        self._task: asyncio.Task | None = None
        self._counter = 0

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._expiry_loop(), name="consumer-instance-expiry")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        # Best effort and bounded: the node is stopping, its commits and leave requests may not get through
        # (then the members' sessions expire on the coordinator).
        closing = asyncio.gather(*(i.close() for i in list(self.instances.values())), return_exceptions=True)
        try:
            await asyncio.wait_for(closing, STOP_TIMEOUT_S)
        except asyncio.TimeoutError:
            log.info("closing the consumer instances timed out")
        self.instances.clear()

    async def _expiry_loop(self) -> None:
        timeout = self.config.consumer_instance_timeout_ms / 1000
        while True:
            await asyncio.sleep(min(1.0, max(0.05, timeout / 4)))
            now = time.monotonic()
            for key, inst in list(self.instances.items()):
                if now - inst.last_used > timeout:
                    log.info("consumer instance %s/%s expired (consumer.instance.timeout.ms)", *key)
                    self.instances.pop(key, None)
                    try:
                        await inst.close()
                    except Exception:
                        log.exception("closing expired consumer instance %s/%s failed", *key)

    def parse_config(self, body: dict[str, Any]) -> InstanceConfig:
        cfg = self.config

        def opt(name: str, default: Any) -> Any:
            v = body.get(name)
            return default if v is None else v

        fmt = str(opt("format", "binary")).lower()
        if fmt not in FORMATS:
            raise InvalidRequestError(f"format must be one of {', '.join(FORMATS)} (got {fmt!r})")
        reset = str(opt("auto.offset.reset", "latest")).lower()
        if reset == "smallest":
            reset = "earliest"
        elif reset == "largest":
            reset = "latest"
        if reset not in ("earliest", "latest", "none"):
            raise InvalidRequestError("auto.offset.reset must be earliest, latest or none")
        auto_commit = opt("auto.commit.enable", True)
        if isinstance(auto_commit, str):
            if auto_commit.lower() not in ("true", "false"):
                raise InvalidRequestError("auto.commit.enable must be true or false")
            auto_commit = auto_commit.lower() == "true"
        if not isinstance(auto_commit, bool):
            raise InvalidRequestError("auto.commit.enable must be true or false")

        def int_opt(name: str, default: int, lo: int, hi: int) -> int:
            v = opt(name, default)
            try:
                v = int(v)
            except (TypeError, ValueError):
                raise InvalidRequestError(f"{name} must be an integer") from None
            if isinstance(opt(name, 0), bool) or not lo <= v <= hi:
                raise InvalidRequestError(f"{name} must be between {lo} and {hi}")
            return v

        session = int_opt("session.timeout.ms", min(max(cfg.consumer_session_timeout_ms, cfg.group_min_session_timeout_ms),
                                                    cfg.group_max_session_timeout_ms),
                          cfg.group_min_session_timeout_ms, cfg.group_max_session_timeout_ms)
        heartbeat = int_opt("heartbeat.interval.ms", min(cfg.consumer_heartbeat_interval_ms, max(1, session // 3)),
                            1, session)
        from lakelog.ingest_api.groups.assignors import parse_strategies
        try:
            strategies = parse_strategies(opt("partition.assignment.strategy", cfg.consumer_partition_assignment_strategy))
        except ValueError as e:
            raise InvalidRequestError(str(e)) from None
        return InstanceConfig(
            format=fmt, auto_offset_reset=reset, auto_commit_enable=auto_commit,
            auto_commit_interval_ms=int_opt("auto.commit.interval.ms", cfg.consumer_auto_commit_interval_ms, 1,
                                            24 * 3600 * 1000),
            session_timeout_ms=session, heartbeat_interval_ms=heartbeat, strategies=tuple(strategies),
            max_poll_records=int_opt("max.poll.records", cfg.consumer_max_poll_records, 1,
                                     cfg.consumer_max_poll_records))

    def new_name(self) -> str:
        self._counter += 1
        return f"rest-consumer-{self.node.node_id}-{int(time.time() * 1000):x}-{self._counter}"

    def create(self, group: str, name: str, cfg: InstanceConfig, owner: str | None = None) -> ConsumerInstance:
        key = (group, name)
        if key in self.instances:
            raise ConsumerAlreadyExistsError(
                "Consumer with specified consumer ID already exists in the specified consumer group.")
        if len(self.instances) >= self.config.consumer_max_instances:
            raise TooManyInstancesError(f"this node holds consumer.max.instances={self.config.consumer_max_instances} "
                                        f"consumer instances; delete some or use another node")
        inst = self.instances[key] = ConsumerInstance(self, group, name, cfg, owner)
        return inst

    def get(self, group: str, name: str) -> ConsumerInstance:
        inst = self.instances.get((group, name))
        if inst is None:
            raise ConsumerInstanceNotFoundError("Consumer instance not found.")
        inst.touch()
        return inst

    async def delete(self, group: str, name: str) -> None:
        inst = self.get(group, name)
        self.instances.pop((group, name), None)
        await inst.close()

