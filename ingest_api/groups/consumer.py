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

Concurrency: everything on the server's event loop. An assignment change bumps the subscription
state's `version`; a `records` call that raced with one drops what it fetched for partitions no
longer assigned.

Where the code is: this module holds `ConsumerInstance` and `ConsumerManager`. An instance is
composed of objects that each own their state: a `SubscriptionState` (consumer_subscription.py:
the subscription or manual assignment, the assigned partitions, the positions), an
`InstanceMembership` (consumer_membership.py: join, sync, heartbeat, leave; given the subscription
state and the instance's auto-commit) and an `InstanceRecords` (consumer_records.py: fetch rounds
over the subscription state's positions). The instance itself keeps what spans them: commits,
auto-commit, seeks and close. Its settings and limits are in consumer_config.py, the reads through
a partition's leader (`fetch_partition`, `partition_bounds`) in consumer_fetch.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from lakelog.ingest_api.cluster.metadata_follower import cancel_task
from lakelog.ingest_api.errors import InvalidRequestError
from lakelog.ingest_api.groups.assignors import TopicPartition, parse_strategies
from lakelog.ingest_api.groups.consumer_config import FORMATS, ISOLATION_LEVELS, STOP_TIMEOUT_S, InstanceConfig
from lakelog.ingest_api.groups.consumer_fetch import partition_bounds
from lakelog.ingest_api.groups.consumer_membership import InstanceMembership
from lakelog.ingest_api.groups.consumer_records import InstanceRecords
from lakelog.ingest_api.groups.consumer_subscription import SubscriptionState
from lakelog.ingest_api.groups.errors import (
    ConsumerAlreadyExistsError,
    ConsumerInstanceNotFoundError,
    RebalanceInProgressError,
    TooManyInstancesError,
)
from lakelog.ingest_api.groups.service import GroupService

log = logging.getLogger("lakelog.consumers")


class ConsumerInstance:
    """One REST Proxy consumer instance (module doc): its subscription state, membership and fetcher."""

    def __init__(self, manager: "ConsumerManager", group: str, name: str, cfg: InstanceConfig,
                 owner: str | None = None) -> None:
        #: The principal that created the instance (None when security is off): see groups/instances.py.
        self.owner = owner
        self.node = manager.node
        self.groups: GroupService = manager.groups
        self.group, self.name, self.cfg = group, name, cfg
        self.state = SubscriptionState()
        self.membership = InstanceMembership(self.node, self.groups, group, name, cfg, self.state, self._auto_commit)
        self.fetcher = InstanceRecords(self.node, self.groups, group, name, cfg, owner, self.state)
        self.closed = False
        self.last_used = time.monotonic()
        self._next_auto_commit = time.monotonic() + cfg.auto_commit_interval_ms / 1000

    @property
    def subscription(self) -> list[str] | None:
        """The subscribed topics ([] with a pattern); None: no subscription."""
        return self.state.subscription

    @property
    def assignment(self) -> list[TopicPartition]:
        return self.state.assignment

    def touch(self) -> None:
        self.last_used = time.monotonic()

    # ------------------------------------------------------------------ subscription and assignment

    def subscribe(self, topics: list[str] | None, pattern: str | None) -> None:
        self.state.subscribe(topics, pattern)
        self.membership.start()

    def subscribed_topics(self) -> list[str]:
        return self.state.subscribed_topics(self.node.image.topics)

    async def unsubscribe(self) -> None:
        await self.membership.stop()
        self.state.unsubscribe()

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.state.assign(partitions, self.node.image.topics)

    def check_assigned(self, tp: TopicPartition) -> None:
        self.state.check_assigned(tp)

    async def close(self) -> None:
        if self.closed:
            return
        if self.state.manual is not None and self.cfg.auto_commit_enable and self.state.positions:
            await self._auto_commit("on close")
        await self.membership.stop(close=True)
        self.closed = True

    # ------------------------------------------------------------------ records and offsets

    async def records(self, timeout_ms: int, max_bytes: int) -> list[dict[str, Any]]:
        if self.cfg.auto_commit_enable and time.monotonic() >= self._next_auto_commit and self.state.positions:
            await self._auto_commit("on schedule")
        return await self.fetcher.records(timeout_ms, max_bytes)

    async def commit(self, offsets: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        if offsets is None:
            offsets = self.state.consumed()
        if not offsets:
            return []
        if self.state.subscribed and not self.membership.member_id:
            raise RebalanceInProgressError("the instance is joining its group; commit after it has an assignment")
        doc = await self.groups.call_with_retry(self.group, "commit", {**self.membership.commit_identity(),
                                                                       "offsets": offsets})
        return doc["offsets"]

    async def _auto_commit(self, why: str) -> None:
        self._next_auto_commit = time.monotonic() + self.cfg.auto_commit_interval_ms / 1000
        try:
            await self.commit(None)
        except Exception as e:
            log.info("consumer %s/%s: auto-commit %s failed: %s", self.group, self.name, why, e)

    async def committed(self, partitions: list[TopicPartition] | None) -> list[dict[str, Any]]:
        wanted = partitions if partitions is not None else list(self.state.assignment)
        if not wanted:
            return []
        doc = await self.groups.call_with_retry(self.group, "offset_fetch", {
            "partitions": [[tp.topic, tp.partition] for tp in wanted]})
        return [{"topic": o["topic"], "partition": o["partition"], "offset": o["offset"], "metadata": o["metadata"]}
                for o in doc["offsets"]]

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.state.seek(tp, offset)

    async def seek_to(self, tps: list[TopicPartition], end: bool) -> None:
        for tp in tps:
            self.state.check_assigned(tp)
        for tp, bounds in zip(tps, await asyncio.gather(*(partition_bounds(self.node, tp) for tp in tps))):
            self.state.positions[tp] = bounds[1] if end else bounds[0]


class ConsumerManager:
    """The consumer instances of this node, their limits and their expiry."""

    def __init__(self, node: Any, groups: GroupService) -> None:
        self.node, self.groups = node, groups
        self.config = node.config
        self.instances: dict[tuple[str, str], ConsumerInstance] = {}
        self._task: asyncio.Task | None = None
        self._counter = 0

    async def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._expiry_loop(), name="consumer-instance-expiry")

    async def stop(self) -> None:
        await cancel_task(self._task)
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
        try:
            strategies = parse_strategies(opt("partition.assignment.strategy", cfg.consumer_partition_assignment_strategy))
        except ValueError as e:
            raise InvalidRequestError(str(e)) from None
        isolation = str(opt("isolation.level", "read_uncommitted")).lower()
        if isolation not in ISOLATION_LEVELS:
            raise InvalidRequestError(f"isolation.level must be one of {', '.join(ISOLATION_LEVELS)}")
        return InstanceConfig(
            isolation_level=isolation, format=fmt, auto_offset_reset=reset, auto_commit_enable=auto_commit,
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
        inst = self.held(group, name)
        if inst is None:
            raise ConsumerInstanceNotFoundError("Consumer instance not found.")
        return inst

    def held(self, group: str, name: str) -> ConsumerInstance | None:
        """The instance if this node holds it (then touched: it was used), else None."""
        inst = self.instances.get((group, name))
        if inst is not None:
            inst.touch()
        return inst

    async def delete(self, group: str, name: str) -> None:
        inst = self.get(group, name)
        self.instances.pop((group, name), None)
        await inst.close()
