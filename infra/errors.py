"""The root of every Lakelog error, and the kinds that decide how an error is answered.

Each package keeps a small tree of its own under `LakelogError`; every class names its `kind`.
One table (`infra/error_codes.py`, bound to the node's classes by `ingest_api/error_table.py`) turns
errors and kinds into HTTP statuses, Confluent-style `error_code`s and Kafka protocol codes, so
packages below the node never think about HTTP.
"""

from __future__ import annotations

import enum


class ErrorKind(enum.Enum):
    """What an error means to the caller, independent of transport."""

    CONFIGURATION = "configuration"  # the operator's settings are wrong; fix and restart
    INVALID_REQUEST = "invalid_request"  # the client sent something we refuse; retrying won't help
    NOT_FOUND = "not_found"  # the named topic / partition / offset does not exist
    NOT_LEADER = "not_leader"  # ask someone else (or a fenced, stale epoch)
    TRANSIENT = "transient"  # try again later
    CORRUPT = "corrupt"  # stored bytes failed a checksum or a structural check


class LakelogError(Exception):
    """Root of all Lakelog errors."""

    kind: ErrorKind = ErrorKind.TRANSIENT


def invariant(condition: bool, message: str) -> None:
    """Check a named invariant; raise instead of `assert` so it holds under `python -O` too."""
    if not condition:
        raise InvariantViolation(message)


class InvariantViolation(LakelogError):
    """An internal invariant does not hold: a bug, never a client's fault."""

    kind = ErrorKind.CORRUPT
