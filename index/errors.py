"""Errors of the index formats (`index/`): the layer below the log, so the log and the remote tier
can both read indexes without importing each other."""

from __future__ import annotations

from lakelog.infra.errors import ErrorKind, LakelogError


class IndexFormatError(LakelogError):
    """Root of the index formats' errors."""


class CorruptIndexError(IndexFormatError):
    """An index file fails its structural checks; it is rebuilt from its `.log`."""

    kind = ErrorKind.CORRUPT
