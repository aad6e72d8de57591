"""The health of a node's log directory, as Kafka's LogDirFailureChannel keeps it: an I/O error
while a partition's log appends, rolls or flushes takes the whole directory offline.

    health = LogDirHealth(Path("data"))
    health.check_writable("orders-0")                  # KafkaStorageError once offline
    try:
        log.append_as_leader(batch, epoch)
    except OSError as e:
        raise health.failed("orders-0", "append", e)   # offline now; the error to answer

Why the whole directory and until a restart: after a failed write or fsync, what the page cache
holds for the directory's files is not known to be on disk (a failed fsync may even clear the dirty
pages), so no further write there can be acknowledged with confidence. The node keeps running,
answers every write to the directory with `KafkaStorageError` (`LogDirectoryFullError` when the
filesystem is full) and shows the state on `/readyz` and `/metrics`; recovery of the logs at the
next start (logstore/segment_recovery.py) truncates whatever a failed write left half-written.

Invariants: the state goes ONLINE -> OFFLINE only (never back without a restart); the first
failure is the one reported.

Concurrency: thread-safe (appends run on the event loop, flushes on the flush thread).
"""

from __future__ import annotations

import enum
import errno
import logging
import threading
import time
from pathlib import Path

from lakelog.infra.errors import invariant
from lakelog.logstore.errors import KafkaStorageError, LogDirectoryFullError

log = logging.getLogger(__name__)

#: errno values that mean "the filesystem has no room" (answered as LogDirectoryFullError).
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
#: errno values that mean the directory's device failed us. Others (a file gone with its deleted
#: topic, a descriptor closed by a concurrent close) are a partition's race, not the directory's.
DISK_ERRNOS = FULL_ERRNOS | {errno.EIO, errno.EROFS, errno.ENODEV, errno.ENXIO, errno.EFBIG}


def is_disk_failure(error: OSError) -> bool:
    """Does `error` take the log directory offline?"""
    return error.errno in DISK_ERRNOS


class LogDirState(enum.Enum):
    """Whether the log directory takes writes (the value is the `lakelog_log_dir_offline` gauge)."""

    ONLINE = 0
    OFFLINE = 1


class LogDirHealth:
    """One log directory's state (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._state = LogDirState.ONLINE
        self._cause: str | None = None
        self._errno: int | None = None
        self._since_ms: int | None = None

    @property
    def state(self) -> LogDirState:
        with self._lock:
            return self._state

    def _error(self, message: str, code: int | None) -> KafkaStorageError:
        cls = LogDirectoryFullError if code in FULL_ERRNOS else KafkaStorageError
        return cls(message, errno=code)

    def check_writable(self, what: str) -> None:
        """Raise the directory's error if it is offline (before a write of `what` is tried)."""
        with self._lock:
            if self._state == LogDirState.ONLINE:
                return
            cause, code = self._cause, self._errno
        raise self._error(f"KAFKA_STORAGE_ERROR: the log directory {self.path} is offline since {cause}; "
                          f"{what} is not written (restart the node once the directory is fixed)", code)

    def failed(self, what: str, operation: str, error: OSError) -> KafkaStorageError:
        """An I/O error of `operation` (append, roll, flush) on `what`: the directory goes offline.
        Returns the error to raise to the writer (nothing it wrote is acknowledged)."""
        code = error.errno
        reason = errno.errorcode.get(code, str(code)) if code is not None else type(error).__name__
        with self._lock:
            first = self._state == LogDirState.ONLINE
            if first:
                self._state = LogDirState.OFFLINE
                self._cause = f"{operation} of {what} failed with {reason} ({error.strerror or error})"
                self._errno = code
                self._since_ms = int(time.time() * 1000)  # a timestamp for operators, not a duration
            invariant(self._state == LogDirState.OFFLINE, "a failed log directory is offline")
        if first:
            log.error("log directory %s is offline: %s of %s failed: %s", self.path, operation, what, error)
        full = code in FULL_ERRNOS
        return self._error(f"KAFKA_STORAGE_ERROR: {operation} of {what} failed: "
                           f"{'the log directory is full' if full else reason} ({error.strerror or error}); "
                           f"the log directory {self.path} is offline, nothing was acknowledged", code)

    def status(self) -> dict:
        """What `/readyz` and `/metrics` show."""
        with self._lock:
            return {"path": str(self.path), "state": self._state.name.lower(), "cause": self._cause,
                    "errno": errno.errorcode.get(self._errno, self._errno) if self._errno is not None else None,
                    "offline_since_ms": self._since_ms}
