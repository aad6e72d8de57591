"""A consumer instance's group membership: the background task that joins, syncs and heartbeats.

`InstanceMembership` is what a subscribed `ConsumerInstance` (consumer.py) holds to be a member of
its group: `start` (the background task, `_run`: join and sync when asked to rejoin, heartbeat
every `heartbeat.interval.ms`, back off while the coordinator moves), `_join_and_sync` (JoinGroup
then SyncGroup; as the group leader it runs the agreed assignor, `_assign`), `_check_metadata`
(rejoin when the pattern matches other topics or, as the leader, a partition count changed) and
`stop` (commit, leave the group). It owns the membership's fields (member id, generation,
leadership, the rejoin flags, the task); it reads the instance's subscription and sets its
assignment through the `SubscriptionState` it is given (consumer_subscription.py), and commits
through the `auto_commit` callable the instance gives it (before rejoining and when leaving, with
`auto.commit.enable`). The rules are in consumer.py's docstring.

Concurrency: everything on the server's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from lakelog.ingest_api.errors import InvalidRequestError
from lakelog.ingest_api.groups.assignors import ASSIGNORS, Subscription, TopicPartition
from lakelog.ingest_api.groups.consumer_config import InstanceConfig
from lakelog.ingest_api.groups.consumer_subscription import SubscriptionState
from lakelog.ingest_api.groups.errors import (
    IllegalGenerationError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)
from lakelog.ingest_api.groups.service import GroupService

log = logging.getLogger("lakelog.consumers")


class InstanceMembership:
    """The group membership of one consumer instance (module doc)."""

    def __init__(self, node: Any, groups: GroupService, group: str, name: str, cfg: InstanceConfig,
                 state: SubscriptionState, auto_commit: Callable[[str], Awaitable[None]]) -> None:
        self.node, self.groups = node, groups
        self.group, self.name, self.cfg = group, name, cfg
        self._state = state
        self._auto_commit = auto_commit
        self.member_id = ""
        self.generation = -1
        self.leader = False
        self._closed = False
        self._rejoin = True
        #: No membership yet, or it was lost: the next completed join starts every position afresh.
        self._new_member = True
        self._joined_topics: list[str] = []
        self._assigned_counts: dict[str, int] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """(Re)join at once: the subscription changed. Starts the background task if it is not running."""
        self._rejoin = True
        if not self._closed and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"consumer-{self.group}-{self.name}")
        self._wake.set()

    def commit_identity(self) -> dict[str, Any]:
        """The member id and generation a commit carries ("" and -1: a simple consumer's commit)."""
        if self._state.subscribed:
            return {"member_id": self.member_id, "generation": self.generation}
        return {"member_id": "", "generation": -1}

    # ------------------------------------------------------------------ group membership (background)

    async def _run(self) -> None:
        delay = 0.1
        while not self._closed and self._state.subscribed:
            try:
                if self._rejoin:
                    await self._join_and_sync()
                    delay = 0.1
                try:
                    await asyncio.wait_for(self._wake.wait(), self.cfg.heartbeat_interval_ms / 1000)
                except asyncio.TimeoutError:
                    pass
                self._wake.clear()
                if self._rejoin or self._closed or not self._state.subscribed:
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
        if self.cfg.auto_commit_enable and self.member_id and self._state.assignment:
            await self._auto_commit("before rejoining")
        topics = self._state.subscribed_topics(self.node.image.topics)
        meta = {"topics": topics, "owned": [[tp.topic, tp.partition] for tp in self._state.assignment]}
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
            self._state.clear_positions()
            self._new_member = False
        self.member_id, self.generation = str(res["member_id"]), int(res["generation"])
        self._joined_topics = topics
        self.leader = res["leader_id"] == self.member_id
        assignments = self._assign(str(res["protocol"]), res["members"]) if self.leader else None
        sres = await self.groups.call(self.group, "sync", {"member_id": self.member_id, "generation": self.generation,
                                                           "assignments": assignments}, timeout_s=wait_s)
        new = [TopicPartition(str(t), int(p)) for t, p in (sres.get("assignment") or [])]
        self._state.set_assignment(new)
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
        if self._state.subscribed_topics(self.node.image.topics) != self._joined_topics:
            self._rejoin = True
        elif self.leader:
            counts = {t: len(self.node.image.topics[t].partitions)
                      for t in self._assigned_counts if t in self.node.image.topics}
            if counts != self._assigned_counts:
                log.info("consumer %s/%s: partition counts changed %s -> %s; rebalancing", self.group, self.name,
                         self._assigned_counts, counts)
                self._rejoin = True

    async def stop(self, *, close: bool = False) -> None:
        """Stop the background task and leave the group (committing first, with auto-commit); `close`:
        for good, `start` starts no task after it."""
        self._closed = self._closed or close
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
            self._task = None
        if self.member_id:
            if self.cfg.auto_commit_enable and self._state.assignment:
                await self._auto_commit("on leaving")
            try:
                await self.groups.call(self.group, "leave", {"member_id": self.member_id}, timeout_s=5)
            except Exception as e:
                log.info("consumer %s/%s: leaving the group failed (its session will expire): %s",
                         self.group, self.name, e)
        self.member_id, self.generation, self.leader, self._new_member = "", -1, False, True
