"""Errors of the controller quorum: the answers the active controller gives brokers and admins.

Every class sits under `ClusterError` (itself a `NodeError`, so `ingest_api.errors.http_error` maps
it) and names its `kind`, its HTTP `status` and a Confluent-style `error_code` whose first three
digits are the status. Where a node-level class already means the same thing it is a second base
(`InvalidRequestError` for refused requests), so `except InvalidRequestError` catches ours too. The
Kafka error each one stands for is named in its docstring, so a reader who knows Kafka's
`ReplicationControlManager` / `ClusterControlManager` finds their way.

Topics that do not exist or already exist reuse `TopicNotFoundError`, `PartitionNotFoundError` and
`TopicExistsError` from `ingest_api.errors`.
"""

from __future__ import annotations

from lakelog.infra.errors import ErrorKind
from lakelog.ingest_api.errors import InvalidRequestError, NodeError


class ClusterError(NodeError):
    """Root of the controller quorum's errors."""


class NotControllerError(ClusterError):
    """This node is not the active controller (Kafka NOT_CONTROLLER); ask the Raft leader."""

    kind = ErrorKind.NOT_LEADER
    status, error_code = 421, 42102

    def __init__(self, message: str, controller_id: int | None = None) -> None:
        super().__init__(message)
        self.controller_id = controller_id  # the known Raft leader, if any: where to retry


class StaleControllerEpochError(ClusterError):
    """A message comes from a controller epoch older than one already seen (Kafka STALE_CONTROLLER_EPOCH)."""

    kind = ErrorKind.NOT_LEADER
    status, error_code = 421, 42103


class FencedBrokerError(ClusterError):
    """The broker epoch is not the node's current registration's (Kafka STALE_BROKER_EPOCH): re-register."""

    kind = ErrorKind.NOT_LEADER
    status, error_code = 409, 40903


class BrokerNotRegisteredError(FencedBrokerError):
    """No registration for that node id (Kafka BROKER_ID_NOT_REGISTERED): register first."""

    status, error_code = 409, 40904


class InvalidUpdateVersionError(ClusterError):
    """The partition epoch of an ISR change is not the current one (Kafka INVALID_UPDATE_VERSION).

    The partition changed since the leader last read it; it must catch up with the metadata log
    and retry with the new partition epoch.
    """

    kind = ErrorKind.NOT_LEADER
    status, error_code = 409, 40905


class FencedLeaderEpochError(ClusterError):
    """The leader epoch of a request is not the partition's current one (Kafka FENCED_LEADER_EPOCH)."""

    kind = ErrorKind.NOT_LEADER
    status, error_code = 409, 40906


class NotPartitionLeaderError(ClusterError):
    """The requester is not the partition's current leader (Kafka NOT_LEADER_OR_FOLLOWER)."""

    kind = ErrorKind.NOT_LEADER
    status, error_code = 421, 42104


class IneligibleReplicaError(ClusterError, InvalidRequestError):
    """A replica added to the ISR is fenced, shutting down or unregistered (Kafka INELIGIBLE_REPLICA)."""

    kind = ErrorKind.INVALID_REQUEST
    status, error_code = 422, 42211


class InvalidIsrError(ClusterError, InvalidRequestError):
    """A proposed ISR is empty, lacks the leader, repeats a node or names a non-replica (Kafka INVALID_REQUEST)."""

    kind = ErrorKind.INVALID_REQUEST
    status, error_code = 422, 42212


class InvalidReplicationFactorError(ClusterError, InvalidRequestError):
    """The replication factor is below 1 or above the live brokers (Kafka INVALID_REPLICATION_FACTOR;
    Confluent v3 answers it 400 / 40002)."""

    kind = ErrorKind.INVALID_REQUEST
    status, error_code = 400, 40002


class InvalidPartitionsError(ClusterError, InvalidRequestError):
    """A partition count is out of bounds or would shrink a topic (Kafka INVALID_PARTITIONS)."""

    kind = ErrorKind.INVALID_REQUEST
    status, error_code = 422, 42206


class InvalidTopicIdError(ClusterError, InvalidRequestError):
    """A topic id is empty, too long, or already names another topic (Kafka INCONSISTENT_TOPIC_ID)."""

    kind = ErrorKind.INVALID_REQUEST
    status, error_code = 422, 42207
