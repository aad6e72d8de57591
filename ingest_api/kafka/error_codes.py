"""Error class -> Kafka error code, for the Kafka door.

This folds into the error table's Kafka-code column (`ingest_api/error_table.py`) when the two
branches merge: until then it is the one place the Kafka door maps errors, by the same rules as
the table (the first class of the exception's MRO found here; a Lakelog error without a row by its
kind; anything else UNKNOWN_SERVER_ERROR). Group errors carry Kafka's name (`kafka_name`) and map
by it. A `RemoteError` (another node's HTTP answer) maps as the class whose `error_code` it carries.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from lakelog.infra.config import ConfigError
from lakelog.infra.errors import ErrorKind, LakelogError
from lakelog.ingest_api.cluster.errors import InvalidPartitionsError, InvalidReplicationFactorError
from lakelog.ingest_api.error_table import ERROR_TABLE
from lakelog.ingest_api.errors import (
    InvalidRequestError,
    InvalidTopicError,
    LeaderNotAvailableError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    NotReadyError,
    OffsetNotAvailableError,
    PartitionNotFoundError,
    PeerUnavailableError,
    ProduceTimeoutError,
    RemoteError,
    RequestTooLargeError,
    TopicExistsError,
    TopicNotFoundError,
    UnknownLeaderEpochError,
)
from lakelog.ingest_api.groups.errors import GroupError
from lakelog.ingest_api.security.errors import AuthorizationFailedError, ThrottledError
from lakelog.logstore.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    LogClosedError,
    MixedDuplicateBatchesError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    UnsupportedCompressionError,
)
from lakelog.tiering.errors import TransientStoreError

E = ErrorCode

KAFKA_CODES: dict[type[BaseException], ErrorCode] = {
    ConfigError: E.invalid_config,
    InvalidTopicError: E.invalid_topic_exception,
    InvalidRequestError: E.invalid_request,
    TopicNotFoundError: E.unknown_topic_or_partition,
    PartitionNotFoundError: E.unknown_topic_or_partition,
    TopicExistsError: E.topic_already_exists,
    InvalidReplicationFactorError: E.invalid_replication_factor,
    InvalidPartitionsError: E.invalid_partitions,
    RequestTooLargeError: E.message_too_large,
    RecordTooLargeError: E.message_too_large,
    UnsupportedCompressionError: E.unsupported_compression_type,
    OutOfOrderSequenceError: E.out_of_order_sequence_number,
    MixedDuplicateBatchesError: E.invalid_record,
    InvalidRecordError: E.corrupt_message,
    InvalidProducerEpochError: E.invalid_producer_epoch,
    OffsetOutOfRangeError: E.offset_out_of_range,
    CorruptRecordError: E.kafka_storage_error,
    LogClosedError: E.not_leader_or_follower,
    NotLeaderOrFollowerError: E.not_leader_or_follower,
    LeaderNotAvailableError: E.leader_not_available,
    UnknownLeaderEpochError: E.unknown_leader_epoch,
    NotEnoughReplicasError: E.not_enough_replicas,
    NotEnoughReplicasAfterAppendError: E.not_enough_replicas_after_append,
    OffsetNotAvailableError: E.offset_not_available,
    ProduceTimeoutError: E.request_timed_out,
    NotReadyError: E.not_leader_or_follower,  # a node not yet serving: the client refreshes metadata
    PeerUnavailableError: E.request_timed_out,
    TransientStoreError: E.kafka_storage_error,
    AuthorizationFailedError: E.topic_authorization_failed,
    ThrottledError: E.throttling_quota_exceeded,
}

KIND_CODES: dict[ErrorKind, ErrorCode] = {
    ErrorKind.CONFIGURATION: E.invalid_config,
    ErrorKind.INVALID_REQUEST: E.invalid_request,
    ErrorKind.NOT_FOUND: E.unknown_topic_or_partition,
    ErrorKind.NOT_LEADER: E.not_leader_or_follower,
    ErrorKind.TRANSIENT: E.request_timed_out,
    ErrorKind.CORRUPT: E.kafka_storage_error,
}

_BY_HTTP_CODE = {row.error_code: cls for cls, row in ERROR_TABLE.items()}


def kafka_code(exc: BaseException) -> ErrorCode:
    """The Kafka error code an exception is answered with."""
    if isinstance(exc, RemoteError):
        cls = _BY_HTTP_CODE.get(exc.error_code)
        return kafka_code_of(cls) if cls is not None else E.unknown_server_error
    return kafka_code_of(type(exc))


def kafka_code_of(cls: type[BaseException]) -> ErrorCode:
    if issubclass(cls, GroupError):
        try:
            return E[cls.kafka_name.lower()]
        except KeyError:
            return E.unknown_server_error
    for base in cls.__mro__:
        code = KAFKA_CODES.get(base)
        if code is not None:
            return code
    if issubclass(cls, LakelogError):
        return KIND_CODES[cls.kind]
    return E.unknown_server_error
