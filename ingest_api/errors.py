"""Errors of the ingest node (one tree under `NodeError`).

What each error answers over HTTP — status and Confluent-style `error_code` — is declared in one
place, `infra.error_codes` (bound to these classes by `ingest_api.error_table`); no class here
carries a code.
"""

from __future__ import annotations

from lakelog.infra.errors import ErrorKind, LakelogError


class NodeError(LakelogError):
    """Root of the ingest node's errors."""


class TopicNotFoundError(NodeError):
    """The topic does not exist."""

    kind = ErrorKind.NOT_FOUND


class PartitionNotFoundError(NodeError):
    """The topic exists but has no such partition."""

    kind = ErrorKind.NOT_FOUND


class TopicExistsError(NodeError):
    """A topic of that name already exists (under /v3 answered as Confluent: 400, 40002)."""

    kind = ErrorKind.INVALID_REQUEST


class InvalidTopicError(NodeError):
    """The topic name breaks Kafka's naming rules."""

    kind = ErrorKind.INVALID_REQUEST


class InvalidRequestError(NodeError):
    """The request is malformed (body, parameters)."""

    kind = ErrorKind.INVALID_REQUEST


class RequestTooLargeError(NodeError):
    """The request body or a record is above a configured limit."""

    kind = ErrorKind.INVALID_REQUEST


class UnsupportedMediaTypeError(NodeError):
    """The Content-Type or Accept header names a format this endpoint does not speak."""

    kind = ErrorKind.INVALID_REQUEST


class NotAcceptableError(NodeError):
    """The Accept header names a format this endpoint cannot produce."""

    kind = ErrorKind.INVALID_REQUEST


class NotReadyError(NodeError):
    """The node is starting or stopping and cannot serve yet."""

    kind = ErrorKind.TRANSIENT


class RecordDeserializationError(NodeError):
    """A stored record cannot be rendered in the asked format (e.g. its value is not JSON)."""

    kind = ErrorKind.INVALID_REQUEST


class NotLeaderOrFollowerError(NodeError):
    """This node is not the partition's leader (Kafka NOT_LEADER_OR_FOLLOWER); retry, metadata is moving."""

    kind = ErrorKind.NOT_LEADER


class LeaderNotAvailableError(NodeError):
    """The partition has no live leader (offline, or an election is in progress); retry."""

    kind = ErrorKind.TRANSIENT


class NotEnoughReplicasError(NodeError):
    """acks=all refused before appending: the ISR is smaller than min.insync.replicas (nothing was written)."""

    kind = ErrorKind.TRANSIENT


class NotEnoughReplicasAfterAppendError(NodeError):
    """acks=all: the records were appended, but the ISR shrank below min.insync.replicas before they committed."""

    kind = ErrorKind.TRANSIENT


class OffsetNotAvailableError(NodeError):
    """A new leader does not know the end offset yet: its HW is below its epoch's start (KIP-207); retry."""

    kind = ErrorKind.TRANSIENT


class ProduceTimeoutError(NodeError):
    """acks=all: the high watermark did not pass the records within request.timeout.ms (they may still commit)."""

    kind = ErrorKind.TRANSIENT


class UnknownLeaderEpochError(NodeError):
    """A replica request carries a leader epoch newer than this node knows (its metadata lags); retry."""

    kind = ErrorKind.TRANSIENT


class NotFoundError(NodeError):
    """Something named by the request does not exist, and no more specific error says what."""

    kind = ErrorKind.NOT_FOUND


class ClusterNotFoundError(NotFoundError):
    """The cluster id in the path is not this cluster's."""


class BrokerNotFoundError(NotFoundError):
    """No broker with that id."""


class ConfigNotFoundError(NotFoundError):
    """No topic config of that name."""


class MisdirectedRequestError(NodeError):
    """The request reached a node no longer in charge (a stale or fenced epoch), and no more specific error says which."""

    kind = ErrorKind.NOT_LEADER


class RetriableError(NodeError):
    """A transient failure that no more specific error describes; retry."""

    kind = ErrorKind.TRANSIENT


class InternalServerError(NodeError):
    """An unexpected failure inside the node (a bug); the answer to any exception outside the error tree."""

    kind = ErrorKind.CORRUPT


class PeerUnavailableError(NodeError):
    """A peer node could not be reached (or its address is unknown); retry."""

    kind = ErrorKind.TRANSIENT


class RemoteError(NodeError):
    """An error answered by another node (forwarded request, controller call), passed on as is."""

    def __init__(self, status: int, error_code: int, message: str) -> None:
        super().__init__(message)
        self.status, self.error_code = status, error_code


class RouteError(NodeError):
    """The HTTP framework refused the request before any router (no such route: 404, method not allowed: 405).

    Answered with the bare status as `error_code` (404, not 40401), which is how a client tells a
    missing route from a missing topic.
    """

    kind = ErrorKind.INVALID_REQUEST

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.error_code = status, status
