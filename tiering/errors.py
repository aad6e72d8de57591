"""Errors of the remote tier (`tiering/`): the object-store seam, the manifest, uploads and reads.

Every class names its `kind` (see infra/errors.py); the ingest node maps kinds to HTTP. The two
families a caller usually branches on:

  * store errors — `TransientStoreError` (retry later: the store is down, slow or throttling;
    `RemoteStorageUnavailableError` when the store's health state refused the call at once,
    `RemoteFetchTimeoutError` when a read missed `remote.fetch.max.wait.ms`),
    `ObjectNotFoundError`, `PreconditionFailedError` (a conditional write lost its race),
    `StoreConfigurationError` (bad URL, bucket, credentials);
  * manifest errors — `FencedLeaderEpochError` (a writer from an older leader epoch: a zombie),
    `ManifestConflictError` (compare-and-swap retries exhausted), `InvalidStateTransitionError`.

Reads raise `RemoteOffsetOutOfRangeError` (also a logstore `OffsetOutOfRangeError`, so fetch code
that already handles the local error handles this one) and `RemoteCorruptionError` when stored
bytes fail a checksum: a read never returns bytes that failed their check.
"""

from __future__ import annotations

from lakelog.infra.errors import ErrorKind, LakelogError
from lakelog.logstore.errors import OffsetOutOfRangeError


class TieringError(LakelogError):
    """Root of the remote tier's errors."""


# ---------------------------------------------------------------------------------------------
# the object-store seam


class StoreError(TieringError):
    """An object-store request failed for a reason not covered by a narrower class."""

    kind = ErrorKind.INVALID_REQUEST

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message + (f" (key {key})" if key is not None else ""))
        self.key = key


class TransientStoreError(StoreError):
    """The store did not answer, answered 5xx, throttled, or timed out: retry later."""

    kind = ErrorKind.TRANSIENT


class RemoteStorageUnavailableError(TransientStoreError):
    """The store is degraded (tiering/store_health.py): refused at once, without a request."""

    def __init__(self, message: str, *, key: str | None = None, retry_after_s: float = 1.0) -> None:
        super().__init__(message, key=key)
        self.retry_after_s = retry_after_s


class RemoteFetchTimeoutError(TransientStoreError):
    """A read of the remote tier missed its deadline (`remote.fetch.max.wait.ms`); it goes on
    in the background, so a retry may find its bytes cached."""

    def __init__(self, message: str, *, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class RemoteStorageTimeoutError(TransientStoreError):
    """A call to the object store missed its deadline (tiering/deadline_store.py): the store hangs."""

    def __init__(self, message: str, *, key: str | None = None, deadline_ms: int = 0, config_key: str = "",
                 retry_after_s: float = 1.0) -> None:
        super().__init__(message, key=key)
        self.deadline_ms = deadline_ms
        self.config_key = config_key
        self.retry_after_s = retry_after_s


class ObjectNotFoundError(StoreError):
    """The object (or the range asked of it) does not exist."""

    kind = ErrorKind.NOT_FOUND


class PreconditionFailedError(StoreError):
    """A conditional write (If-None-Match / If-Match) found another version: re-read and retry."""

    kind = ErrorKind.TRANSIENT


#: The name the interface documents (`put_if_absent` "raises PreconditionFailed").
PreconditionFailed = PreconditionFailedError


class StoreConfigurationError(StoreError):
    """The store URL, bucket name, bucket or credentials are wrong: fix the settings."""

    kind = ErrorKind.CONFIGURATION


class InvalidObjectKeyError(StoreError):
    """An object key is empty, absolute, has `.`/`..`/empty components or a reserved name."""

    kind = ErrorKind.INVALID_REQUEST


# ---------------------------------------------------------------------------------------------
# the manifest


class ManifestFormatError(TieringError):
    """A manifest fails its version, CRC-32C or a structural check; nothing is guessed."""

    kind = ErrorKind.CORRUPT


class UnsupportedManifestVersionError(ManifestFormatError):
    """A manifest carries a format version this code does not read."""


class ManifestInvariantError(TieringError):
    """A manifest change would break an invariant (a gap, an overlap, a log start moving back)."""

    kind = ErrorKind.CORRUPT


class InvalidStateTransitionError(TieringError):
    """A segment state change the lifecycle forbids (e.g. DELETE_STARTED -> COPY_FINISHED)."""

    kind = ErrorKind.INVALID_REQUEST


class FencedLeaderEpochError(TieringError):
    """The writer's leader epoch is below the manifest's: a newer leader owns the partition."""

    kind = ErrorKind.NOT_LEADER


class TopicIdMismatchError(FencedLeaderEpochError):
    """The manifest belongs to another incarnation of the topic (another topic id)."""


class RemotePartitionDeletedError(FencedLeaderEpochError):
    """The partition's remote data was deleted with its topic; this incarnation may not write."""


class ManifestConflictError(TieringError):
    """Compare-and-swap on the manifest kept losing races; the change was not applied."""

    kind = ErrorKind.TRANSIENT


# ---------------------------------------------------------------------------------------------
# uploads


class LocalSegmentChangedError(TieringError):
    """A local segment planned for upload was deleted or replaced meanwhile; nothing committed."""

    kind = ErrorKind.TRANSIENT


class LocalSegmentCorruptError(TieringError):
    """A local segment failed a CRC or framing check while being uploaded: it is not uploaded."""

    kind = ErrorKind.CORRUPT


class SegmentBoundaryError(TieringError):
    """The remote tier ends inside a local batch: the replicas' batches differ (a compacted or
    diverged log); uploading would duplicate or skip offsets."""

    kind = ErrorKind.CORRUPT


# ---------------------------------------------------------------------------------------------
# reads


class RemoteOffsetOutOfRangeError(TieringError, OffsetOutOfRangeError):
    """The offset is below the remote log start offset or above the last tiered offset."""

    kind = ErrorKind.NOT_FOUND


class RemoteCorruptionError(TieringError):
    """Remote bytes failed a check: a batch CRC, an index checksum or size, a missing object."""

    kind = ErrorKind.CORRUPT

    def __init__(self, message: str, *, key: str | None = None, position: int | None = None,
                 offset: int | None = None) -> None:
        where = [f"{name} {value}" for name, value in (("key", key), ("position", position), ("offset", offset))
                 if value is not None]
        super().__init__(message + (f" ({', '.join(where)})" if where else ""))
        self.key = key
        self.position = position
        self.offset = offset


class LeaseHeldError(TieringError):
    """Another run holds the partition's job lease (tiering/lease.py); try again later."""

    kind = ErrorKind.TRANSIENT

    def __init__(self, key: str, owner: str, expires_ms: int) -> None:
        super().__init__(f"{key} is held by {owner} until {expires_ms}")
        self.owner = owner
        self.expires_ms = expires_ms
