"""Errors of the ingest node, and the one place that maps every error kind to HTTP.

Bodies follow the Confluent REST Proxy convention: `{"error_code": 40401, "message": "..."}` where
the first three digits of `error_code` are the HTTP status.
"""

from __future__ import annotations

from lakelog.infra.config import ConfigError
from lakelog.infra.errors import ErrorKind, LakelogError
from lakelog.tiering.errors import RemoteCorruptionError, TransientStoreError
from lakelog.logstore.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    LogClosedError,
    MixedDuplicateBatchesError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
)


class NodeError(LakelogError):
    """Root of the ingest node's errors."""


class TopicNotFoundError(NodeError):
    """The topic does not exist."""

    kind = ErrorKind.NOT_FOUND
    status, error_code = 404, 40401


class PartitionNotFoundError(NodeError):
    """The topic exists but has no such partition."""

    kind = ErrorKind.NOT_FOUND
    status, error_code = 404, 40402


class TopicExistsError(NodeError):
    """A topic of that name already exists (Confluent v3: 400, 40002)."""

    kind = ErrorKind.INVALID_REQUEST
    status, error_code = 400, 40002


class InvalidTopicError(NodeError):
    """The topic name breaks Kafka's naming rules."""

    kind = ErrorKind.INVALID_REQUEST
    status, error_code = 400, 40002


class InvalidRequestError(NodeError):
    """The request is malformed (body, parameters)."""

    kind = ErrorKind.INVALID_REQUEST
    status, error_code = 422, 42201


class RequestTooLargeError(NodeError):
    """The request body or a record is above a configured limit."""

    kind = ErrorKind.INVALID_REQUEST
    status, error_code = 413, 41301


class UnsupportedMediaTypeError(NodeError):
    """The Content-Type or Accept header names a format this endpoint does not speak."""

    kind = ErrorKind.INVALID_REQUEST
    status, error_code = 415, 41501


class NotAcceptableError(NodeError):
    """The Accept header names a format this endpoint cannot produce."""

    kind = ErrorKind.INVALID_REQUEST
    status, error_code = 406, 40601


class NotReadyError(NodeError):
    """The node is starting or stopping and cannot serve yet."""

    kind = ErrorKind.TRANSIENT
    status, error_code = 503, 50301


class RecordDeserializationError(NodeError):
    """A stored record cannot be rendered in the asked format (e.g. its value is not JSON)."""

    kind = ErrorKind.INVALID_REQUEST
    status, error_code = 406, 40602


class NotLeaderOrFollowerError(NodeError):
    """This node is not the partition's leader (Kafka NOT_LEADER_OR_FOLLOWER); retry, metadata is moving."""

    kind = ErrorKind.NOT_LEADER
    status, error_code = 503, 50302


class LeaderNotAvailableError(NodeError):
    """The partition has no live leader (offline, or an election is in progress); retry."""

    kind = ErrorKind.TRANSIENT
    status, error_code = 503, 50306


class NotEnoughReplicasError(NodeError):
    """acks=all refused before appending: the ISR is smaller than min.insync.replicas (nothing was written)."""

    kind = ErrorKind.TRANSIENT
    status, error_code = 503, 50303


class NotEnoughReplicasAfterAppendError(NodeError):
    """acks=all: the records were appended, but the ISR shrank below min.insync.replicas before they committed."""

    kind = ErrorKind.TRANSIENT
    status, error_code = 503, 50304


class OffsetNotAvailableError(NodeError):
    """A new leader does not know the end offset yet: its HW is below its epoch's start (KIP-207); retry."""

    kind = ErrorKind.TRANSIENT
    status, error_code = 503, 50310


class ProduceTimeoutError(NodeError):
    """acks=all: the high watermark did not pass the records within request.timeout.ms (they may still commit)."""

    kind = ErrorKind.TRANSIENT
    status, error_code = 504, 50401


class FencedLeaderEpochError(NodeError):
    """A replica request carries a leader epoch older than the partition's current one."""

    kind = ErrorKind.NOT_LEADER
    status, error_code = 409, 40907


class UnknownLeaderEpochError(NodeError):
    """A replica request carries a leader epoch newer than this node knows (its metadata lags); retry."""

    kind = ErrorKind.TRANSIENT
    status, error_code = 503, 50307


_KIND_DEFAULTS: dict[ErrorKind, tuple[int, int]] = {
    ErrorKind.CONFIGURATION: (400, 40001),
    ErrorKind.INVALID_REQUEST: (422, 42201),
    ErrorKind.NOT_FOUND: (404, 40403),
    ErrorKind.NOT_LEADER: (421, 42101),
    ErrorKind.TRANSIENT: (503, 50301),
    ErrorKind.CORRUPT: (500, 50002),
}


def http_error(exc: BaseException) -> tuple[int, int, str]:
    """(HTTP status, Confluent error_code, message) for any exception."""
    if isinstance(exc, NodeError) and hasattr(exc, "status"):
        return exc.status, exc.error_code, str(exc)  # type: ignore[attr-defined]
    if isinstance(exc, RecordTooLargeError):
        return 413, 41301, str(exc)
    if isinstance(exc, OffsetOutOfRangeError):
        return 416, 41601, str(exc)
    if isinstance(exc, OutOfOrderSequenceError):
        return 409, 40908, f"OUT_OF_ORDER_SEQUENCE_NUMBER: {exc}"
    if isinstance(exc, InvalidProducerEpochError):
        return 409, 40909, f"INVALID_PRODUCER_EPOCH: {exc}"
    if isinstance(exc, MixedDuplicateBatchesError):
        return 422, 42208, str(exc)
    if isinstance(exc, InvalidRecordError):
        return 422, 42204, str(exc)
    if isinstance(exc, ConfigError):
        return 400, 40002, str(exc)
    if isinstance(exc, LogClosedError):
        return 503, 50301, "the partition is being closed; retry"
    if isinstance(exc, RemoteCorruptionError):
        return 500, 50003, f"remote tier data failed its checks; it will not be served: {exc}"
    if isinstance(exc, TransientStoreError):
        return 503, 50320, f"the remote tier is unavailable; retry: {exc}"
    if isinstance(exc, CorruptRecordError):
        return 500, 50002, "stored data failed its checksum; it will not be served"
    if isinstance(exc, LakelogError):
        status, code = _KIND_DEFAULTS[exc.kind]
        return status, code, str(exc)
    return 500, 50001, "internal error"
