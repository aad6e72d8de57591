"""Assignors: the examples of the design documents (10 partitions, 3 consumers), balance, stickiness."""

from __future__ import annotations

import random

import pytest

from lakelog.ingest_api.groups.assignors import (
    ASSIGNORS,
    Subscription,
    TopicPartition as TP,
    check_assignment,
    parse_strategies,
    range_assign,
    round_robin,
    round_robin_assign,
    sticky_assign,
)
from lakelog.ingest_api.groups.hashing import coordinator_partition, java_string_hashcode, kafka_abs


def tps(*ps: int, topic: str = "test") -> list[TP]:
    return [TP(topic, p) for p in ps]


def test_range_matches_the_design_documents_example():
    members = {c: Subscription(("test",)) for c in ("C0", "C1", "C2")}
    a = range_assign(members, {"test": 10})
    assert a == {"C0": tps(0, 1, 2, 3), "C1": tps(4, 5, 6), "C2": tps(7, 8, 9)}


def test_range_gives_the_first_member_one_more_per_topic():
    members = {c: Subscription(("a", "b")) for c in ("C0", "C1", "C2")}
    a = range_assign(members, {"a": 10, "b": 10})
    assert [len(a[c]) for c in ("C0", "C1", "C2")] == [8, 6, 6]


def test_round_robin_matches_the_design_documents_example():
    # The example's orders: partitions and consumers as sorted by hashCode in the document.
    members = {c: Subscription(("test",)) for c in ("C0", "C1", "C2")}
    order = tps(5, 8, 2, 4, 3, 6, 7, 9, 0, 1)
    a = round_robin(["C2", "C0", "C1"], order, members)
    assert a == {"C2": tps(5, 4, 7, 1), "C0": tps(8, 3, 9), "C1": tps(2, 6, 0)}


def test_round_robin_sorts_by_java_hashcode():
    members = {c: Subscription(("test",)) for c in ("C0", "C1", "C2")}
    a = round_robin_assign(members, {"test": 10})
    # "test-0".."test-9" and "C0".."C2" differ in their last character only: hashCode order is name order.
    assert a == {"C0": tps(0, 3, 6, 9), "C1": tps(1, 4, 7), "C2": tps(2, 5, 8)}
    # Counts differ by at most one across several topics.
    members = {c: Subscription(("a", "b", "c")) for c in ("m1", "m2", "m3", "m4")}
    a = round_robin_assign(members, {"a": 3, "b": 5, "c": 7})
    assert max(map(len, a.values())) - min(map(len, a.values())) <= 1


def test_java_hashcode_and_coordinator_partition():
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("a") == 97
    assert java_string_hashcode("hello") == 99162322
    assert java_string_hashcode("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE
    assert kafka_abs(-(1 << 31)) == 0 and kafka_abs(-5) == 5
    # Java: Math.abs("console-consumer-1".hashCode()) % 50
    h = java_string_hashcode("console-consumer-1")
    assert coordinator_partition("console-consumer-1", 50) == abs(h) % 50
    assert coordinator_partition("polygenelubricants", 50) == 0
    assert java_string_hashcode("\U0001F600") == 0xD83D * 31 + 0xDE00  # UTF-16 code units


@pytest.mark.parametrize("name", sorted(ASSIGNORS))
def test_every_assignor_assigns_each_partition_once(name):
    rng = random.Random(7)
    for _ in range(200):
        topics = [f"t{i}" for i in range(rng.randint(1, 4))]
        partitions = {t: rng.randint(0, 12) for t in topics}
        members = {f"m{i}": Subscription(tuple(rng.sample(topics, rng.randint(1, len(topics)))))
                   for i in range(rng.randint(1, 6))}
        if name == "sticky":
            members = {m: s._replace(owned=tuple(TP(t, rng.randrange(max(1, partitions[t] + 2)))
                                                 for t in s.topics)) for m, s in members.items()}
        a = ASSIGNORS[name](members, partitions)
        check_assignment(members, partitions, a)


def test_sticky_keeps_owned_partitions_and_balances():
    members = {"a": Subscription(("t",)), "b": Subscription(("t",))}
    first = sticky_assign(members, {"t": 6})
    assert sorted(map(len, first.values())) == [3, 3]
    # c joins: a and b each give one partition up and keep the others.
    members = {m: Subscription(("t",), tuple(first[m])) for m in ("a", "b")}
    members["c"] = Subscription(("t",))
    second = sticky_assign(members, {"t": 6})
    assert sorted(map(len, second.values())) == [2, 2, 2]
    assert set(second["a"]) <= set(first["a"]) and set(second["b"]) <= set(first["b"])
    # b leaves: a and c keep theirs and share b's.
    members = {m: Subscription(("t",), tuple(second[m])) for m in ("a", "c")}
    third = sticky_assign(members, {"t": 6})
    assert set(second["a"]) <= set(third["a"]) and set(second["c"]) <= set(third["c"])
    assert sorted(map(len, third.values())) == [3, 3]


def test_parse_strategies():
    assert parse_strategies("range, roundrobin") == ["range", "roundrobin"]
    assert parse_strategies("org.apache.kafka.clients.consumer.StickyAssignor") == ["sticky"]
    with pytest.raises(ValueError):
        parse_strategies("cooperative-sticky-ish")
