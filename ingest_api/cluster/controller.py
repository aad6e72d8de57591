"""The active controller's logic: from the metadata image and a request, the records to propose.

Runs on the Raft leader of the controller quorum only (its term is the controller epoch). Pure:
no I/O, no clock (time comes in as `now_ms`), no randomness (topic ids come in from the host,
placement offsets are derived from the topic name). Every method validates against the current
`ClusterImage` and returns records (dicts, see `image.py` for their schemas) — it never mutates
the image. The only state of its own is soft, and dropped on (de)activation: broker sessions (last
heartbeat per node), the high-water marks of the broker epochs and producer ids it has handed out
but may not see applied yet, and the fences and partition changes it proposed that are in flight.

Contract with the host (the Raft node that owns the image):

* `activate(now_ms)` once this node is Raft leader *and* its image has applied the leader's first
  entry of the term (so every entry of an earlier term that will ever commit is in the image);
  `deactivate()` when leadership is lost. Methods of an inactive controller raise
  `NotControllerError`.
* Propose the returned records in order, one per entry. Answer the caller only once they are
  committed and applied; a record the image skipped (`image.skipped_at(index)`) did not take
  effect (a concurrent request got there first) — answer with a retriable error, or compare the
  image with the returned value (`image.partition(...) == state`, `image.topic(name).topic_id`).
* Not thread-safe: calls come from one thread. They may overlap with proposals still in flight,
  and that is safe: broker epochs and producer-id blocks come from in-memory high-water marks
  (never handed out twice), every other record is a compare-and-swap in `apply` (a duplicate is
  skipped), and `tick` does not re-propose a change of its own until it is applied or
  `proposal_timeout_ms` has passed (a proposal lost without a leadership change).
* Call `tick(now_ms)` periodically (every few hundred ms); it fences expired sessions and moves
  leaderships.

Invariants (also in `image.py`, checked there on every applied record):
  leader ∈ ISR ⊆ replicas unless leader == -1; the ISR is never empty; leader and partition epochs
  only grow; a node's broker epoch only grows; producer-id blocks never overlap.

Broker epochs: a registration gets `max(image.last_applied_index + 1, previous epoch of the node + 1,
last epoch this controller handed out + 1)`. The register record lands at an index above the
applied index, so the epoch of every earlier registration of any node — itself at most its own
record's index — is smaller, even across unregister / re-register and controller failover.

Liveness: a broker is *alive* when registered and unfenced; it is *eligible* (may lead, may join an
ISR, receives new replicas) when alive and not in controlled shutdown. A broker is fenced when its
session expires — no heartbeat for `broker_session_timeout_ms` since the later of its last heartbeat
and this controller's activation (a new controller grants everyone a full session) — or when it asks
(`want_fence`), or when its controlled shutdown completes. A fenced broker is unfenced by a heartbeat
that shows it has applied the metadata log up to its own register record.

Partition reconciliation (`tick`, and after every broker-state change, for that broker's partitions)
follows the rules in `partition_change.py`.

Where the code is: this module holds `Controller`'s constructor; brokers (registration,
heartbeats, fencing, `tick`, producer ids) are `ControllerBrokers` (controller_brokers.py, with
`HeartbeatReply`), topics and partitions `ControllerTopics` (controller_topics.py), the fields,
leadership and shared helpers `ControllerState` (controller_state.py), the settings
`ControllerConfig` (controller_config.py). They work on the same fields.
"""

from __future__ import annotations

from typing import Any

from lakelog.ingest_api.cluster.controller_brokers import ControllerBrokers, HeartbeatReply  # noqa: F401  (HeartbeatReply re-exported)
from lakelog.ingest_api.cluster.controller_config import (  # noqa: F401  (re-exported: the node, its components and tests import them here)
    MIN_INSYNC_REPLICAS_KEY,
    UNCLEAN_LEADER_ELECTION_KEY,
    ControllerConfig,
)
from lakelog.ingest_api.cluster.controller_topics import ControllerTopics
from lakelog.ingest_api.cluster.image import ClusterImage


class Controller(ControllerBrokers, ControllerTopics):
    """The active controller: validates requests against the image and returns the records to propose."""

    def __init__(self, image: ClusterImage, config: ControllerConfig | None = None) -> None:
        self.image = image
        self.config = config or ControllerConfig()
        self.active = False
        self._active_since_ms = 0
        self._last_contact_ms: dict[int, int] = {}
        self._next_broker_epoch = 1
        self._next_producer_id = 0
        self._scanned_index = -1  # image index of the last complete reconcile (-1: rescan)
        self._scanned_ms = 0
        # What this controller proposed and has not seen applied yet, so `tick` does not propose it
        # again: ("fence", node_id) -> (broker epoch, proposed at) and
        # ("partition", topic_id, partition) -> (target partition epoch, proposed at).
        self._in_flight: dict[tuple[Any, ...], tuple[int, int]] = {}
        self._now_ms = 0  # the latest time any call brought
        self._last_rebalance_ms = 0
        self._rebalance_due_ms: int | None = None  # an earlier rebalance, see preferred_leader_return_delay_ms
