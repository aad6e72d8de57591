"""The one table of how errors are answered over HTTP: error class -> (status, `error_code`).

Bodies follow the Confluent REST Proxy convention, `{"error_code": 40401, "message": "..."}`, where
the first three digits of `error_code` are the HTTP status. Confluent's own codes keep Confluent's
meaning (40401 topic not found, 40402 partition not found, 40403 consumer instance not found,
40405 consumer group not found, 40601 consumer format mismatch, 40801 request timeout, 40902
consumer instance already exists, 40903 illegal state, 42901 too many requests, 50001 internal
error, 50002 server-side error, 50301 retriable unavailability); the others are ours, in the same
scheme. Each code has one meaning: the table is checked at import (codes unique, prefix = status).

A class answers with the row of the first class of its MRO found here, so a subclass shares its
base's meaning (`AuthenticationError`, the cluster's signature check, answers as
`AuthenticationFailedError`). A Lakelog error with no row of its own or of a base answers by its
`kind`, with the row of the class that stands for that kind (`KIND_FALLBACK`). Anything else is an
internal error (500 / 50001). A `RemoteError` relays another node's answer as it was; a `RouteError` (no such route)
answers its bare HTTP status.

Nothing else in the tree writes a status or a code: routers and middlewares answer through
`http_error` / `error_body`, and code that must recognise a relayed code asks `code_of(cls)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from lakelog.infra.config import ConfigError
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
)
from lakelog.logstore.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    KafkaStorageError,
    LogClosedError,
    LogDirectoryFullError,
    MixedDuplicateBatchesError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
)
from lakelog.tiering.errors import (
    RemoteCorruptionError,
    RemoteFetchTimeoutError,
    RemoteStorageUnavailableError,
    TransientStoreError,
)


@dataclass(frozen=True)
class HttpError:
    """How one error class is answered: HTTP status, Confluent-style `error_code`, and the message."""

    status: int
    error_code: int
    #: The body's message from the exception; `str(exc)` when None. Fixed texts never leak stored bytes.
    message: Callable[[BaseException], str] | None = None


def _prefixed(prefix: str) -> Callable[[BaseException], str]:
    return lambda exc: f"{prefix}{exc}"


def _fixed(text: str) -> Callable[[BaseException], str]:
    return lambda exc: text


ERROR_TABLE: dict[type[BaseException], HttpError] = {
    # 400 Bad Request
    ConfigError: HttpError(400, 40001),  # an invalid topic or broker configuration value
    InvalidTopicError: HttpError(400, 40002),
    InvalidSecurityRequestError: HttpError(400, 40003),
    # 401 / 403
    AuthenticationFailedError: HttpError(401, 40101),  # also the cluster's internal signature check
    AuthorizationFailedError: HttpError(403, 40301),
    NotAVoterError: HttpError(403, 40310),
    # 404 Not Found
    TopicNotFoundError: HttpError(404, 40401),
    PartitionNotFoundError: HttpError(404, 40402),
    ConsumerInstanceNotFoundError: HttpError(404, 40403),
    GroupNotFoundError: HttpError(404, 40405),
    ConfigNotFoundError: HttpError(404, 40406),
    ClusterNotFoundError: HttpError(404, 40407),
    BrokerNotFoundError: HttpError(404, 40408),
    SecurityNotFoundError: HttpError(404, 40409),
    NotFoundError: HttpError(404, 40410),
    NoReassignmentInProgressError: HttpError(404, 40411),  # also a GET of a partition not being moved
    # 406 Not Acceptable
    NotAcceptableError: HttpError(406, 40601),  # and ConsumerFormatMismatchError, a case of it
    RecordDeserializationError: HttpError(406, 40602),
    # 408 Request Timeout
    RequestBodyTimeout: HttpError(408, 40801),
    # 409 Conflict
    ConsumerAlreadyExistsError: HttpError(409, 40902),
    IllegalStateError: HttpError(409, 40903),
    BrokerNotRegisteredError: HttpError(409, 40904),
    InvalidUpdateVersionError: HttpError(409, 40905),
    FencedLeaderEpochError: HttpError(409, 40906),
    FencedBrokerError: HttpError(409, 40907),
    OutOfOrderSequenceError: HttpError(409, 40908, _prefixed("OUT_OF_ORDER_SEQUENCE_NUMBER: ")),
    InvalidProducerEpochError: HttpError(409, 40909, _prefixed("INVALID_PRODUCER_EPOCH: ")),
    GroupMaxSizeReachedError: HttpError(409, 40910),
    InconsistentProtocolError: HttpError(409, 40911),
    UnknownMemberIdError: HttpError(409, 40912),
    IllegalGenerationError: HttpError(409, 40913),
    RebalanceInProgressError: HttpError(409, 40914),
    NoOffsetForPartitionError: HttpError(409, 40915),
    TopicExistsError: HttpError(409, 40916),
    BrokerInUseError: HttpError(409, 40917),
    NonEmptyGroupError: HttpError(409, 40918),
    # 413 / 415 / 416
    RequestTooLargeError: HttpError(413, 41301),  # a body over max.request.bytes, too many records
    RecordTooLargeError: HttpError(413, 41302),  # a batch over max.message.bytes
    OffsetMetadataTooLargeError: HttpError(413, 41310),
    UnsupportedMediaTypeError: HttpError(415, 41501),
    OffsetOutOfRangeError: HttpError(416, 41601),
    # 421 Misdirected Request
    MisdirectedRequestError: HttpError(421, 42101),
    NotControllerError: HttpError(421, 42102),
    StaleControllerEpochError: HttpError(421, 42103),
    NotPartitionLeaderError: HttpError(421, 42104),
    # 422 Unprocessable Entity
    InvalidRequestError: HttpError(422, 42201),  # also FastAPI's request validation
    SchemaValueError: HttpError(422, 42203),  # REST Proxy's "conversion of JSON to Avro failed"
    InvalidRecordError: HttpError(422, 42204),
    InvalidReplicationFactorError: HttpError(422, 42205),
    InvalidPartitionsError: HttpError(422, 42206),
    InvalidTopicIdError: HttpError(422, 42207),
    MixedDuplicateBatchesError: HttpError(422, 42208),
    InvalidSessionTimeoutError: HttpError(422, 42210),
    IneligibleReplicaError: HttpError(422, 42211),
    InvalidIsrError: HttpError(422, 42212),
    InvalidReplicaAssignmentError: HttpError(422, 42213),
    # 429 Too Many Requests
    ThrottledError: HttpError(429, 42901),
    TooManyInstancesError: HttpError(429, 42902),
    # 431 Request Header Fields Too Large
    HeadersTooLargeError: HttpError(431, 43101),
    # 500 Internal Server Error
    InternalServerError: HttpError(500, 50001, _fixed("internal error")),
    CorruptRecordError: HttpError(500, 50002, _fixed("stored data failed its checksum; it will not be served")),
    RemoteCorruptionError: HttpError(500, 50003, _prefixed(
        "remote tier data failed its checks; it will not be served: ")),
    OffsetsRecordError: HttpError(500, 50004),  # a stored __consumer_offsets record is malformed
    # 503 Service Unavailable
    NotReadyError: HttpError(503, 50301),
    NotLeaderOrFollowerError: HttpError(503, 50302),
    NotEnoughReplicasError: HttpError(503, 50303),
    NotEnoughReplicasAfterAppendError: HttpError(503, 50304),
    RetriableError: HttpError(503, 50305),
    LeaderNotAvailableError: HttpError(503, 50306),
    UnknownLeaderEpochError: HttpError(503, 50307),
    PeerUnavailableError: HttpError(503, 50308),
    LogClosedError: HttpError(503, 50309, _fixed("the partition is being closed; retry")),
    OffsetNotAvailableError: HttpError(503, 50310),
    QuorumUnavailableError: HttpError(503, 50311),
    MetadataFollowerError: HttpError(503, 50312),
    KafkaStorageError: HttpError(503, 50340),  # the log directory failed an I/O operation and is offline
    TransientStoreError: HttpError(503, 50320, _prefixed("the remote tier is unavailable; retry: ")),
    # the store's health state refused the call at once (tiering/store_health.py)
    RemoteStorageUnavailableError: HttpError(503, 50321, _prefixed(
        "REMOTE_STORAGE_UNAVAILABLE: the remote tier is degraded; retry: ")),
    # no answer within remote.fetch.max.wait.ms; the read goes on and fills the caches
    RemoteFetchTimeoutError: HttpError(503, 50322, _prefixed("REMOTE_STORAGE_TIMEOUT: retry: ")),
    NotCoordinatorError: HttpError(503, 50330),
    CoordinatorLoadInProgressError: HttpError(503, 50331),
    # 507 Insufficient Storage
    LogDirectoryFullError: HttpError(507, 50701),  # ENOSPC / EDQUOT: the log directory is full (and offline)
    # 504 Gateway Timeout
    ProduceTimeoutError: HttpError(504, 50401),
    QuorumTimeoutError: HttpError(504, 50410),
}

#: Confluent Schema Registry's own codes, for the registry's errors wherever they are answered (its
#: API at /subjects, /schemas, /config, /mode, /compatibility; schema-aware produce). The registry is
#: a separate API with its own namespace, as in Confluent's: 40401 is a subject there, a topic in
#: the REST Proxy's; 409 (incompatible) is Confluent's bare code. Codes unique within the table.
SCHEMA_REGISTRY_TABLE: dict[type[BaseException], HttpError] = {
    registry.SubjectNotFoundError: HttpError(404, 40401),
    registry.VersionNotFoundError: HttpError(404, 40402),
    registry.SchemaNotFoundError: HttpError(404, 40403),
    registry.SubjectSoftDeletedError: HttpError(404, 40404),
    registry.SubjectNotSoftDeletedError: HttpError(404, 40405),
    registry.VersionSoftDeletedError: HttpError(404, 40406),
    registry.VersionNotSoftDeletedError: HttpError(404, 40407),
    registry.SubjectCompatibilityNotConfiguredError: HttpError(404, 40408),
    registry.SubjectModeNotConfiguredError: HttpError(404, 40409),
    registry.IncompatibleSchemaError: HttpError(409, 409),
    registry.InvalidSchemaError: HttpError(422, 42201),
    registry.InvalidVersionError: HttpError(422, 42202),
    registry.InvalidCompatibilityLevelError: HttpError(422, 42203),
    registry.InvalidModeError: HttpError(422, 42204),
    registry.OperationNotPermittedError: HttpError(422, 42205),
    registry.ReferenceExistsError: HttpError(422, 42206),
    registry.IdDoesNotMatchError: HttpError(422, 42207),
    registry.InvalidSubjectError: HttpError(422, 42208),
    registry.SchemaTooLargeError: HttpError(422, 42209),
    registry.SchemaRegistryError: HttpError(422, 42299),  # (a registry refusal without a code of its own)
}

#: Errors of the v3 API only, answered under /v3 with Confluent REST Proxy v3's status and code
#: (`v3_errors.shape`, rule 5); elsewhere they answer by their base's row above.
V3_ONLY_TABLE: dict[type[BaseException], HttpError] = {
    schemas_v3.V3SerializationError: HttpError(422, 42207),  # "Error serializing message. ..."
    schemas_v3.V3InvalidSchemaError: HttpError(422, 42205),  # "Invalid schema: ..."
    schemas_v3.V3SchemaBadRequest: HttpError(400, 400),
}

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
