"""Consumer instances across the cluster: which node holds one, who may use it, and a group's lag.

The REST Proxy v2 consumer API (routers/consumers.py) is thin over this service; the instances
themselves are `ConsumerInstance`s held by this node's `ConsumerManager`.

Rules, each with its reason:
  1. Holding. An instance lives on the node that created it. A request for an instance this node
     does not hold is forwarded (one signed hop, like produce and fetch) to its holder, found by
     asking the other live nodes at once (`GET /internal/consumers/{group}/{instance}`) and
     remembered as a hint, checked again on each use. A forwarded request is never forwarded again.
  2. Ownership. An instance belongs to the principal that created it: any other principal is
     refused (403, 40301) on every operation, including delete — on the holder, which sees the
     caller's principal inside the forwarded request's cluster signature. Super users are exempt.
     Reason: group READ lets a principal join a group, not use another member's fetch session,
     whose assignment may name topics the caller may not read.
  3. Topics. Every operation checks the caller's ACLs on the topics it touches, when it runs (an
     ACL added later applies at once): READ on the topics subscribed or assigned, on every topic an
     instance fetches records from (its assignment, and the topics of what is returned), on the
     topics whose offsets it commits or seeks; DESCRIBE on those whose committed offsets it reads.
     Reason: the instance fetches on the caller's behalf; it must never read more than the caller
     could read with a direct fetch.

Concurrency: everything on the server's event loop.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from lakelog.ingest_api.groups.assignors import TopicPartition
from lakelog.ingest_api.groups.consumer import ConsumerInstance, ConsumerManager
from lakelog.ingest_api.groups.consumer_config import InstanceConfig
from lakelog.ingest_api.groups.consumer_fetch import partition_bounds
from lakelog.ingest_api.groups.errors import (
    ConsumerAlreadyExistsError,
    ConsumerInstanceNotFoundError,
    GroupNotFoundError,
)
from lakelog.ingest_api.groups.service import GroupService
from lakelog.ingest_api.security.acl import Operation
from lakelog.ingest_api.security.errors import AuthorizationFailedError

#: How long a holder lookup waits for each node's answer.
HOLDER_LOOKUP_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Caller:
    """Who makes a request: the principal (None when security is off), whether it is a super user,
    and the check of one topic ACL (raises AuthorizationFailedError; a no-op without the authorizer)."""

    principal: str | None
    super_user: bool
    check_topic: Callable[[Operation, str], None]

    def check_topics(self, operation: Operation, topics: Iterable[str]) -> None:
        for topic in sorted(set(topics)):
            self.check_topic(operation, topic)


@dataclass(frozen=True)
class Forwarded:
    """The holder's answer to a forwarded request, passed back to the client as it is."""

    status_code: int
    content: bytes
    content_type: str | None


