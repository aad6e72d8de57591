"""Replication throttles: the dynamic rates in the metadata image, throttled-replica lists, the quota."""

from __future__ import annotations

import pytest

from lakelog.infra.config import ConfigError, LogConfig
from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.cluster.throttles import (
    CLUSTER_DEFAULT,
    FOLLOWER_RATE,
    LEADER_RATE,
    BrokerThrottles,
    ThrottleQuota,
    is_throttled,
    parse_throttled_replicas,
)


def test_rates_live_in_the_image_and_its_snapshot() -> None:
    image = ClusterImage()
    image.apply_record({"type": "alter_broker_configs", "node_id": CLUSTER_DEFAULT, "configs": {LEADER_RATE: "1000"}})
    image.apply_record({"type": "alter_broker_configs", "node_id": 2, "configs": {LEADER_RATE: "50",
                                                                                  FOLLOWER_RATE: "70"}})
    assert image.throttles.rate(1, LEADER_RATE) == 1000 and image.throttles.rate(2, LEADER_RATE) == 50
    assert image.throttles.rate(1, FOLLOWER_RATE) is None and image.throttles.rate(2, FOLLOWER_RATE) == 70
    copy = ClusterImage()
    copy.restore(image.snapshot())
    assert copy.throttles == image.throttles
    # Bad records are skipped, never applied.
    for bad in ({"node_id": 1, "configs": {LEADER_RATE: "0"}}, {"node_id": 1, "configs": {"segment.bytes": "9"}},
                {"node_id": -2, "configs": {LEADER_RATE: "9"}}, {"node_id": 1, "configs": {}}):
        before = image.skipped_records
        image.apply_record({"type": "alter_broker_configs", **bad})
        assert image.skipped_records == before + 1, bad
    # null removes; an emptied broker entry goes, and the snapshot no longer carries throttles.
    image.apply_record({"type": "alter_broker_configs", "node_id": 2, "configs": {LEADER_RATE: None, FOLLOWER_RATE: None}})
    image.apply_record({"type": "alter_broker_configs", "node_id": CLUSTER_DEFAULT, "configs": {LEADER_RATE: None}})
    assert image.throttles == BrokerThrottles() and "throttles" not in image.state_dict()


def test_throttled_replica_lists() -> None:
    assert parse_throttled_replicas("*") is None
    assert parse_throttled_replicas("0:1, 1:2") == {(0, 1), (1, 2)}
    assert parse_throttled_replicas("") == frozenset()
    assert is_throttled("*", 3, 9) and is_throttled("3:9", 3, 9)
    assert not is_throttled("3:8", 3, 9) and not is_throttled("", 3, 9)
    with pytest.raises(ValueError):
        parse_throttled_replicas("0-1")
    assert LogConfig({"follower.replication.throttled.replicas": "0:4,1:4"}).follower_replication_throttled_replicas
    with pytest.raises(ConfigError):
        LogConfig({"leader.replication.throttled.replicas": "all"})


def test_quota_spends_and_refills_with_time() -> None:
    q = ThrottleQuota()
    assert q.allowance(1000, now=0.0) == 1000
    q.record(1000, 1500, now=0.0)  # one batch may overshoot: the next ones wait longer
    assert q.allowance(1000, now=0.1) == 0
    assert q.allowance(1000, now=0.6) == 100
    assert q.allowance(1000, now=5.0) == 1000  # never more than one second's worth
    assert q.allowance(10, now=5.0) == 10  # a new rate starts afresh
