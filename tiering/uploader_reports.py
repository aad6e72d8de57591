"""What a partition's tiering rounds report: `CopyReport` (a copy round) and
`RemoteRetentionReport` (a remote retention pass). Plain records, filled by `SegmentUploader`
(uploader.py) and the objects it holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lakelog.tiering.manifest_model import RemoteSegment


@dataclass(slots=True)
class CopyReport:
    """What one copy round did."""

    uploaded: list[RemoteSegment] = field(default_factory=list)
    bytes_uploaded: int = 0
    abandoned: list[str] = field(default_factory=list)  # COPY_STARTED leftovers moved to DELETE_STARTED
    deleted: list[str] = field(default_factory=list)  # segments whose objects were deleted
    orphans_deleted: list[str] = field(default_factory=list)  # object keys
    restarted_at: int | None = None  # the remote tier restarted here (the offsets before expired locally)
    remote_end_offset: int | None = None
    lag_segments: int = 0  # sealed local segments not yet tiered
    lag_bytes: int = 0


@dataclass(slots=True)
class RemoteRetentionReport:
    """What one remote retention pass did."""

    segments_expired: list[str] = field(default_factory=list)
    bytes_expired: int = 0
    log_start_offset: int = 0
    deleted: list[str] = field(default_factory=list)