class ConsumerInstanceService:
    """Routing (rule 1), ownership (rule 2) and topic ACLs (rule 3) of consumer instances; group lag."""

    def __init__(self, node: Any, consumers: ConsumerManager, groups: GroupService, forwarded_header: str) -> None:
        self.node, self.consumers, self.groups = node, consumers, groups
        self.forwarded_header = forwarded_header
        #: (group, instance) -> the node found holding it (a hint; checked by the forwarded request).
        self._holders: dict[tuple[str, str], int] = {}

    # ------------------------------------------------------------------ rules 1 and 2

    def local(self, group: str, instance: str, caller: Caller) -> ConsumerInstance:
        """An instance this node holds, for `caller` (rule 2); ConsumerInstanceNotFoundError otherwise."""
        return self._owned(self.consumers.get(group, instance), caller)

    async def route(self, group: str, instance: str, caller: Caller, *, method: str, target: str, body: bytes,
                    headers: dict[str, str]) -> ConsumerInstance | Forwarded:
        """The local instance (owned by `caller`), or its holder's answer to the forwarded request."""
        held = self.consumers.held(group, instance)
        if held is not None:
            return self._owned(held, caller)
        holder = await self.find_holder(group, instance)
        if holder is None:
            raise ConsumerInstanceNotFoundError("Consumer instance not found.")
        cfg = self.node.config
        # A records request long-polls up to fetch.max.wait.ms on the holder; commits may wait request.timeout.ms.
        wait_s = (cfg.fetch_max_wait_ms + cfg.request_timeout_ms) / 1000 + 10
        resp = await self.node.peers.request(holder, method, target, body,
                                             headers={**headers, self.forwarded_header: str(self.node.node_id)},
                                             timeout_s=wait_s, principal=caller.principal)
        if resp.status_code == 404:
            self._holders.pop((group, instance), None)
        return Forwarded(resp.status_code, resp.content, resp.headers.get("content-type"))

    @staticmethod
    def _owned(inst: ConsumerInstance, caller: Caller) -> ConsumerInstance:
        if inst.owner is not None and inst.owner != caller.principal and not caller.super_user:
            raise AuthorizationFailedError(f"{caller.principal} may not use consumer instance "
                                           f"{inst.group}/{inst.name}: it belongs to the principal that created it")
        return inst

    async def find_holder(self, group: str, instance: str) -> int | None:
        """The node holding an instance: the remembered hint if it still holds it, else asked of all at once."""
        key = (group, instance)
        cached = self._holders.get(key)
        node = self.node

        async def holds(b: int) -> bool:
            try:
                resp = await node.peers.request(b, "GET", f"/internal/consumers/{group}/{instance}",
                                                timeout_s=HOLDER_LOOKUP_TIMEOUT_S)
                return resp.status_code == 200
            except Exception:
                return False

        if cached is not None and await holds(cached):
            return cached
        others = [b for b in sorted(node.image.brokers)
                  if b not in (node.node_id, cached) and not node.image.brokers[b].fenced]
        for b, found in zip(others, await asyncio.gather(*(holds(b) for b in others))):
            if found:
                self._holders[key] = b
                return b
        self._holders.pop(key, None)
        return None

    async def create(self, group: str, name: str, cfg: InstanceConfig, caller: Caller) -> ConsumerInstance:
        """A new instance held here and owned by `caller`; refused when any node holds one of that name."""
        if (group, name) in self.consumers.instances or await self.find_holder(group, name) is not None:
            raise ConsumerAlreadyExistsError(
                "Consumer with specified consumer ID already exists in the specified consumer group.")
        return self.consumers.create(group, name, cfg, owner=caller.principal)

    # ------------------------------------------------------------------ rule 3

    def subscribe(self, inst: ConsumerInstance, caller: Caller, topics: list[str] | None, pattern: str | None) -> None:
        # A pattern may match any topic, now or later: READ on every topic (the wildcard).
        caller.check_topics(Operation.READ, [t for t in topics if isinstance(t, str)] if topics is not None else ["*"])
        inst.subscribe(topics, pattern)

    def assign(self, inst: ConsumerInstance, caller: Caller, partitions: list[TopicPartition]) -> None:
        caller.check_topics(Operation.READ, (tp.topic for tp in partitions))
        inst.assign(partitions)

    async def records(self, inst: ConsumerInstance, caller: Caller, timeout_ms: int, max_bytes: int) -> list[dict]:
        caller.check_topics(Operation.READ, self._touched(inst))
        out = await inst.records(timeout_ms, max_bytes)
        # A rebalance during the wait may have brought other topics (a pattern subscription).
        caller.check_topics(Operation.READ, (r["topic"] for r in out if "topic" in r))
        return out

    async def commit(self, inst: ConsumerInstance, caller: Caller, offsets: list[dict[str, Any]] | None) -> list[dict]:
        caller.check_topics(Operation.READ, (o["topic"] for o in offsets) if offsets is not None
                            else (tp.topic for tp in inst.assignment))
        return await inst.commit(offsets)

    async def committed(self, inst: ConsumerInstance, caller: Caller,
                        partitions: list[TopicPartition] | None) -> list[dict]:
        caller.check_topics(Operation.DESCRIBE, (tp.topic for tp in (partitions if partitions is not None
                                                                     else inst.assignment)))
        return await inst.committed(partitions)

    def seek(self, inst: ConsumerInstance, caller: Caller, offsets: list[dict[str, Any]]) -> None:
        caller.check_topics(Operation.READ, (o["topic"] for o in offsets))
        tps = [(TopicPartition(o["topic"], o["partition"]), o["offset"]) for o in offsets]
        for tp, _ in tps:  # all or nothing
            inst.check_assigned(tp)
        for tp, offset in tps:
            inst.seek(tp, offset)

    async def seek_to(self, inst: ConsumerInstance, caller: Caller, partitions: list[TopicPartition], end: bool) -> None:
        caller.check_topics(Operation.READ, (tp.topic for tp in partitions))
        await inst.seek_to(partitions, end)

    @staticmethod
    def _touched(inst: ConsumerInstance) -> set[str]:
        """The topics a records call may read: the assignment and an explicit subscription."""
        return {tp.topic for tp in inst.assignment} | set(inst.subscription or ())

    # ------------------------------------------------------------------ a group's lag

    async def describe_group(self, group: str) -> dict[str, Any]:
        """Members, assignment, committed offsets, log end offsets and lag per partition of a group."""
        doc = await self.groups.call_with_retry(group, "describe", {})
        if doc["state"] == "Dead" and not doc["offsets"]:
            raise GroupNotFoundError(f"Consumer group '{group}' does not exist.")
        owner: dict[TopicPartition, dict[str, Any]] = {}
        for m in doc["members"]:
            for t, p in (m.get("assignment") or []):
                owner[TopicPartition(t, p)] = m
        committed = {TopicPartition(o["topic"], o["partition"]): o for o in doc["offsets"]}
        # Every partition of the topics the members subscribe to or the group has committed offsets of,
        # as kafka-consumer-groups --describe lists them (a partition never committed shows no lag).
        topics = set(doc.get("topics") or ()) | {tp.topic for tp in committed} | {tp.topic for tp in owner}
        every = {TopicPartition(t, p) for t in topics if (img := self.node.image.topics.get(t)) is not None
                 for p in range(len(img.partitions))}
        tps = sorted(set(owner) | set(committed) | every)

        async def end_offset(tp: TopicPartition) -> int | None:
            try:
                return (await partition_bounds(self.node, tp))[1]
            except Exception:
                return None

        ends = await asyncio.gather(*(end_offset(tp) for tp in tps))
        rows = []
        for tp, end in zip(tps, ends):
            c = committed.get(tp)
            current = c["offset"] if c is not None and c["offset"] >= 0 else None
            m = owner.get(tp)
            rows.append({"topic": tp.topic, "partition": tp.partition, "current_offset": current,
                         "log_end_offset": end,
                         "lag": (end - current) if end is not None and current is not None else None,
                         "metadata": c["metadata"] if c else None,
                         "consumer_id": m["member_id"] if m else None, "client_id": m["client_id"] if m else None,
                         "host": m["client_host"] if m else None})
        members = [{"member_id": m["member_id"], "client_id": m["client_id"], "host": m["client_host"],
                    "assignment": [{"topic": t, "partition": p} for t, p in (m.get("assignment") or [])]}
                   for m in doc["members"]]
        return {"group_id": group, "state": doc["state"], "protocol_type": doc["protocol_type"],
                "partition_assignor": doc["protocol"], "generation": doc["generation"],
                "coordinator": doc["coordinator"], "leader_id": doc["leader_id"], "members": members,
                "partitions": rows}
