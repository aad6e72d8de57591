"""The partition manifest (`<topic>-<partition>/manifest.json`): remote log metadata of one partition.

Layout: canonical JSON (keys sorted, no spaces, ASCII), UTF-8 bytes:

    {"crc32c": <uint32 CRC-32C of the canonical JSON of "manifest">,
     "manifest": {
        "topic": str, "partition": int, "topic_id": str | null,
        "generation": int,          +1 with every commit (so no two versions have the same bytes)
        "leader_epoch": int,        highest leader epoch that committed; writers below it are fenced
        "log_start_offset": int,    lowest offset the remote tier serves
        "cleaner_checkpoint": int | null,   slot for the remote compaction job (first dirty offset)
        "deleted": bool,            the topic was deleted: a tombstone that fences its old writers
        "segments": [ {             sorted by base offset
            "id": str,              32 hex digits; the objects are <base:020d>-<id>.{log,index,timeindex,epochs}
            "base_offset": int, "end_offset": int,   the offsets [base, end] the segment covers (end =
                                    the next local segment's base - 1, as Kafka's RemoteLogSegmentMetadata)
            "max_timestamp": int,   largest batch max timestamp, -1 if none
            "size_in_bytes": int,   of the .log object
            "leader_epochs": [[epoch, start offset], ...],   as in the .epochs object
            "state": 0..3,          SegmentState
            "state_epoch": int,     leader epoch of the writer of the last state change
            "origin": str,          "upload" (the leader's tiering) or the writer's name (a job)
            "index": [bytes, crc32c], "time_index": [bytes, crc32c], "epochs": [bytes, crc32c],
            "created_ms": int, "updated_ms": int,
            "delete_after_ms": int  DELETE_STARTED: objects are deleted from this time on; else -1
            "record_count": int     optional: the records of the segment's data batches (control
                                    batches not counted), as the writer's CRC-checked scan found
                                    them; absent in entries written before it existed (readers
                                    then count by reading). The `lakelog` source's count() uses it.
        }, ...]},
     "version": 1}

The CRC covers the canonical JSON of the "manifest" value. A reader refuses another version, a CRC
mismatch, a missing or mistyped field, or a manifest that breaks an invariant (ManifestFormatError).

Segment lifecycle (Kafka's RemoteLogSegmentState), explicit values, checked transitions; repeating
the current state is allowed so that a retried commit is harmless:

    COPY_STARTED(0) -> COPY_FINISHED(1) -> DELETE_STARTED(2) -> DELETE_FINISHED(3)
    COPY_STARTED(0) -----------------------> DELETE_STARTED(2)     (an abandoned upload)

Invariants (`validate`, checked on every encode and decode):
  * segment ids are unique; every segment has base <= end and epochs increasing inside [base, end];
  * segments are sorted by base offset; live segments (COPY_STARTED, COPY_FINISHED) never overlap
    (no duplicate offsets);
  * COPY_FINISHED segments are contiguous: each base is the previous end + 1 (no gap);
  * with COPY_FINISHED segments, the first's base <= log_start_offset <= its end; COPY_STARTED
    segments lie at or above the log start offset;
  * a deleted (tombstone) manifest holds no live segment.
Transitions that would break one raise ManifestInvariantError and change nothing; the log start
offset never moves backwards.

Crash behaviour: a manifest is replaced whole by a conditional PUT (see metadata.py); a crash
leaves the old or the new version. Everything here is pure: the transitions take a manifest and
return the next one (or None when nothing changes).

Where the code is: the states, the entries, the manifest and `validate` in manifest_model.py, the
codec (`encode`, `decode`, `to_dict`) in manifest_codec.py, the transitions in
manifest_transitions.py. Every name is imported from here (`from lakelog.tiering import manifest
as mf`), as before the split.
"""

from __future__ import annotations

from lakelog.tiering.errors import (  # noqa: F401  (re-exported: the manifest's errors, as before the split)
    InvalidStateTransitionError,
    ManifestFormatError,
    ManifestInvariantError,
    UnsupportedManifestVersionError,
)
from lakelog.tiering.manifest_model import (  # noqa: F401  (re-exported: the manifest's one import path)
    LIVE_STATES,
    MANIFEST_VERSION,
    NO_TIMESTAMP,
    ORIGIN_UPLOAD,
    PartitionManifest,
    RemoteSegment,
    SegmentState,
    check_transition,
    is_valid_transition,
    validate,
)
from lakelog.tiering.manifest_codec import (  # noqa: F401  (re-exported: the manifest's one import path)
    decode,
    encode,
    to_dict,
)
from lakelog.tiering.manifest_transitions import (  # noqa: F401  (re-exported: the manifest's one import path)
    Replacement,
    abandon_copies,
    claim,
    finish_copy,
    finish_delete,
    mark_deleted,
    replace_index_objects,
    restart_at,
    set_cleaner_checkpoint,
    stage_replacements,
    start_copy,
    start_delete,
    swap_replacements,
)
