"""Dynamic broker configs in the metadata image (ingest_api/cluster/broker_configs.py): what the
controller proposes, what `apply` accepts or skips (identically on every voter), snapshots."""

from __future__ import annotations

import pytest

from lakelog.ingest_api.cluster.broker_configs import (
    CLUSTER_DEFAULT,
    DYNAMIC_BROKER_CONFIGS,
    BrokerConfigState,
    InvalidBrokerConfigError,
    ReadOnlyBrokerConfigError,
    controller_records,
)
from lakelog.ingest_api.cluster.image import ClusterImage


def test_the_dynamic_keys_are_the_topic_defaults():
    assert {"log.retention.ms", "log.segment.bytes", "message.max.bytes", "min.insync.replicas",
            "unclean.leader.election.enable"} <= DYNAMIC_BROKER_CONFIGS
    assert not {"node.id", "listeners", "log.dirs", "num.partitions"} & DYNAMIC_BROKER_CONFIGS


def test_controller_records_merge_validate_and_precedence():
    s = BrokerConfigState()
    recs, _ = controller_records("alter_dynamic_broker_configs", {"broker": -1, "set": {"log.retention.ms": 1000}}, s)
    assert recs == [{"type": "broker_configs", "broker": -1, "configs": {"log.retention.ms": "1000"}}]
    s = s.apply(recs[0])
    recs, _ = controller_records("alter_dynamic_broker_configs", {"broker": 2, "set": {"log.retention.ms": "5",
                                                                             "min.insync.replicas": "2"}}, s)
    s = s.apply(recs[0])
    assert s.effective(2) == {"log.retention.ms": "5", "min.insync.replicas": "2"}
    assert s.effective(1) == {"log.retention.ms": "1000"}
    assert controller_records("alter_dynamic_broker_configs", {"broker": 2, "set": {"log.retention.ms": "5"}}, s)[0] == []
    assert controller_records("alter_dynamic_broker_configs", {"broker": 2, "set": {"log.roll.ms": "9"},
                                                       "validate_only": True}, s)[0] == []
    recs, _ = controller_records("alter_dynamic_broker_configs", {"broker": 2, "delete": ["log.retention.ms",
                                                                                 "min.insync.replicas"]}, s)
    s = s.apply(recs[0])
    assert s.of(2) == {} and 2 not in s.entities  # an entity with nothing left is dropped
    with pytest.raises(ReadOnlyBrokerConfigError):
        controller_records("alter_dynamic_broker_configs", {"broker": 1, "set": {"node.id": "3"}}, s)
    with pytest.raises(ReadOnlyBrokerConfigError):
        controller_records("alter_dynamic_broker_configs", {"broker": 1, "delete": ["listeners"]}, s)
    with pytest.raises(InvalidBrokerConfigError):
        controller_records("alter_dynamic_broker_configs", {"broker": 1, "set": {"log.retention.ms": "x"}}, s)


def test_the_image_applies_skips_bad_records_and_keeps_them_in_snapshots():
    img = ClusterImage()
    img.apply_record({"type": "broker_configs", "broker": CLUSTER_DEFAULT, "configs": {"message.max.bytes": "2000"}})
    img.apply_record({"type": "broker_configs", "broker": 3, "configs": {"log.retention.ms": "7"}})
    for bad in ({"broker": 3, "configs": {"node.id": "1"}}, {"broker": 3, "configs": {"log.retention.ms": "x"}},
                {"broker": -2, "configs": {}}, {"broker": "3", "configs": {}}, {"broker": 3, "configs": ["x"]},
                {"broker": 3, "configs": {"log.retention.ms": 7}}):
        before = img.skipped_records
        img.apply_record({"type": "broker_configs", **bad})
        assert img.skipped_records == before + 1, bad
    assert img.broker_configs.effective(3) == {"message.max.bytes": "2000", "log.retention.ms": "7"}
    other = ClusterImage()
    other.restore(img.snapshot())
    assert other.broker_configs == img.broker_configs and other.state_dict() == img.state_dict()
    assert img.copy().broker_configs is img.broker_configs
    # A cluster that never set one has the same snapshot as before this record type existed.
    assert "broker_configs" not in ClusterImage().state_dict()
