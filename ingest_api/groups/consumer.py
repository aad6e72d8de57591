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

Where the code is: this module holds `ConsumerInstance` (its fields, subscription and assignment,
commits and seeks, close) and `ConsumerManager`; the instance's group membership is
`InstanceMembership` (consumer_membership.py), its positions and fetch rounds `InstanceRecords`
(consumer_records.py), its settings and limits consumer_config.py, the reads through a partition's
leader (`fetch_partition`, `partition_bounds`) consumer_fetch.py.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Any

from lakelog.ingest_api.errors import InvalidRequestError, PartitionNotFoundError, TopicNotFoundError
from lakelog.ingest_api.groups.assignors import TopicPartition
from lakelog.ingest_api.groups.consumer_config import (  # noqa: F401  (FORMATS, validate_name, InstanceConfig re-exported: the routers import them here)
    FORMATS,
    MAX_PARTITIONS,
    MAX_PATTERN_CHARS,
    MAX_TOPICS,
    STOP_TIMEOUT_S,
    InstanceConfig,
    validate_name,
)
from lakelog.ingest_api.groups.consumer_fetch import (  # noqa: F401  (re-exported: lag.py and the routers import them here)
    fetch_partition,
    partition_bounds,
)
from lakelog.ingest_api.groups.consumer_membership import InstanceMembership
from lakelog.ingest_api.groups.consumer_records import InstanceRecords
from lakelog.ingest_api.groups.errors import (
    ConsumerAlreadyExistsError,
    ConsumerInstanceNotFoundError,
    IllegalStateError,
    RebalanceInProgressError,
    TooManyInstancesError,
)
from lakelog.ingest_api.groups.service import GroupService

log = logging.getLogger("lakelog.consumers")


class ConsumerInstance(InstanceMembership, InstanceRecords):
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
