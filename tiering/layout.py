"""Object keys of the remote tier (relative to the store's prefix).

    <topic>-<partition>/manifest.json                                 the partition manifest
    <topic>-<partition>/<base offset, 20 digits>-<segment id>.log      the segment's batches
    <topic>-<partition>/<base offset, 20 digits>-<segment id>.index    its offset index
    <topic>-<partition>/<base offset, 20 digits>-<segment id>.timeindex its time index
    <topic>-<partition>/<base offset, 20 digits>-<segment id>.epochs   its leader-epoch entries
    <topic>-<partition>/<base offset, 20 digits>-<segment id>.txnindex its aborted transactions
                                                                      (only when it has some)

The segment id (32 lowercase hex digits, a random UUID) makes every upload attempt's objects
distinct: a retried or superseded upload never overwrites objects that a manifest entry, a reader
or another writer may still refer to. The base offset first makes a listing sort by offset.
"""

from __future__ import annotations

import re
import uuid

from lakelog.logstore.segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX
from lakelog.tiering.store import check_key

MANIFEST_NAME = "manifest.json"
#: A remote segment's leader-epoch entries (the local log keeps one checkpoint per partition).
EPOCHS_SUFFIX = ".epochs"
#: The objects every remote segment has; a `.txnindex` only when the segment aborted a transaction.
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, EPOCHS_SUFFIX)
_ALL_SUFFIXES = SEGMENT_SUFFIXES + (TXN_INDEX_SUFFIX,)

_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_SEGMENT_ID = re.compile(r"^[0-9a-f]{32}$")
_SEGMENT_FILE = re.compile(r"^(\d{20})-([0-9a-f]{32})(\.log|\.index|\.timeindex|\.epochs|\.txnindex)$")


def new_segment_id() -> str:
    return uuid.uuid4().hex


def is_segment_id(value: str) -> bool:
    return bool(_SEGMENT_ID.match(value))


def partition_dir(topic: str, partition: int) -> str:
    if not _TOPIC.match(topic) or topic in (".", ".."):
        raise ValueError(f"{topic!r} is not a valid topic name")
    if partition < 0:
        raise ValueError(f"partition {partition} is negative")
    return check_key(f"{topic}-{partition}")


def manifest_key(topic: str, partition: int) -> str:
    return f"{partition_dir(topic, partition)}/{MANIFEST_NAME}"


def segment_stem(base_offset: int, segment_id: str) -> str:
    return f"{base_offset:020d}-{segment_id}"


def segment_key(topic: str, partition: int, base_offset: int, segment_id: str, suffix: str) -> str:
    if suffix not in _ALL_SUFFIXES:
        raise ValueError(f"unknown segment file suffix {suffix!r}")
    return f"{partition_dir(topic, partition)}/{segment_stem(base_offset, segment_id)}{suffix}"


def segment_keys(topic: str, partition: int, base_offset: int, segment_id: str, *,
                 txn_index: bool = False) -> list[str]:
    """The keys of a segment's objects; with `txn_index`, its `.txnindex` too."""
    return [segment_key(topic, partition, base_offset, segment_id, s)
            for s in (_ALL_SUFFIXES if txn_index else SEGMENT_SUFFIXES)]


def parse_segment_file(name: str) -> tuple[int, str, str] | None:
    """(base offset, segment id, suffix) of a segment object's file name, or None."""
    m = _SEGMENT_FILE.match(name)
    return (int(m.group(1)), m.group(2), m.group(3)) if m else None
