"""The one table of error codes: for each error, its HTTP status, Confluent-style `error_code` and
Kafka protocol error code.

Every front door and every client answers or recognises an error through this table: the node's
HTTP API binds its error classes to these rows by class name (`ingest_api/error_table.py`, which
also says how a row's message is written), the SQL server's HTTP endpoint answers with them
(`spark_log/sql_server/`), and the Python client and the CLI recognise the codes a node sends
(`client/`, `cli/`). Nothing else in the tree writes a status-prefixed code.

Columns of a row:
- `status`: the HTTP status of the answer.
- `error_code`: the body's code, `{"error_code": 40401, "message": "..."}`, as the Confluent REST
  Proxy writes it: the first three digits are the HTTP status. Confluent's own codes keep Confluent's
  meaning (40401 topic not found, 40402 partition not found, 40403 consumer instance not found,
  40405 consumer group not found, 40601 consumer format mismatch, 40801 request timeout, 40902
  consumer instance already exists, 40903 illegal state, 42901 too many requests, 50001 internal
  error, 50002 server-side error, 50301 retriable unavailability); the others are ours, in the same
  scheme. Each code has one meaning within its table.
- `kafka`: the Kafka protocol's error code the same error is answered with over Kafka's wire
  protocol (`KafkaCode`: Kafka's names and numbers). Several rows may share one: Kafka's codes are
  coarser than HTTP's.

Rows are keyed by the name of the error class that stands for them (the node's classes carry these
names; a client or the SQL server names the row whose meaning it answers with). Three namespaces:
`ERRORS` (the REST Proxy API and every other JSON API: admin, groups, security, cluster, SQL),
`SCHEMA_REGISTRY` (Confluent Schema Registry's API has its own codes: 40401 is a subject there, a
topic in `ERRORS`) and `V3_ONLY` (errors only the v3 API raises, answered with Confluent v3's codes).
`FRAMEWORK` holds the answers HTTP itself makes (no such route, no length), whose code is the bare
status. The table is checked at import: codes unique per namespace, each starting with its status.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class KafkaCode(enum.IntEnum):
    """Kafka protocol error codes used by the table: Kafka's names and numbers (its protocol guide,
    "Error Codes"). A response carries the number as an int16."""

    UNKNOWN_SERVER_ERROR = -1
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    GROUP_MAX_SIZE_REACHED = 81
    NO_REASSIGNMENT_IN_PROGRESS = 85
    INVALID_RECORD = 87
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    INELIGIBLE_REPLICA = 107


_K = KafkaCode


@dataclass(frozen=True)
class ErrorCode:
    """How one error is answered: HTTP status, Confluent-style `error_code`, Kafka protocol code."""

    status: int
    error_code: int
    kafka: KafkaCode


_E = ErrorCode

ERRORS: dict[str, ErrorCode] = {
    # 400 Bad Request
    "ConfigError": _E(400, 40001, _K.INVALID_CONFIG),  # an invalid topic or broker configuration value
    "InvalidTopicError": _E(400, 40002, _K.INVALID_TOPIC_EXCEPTION),
    "InvalidSecurityRequestError": _E(400, 40003, _K.INVALID_REQUEST),
    # 401 / 403
    "AuthenticationFailedError": _E(401, 40101, _K.SASL_AUTHENTICATION_FAILED),  # also the cluster's signature check
    # An ACL refuses: the Kafka door answers GROUP_ / CLUSTER_AUTHORIZATION_FAILED for those resources.
    "AuthorizationFailedError": _E(403, 40301, _K.TOPIC_AUTHORIZATION_FAILED),
    "TransactionalIdAuthorizationFailedError": _E(403, 40302, _K.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    "NotAVoterError": _E(403, 40310, _K.INCONSISTENT_VOTER_SET),
    # 404 Not Found
    "TopicNotFoundError": _E(404, 40401, _K.UNKNOWN_TOPIC_OR_PARTITION),
    "PartitionNotFoundError": _E(404, 40402, _K.UNKNOWN_TOPIC_OR_PARTITION),
    "ConsumerInstanceNotFoundError": _E(404, 40403, _K.UNKNOWN_MEMBER_ID),
    "GroupNotFoundError": _E(404, 40405, _K.GROUP_ID_NOT_FOUND),
    "ConfigNotFoundError": _E(404, 40406, _K.INVALID_CONFIG),
    "ClusterNotFoundError": _E(404, 40407, _K.INCONSISTENT_CLUSTER_ID),
    "BrokerNotFoundError": _E(404, 40408, _K.BROKER_NOT_AVAILABLE),
    "SecurityNotFoundError": _E(404, 40409, _K.RESOURCE_NOT_FOUND),
    "NotFoundError": _E(404, 40410, _K.RESOURCE_NOT_FOUND),
    "NoReassignmentInProgressError": _E(404, 40411, _K.NO_REASSIGNMENT_IN_PROGRESS),  # also a GET of an unmoved partition
    "TransactionalIdNotFoundError": _E(404, 40440, _K.TRANSACTIONAL_ID_NOT_FOUND),
    # 406 Not Acceptable
    "NotAcceptableError": _E(406, 40601, _K.INVALID_REQUEST),  # and ConsumerFormatMismatchError, a case of it
    "RecordDeserializationError": _E(406, 40602, _K.INVALID_RECORD),
    # 408 Request Timeout
    "RequestBodyTimeout": _E(408, 40801, _K.REQUEST_TIMED_OUT),
    # 409 Conflict
    "ConsumerAlreadyExistsError": _E(409, 40902, _K.DUPLICATE_RESOURCE),
    "IllegalStateError": _E(409, 40903, _K.INVALID_REQUEST),
    "BrokerNotRegisteredError": _E(409, 40904, _K.BROKER_ID_NOT_REGISTERED),
    "InvalidUpdateVersionError": _E(409, 40905, _K.INVALID_UPDATE_VERSION),
    "FencedLeaderEpochError": _E(409, 40906, _K.FENCED_LEADER_EPOCH),
    "FencedBrokerError": _E(409, 40907, _K.STALE_BROKER_EPOCH),
    "OutOfOrderSequenceError": _E(409, 40908, _K.OUT_OF_ORDER_SEQUENCE_NUMBER),
    "InvalidProducerEpochError": _E(409, 40909, _K.INVALID_PRODUCER_EPOCH),
    "InvalidTxnStateError": _E(409, 40940, _K.INVALID_TXN_STATE),
    "TransactionCoordinatorFencedError": _E(409, 40941, _K.TRANSACTION_COORDINATOR_FENCED),
    "GroupMaxSizeReachedError": _E(409, 40910, _K.GROUP_MAX_SIZE_REACHED),
    "InconsistentProtocolError": _E(409, 40911, _K.INCONSISTENT_GROUP_PROTOCOL),
    "UnknownMemberIdError": _E(409, 40912, _K.UNKNOWN_MEMBER_ID),
    "IllegalGenerationError": _E(409, 40913, _K.ILLEGAL_GENERATION),
    "RebalanceInProgressError": _E(409, 40914, _K.REBALANCE_IN_PROGRESS),
    "NoOffsetForPartitionError": _E(409, 40915, _K.OFFSET_OUT_OF_RANGE),  # Kafka's reset policy "none"
    "TopicExistsError": _E(409, 40916, _K.TOPIC_ALREADY_EXISTS),
    "NonEmptyGroupError": _E(409, 40918, _K.NON_EMPTY_GROUP),  # DeleteGroups of a group with members
    "BrokerInUseError": _E(409, 40917, _K.POLICY_VIOLATION),
    # transactions (ingest_api/transactions/errors.py; InvalidTxnStateError above serves the coordinator too)
    "InvalidProducerIdMappingError": _E(409, 40943, _K.INVALID_PRODUCER_ID_MAPPING),
    "ProducerFencedError": _E(409, 40942, _K.PRODUCER_FENCED),
    # 413 / 415 / 416
    "RequestTooLargeError": _E(413, 41301, _K.RECORD_LIST_TOO_LARGE),  # a body over max.request.bytes, too many records
    "RecordTooLargeError": _E(413, 41302, _K.MESSAGE_TOO_LARGE),  # a batch over max.message.bytes
    "OffsetMetadataTooLargeError": _E(413, 41310, _K.OFFSET_METADATA_TOO_LARGE),
    "UnsupportedMediaTypeError": _E(415, 41501, _K.INVALID_REQUEST),
    "OffsetOutOfRangeError": _E(416, 41601, _K.OFFSET_OUT_OF_RANGE),
    # 421 Misdirected Request
    "MisdirectedRequestError": _E(421, 42101, _K.NOT_LEADER_OR_FOLLOWER),
    "NotControllerError": _E(421, 42102, _K.NOT_CONTROLLER),
    "StaleControllerEpochError": _E(421, 42103, _K.STALE_CONTROLLER_EPOCH),
    "NotPartitionLeaderError": _E(421, 42104, _K.NOT_LEADER_OR_FOLLOWER),
    # 422 Unprocessable Entity
    "InvalidRequestError": _E(422, 42201, _K.INVALID_REQUEST),  # also FastAPI's request validation
    "SchemaValueError": _E(422, 42203, _K.INVALID_RECORD),  # REST Proxy's "conversion of JSON to Avro failed"
    "InvalidRecordError": _E(422, 42204, _K.INVALID_RECORD),
    "InvalidReplicationFactorError": _E(422, 42205, _K.INVALID_REPLICATION_FACTOR),
    "InvalidPartitionsError": _E(422, 42206, _K.INVALID_PARTITIONS),
    "InvalidTopicIdError": _E(422, 42207, _K.INCONSISTENT_TOPIC_ID),
    "MixedDuplicateBatchesError": _E(422, 42208, _K.DUPLICATE_SEQUENCE_NUMBER),
    "InvalidSessionTimeoutError": _E(422, 42210, _K.INVALID_SESSION_TIMEOUT),
    "IneligibleReplicaError": _E(422, 42211, _K.INELIGIBLE_REPLICA),
    "InvalidIsrError": _E(422, 42212, _K.INVALID_REQUEST),
    "InvalidReplicaAssignmentError": _E(422, 42213, _K.INVALID_REPLICA_ASSIGNMENT),
    "InvalidTransactionTimeoutError": _E(422, 42240, _K.INVALID_TRANSACTION_TIMEOUT),
    # 429 Too Many Requests
    "ThrottledError": _E(429, 42901, _K.THROTTLING_QUOTA_EXCEEDED),
    "TooManyInstancesError": _E(429, 42902, _K.THROTTLING_QUOTA_EXCEEDED),
    # 431 Request Header Fields Too Large
    "HeadersTooLargeError": _E(431, 43101, _K.INVALID_REQUEST),
    # 500 Internal Server Error
    "InternalServerError": _E(500, 50001, _K.UNKNOWN_SERVER_ERROR),
    "CorruptRecordError": _E(500, 50002, _K.CORRUPT_MESSAGE),
    "RemoteCorruptionError": _E(500, 50003, _K.CORRUPT_MESSAGE),
    "OffsetsRecordError": _E(500, 50004, _K.UNKNOWN_SERVER_ERROR),  # a stored __consumer_offsets record is malformed
    "TransactionStateRecordError": _E(500, 50040, _K.UNKNOWN_SERVER_ERROR),  # likewise of __transaction_state
    # 503 Service Unavailable
    # a node not serving yet: NOT_LEADER_OR_FOLLOWER makes a Kafka client refresh its metadata and retry
    "NotReadyError": _E(503, 50301, _K.NOT_LEADER_OR_FOLLOWER),
    "NotLeaderOrFollowerError": _E(503, 50302, _K.NOT_LEADER_OR_FOLLOWER),
    "NotEnoughReplicasError": _E(503, 50303, _K.NOT_ENOUGH_REPLICAS),
    "NotEnoughReplicasAfterAppendError": _E(503, 50304, _K.NOT_ENOUGH_REPLICAS_AFTER_APPEND),
    # Kafka has no generic "retry": REQUEST_TIMED_OUT is the retriable code every Kafka client retries.
    "RetriableError": _E(503, 50305, _K.REQUEST_TIMED_OUT),
    "LeaderNotAvailableError": _E(503, 50306, _K.LEADER_NOT_AVAILABLE),
    "UnknownLeaderEpochError": _E(503, 50307, _K.UNKNOWN_LEADER_EPOCH),
    "PeerUnavailableError": _E(503, 50308, _K.NETWORK_EXCEPTION),
    "LogClosedError": _E(503, 50309, _K.NOT_LEADER_OR_FOLLOWER),  # the replica is being closed (moved, deleted)
    "OffsetNotAvailableError": _E(503, 50310, _K.OFFSET_NOT_AVAILABLE),
    "QuorumUnavailableError": _E(503, 50311, _K.NOT_CONTROLLER),
    "MetadataFollowerError": _E(503, 50312, _K.NOT_CONTROLLER),
    "TransientStoreError": _E(503, 50320, _K.KAFKA_STORAGE_ERROR),
    # the store's health state refused the call at once (tiering/store_health.py)
    "RemoteStorageUnavailableError": _E(503, 50321, _K.KAFKA_STORAGE_ERROR),
    # no answer within remote.fetch.max.wait.ms; the read goes on and fills the caches
    "RemoteFetchTimeoutError": _E(503, 50322, _K.REQUEST_TIMED_OUT),
    "RemoteStorageTimeoutError": _E(503, 50323, _K.REQUEST_TIMED_OUT),
    "NotCoordinatorError": _E(503, 50330, _K.NOT_COORDINATOR),
    "CoordinatorLoadInProgressError": _E(503, 50331, _K.COORDINATOR_LOAD_IN_PROGRESS),
    # the transaction is between states (markers being written, an epoch being fenced): retry
    "ConcurrentTransactionsError": _E(503, 50335, _K.CONCURRENT_TRANSACTIONS),
    # the log directory failed an I/O operation and is offline
    "KafkaStorageError": _E(503, 50340, _K.KAFKA_STORAGE_ERROR),
    # a connection over max.connections (the Kafka door closes it without an answer)
    "TooManyConnectionsError": _E(503, 50350, _K.NETWORK_EXCEPTION),
    # 507 Insufficient Storage: ENOSPC / EDQUOT, the log directory is full (and offline)
    "LogDirectoryFullError": _E(507, 50701, _K.KAFKA_STORAGE_ERROR),
    # 504 Gateway Timeout
    "ProduceTimeoutError": _E(504, 50401, _K.REQUEST_TIMED_OUT),
    "QuorumTimeoutError": _E(504, 50410, _K.REQUEST_TIMED_OUT),
}

#: Confluent Schema Registry's own codes, for the registry's errors wherever they are answered (its
#: API at /subjects, /schemas, /config, /mode, /compatibility; schema-aware produce); 409
#: (incompatible) is Confluent's bare code. Over Kafka's protocol a registry refusal can only meet a
#: produce whose records are checked against their schemas: INVALID_RECORD.
SCHEMA_REGISTRY: dict[str, ErrorCode] = {
    "SubjectNotFoundError": _E(404, 40401, _K.INVALID_RECORD),
    "VersionNotFoundError": _E(404, 40402, _K.INVALID_RECORD),
    "SchemaNotFoundError": _E(404, 40403, _K.INVALID_RECORD),
    "SubjectSoftDeletedError": _E(404, 40404, _K.INVALID_RECORD),
    "SubjectNotSoftDeletedError": _E(404, 40405, _K.INVALID_RECORD),
    "VersionSoftDeletedError": _E(404, 40406, _K.INVALID_RECORD),
    "VersionNotSoftDeletedError": _E(404, 40407, _K.INVALID_RECORD),
    "SubjectCompatibilityNotConfiguredError": _E(404, 40408, _K.INVALID_RECORD),
    "SubjectModeNotConfiguredError": _E(404, 40409, _K.INVALID_RECORD),
    "IncompatibleSchemaError": _E(409, 409, _K.INVALID_RECORD),
    "InvalidSchemaError": _E(422, 42201, _K.INVALID_RECORD),
    "InvalidVersionError": _E(422, 42202, _K.INVALID_RECORD),
    "InvalidCompatibilityLevelError": _E(422, 42203, _K.INVALID_RECORD),
    "InvalidModeError": _E(422, 42204, _K.INVALID_RECORD),
    "OperationNotPermittedError": _E(422, 42205, _K.INVALID_RECORD),
    "ReferenceExistsError": _E(422, 42206, _K.INVALID_RECORD),
    "IdDoesNotMatchError": _E(422, 42207, _K.INVALID_RECORD),
    "InvalidSubjectError": _E(422, 42208, _K.INVALID_RECORD),
    "SchemaTooLargeError": _E(422, 42209, _K.INVALID_RECORD),
    "SchemaRegistryError": _E(422, 42299, _K.INVALID_RECORD),  # (a registry refusal without a code of its own)
}

#: Errors of the v3 API only, answered under /v3 with Confluent REST Proxy v3's status and code.
V3_ONLY: dict[str, ErrorCode] = {
    "V3SerializationError": _E(422, 42207, _K.INVALID_RECORD),  # "Error serializing message. ..."
    "V3InvalidSchemaError": _E(422, 42205, _K.INVALID_RECORD),  # "Invalid schema: ..."
    "V3SchemaBadRequest": _E(400, 400, _K.INVALID_REQUEST),
}

#: What HTTP itself answers (a server built on `http.server` writes these; FastAPI's come as
#: `RouteError`): the code is the bare status, which is how a client tells "no such route" from
#: "no such topic" (40401).
FRAMEWORK: dict[str, ErrorCode] = {
    "RouteNotFound": _E(404, 404, _K.UNSUPPORTED_VERSION),  # an API this server does not have
    "LengthRequired": _E(411, 411, _K.INVALID_REQUEST),
}

_NAMESPACES = {"ERRORS": ERRORS, "SCHEMA_REGISTRY": SCHEMA_REGISTRY, "V3_ONLY": V3_ONLY, "FRAMEWORK": FRAMEWORK}


def check_rows(name: str, rows: dict[str, ErrorCode]) -> None:
    """Codes unique within `rows`, each starting with its status (or the bare status); every row has
    a Kafka code."""
    seen: dict[int, str] = {}
    for key, row in rows.items():
        if row.error_code in seen:
            raise AssertionError(f"{name}: error_code {row.error_code} of {key} is already {seen[row.error_code]}'s")
        seen[row.error_code] = key
        if row.error_code != row.status and row.error_code // 100 != row.status:
            raise AssertionError(f"{name}: error_code {row.error_code} of {key} does not start with {row.status}")
        if not isinstance(row.kafka, KafkaCode):
            raise AssertionError(f"{name}: {key} has no Kafka error code")


for _name, _rows in _NAMESPACES.items():
    check_rows(_name, _rows)


def code(name: str) -> ErrorCode:
    """The row of the error named `name` (a class name of `ERRORS`); KeyError if there is none."""
    return ERRORS[name]


def framework(name: str) -> ErrorCode:
    """The row of an answer HTTP itself makes (`FRAMEWORK`)."""
    return FRAMEWORK[name]


def kafka_code_of(name: str) -> KafkaCode:
    """The Kafka protocol error code of the error named `name` (any namespace but the v3 API's)."""
    for rows in (ERRORS, SCHEMA_REGISTRY, FRAMEWORK):
        row = rows.get(name)
        if row is not None:
            return row.kafka
    raise KeyError(f"{name} has no row in the error table")


_BY_CODE: dict[int, ErrorCode] = {row.error_code: row for rows in (ERRORS, FRAMEWORK) for row in rows.values()}


def by_error_code(error_code: int) -> ErrorCode | None:
    """The `ERRORS` (or `FRAMEWORK`) row of an `error_code` another node answered with, or None."""
    return _BY_CODE.get(error_code)
