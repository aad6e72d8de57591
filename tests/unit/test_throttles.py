"""Replication throttles: the dynamic rates among the dynamic broker configs (and the former throttle
records and snapshots still replayed), throttled-replica lists, the quota."""

from __future__ import annotations

import json

import pytest

from lakelog.infra.config import ConfigError, LogConfig
from lakelog.ingest_api.cluster.broker_configs import BrokerConfigState, InvalidBrokerConfigError, controller_records
from lakelog.ingest_api.cluster.image import SNAPSHOT_VERSION, ClusterImage
from lakelog.ingest_api.cluster.image_values import canonical_json
from lakelog.ingest_api.cluster.throttles import (
    CLUSTER_DEFAULT,
    FOLLOWER_RATE,
    LEADER_RATE,
    ThrottleQuota,
    is_throttled,
    parse_throttled_replicas,
)
from lakelog.logstore.record_batch import crc32c


def test_rates_are_dynamic_broker_configs_in_the_image_and_its_snapshot() -> None:
    # One mechanism: the rates are written like every dynamic broker config (alter_dynamic_broker_configs).
    image = ClusterImage()

    def alter(broker: int, **change) -> None:
        recs, _ = controller_records("alter_dynamic_broker_configs", {"broker": broker, **change}, image.broker_configs)
        for rec in recs:
            image.apply_record(rec)

    alter(CLUSTER_DEFAULT, set={LEADER_RATE: "1000"})
    alter(2, set={LEADER_RATE: 50, FOLLOWER_RATE: "70", "log.retention.ms": "5000"})
    rates = image.broker_configs
    assert rates.rate(1, LEADER_RATE) == 1000 and rates.rate(2, LEADER_RATE) == 50
    assert rates.rate(1, FOLLOWER_RATE) is None and rates.rate(2, FOLLOWER_RATE) == 70
    # A node lays only its node keys over node.toml; the rates are dynamic only.
    assert rates.node_overrides(2) == {"log.retention.ms": "5000"}
    copy = ClusterImage()
    copy.restore(image.snapshot())
    assert copy.broker_configs == image.broker_configs and "throttles" not in image.state_dict()
    # Bad values are refused by the controller, and bad records skipped by every voter alike.
    for bad in ("0", "-3", "x", str(1 << 63)):
        with pytest.raises(InvalidBrokerConfigError):
            alter(1, set={LEADER_RATE: bad})
    before = image.skipped_records
    image.apply_record({"type": "broker_configs", "broker": 1, "configs": {LEADER_RATE: "0"}})
    assert image.skipped_records == before + 1
    alter(2, delete=[LEADER_RATE, FOLLOWER_RATE, "log.retention.ms"])
    alter(CLUSTER_DEFAULT, delete=[LEADER_RATE])
    assert image.broker_configs == BrokerConfigState() and "broker_configs" not in image.state_dict()


def test_a_metadata_log_written_with_the_former_throttle_records_still_replays() -> None:
    image = ClusterImage()
    image.apply_record({"type": "alter_broker_configs", "node_id": CLUSTER_DEFAULT, "configs": {LEADER_RATE: "1000"}})
    image.apply_record({"type": "alter_broker_configs", "node_id": 2, "configs": {LEADER_RATE: "50",
                                                                                  FOLLOWER_RATE: "70"}})
    image.apply_record({"type": "broker_configs", "broker": 2, "configs": {**image.broker_configs.of(2),
                                                                            "log.retention.ms": "9"}})
    assert image.broker_configs.rate(1, LEADER_RATE) == 1000 and image.broker_configs.rate(2, LEADER_RATE) == 50
    assert image.broker_configs.of(2) == {LEADER_RATE: "50", FOLLOWER_RATE: "70", "log.retention.ms": "9"}
    # What the former record type skipped is still skipped.
    for bad in ({"node_id": 1, "configs": {LEADER_RATE: "0"}}, {"node_id": 1, "configs": {"segment.bytes": "9"}},
                {"node_id": -2, "configs": {LEADER_RATE: "9"}}, {"node_id": 1, "configs": {}}):
        before = image.skipped_records
        image.apply_record({"type": "alter_broker_configs", **bad})
        assert image.skipped_records == before + 1, bad
    # null removes only that rate (a delta, as it was); the entity keeps its other configs.
    image.apply_record({"type": "alter_broker_configs", "node_id": 2, "configs": {LEADER_RATE: None, FOLLOWER_RATE: None}})
    assert image.broker_configs.of(2) == {"log.retention.ms": "9"}
    # A snapshot written before the merge: its `throttles` section joins the broker configs.
    state = {**image.state_dict(), "throttles": {"brokers": [{"node_id": 3, "configs": {FOLLOWER_RATE: "123"}},
                                                             {"node_id": 2, "configs": {LEADER_RATE: "7"}}]}}
    old = json.dumps({"version": SNAPSHOT_VERSION, "crc32c": crc32c(canonical_json(state)), "image": state}).encode()
    restored = ClusterImage()
    restored.restore(old)
    assert restored.broker_configs.rate(3, FOLLOWER_RATE) == 123 and restored.broker_configs.rate(2, LEADER_RATE) == 7
    assert restored.broker_configs.of(2) == {"log.retention.ms": "9", LEADER_RATE: "7"}
    assert "throttles" not in restored.state_dict()  # written back in the one format


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
