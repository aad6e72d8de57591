"""Errors of key compaction and retention (`compaction/`)."""

from __future__ import annotations

from lakelog.infra.errors import ErrorKind, LakelogError


class CompactionError(LakelogError):
    """Root of the compaction and retention errors."""


class OffsetMapTooSmallError(CompactionError):
    """The key -> offset map cannot hold the distinct keys of even one batch: raise its limit."""

    kind = ErrorKind.CONFIGURATION


class CleaningAbortedError(CompactionError):
    """A cleaning round was stopped (cleaner shutdown) or the log changed under it; nothing swapped."""

    kind = ErrorKind.TRANSIENT


class CorruptCleanerCheckpointError(CompactionError):
    """The `cleaner-offset-checkpoint` file is unreadable or holds impossible values."""

    kind = ErrorKind.CORRUPT
