"""Errors of the transaction coordinator (one tree under `TransactionError`).

Their HTTP statuses, `error_code`s and Kafka codes are rows of infra/error_codes.py, bound in
ingest_api/error_table.py. A coordinator that moved or is loading answers the group coordinator's
NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS (ingest_api/groups/errors.py), a request that does not
fit the transaction's state the log's INVALID_TXN_STATE (logstore/errors.py): one meaning, one class.
"""

from __future__ import annotations

from lakelog.infra.errors import ErrorKind
from lakelog.ingest_api.errors import NodeError


class TransactionError(NodeError):
    """Root of the transaction errors."""

    #: Kafka's error name, for the coordinator's answers between nodes.
    kafka_name = "UNKNOWN_SERVER_ERROR"


class InvalidProducerIdMappingError(TransactionError):
    """The transactional id is unknown, or maps to another producer id."""

    kind = ErrorKind.INVALID_REQUEST
    kafka_name = "INVALID_PRODUCER_ID_MAPPING"


class InvalidTransactionTimeoutError(TransactionError):
    """transaction.timeout.ms is not in [1, transaction.max.timeout.ms]."""

    kind = ErrorKind.INVALID_REQUEST
    kafka_name = "INVALID_TRANSACTION_TIMEOUT"


class ConcurrentTransactionsError(TransactionError):
    """The transaction is between states (its markers are being written, or its epoch fenced): retry."""

    kind = ErrorKind.TRANSIENT
    kafka_name = "CONCURRENT_TRANSACTIONS"


class ProducerFencedError(TransactionError):
    """A newer producer with the same transactional id has a higher epoch: this one is a zombie."""

    kind = ErrorKind.NOT_LEADER
    kafka_name = "PRODUCER_FENCED"


class TransactionalIdNotFoundError(TransactionError):
    """No transaction of that transactional id on its coordinator."""

    kind = ErrorKind.NOT_FOUND
    kafka_name = "TRANSACTIONAL_ID_NOT_FOUND"


#: Errors a coordinator answers between nodes, by Kafka name (the caller re-raises them).
BY_KAFKA_NAME: dict[str, type[TransactionError]] = {c.kafka_name: c for c in (
    InvalidProducerIdMappingError, InvalidTransactionTimeoutError,
    ConcurrentTransactionsError, ProducerFencedError, TransactionalIdNotFoundError)}
