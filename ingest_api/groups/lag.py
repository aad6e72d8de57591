"""A consumer group as its lag views show it: members, committed offsets, end offsets, lag per
partition, and the lag summary (Confluent v3's ConsumerLagData / ConsumerGroupLagSummaryData).

Lag of a partition = its end offset (the high watermark, what a consumer can read) minus the group's
committed offset; only partitions with a committed offset have a lag (as Kafka's
`kafka-consumer-groups --describe` and Confluent's lag endpoints). The owner of a partition is the
member whose assignment holds it ("" when none).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from lakelog.ingest_api.groups.assignors import TopicPartition
from lakelog.ingest_api.groups.consumer_fetch import partition_bounds
from lakelog.ingest_api.groups.errors import GroupNotFoundError

#: Lakelog's group states -> Confluent's ConsumerGroupState.
STATES = {"Stable": "STABLE", "Empty": "EMPTY", "PreparingRebalance": "PREPARING_REBALANCE",
          "CompletingRebalance": "COMPLETING_REBALANCE", "Dead": "DEAD"}


@dataclass(frozen=True)
class PartitionLag:
    topic: str
    partition: int
    current_offset: int
    log_end_offset: int
    lag: int
    consumer_id: str
    client_id: str


@dataclass
class GroupLagView:
    group_id: str
    state: str
    protocol: str | None
    coordinator: int
    members: list[dict[str, Any]]
    lags: list[PartitionLag] = field(default_factory=list)

    @property
    def is_simple(self) -> bool:
        """A group that only commits offsets (no member ever joined with a protocol)."""
        return not self.members and self.protocol is None

    def member(self, member_id: str) -> dict[str, Any] | None:
        return next((m for m in self.members if m["member_id"] == member_id), None)


async def describe(node: Any, groups: Any, group_id: str, *, with_lag: bool = True) -> GroupLagView:
    """The group from its coordinator, and (with_lag) the end offset of each committed partition."""
    doc = await groups.call_with_retry(group_id, "describe", {})
    if doc["state"] == "Dead" and not doc["offsets"]:
        raise GroupNotFoundError(f"Consumer group {group_id} cannot be found.")
    members = [{"member_id": m["member_id"], "client_id": m["client_id"] or "", "host": m["client_host"],
                "assignment": [TopicPartition(t, p) for t, p in (m.get("assignment") or [])]}
               for m in doc["members"]]
    view = GroupLagView(group_id, STATES.get(doc["state"], "UNKNOWN"), doc["protocol"], doc["coordinator"], members)
    if not with_lag:
        return view
    owner = {tp: m for m in members for tp in m["assignment"]}
    committed = sorted(((TopicPartition(o["topic"], o["partition"]), o["offset"]) for o in doc["offsets"]
                        if o["offset"] >= 0), key=lambda x: (x[0].topic, x[0].partition))

    async def end(tp: TopicPartition) -> int | None:
        try:
            return (await partition_bounds(node, tp))[1]
        except Exception:
            return None  # a partition without a reachable leader has no lag to show

    ends = await asyncio.gather(*(end(tp) for tp, _ in committed))
    for (tp, current), e in zip(committed, ends):
        if e is None:
            continue
        m = owner.get(tp)
        view.lags.append(PartitionLag(tp.topic, tp.partition, current, e, max(0, e - current),
                                      m["member_id"] if m else "", m["client_id"] if m else ""))
    return view
