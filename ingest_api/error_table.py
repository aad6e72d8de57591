"""How the node answers errors: each error class bound to its row of the code table.

The rows themselves (HTTP status, Confluent-style `error_code`, Kafka protocol code) are the one table
`infra/error_codes.py`, keyed by class name, so the SQL server and the clients share them; here the
node's classes are bound to them (`_bind` refuses a row without a class and a class without a row),
and each row says how its message is written (fixed texts never leak stored bytes).

A class answers with the row of the first class of its MRO found here, so a subclass shares its
base's meaning (`AuthenticationError`, the cluster's signature check, answers as
`AuthenticationFailedError`). A Lakelog error with no row of its own or of a base answers by its
`kind`, with the row of the class that stands for that kind (`KIND_FALLBACK`). Anything else is an
internal error (500 / 50001). A `RemoteError` relays another node's answer as it was; a `RouteError`
(no such route) answers its bare HTTP status.

Nothing else in the tree writes a status-prefixed code: routers and middlewares answer through
`http_error` / `error_body`, code that must recognise a relayed code asks `code_of(cls)`, and a
Kafka-protocol answer takes its code from `kafka_code(exc)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from lakelog.infra import error_codes
from lakelog.infra.config import ConfigError
from lakelog.infra.error_codes import ErrorCode, KafkaCode
from lakelog.infra.errors import ErrorKind, LakelogError
from lakelog.ingest_api.cluster.errors import (
    BrokerInUseError,
    BrokerNotRegisteredError,
    FencedBrokerError,
    FencedLeaderEpochError,
    IneligibleReplicaError,
    InvalidIsrError,
    InvalidReplicaAssignmentError,
    NoReassignmentInProgressError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicIdError,
    InvalidUpdateVersionError,
    MetadataFollowerError,
    NotAVoterError,
    NotControllerError,
    NotPartitionLeaderError,
    QuorumTimeoutError,
    QuorumUnavailableError,
    StaleControllerEpochError,
)
from lakelog.ingest_api.errors import (
    BrokerNotFoundError,
    ClusterNotFoundError,
    ConfigNotFoundError,
    InternalServerError,
    InvalidRequestError,
    InvalidTopicError,
    LeaderNotAvailableError,
    MisdirectedRequestError,
    NotAcceptableError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotFoundError,
    NotLeaderOrFollowerError,
    NotReadyError,
    OffsetNotAvailableError,
    PartitionNotFoundError,
    PeerUnavailableError,
    ProduceTimeoutError,
    RecordDeserializationError,
    RemoteError,
    RequestTooLargeError,
    RetriableError,
    RouteError,
    TopicExistsError,
    TopicNotFoundError,
    UnknownLeaderEpochError,
    UnsupportedMediaTypeError,
)
from lakelog.ingest_api.groups.errors import (
    CoordinatorLoadInProgressError,
    ConsumerAlreadyExistsError,
    ConsumerInstanceNotFoundError,
    GroupMaxSizeReachedError,
    GroupNotFoundError,
    IllegalGenerationError,
    IllegalStateError,
    InconsistentProtocolError,
    InvalidSessionTimeoutError,
    NoOffsetForPartitionError,
    NonEmptyGroupError,
    NotCoordinatorError,
    OffsetMetadataTooLargeError,
    RebalanceInProgressError,
    TooManyInstancesError,
    UnknownMemberIdError,
)
from lakelog.ingest_api.groups.offsets_codec import OffsetsRecordError
from lakelog.ingest_api.transactions.errors import (
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    ProducerFencedError,
    TransactionalIdNotFoundError,
)
from lakelog.ingest_api.transactions.state_codec import TransactionStateRecordError
from lakelog.ingest_api.schemas import errors as registry
from lakelog.ingest_api.schemas.codec import SchemaValueError
from lakelog.ingest_api.schemas import rest_v3 as schemas_v3
from lakelog.ingest_api.security.errors import (
    AuthenticationFailedError,
    AuthorizationFailedError,
    HeadersTooLargeError,
    InvalidSecurityRequestError,
    RequestBodyTimeout,
    SecurityNotFoundError,
    ThrottledError,
    TooManyConnectionsError,
    TransactionalIdAuthorizationFailedError,
)
from lakelog.logstore.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    KafkaStorageError,
    LogClosedError,
    LogDirectoryFullError,
    MixedDuplicateBatchesError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    TransactionCoordinatorFencedError,
)
from lakelog.tiering.errors import (
    RemoteCorruptionError,
    RemoteFetchTimeoutError,
    RemoteStorageTimeoutError,
    RemoteStorageUnavailableError,
    TransientStoreError,
)


@dataclass(frozen=True)
class HttpError:
    """How one error class is answered: its row of the code table, and the message."""

    status: int
    error_code: int
    kafka: KafkaCode
    #: The body's message from the exception; `str(exc)` when None. Fixed texts never leak stored bytes.
    message: Callable[[BaseException], str] | None = None


def _prefixed(prefix: str) -> Callable[[BaseException], str]:
    return lambda exc: f"{prefix}{exc}"


def _fixed(text: str) -> Callable[[BaseException], str]:
    return lambda exc: text


def _bind(rows: dict[str, ErrorCode], classes: tuple[type[BaseException], ...],
          messages: dict[type[BaseException], Callable[[BaseException], str]] | None = None,
          ) -> dict[type[BaseException], HttpError]:
    """Each class bound to the row of its name: every row bound once, every class has a row."""
    table = {}
    for cls in classes:
        row = rows[cls.__name__]
        table[cls] = HttpError(row.status, row.error_code, row.kafka, (messages or {}).get(cls))
    unbound = set(rows) - {cls.__name__ for cls in classes}
    if unbound or len(table) != len(classes):
        raise AssertionError(f"rows of the code table bound to no class (or twice): {sorted(unbound)}")
    return table


#: The node's classes, bound to `error_codes.ERRORS` (the code table says why each row is what it is).
ERROR_TABLE: dict[type[BaseException], HttpError] = _bind(error_codes.ERRORS, (
    ConfigError, InvalidTopicError, InvalidSecurityRequestError,
    AuthenticationFailedError, AuthorizationFailedError, TransactionalIdAuthorizationFailedError, NotAVoterError,
    TopicNotFoundError, PartitionNotFoundError, ConsumerInstanceNotFoundError, GroupNotFoundError,
    ConfigNotFoundError, ClusterNotFoundError, BrokerNotFoundError, SecurityNotFoundError, NotFoundError,
    NoReassignmentInProgressError,
    NotAcceptableError, RecordDeserializationError,
    RequestBodyTimeout,
    ConsumerAlreadyExistsError, IllegalStateError, BrokerNotRegisteredError, InvalidUpdateVersionError,
    FencedLeaderEpochError, FencedBrokerError, OutOfOrderSequenceError, InvalidProducerEpochError,
    GroupMaxSizeReachedError, InconsistentProtocolError, UnknownMemberIdError, IllegalGenerationError,
    RebalanceInProgressError, NoOffsetForPartitionError, TopicExistsError, BrokerInUseError, NonEmptyGroupError,
    RequestTooLargeError, RecordTooLargeError, OffsetMetadataTooLargeError, UnsupportedMediaTypeError,
    OffsetOutOfRangeError,
    MisdirectedRequestError, NotControllerError, StaleControllerEpochError, NotPartitionLeaderError,
    InvalidRequestError, SchemaValueError, InvalidRecordError, InvalidReplicationFactorError,
    InvalidPartitionsError, InvalidTopicIdError, MixedDuplicateBatchesError, InvalidSessionTimeoutError,
    IneligibleReplicaError, InvalidIsrError, InvalidReplicaAssignmentError,
    ThrottledError, TooManyInstancesError,
    HeadersTooLargeError, TooManyConnectionsError,
    InternalServerError, CorruptRecordError, RemoteCorruptionError, OffsetsRecordError,
    NotReadyError, NotLeaderOrFollowerError, NotEnoughReplicasError, NotEnoughReplicasAfterAppendError,
    RetriableError, LeaderNotAvailableError, UnknownLeaderEpochError, PeerUnavailableError, LogClosedError,
    OffsetNotAvailableError, QuorumUnavailableError, MetadataFollowerError, TransientStoreError,
    RemoteStorageUnavailableError, RemoteFetchTimeoutError,
    RemoteStorageTimeoutError,
    NotCoordinatorError, CoordinatorLoadInProgressError, KafkaStorageError, LogDirectoryFullError,
    ProduceTimeoutError, QuorumTimeoutError,
    InvalidTxnStateError, TransactionCoordinatorFencedError,
    InvalidProducerIdMappingError, ProducerFencedError, TransactionalIdNotFoundError,
    InvalidTransactionTimeoutError, ConcurrentTransactionsError, TransactionStateRecordError,
), messages={
    OutOfOrderSequenceError: _prefixed("OUT_OF_ORDER_SEQUENCE_NUMBER: "),
    InvalidProducerEpochError: _prefixed("INVALID_PRODUCER_EPOCH: "),
    InternalServerError: _fixed("internal error"),
    CorruptRecordError: _fixed("stored data failed its checksum; it will not be served"),
    RemoteCorruptionError: _prefixed("remote tier data failed its checks; it will not be served: "),
    LogClosedError: _fixed("the partition is being closed; retry"),
    TransientStoreError: _prefixed("the remote tier is unavailable; retry: "),
    RemoteStorageUnavailableError: _prefixed("REMOTE_STORAGE_UNAVAILABLE: the remote tier is degraded; retry: "),
    RemoteFetchTimeoutError: _prefixed("REMOTE_STORAGE_TIMEOUT: retry: "),
    RemoteStorageTimeoutError: _prefixed("REMOTE_STORAGE_TIMEOUT: retry: "),
})

#: The registry's errors wherever they are answered (its API at /subjects, /schemas, /config, /mode,
#: /compatibility; schema-aware produce), bound to `error_codes.SCHEMA_REGISTRY`: its own namespace.
SCHEMA_REGISTRY_TABLE: dict[type[BaseException], HttpError] = _bind(error_codes.SCHEMA_REGISTRY, (
    registry.SubjectNotFoundError, registry.VersionNotFoundError, registry.SchemaNotFoundError,
    registry.SubjectSoftDeletedError, registry.SubjectNotSoftDeletedError, registry.VersionSoftDeletedError,
    registry.VersionNotSoftDeletedError, registry.SubjectCompatibilityNotConfiguredError,
    registry.SubjectModeNotConfiguredError, registry.IncompatibleSchemaError, registry.InvalidSchemaError,
    registry.InvalidVersionError, registry.InvalidCompatibilityLevelError, registry.InvalidModeError,
    registry.OperationNotPermittedError, registry.ReferenceExistsError, registry.IdDoesNotMatchError,
    registry.InvalidSubjectError, registry.SchemaTooLargeError, registry.SchemaRegistryError,
))

#: Errors of the v3 API only, answered under /v3 with Confluent REST Proxy v3's status and code
#: (`v3_errors.shape`, rule 5); elsewhere they answer by their base's row above.
V3_ONLY_TABLE: dict[type[BaseException], HttpError] = _bind(error_codes.V3_ONLY, (
    schemas_v3.V3SerializationError, schemas_v3.V3InvalidSchemaError, schemas_v3.V3SchemaBadRequest,
))

#: A Lakelog error without a row of its own (or of a base) answers as the class standing for its kind.
KIND_FALLBACK: dict[ErrorKind, type[BaseException]] = {
    ErrorKind.CONFIGURATION: ConfigError,
    ErrorKind.INVALID_REQUEST: InvalidRequestError,
    ErrorKind.NOT_FOUND: NotFoundError,
    ErrorKind.NOT_LEADER: MisdirectedRequestError,
    ErrorKind.TRANSIENT: RetriableError,
    ErrorKind.CORRUPT: InternalServerError,
}

def _check_table() -> None:
    """Every code unique, its first three digits its status; every kind has a fallback row."""
    registry_codes = [row.error_code for row in SCHEMA_REGISTRY_TABLE.values()]
    if len(set(registry_codes)) != len(registry_codes):
        raise AssertionError("an error_code of the schema registry table is used twice")
    seen: dict[int, type[BaseException]] = {}
    for cls, row in ERROR_TABLE.items():
        if row.error_code in seen:
            raise AssertionError(f"error_code {row.error_code} of {cls.__name__} is already "
                                 f"{seen[row.error_code].__name__}'s")
        seen[row.error_code] = cls
        if row.error_code // 100 != row.status:
            raise AssertionError(f"error_code {row.error_code} of {cls.__name__} does not start with {row.status}")
    for kind in ErrorKind:
        if KIND_FALLBACK.get(kind) not in ERROR_TABLE:
            raise AssertionError(f"no fallback row for {kind}")


_check_table()


def row_of(cls: type[BaseException]) -> HttpError | None:
    """The row a class answers with through its MRO (None if only its kind, or nothing, covers it)."""
    table = SCHEMA_REGISTRY_TABLE if issubclass(cls, registry.SchemaRegistryError) else ERROR_TABLE
    for base in cls.__mro__:
        row = table.get(base)
        if row is not None:
            return row
    return None


def code_of(cls: type[BaseException]) -> int:
    """The `error_code` of an error class (for code that recognises a code relayed by another node)."""
    row = row_of(cls)
    if row is None:
        raise KeyError(f"{cls.__name__} has no row in the error table")
    return row.error_code


def http_error(exc: BaseException) -> tuple[int, int, str]:
    """(HTTP status, Confluent error_code, message) for any exception."""
    if isinstance(exc, (RemoteError, RouteError)):  # an answer already made: another node's, the framework's
        return exc.status, exc.error_code, str(exc)
    row = row_of(type(exc))
    if row is None and isinstance(exc, LakelogError):
        row = ERROR_TABLE[KIND_FALLBACK[exc.kind]]
    if row is None:
        row = ERROR_TABLE[InternalServerError]
        return row.status, row.error_code, row.message(exc) if row.message else "internal error"
    return row.status, row.error_code, row.message(exc) if row.message is not None else str(exc)


def error_body(exc: BaseException) -> tuple[int, dict]:
    """(status, `{"error_code", "message"}`) for an exception."""
    status, code, message = http_error(exc)
    return status, {"error_code": code, "message": message}


def kafka_code(exc: BaseException) -> KafkaCode:
    """The Kafka protocol error code for any exception, by the same rows `http_error` answers with."""
    if isinstance(exc, (RemoteError, RouteError)):  # another node's answer: its code names the row
        relayed = error_codes.by_error_code(exc.error_code)
        return relayed.kafka if relayed is not None else KafkaCode.UNKNOWN_SERVER_ERROR
    row = row_of(type(exc))
    if row is None and isinstance(exc, LakelogError):
        row = ERROR_TABLE[KIND_FALLBACK[exc.kind]]
    return row.kafka if row is not None else KafkaCode.UNKNOWN_SERVER_ERROR


#: Partition-log errors of a coordinator's own partition (`__consumer_offsets` or `__transaction_state`)
#: as a coordinator API answers them: clients retry these two, while a partition error code in a
#: JoinGroup, OffsetCommit or EndTxn answer is fatal to them (Kafka's coordinators map them the same way).
_COORDINATOR_CODES = {
    KafkaCode.UNKNOWN_TOPIC_OR_PARTITION: KafkaCode.COORDINATOR_NOT_AVAILABLE,
    KafkaCode.LEADER_NOT_AVAILABLE: KafkaCode.COORDINATOR_NOT_AVAILABLE,
    KafkaCode.NOT_ENOUGH_REPLICAS: KafkaCode.COORDINATOR_NOT_AVAILABLE,
    KafkaCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: KafkaCode.COORDINATOR_NOT_AVAILABLE,
    KafkaCode.REQUEST_TIMED_OUT: KafkaCode.COORDINATOR_NOT_AVAILABLE,
    KafkaCode.BROKER_NOT_AVAILABLE: KafkaCode.COORDINATOR_NOT_AVAILABLE,
    KafkaCode.NOT_LEADER_OR_FOLLOWER: KafkaCode.NOT_COORDINATOR,
    KafkaCode.FENCED_LEADER_EPOCH: KafkaCode.NOT_COORDINATOR,
    KafkaCode.KAFKA_STORAGE_ERROR: KafkaCode.NOT_COORDINATOR,
}


def coordinator_code(exc: BaseException) -> KafkaCode:
    """`kafka_code` for the answer of a group or transaction coordinator API."""
    code = kafka_code(exc)
    return _COORDINATOR_CODES.get(code, code)
