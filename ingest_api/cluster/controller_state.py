"""The fields of the active controller, its leadership, and the helpers every part uses.

`Controller` (controller.py) is one class in several files, one per concern, on the same fields:
`ControllerState` (this module) declares those fields and holds leadership (`activate`,
`deactivate`, `_require_active`) and the shared helpers (what is in flight, broker and topic
checks, the size bound of a record, placement brokers, reconciliation with
partition_change.py's rules); `ControllerBrokers` (controller_brokers.py) registers, heartbeats,
fences and ticks brokers and allocates producer ids; `ControllerTopics` (controller_topics.py)
creates, alters and deletes topics and changes partitions. The contract with the host and the
invariants are in controller.py's docstring.

Pure, and not thread-safe: calls come from one thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lakelog.ingest_api.cluster.controller_config import UNCLEAN_LEADER_ELECTION_KEY, ControllerConfig
from lakelog.ingest_api.cluster.errors import (
    BrokerNotRegisteredError,
    FencedBrokerError,
    InvalidTopicIdError,
    NotControllerError,
)
from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.cluster.image_values import (
    MAX_TOPIC_ID_LENGTH,
    BrokerRegistration,
    PartitionState,
    TopicImage,
    encode_record,
)
from lakelog.ingest_api.cluster.partition_change import LivenessView, change_record, target_state
from lakelog.ingest_api.errors import RequestTooLargeError, TopicNotFoundError


class ControllerState:
    """The fields of `Controller` and its shared primitives (module doc)."""

    # Made by Controller.__init__ (controller.py).
    image: ClusterImage
    config: ControllerConfig
    active: bool
    _active_since_ms: int
    _last_contact_ms: dict[int, int]
    _next_broker_epoch: int
    _next_producer_id: int
    _scanned_index: int
    _scanned_ms: int
    _in_flight: dict[tuple[Any, ...], tuple[int, int]]
    _now_ms: int
    _last_rebalance_ms: int
    _rebalance_due_ms: int | None

    # --- leadership ----------------------------------------------------------------------------

    def activate(self, now_ms: int) -> None:
        """Become the active controller: every registered broker gets a full session from `now_ms`."""
        self.active = True
        self._active_since_ms = now_ms
        self._now_ms = now_ms
        self._last_contact_ms.clear()
        self._next_broker_epoch = self.image.last_applied_index + 1
        self._next_producer_id = self.image.next_producer_id
        self._scanned_index = -1
        self._scanned_ms = now_ms
        self._last_rebalance_ms = now_ms
        self._rebalance_due_ms = None
        self._in_flight.clear()

    def deactivate(self) -> None:
        """Stop being the active controller (leadership lost); the soft state is dropped."""
        self.active = False
        self._last_contact_ms.clear()
        self._in_flight.clear()

    def _require_active(self) -> None:
        if not self.active:
            raise NotControllerError("this node is not the active controller")

    # --- helpers -------------------------------------------------------------------------------

    def _proposed(self, records: list[dict[str, Any]], now_ms: int | None = None) -> list[dict[str, Any]]:
        """Remember the fences and partition changes in `records` as in flight; returns `records`."""
        if now_ms is not None:
            self._now_ms = max(self._now_ms, now_ms)
        for r in records:
            if r["type"] == "fence_broker":
                self._in_flight[("fence", r["node_id"])] = (r["broker_epoch"], self._now_ms)
            elif r["type"] == "partition_change":
                self._in_flight[("partition", r["topic_id"], r["partition"])] = (r["partition_epoch"], self._now_ms)
        return records

    def _is_in_flight(self, change: tuple[TopicImage, int, PartitionState, PartitionState]) -> bool:
        """Whether a change of ours to that partition is proposed and not applied yet."""
        t, p, old, _ = change
        key = ("partition", t.topic_id, p)
        pending = self._in_flight.get(key)
        if pending is None:
            return False
        if old.partition_epoch >= pending[0]:  # landed (or lost to another change): decide afresh
            del self._in_flight[key]
            return False
        return True

    def _expire_in_flight(self, now_ms: int) -> None:
        self._now_ms = max(self._now_ms, now_ms)
        timeout = self.config.proposal_timeout_ms
        for key in [k for k, (_, at) in self._in_flight.items() if now_ms - at >= timeout]:
            del self._in_flight[key]


    def _check_broker(self, node_id: int, broker_epoch: int) -> BrokerRegistration:
        reg = self.image.brokers.get(node_id)
        if reg is None:
            raise BrokerNotRegisteredError(f"node {node_id} is not registered")
        if broker_epoch != reg.broker_epoch:
            raise FencedBrokerError(f"broker epoch {broker_epoch} of node {node_id} is stale "
                                    f"(current: {reg.broker_epoch}); register again")
        return reg

    def _topic(self, name: str) -> TopicImage:
        t = self.image.topics.get(name)
        if t is None:
            raise TopicNotFoundError(f"Topic '{name}' not found.")
        return t

    def _check_topic_id(self, topic_id: str) -> None:
        if not isinstance(topic_id, str) or not 0 < len(topic_id) <= MAX_TOPIC_ID_LENGTH:
            raise InvalidTopicIdError(f"topic id must be a string of 1..{MAX_TOPIC_ID_LENGTH} characters")
        if any(t.topic_id == topic_id for t in self.image.topics.values()):
            raise InvalidTopicIdError(f"topic id {topic_id} is taken")

    def _check_size(self, record: Mapping[str, Any], what: str) -> None:
        size = len(encode_record(record))
        if size > self.config.max_record_bytes:
            raise RequestTooLargeError(f"{what} takes a {size}-byte metadata record, above the limit of "
                                       f"{self.config.max_record_bytes} bytes")

    def _placement_brokers(self) -> list[tuple[int, str | None]]:
        view = LivenessView(self.image)
        return [(n, reg.rack) for n, reg in sorted(self.image.brokers.items()) if view.eligible(n)]

    def _unclean(self, topic: TopicImage) -> bool:
        value = topic.configs.get(UNCLEAN_LEADER_ELECTION_KEY)
        if value is None:
            return self.config.unclean_leader_election_enable
        return value.strip().lower() == "true"

    def _reconcile(self, view: LivenessView, *, nodes: set[int] | None = None, rebalance: bool = False,
                   topic: str | None = None) -> list[dict[str, Any]]:
        return [change_record(t, p, old, new)
                for t, p, old, new in self._reconcile_changes(view, nodes=nodes, rebalance=rebalance, topic=topic)]

    def _reconcile_changes(self, view: LivenessView, *, nodes: set[int] | None = None, rebalance: bool = False,
                           topic: str | None = None
                           ) -> list[tuple[TopicImage, int, PartitionState, PartitionState]]:
        """(topic, partition, old, new) for each partition whose target state differs from its state."""
        out: list[tuple[TopicImage, int, PartitionState, PartitionState]] = []
        names = [topic] if topic is not None else sorted(self.image.topics)
        topics = [self.image.topics[n] for n in names]
        for t in topics:
            unclean = self._unclean(t)
            for p, state in enumerate(t.partitions):
                if nodes is not None and nodes.isdisjoint(state.replicas):
                    continue
                new = target_state(state, view, unclean=unclean, rebalance=rebalance)
                if new != state:
                    out.append((t, p, state, new))
        return out
