"""A broker that is not a controller voter: it follows the metadata log as an observer.

A node whose `node.id` is not in `controller.quorum.voters` is added to a running cluster this way
(Kafka's broker-only node in KRaft): it registers and heartbeats like any broker (through the
active controller, found from the voters' answers), takes replicas, leads partitions, serves
clients — but never votes and never becomes the controller. `ObserverHost` stands where a voter's
`QuorumHost` stands for the rest of the node: it follows the committed metadata log with
`MetadataFollower` (long-polling a voter's `GET /internal/metadata`, snapshot first when it is far
behind) into the node's `ClusterImage`, calls `on_applied` after each batch, knows the Raft leader
from the voters' answers, and is never leader.

Limits: the voters set stays the configured one (adding voters to a running quorum is not
supported); the follower polls voters over plain HTTP (a cluster with TLS between nodes keeps every
node a voter); the observer starts from the voters' snapshot after a restart (its image is not
persisted here).

Concurrency: the follower task runs on the node's event loop and is the only writer of the image.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lakelog.ingest_api.cluster.errors import NotControllerError
from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.cluster.metadata_follower import MetadataFollower
from lakelog.ingest_api.raft.messages import NO_NODE


class ObserverConfig:
    """What the node's internal endpoints read of a quorum host's config (the cluster secret and the
    accepted clock skew of signatures)."""

    def __init__(self, secret: bytes, max_clock_skew_ms: int) -> None:
        self.secret = secret
        self.max_clock_skew_ms = max_clock_skew_ms


class ObserverHost:
    """The quorum seen from a non-voter: the committed metadata log, the leader's id; never leader."""

    is_leader = False
    has_lease = False

    def __init__(self, node_id: int, voters: dict[int, tuple[str, int]], secret: bytes, image: ClusterImage, *,
                 on_applied: Callable[[int], None], max_clock_skew_ms: int, request_timeout_ms: int) -> None:
        self.node_id = node_id
        self.config = ObserverConfig(secret, max_clock_skew_ms)
        self.follower = MetadataFollower(node_id, voters, secret, image, on_applied=on_applied,
                                         request_timeout_ms=request_timeout_ms)

    @property
    def leader_id(self) -> int:
        return self.follower.leader_id if self.follower.leader_id is not None else NO_NODE

    @property
    def term(self) -> int:
        return self.follower.term

    @property
    def applied_index(self) -> int:
        return self.follower.applied_index

    async def start(self) -> None:
        await self.follower.start()

    async def stop(self, timeout_s: float = 10.0) -> None:
        await self.follower.stop()

    async def confirm_lease(self, timeout_s: float | None = None) -> bool:
        return False

    async def propose_many(self, payloads: list[bytes], timeout_s: float = 5.0, window: int = 256) -> int:
        raise NotControllerError(f"node {self.node_id} is not a controller voter", self.leader_id)

    def __getattr__(self, name: str) -> Any:
        # Anything voter-only (Raft messages, metadata serving) is refused as the quorum's
        # "not a voter here" would be: an AttributeError the router answers 503 for.
        raise AttributeError(f"node {self.node_id} is an observer (not a controller voter): no {name}")
