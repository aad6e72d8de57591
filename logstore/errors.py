"""Errors of the log storage engine (`logstore/`); the index formats' own are in index/errors.py."""

from __future__ import annotations

from lakelog.infra.errors import ErrorKind, LakelogError


class LogStoreError(LakelogError):
    """Root of the storage engine's errors."""


class CorruptRecordError(LogStoreError):
    """Stored or received bytes fail a checksum or a structural check (CRC, length, magic)."""

    kind = ErrorKind.CORRUPT

    def __init__(self, message: str, *, file: str | None = None, position: int | None = None,
                 offset: int | None = None) -> None:
        where = []
        if file is not None:
            where.append(f"file {file}")
        if position is not None:
            where.append(f"position {position}")
        if offset is not None:
            where.append(f"offset {offset}")
        super().__init__(message + (f" ({', '.join(where)})" if where else ""))
        self.file = file
        self.position = position
        self.offset = offset


class InvalidRecordError(LogStoreError):
    """A batch from a client is well-formed bytes but breaks a rule (offsets, keys, sizes)."""

    kind = ErrorKind.INVALID_REQUEST


class CorruptBatchError(InvalidRecordError):
    """A batch from a client fails its CRC or its framing: refused, nothing appended."""


class UnsupportedMagicError(InvalidRecordError):
    """A batch carries a magic (format version) other than 2."""


class UnsupportedCompressionError(InvalidRecordError):
    """A batch names a compression codec we do not know, or cannot be decompressed."""


class RecordTooLargeError(InvalidRecordError):
    """A batch exceeds `max.message.bytes` (or a record exceeds a configured limit)."""


class RecordKeyRequiredError(InvalidRecordError):
    """A compacted topic received a record without a key."""


class OffsetOutOfRangeError(LogStoreError):
    """The requested offset is below the log start offset or above the log end offset."""

    kind = ErrorKind.NOT_FOUND


class UnsupportedFormatVersionError(LogStoreError):
    """A stored artifact (checkpoint, marker) carries a version this code does not read."""

    kind = ErrorKind.CORRUPT


class LogClosedError(LogStoreError):
    """The partition log was closed or deleted."""

    kind = ErrorKind.TRANSIENT


class SegmentsChangedError(LogStoreError):
    """The segments an operation planned on changed under it (a concurrent swap or deletion)."""

    kind = ErrorKind.TRANSIENT


class InvalidProducerEpochError(LogStoreError):
    """An idempotent producer's epoch is below the partition's: a newer instance fenced it."""

    kind = ErrorKind.NOT_LEADER


class OutOfOrderSequenceError(InvalidRecordError):
    """An idempotent producer's batch does not continue its sequence (a gap, or a new epoch not at 0)."""


class MixedDuplicateBatchesError(InvalidRecordError):
    """A request mixes batches already appended (duplicates) with new ones: nothing is appended."""


class KafkaStorageError(LogStoreError):
    """The log directory failed an I/O operation (EIO, ENOSPC, ...) or is offline since one did:
    nothing was acknowledged; retry (another replica may lead by then)."""

    kind = ErrorKind.TRANSIENT

    def __init__(self, message: str, *, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class LogDirectoryFullError(KafkaStorageError):
    """The log directory's filesystem is full (ENOSPC, EDQUOT): free space, then restart the node."""


class InvalidTxnStateError(InvalidRecordError):
    """A producer with an open transaction sent a non-transactional batch (Kafka's INVALID_TXN_STATE)."""


class TransactionCoordinatorFencedError(LogStoreError):
    """A COMMIT / ABORT marker comes from a coordinator epoch below the last marker's: a stale coordinator."""

    kind = ErrorKind.NOT_LEADER
