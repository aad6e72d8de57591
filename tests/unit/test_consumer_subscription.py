"""A consumer instance's subscription state (groups/consumer_subscription.py), without a node."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from lakelog.ingest_api.errors import InvalidRequestError, PartitionNotFoundError, TopicNotFoundError
from lakelog.ingest_api.groups.assignors import TopicPartition
from lakelog.ingest_api.groups.consumer_subscription import SubscriptionState
from lakelog.ingest_api.groups.errors import IllegalStateError

TOPICS = {"orders": SimpleNamespace(partitions=[0, 1]), "order-audit": SimpleNamespace(partitions=[0]),
          "__consumer_offsets": SimpleNamespace(partitions=[0])}
A0, A1, B0 = TopicPartition("orders", 0), TopicPartition("orders", 1), TopicPartition("order-audit", 0)


def test_a_subscription_and_a_manual_assignment_exclude_each_other():
    s = SubscriptionState()
    s.subscribe(["orders", "orders", "order-audit"], None)
    assert s.subscribed and s.subscribed_topics(TOPICS) == ["order-audit", "orders"]
    with pytest.raises(IllegalStateError):
        s.assign([A0], TOPICS)
    s.unsubscribe()
    assert not s.subscribed
    s.assign([A0, A0, A1], TOPICS)
    assert s.manual == [A0, A1] and s.assignment == [A0, A1]
    with pytest.raises(IllegalStateError):
        s.subscribe(["orders"], None)


def test_a_pattern_matches_whole_names_and_never_an_internal_topic():
    s = SubscriptionState()
    s.subscribe(None, "order.*")
    assert s.subscription == [] and s.subscribed_topics(TOPICS) == ["order-audit", "orders"]
    s.subscribe(None, "orders|__consumer_offsets")
    assert s.subscribed_topics(TOPICS) == ["orders"]
    for topics, pattern in ((None, "("), (None, "x" * 1001), ([], None), (["ok", ""], None)):
        with pytest.raises(InvalidRequestError):
            SubscriptionState().subscribe(topics, pattern)


def test_a_manual_assignment_names_existing_partitions():
    with pytest.raises(TopicNotFoundError):
        SubscriptionState().assign([TopicPartition("nope", 0)], TOPICS)
    with pytest.raises(PartitionNotFoundError):
        SubscriptionState().assign([TopicPartition("orders", 2)], TOPICS)


def test_a_new_assignment_keeps_the_positions_of_the_partitions_that_stay_and_bumps_the_version():
    s = SubscriptionState()
    s.set_assignment([A0, A1])
    s.seek(A0, 5)
    s.seek(A1, 7)
    version = s.version
    s.set_assignment([A1, B0])
    assert s.version == version + 1 and s.positions == {A1: 7}
    assert s.consumed() == [{"topic": "orders", "partition": 1, "offset": 7}]
    with pytest.raises(IllegalStateError):
        s.seek(A0, 1)  # no longer assigned
    with pytest.raises(InvalidRequestError):
        s.seek(A1, -1)
    s.clear_positions()
    assert s.positions == {} and s.assignment == [A1, B0] and s.version == version + 1
