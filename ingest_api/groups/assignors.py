"""Partition assignors: given the members' subscriptions and the topics' partition counts, who consumes what.

Pure functions of their inputs; the group leader runs one (the strategy the group agreed on in the join,
`partition.assignment.strategy`) and hands the result to the coordinator in its SyncGroup.

  * `range` — per topic: partitions sorted by id, the subscribed members sorted by member id; each
    member gets a contiguous range of P // M partitions and the first P % M members one more. Ten
    partitions, three members C0, C1, C2: C0 gets 0-3, C1 4-6, C2 7-9. With n topics, the first
    member can end up with n partitions more than the last.
  * `roundrobin` — every subscribed partition of every topic and every member are each sorted by
    Java `hashCode` of their name (`topic-partition`, member id; ties by name), then the partitions
    are dealt out one at a time around the members (a member not subscribed to a partition's topic
    is skipped). Counts differ by at most one when the members' subscriptions are equal.
  * `sticky` — balanced like round-robin, but a member keeps the partitions it owned in the previous
    generation (sent in its join metadata) as far as balance allows, so a rebalance moves as few
    partitions as possible.

Invariants (checked by `check_assignment`): every partition of a subscribed topic is assigned to
exactly one member, and only to a member subscribed to its topic.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping, NamedTuple, Sequence

from lakelog.infra.errors import invariant
from lakelog.ingest_api.groups.hashing import java_string_hashcode


class TopicPartition(NamedTuple):
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class Subscription(NamedTuple):
    """A member's subscribed topics and (for sticky) the partitions it owned in the last generation."""

    topics: tuple[str, ...]
    owned: tuple[TopicPartition, ...] = ()


Assignment = dict[str, list[TopicPartition]]
Assignor = Callable[[Mapping[str, Subscription], Mapping[str, int]], Assignment]


def _hash_key(name: str) -> tuple[int, str]:
    return java_string_hashcode(name), name


