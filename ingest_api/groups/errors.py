"""Errors of consumer groups and consumer instances (one tree under `GroupError`).

Their HTTP statuses and `error_code`s are in `ingest_api.error_table`: Confluent's codes where the
REST Proxy has one (consumer instance not found, already exists, illegal state, format mismatch,
group not found); the group protocol's own errors (Kafka's UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
REBALANCE_IN_PROGRESS, ...) get codes of their own in the same scheme.
"""

from __future__ import annotations

from lakelog.infra.errors import ErrorKind
from lakelog.ingest_api.errors import NodeError, NotAcceptableError


class GroupError(NodeError):
    """Root of the consumer group errors."""

    #: Kafka's error name, for the group protocol answers between nodes.
    kafka_name = "UNKNOWN_SERVER_ERROR"


class ConsumerInstanceNotFoundError(GroupError):
    """No consumer instance of that name in that group (it was deleted, or it expired)."""

    kind = ErrorKind.NOT_FOUND


class GroupNotFoundError(GroupError):
    """The group has no members and no committed offsets."""

    kind = ErrorKind.NOT_FOUND
    kafka_name = "GROUP_ID_NOT_FOUND"


class ConsumerAlreadyExistsError(GroupError):
    """A consumer instance of that name already exists in the group."""

    kind = ErrorKind.INVALID_REQUEST


class IllegalStateError(GroupError):
    """The request does not fit the instance's state (e.g. subscribe and assign mixed, unassigned partition)."""

    kind = ErrorKind.INVALID_REQUEST


class ConsumerFormatMismatchError(GroupError, NotAcceptableError):
    """The Accept header does not match the embedded format the instance was created with."""

    kind = ErrorKind.INVALID_REQUEST


class TooManyInstancesError(GroupError):
    """This node holds consumer.max.instances instances already."""

    kind = ErrorKind.TRANSIENT


class GroupMaxSizeReachedError(GroupError):
    """The group has group.max.size members already (Kafka GROUP_MAX_SIZE_REACHED)."""

    kind = ErrorKind.INVALID_REQUEST
    kafka_name = "GROUP_MAX_SIZE_REACHED"


class InvalidSessionTimeoutError(GroupError):
    """session.timeout.ms is outside [group.min.session.timeout.ms, group.max.session.timeout.ms]."""

    kind = ErrorKind.INVALID_REQUEST
    kafka_name = "INVALID_SESSION_TIMEOUT"


class InconsistentProtocolError(GroupError):
    """The member supports none of the group's assignment strategies (Kafka INCONSISTENT_GROUP_PROTOCOL)."""

    kind = ErrorKind.INVALID_REQUEST
    kafka_name = "INCONSISTENT_GROUP_PROTOCOL"


class UnknownMemberIdError(GroupError):
    """The coordinator does not know this member (its session expired, or the coordinator moved)."""

    kind = ErrorKind.INVALID_REQUEST
    kafka_name = "UNKNOWN_MEMBER_ID"


class IllegalGenerationError(GroupError):
    """The request carries a generation that is not the group's current one."""

    kind = ErrorKind.INVALID_REQUEST
    kafka_name = "ILLEGAL_GENERATION"


class RebalanceInProgressError(GroupError):
    """The group is rebalancing: rejoin."""

    kind = ErrorKind.TRANSIENT
    kafka_name = "REBALANCE_IN_PROGRESS"


class NotCoordinatorError(GroupError):
    """This node is not (or no longer) the group's coordinator; retry, the coordinator moved."""

    kind = ErrorKind.NOT_LEADER
    kafka_name = "NOT_COORDINATOR"


class CoordinatorLoadInProgressError(GroupError):
    """The coordinator is reading its `__consumer_offsets` partition back; retry."""

    kind = ErrorKind.TRANSIENT
    kafka_name = "COORDINATOR_LOAD_IN_PROGRESS"


class OffsetMetadataTooLargeError(GroupError):
    """The commit's metadata string is longer than offset.metadata.max.bytes."""

    kind = ErrorKind.INVALID_REQUEST
    kafka_name = "OFFSET_METADATA_TOO_LARGE"


class NonEmptyGroupError(GroupError):
    """A group with members cannot be deleted."""

    kind = ErrorKind.INVALID_REQUEST
    kafka_name = "NON_EMPTY_GROUP"


class NoOffsetForPartitionError(GroupError):
    """auto.offset.reset=none and the group has no committed offset for an assigned partition."""

    kind = ErrorKind.INVALID_REQUEST


#: Errors a coordinator answers between nodes, by Kafka name (the client side re-raises them).
BY_KAFKA_NAME: dict[str, type[GroupError]] = {c.kafka_name: c for c in (
    GroupNotFoundError, GroupMaxSizeReachedError, InvalidSessionTimeoutError, InconsistentProtocolError,
    UnknownMemberIdError, IllegalGenerationError, RebalanceInProgressError, NotCoordinatorError,
    CoordinatorLoadInProgressError, OffsetMetadataTooLargeError, NonEmptyGroupError)}
