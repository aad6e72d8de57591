"""The active controller's settings (`ControllerConfig`) and the topic keys it reads.

Keyed fields take their default and bounds from their declared key (`keyed`, infra/config.py);
the others are the controller's own limits. `Controller` (controller.py) takes one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lakelog.infra.config import LOG_CONFIG, ConfigError, check_keyed, from_keys, keyed
from lakelog.ingest_api.cluster.image_values import MAX_LONG, MAX_PARTITIONS_PER_TOPIC, MAX_PRODUCER_ID_BLOCK
from lakelog.ingest_api.config.node import NODE_CONFIG

UNCLEAN_LEADER_ELECTION_KEY = "unclean.leader.election.enable"
MIN_INSYNC_REPLICAS_KEY = "min.insync.replicas"


_KEY = NODE_CONFIG.keys


@dataclass(frozen=True)
class ControllerConfig:
    """The controller's settings; keyed fields take their default and bounds from their declared key.

    The others are the controller's own limits, not configuration keys.
    """

    broker_session_timeout_ms: int = keyed(_KEY["broker.session.timeout.ms"])
    default_replication_factor: int = keyed(_KEY["default.replication.factor"])
    num_partitions: int = keyed(_KEY["num.partitions"])
    max_partitions_per_topic: int = keyed(_KEY["max.partitions.per.topic"])  # also bounded by max_record_bytes
    default_min_insync_replicas: int = keyed(LOG_CONFIG.keys["min.insync.replicas"])
    unclean_leader_election_enable: bool = keyed(LOG_CONFIG.keys["unclean.leader.election.enable"])
    auto_leader_rebalance_enable: bool = keyed(_KEY["auto.leader.rebalance.enable"])
    leader_imbalance_check_interval_ms: int = keyed(_KEY["leader.imbalance.check.interval.seconds"],
                                                    lambda seconds: seconds * 1000)
    #: When an ISR expansion brings back a partition's preferred leader while another replica leads,
    #: the leader rebalance runs this long after the last such expansion (not at the next periodic
    #: check): a restarted node gets its leaderships back once it has caught up, not minutes later.
    preferred_leader_return_delay_ms: int = 5_000
    #: Leader moves a rebalance proposes per tick (see PartitionReconciler._pace_rebalance, controller_partitions.py).
    rebalance_moves_per_tick: int = 8
    producer_id_block_size: int = 1_000
    max_record_bytes: int = 1_000_000  # below the Raft max_entry_bytes (1 MiB)
    max_records_per_tick: int = 10_000  # a tick proposes at most this many; the rest next tick
    proposal_timeout_ms: int = 10_000  # a proposed change not applied after this long is proposed again

    def __post_init__(self) -> None:
        check_keyed(self)
        bounds = {
            "leader_imbalance_check_interval_ms": (0, MAX_LONG),
            "preferred_leader_return_delay_ms": (0, MAX_LONG), "rebalance_moves_per_tick": (1, 1_000_000),
            "producer_id_block_size": (1, MAX_PRODUCER_ID_BLOCK), "max_record_bytes": (1_024, 1 << 30),
            "max_records_per_tick": (1, 1_000_000), "proposal_timeout_ms": (1, MAX_LONG),
        }
        for key, (lo, hi) in bounds.items():
            value = getattr(self, key)
            if type(value) is not int or not lo <= value <= hi:
                raise ConfigError(f"controller setting {key} = {value!r} is not an integer in [{lo}, {hi}]")
        if self.num_partitions > self.max_partitions_per_topic:
            raise ConfigError("num_partitions is above max_partitions_per_topic")
        if self.max_partitions_per_topic > MAX_PARTITIONS_PER_TOPIC:
            raise ConfigError(f"max_partitions_per_topic is above {MAX_PARTITIONS_PER_TOPIC}")

    @classmethod
    def from_keys(cls, config: Any, **overrides: Any) -> "ControllerConfig":
        """From a node's parsed configuration (`NodeConfig`)."""
        return from_keys(cls, config, **overrides)