def _subscribed_partitions(members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> list[TopicPartition]:
    topics = sorted({t for s in members.values() for t in s.topics if partitions.get(t, 0) > 0})
    return [TopicPartition(t, p) for t in topics for p in range(partitions[t])]


def range_assign(members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> Assignment:
    out: Assignment = {m: [] for m in members}
    for topic in sorted({t for s in members.values() for t in s.topics}):
        count = partitions.get(topic, 0)
        consumers = sorted(m for m, s in members.items() if topic in s.topics)
        if not consumers or count <= 0:
            continue
        per, extra = divmod(count, len(consumers))
        for i, m in enumerate(consumers):
            start = i * per + min(i, extra)
            n = per + (1 if i < extra else 0)
            out[m].extend(TopicPartition(topic, p) for p in range(start, start + n))
    return out


def round_robin(member_order: Sequence[str], partition_order: Sequence[TopicPartition],
                members: Mapping[str, Subscription]) -> Assignment:
    """Deal `partition_order` around `member_order`, skipping members not subscribed to the topic."""
    out: Assignment = {m: [] for m in member_order}
    if not member_order:
        return out
    i = 0
    for tp in partition_order:
        for _ in range(len(member_order)):
            m = member_order[i % len(member_order)]
            i += 1
            if tp.topic in members[m].topics:
                out[m].append(tp)
                break
    return out


def round_robin_assign(members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> Assignment:
    member_order = sorted(members, key=_hash_key)
    partition_order = sorted(_subscribed_partitions(members, partitions), key=lambda tp: _hash_key(str(tp)))
    return round_robin(member_order, partition_order, members)


def sticky_assign(members: Mapping[str, Subscription], partitions: Mapping[str, int]) -> Assignment:
    all_tps = _subscribed_partitions(members, partitions)
    valid = set(all_tps)
    out: Assignment = {m: [] for m in members}
    taken: set[TopicPartition] = set()
    # 1. Keep what each member owned, if the partition still exists and it is still subscribed
    #    (a partition claimed by two members goes to the first in member-id order).
    for m in sorted(members):
        for tp in members[m].owned:
            tp = TopicPartition(*tp)
            if tp in valid and tp not in taken and tp.topic in members[m].topics:
                out[m].append(tp)
                taken.add(tp)

    def eligible(tp: TopicPartition) -> list[str]:
        return [m for m in members if tp.topic in members[m].topics]

    # 2. Members holding more than their fair share give the surplus back (keeping their lowest
    #    partitions), so that newcomers get some.
    fair = _fair_shares(members, all_tps)
    for m in out:
        if len(out[m]) > fair[m]:
            out[m].sort()
            for tp in out[m][fair[m]:]:
                taken.discard(tp)
            del out[m][fair[m]:]
    # 3. Hand the rest, in order, to the least-loaded eligible member.
    for tp in all_tps:
        if tp in taken:
            continue
        cands = eligible(tp)
        if cands:
            best = min(cands, key=lambda m: (len(out[m]), m))
            out[best].append(tp)
            taken.add(tp)
    # 4. Even out what is left (heterogeneous subscriptions): move one partition at a time from a
    #    member to an eligible one holding two or more fewer. Bounded: each move lowers the spread.
    for _ in range(len(all_tps) * max(1, len(members))):
        moved = False
        for src in sorted(out, key=lambda m: (-len(out[m]), m)):
            for tp in sorted(out[src], reverse=True):
                dst = min((m for m in eligible(tp) if m != src), key=lambda m: (len(out[m]), m), default=None)
                if dst is not None and len(out[src]) - len(out[dst]) > 1:
                    out[src].remove(tp)
                    out[dst].append(tp)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            break
    for m in out:
        out[m].sort()
    return out


def _fair_shares(members: Mapping[str, Subscription], all_tps: list[TopicPartition]) -> dict[str, int]:
    """Most partitions each member should keep: ceil(eligible partitions / members sharing them),
    with only `P % M` members allowed the extra one when subscriptions are equal."""
    n, m = len(all_tps), len(members)
    if m == 0:
        return {}
    subs = {s.topics for s in members.values()}
    if len(subs) == 1:  # equal subscriptions: exact quotas, the members owning most keep the extra one
        per, extra = divmod(n, m)
        order = sorted(members, key=lambda x: (-len(members[x].owned), x))
        return {x: per + (1 if i < extra else 0) for i, x in enumerate(order)}
    out = {}
    for x, s in members.items():
        mine = sum(1 for tp in all_tps if tp.topic in s.topics)
        sharing = max(1, sum(1 for y in members.values() if set(y.topics) & set(s.topics)))
        out[x] = -(-mine // sharing)
    return out


ASSIGNORS: dict[str, Assignor] = {
    "range": range_assign,
    "roundrobin": round_robin_assign,
    "sticky": sticky_assign,
}
#: Accepted spellings of `partition.assignment.strategy` (Kafka's class names too).
ALIASES = {
    "range": "range", "rangeassignor": "range",
    "org.apache.kafka.clients.consumer.rangeassignor": "range",
    "roundrobin": "roundrobin", "round-robin": "roundrobin", "roundrobinassignor": "roundrobin",
    "org.apache.kafka.clients.consumer.roundrobinassignor": "roundrobin",
    "sticky": "sticky", "stickyassignor": "sticky", "org.apache.kafka.clients.consumer.stickyassignor": "sticky",
}


def parse_strategies(value: str | Iterable[str]) -> list[str]:
    """`partition.assignment.strategy` (comma-separated or a list) as assignor names, in preference order."""
    items = value.split(",") if isinstance(value, str) else list(value)
    out = []
    for item in items:
        name = ALIASES.get(str(item).strip().lower())
        if name is None:
            raise ValueError(f"unknown partition.assignment.strategy {item!r}: use range, roundrobin or sticky")
        if name not in out:
            out.append(name)
    if not out:
        raise ValueError("partition.assignment.strategy is empty")
    return out


def check_assignment(members: Mapping[str, Subscription], partitions: Mapping[str, int],
                     assignment: Assignment) -> None:
    """Every subscribed partition assigned exactly once, to a member subscribed to its topic."""
    seen: set[TopicPartition] = set()
    for m, tps in assignment.items():
        for tp in tps:
            invariant(tp not in seen, f"{tp} assigned twice")
            invariant(tp.topic in members[m].topics, f"{tp} assigned to {m}, which is not subscribed to it")
            seen.add(tp)
    invariant(seen == set(_subscribed_partitions(members, partitions)), "not every subscribed partition is assigned")
