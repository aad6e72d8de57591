"""Errors of the controller quorum: the answers the active controller gives brokers and admins.

Every class sits under `ClusterError` (itself a `NodeError`) and names its `kind`; its HTTP status and
Confluent-style `error_code` are in `ingest_api.error_table`. Where a node-level class already means the same thing it is a second base
(`InvalidRequestError` for refused requests), so `except InvalidRequestError` catches ours too. The
Kafka error each one stands for is named in its docstring, so a reader who knows Kafka's
`ReplicationControlManager` / `ClusterControlManager` finds their way.

Topics that do not exist or already exist reuse `TopicNotFoundError`, `PartitionNotFoundError` and
`TopicExistsError` from `ingest_api.errors`.
"""

from __future__ import annotations

from lakelog.infra.errors import ErrorKind
from lakelog.ingest_api.errors import InvalidRequestError, NodeError
from lakelog.ingest_api.raft.messages import NO_NODE


class ClusterError(NodeError):
    """Root of the controller quorum's errors."""


class NotControllerError(ClusterError):
    """This node is not the active controller, or stopped leading before a proposal committed (Kafka NOT_CONTROLLER).

    `controller_id` (None when unknown; `leader_id` is the same as a Raft node id, NO_NODE when
    unknown) is where to retry; `term` is the controller epoch known here, when known.
    """

    kind = ErrorKind.NOT_LEADER

    def __init__(self, message: str, controller_id: int | None = None, term: int | None = None) -> None:
        super().__init__(message)
        self.controller_id = controller_id  # the known Raft leader, if any: where to retry
        self.term = term

    @property
    def leader_id(self) -> int:
        return NO_NODE if self.controller_id is None else self.controller_id

    @classmethod
    def from_raft(cls, leader_id: int, term: int, message: str | None = None) -> "NotControllerError":
        """The refusal of a Raft voter that is not the leader (`leader_id` NO_NODE when none is known)."""
        if message is None:
            message = (f"not the controller; the controller is node {leader_id} in epoch {term}"
                       if leader_id != NO_NODE else f"not the controller; none is known in epoch {term}")
        return cls(message, None if leader_id == NO_NODE else leader_id, term)


class StaleControllerEpochError(ClusterError):
    """A message comes from a controller epoch older than one already seen (Kafka STALE_CONTROLLER_EPOCH)."""

    kind = ErrorKind.NOT_LEADER


class FencedBrokerError(ClusterError):
    """The broker epoch is not the node's current registration's (Kafka STALE_BROKER_EPOCH): re-register."""

    kind = ErrorKind.NOT_LEADER


class BrokerNotRegisteredError(FencedBrokerError):
    """No registration for that node id (Kafka BROKER_ID_NOT_REGISTERED): register first."""



class InvalidUpdateVersionError(ClusterError):
    """The partition epoch of an ISR change is not the current one (Kafka INVALID_UPDATE_VERSION).

    The partition changed since the leader last read it; it must catch up with the metadata log
    and retry with the new partition epoch.
    """

    kind = ErrorKind.NOT_LEADER


class FencedLeaderEpochError(ClusterError):
    """The leader epoch of a request is not the partition's current one (Kafka FENCED_LEADER_EPOCH)."""

    kind = ErrorKind.NOT_LEADER


class NotPartitionLeaderError(ClusterError):
    """The requester is not the partition's current leader (Kafka NOT_LEADER_OR_FOLLOWER)."""

    kind = ErrorKind.NOT_LEADER


class IneligibleReplicaError(ClusterError, InvalidRequestError):
    """A replica added to the ISR is fenced, shutting down or unregistered (Kafka INELIGIBLE_REPLICA)."""

    kind = ErrorKind.INVALID_REQUEST


class InvalidIsrError(ClusterError, InvalidRequestError):
    """A proposed ISR is empty, lacks the leader, repeats a node or names a non-replica (Kafka INVALID_REQUEST)."""

    kind = ErrorKind.INVALID_REQUEST


class InvalidReplicationFactorError(ClusterError, InvalidRequestError):
    """The replication factor is below 1 or above the live brokers (Kafka INVALID_REPLICATION_FACTOR;
    under /v3 answered as Confluent: 400 / 40002)."""

    kind = ErrorKind.INVALID_REQUEST


class InvalidPartitionsError(ClusterError, InvalidRequestError):
    """A partition count is out of bounds or would shrink a topic (Kafka INVALID_PARTITIONS)."""

    kind = ErrorKind.INVALID_REQUEST


class InvalidTopicIdError(ClusterError, InvalidRequestError):
    """A topic id is empty, too long, or already names another topic (Kafka INCONSISTENT_TOPIC_ID)."""

    kind = ErrorKind.INVALID_REQUEST


class InvalidReplicaAssignmentError(ClusterError, InvalidRequestError):
    """A reassignment's target replicas are empty, repeat a node or name an unregistered one, or its
    cancel would leave no in-sync replica (Kafka INVALID_REPLICA_ASSIGNMENT)."""

    kind = ErrorKind.INVALID_REQUEST


class BrokerInUseError(ClusterError):
    """A broker to unregister still runs or still holds replicas (drain and stop it first)."""

    kind = ErrorKind.INVALID_REQUEST


class NoReassignmentInProgressError(ClusterError):
    """A cancel named a partition that is not being reassigned (Kafka NO_REASSIGNMENT_IN_PROGRESS)."""

    kind = ErrorKind.NOT_FOUND


# The controller quorum's host (`cluster/quorum.py`).

class QuorumError(ClusterError):
    """Root of the quorum host's errors."""


class QuorumTimeoutError(QuorumError, TimeoutError):
    """A proposal was not applied, or a wait not satisfied, in time (a proposal may still commit)."""

    kind = ErrorKind.TRANSIENT


class QuorumUnavailableError(QuorumError):
    """The quorum host is not running (starting, stopped, failed) or its inbox is full; retry."""

    kind = ErrorKind.TRANSIENT


class NotAVoterError(QuorumError):
    """A Raft message comes from a node that is not a voter, or names a sender other than its signer."""

    kind = ErrorKind.INVALID_REQUEST


class MetadataFollowerError(QuorumError):
    """A metadata fetch answer is unusable (not JSON, a gap, an unknown version); the follower retries."""

    kind = ErrorKind.TRANSIENT
