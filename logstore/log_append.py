"""What an append answers, and how a request's batches are checked before one (`PartitionLog`, log.py).

`AppendInfo` is what `append_as_leader` / `append_as_follower` answer; `split_and_validate` cuts a
request into batches and validates each against the topic config (Kafka's LogValidator) before
anything is written, so an append is all-or-nothing. `assign_offsets` (a leader's) and
`check_follower_offsets` (a follower's) turn the validated batches into a `PreparedAppend`: the
bytes to write and each batch's offsets and timestamp.

Pure: bytes and config in, batches out.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from lakelog.infra.config import LogConfig
from lakelog.logstore.errors import CorruptBatchError, CorruptRecordError, InvalidRecordError, RecordTooLargeError
from lakelog.logstore.producer_state import BatchMetadata
from lakelog.logstore.record_batch import (
    NO_TIMESTAMP,
    RecordBatch,
    TruncatedBatchError,
    iter_batches,
    set_log_append_time,
    set_offset_and_epoch,
    validate_batch,
)

#: The 16 bytes before a batch's magic: base offset, batch length, partition leader epoch (outside the CRC).
_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")
assert _OFFSET_LENGTH_EPOCH.size == 16


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """What an append did: the offsets it assigned and what it stored.

    With `duplicate`, the request repeated batches of idempotent producers that the log already
    holds: nothing was stored (counts and size are 0) and the offsets, timestamps and
    `base_offsets` are those the original append assigned; answer the client with them.
    """

    first_offset: int
    last_offset: int
    max_timestamp: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    record_count: int
    batch_count: int
    size_in_bytes: int
    log_start_offset: int
    base_offsets: tuple[int, ...] = ()
    duplicate: bool = False

    @classmethod
    def of_duplicates(cls, duplicates: tuple[BatchMetadata, ...], *, log_append_time: bool,
                      log_start_offset: int) -> AppendInfo:
        """The answer to a request of duplicates only: the original appends' offsets."""
        max_ts = max(d.max_timestamp for d in duplicates)
        return cls(min(d.first_offset for d in duplicates), max(d.last_offset for d in duplicates), max_ts,
                   max_ts if log_append_time else -1, 0, 0, 0, log_start_offset,
                   tuple(d.first_offset for d in duplicates), duplicate=True)


@dataclass(frozen=True, slots=True)
class PreparedAppend:
    """Validated batches with their offsets, ready for the active segment."""

    parts: list  # the bytes to write, in order (pwritev)
    entries: list  # (position, last offset, max timestamp, size in bytes) of each batch
    base_offsets: tuple[int, ...]
    max_timestamp: int
    record_count: int
    #: (batch, base offset, max timestamp) of each batch of a producer (producer id >= 0)
    producer_batches: list[tuple[RecordBatch, int, int]]

    @property
    def last_offset(self) -> int:
        return self.entries[-1][1]


def split_and_validate(buf: bytes | bytearray | memoryview, config: LogConfig, *, for_leader: bool) -> list:
    """The batches of a request, each validated against the topic config: [(position, batch, summary)].

    A leader validates producer batches (offsets consecutive from 0, `max.message.bytes`, keys
    on a compacted topic); a follower accepts what the leader stored. Raises CorruptBatchError,
    RecordTooLargeError or InvalidRecordError; nothing is appended on any error.
    """
    if not buf:
        raise InvalidRecordError("no record batches in the request")
    cfg = config
    out = []
    try:
        for pos, batch in iter_batches(buf, max_batch_bytes=None):
            if batch.size_in_bytes > cfg.max_message_bytes and for_leader:
                raise RecordTooLargeError(f"batch of {batch.size_in_bytes} bytes exceeds "
                                          f"max.message.bytes={cfg.max_message_bytes}")
            summary = validate_batch(
                batch,
                max_message_bytes=cfg.max_message_bytes if for_leader else max(cfg.max_message_bytes, 2**31 - 1),
                consecutive_offsets=for_leader, require_keys=cfg.compact and for_leader,
                allow_control=not for_leader, max_uncompressed_bytes=cfg.max_uncompressed_batch_bytes)
            out.append((pos, batch, summary))
    except TruncatedBatchError as e:
        raise CorruptBatchError(f"request ends inside a batch: {e}") from None
    except CorruptRecordError as e:
        raise CorruptBatchError(str(e)) from None
    return out


def assign_offsets(buf: bytes | memoryview, parsed: list, first_offset: int, leader_epoch: int, now_ms: int, *,
                   log_append_time: bool) -> PreparedAppend:
    """A leader's batches (`split_and_validate`'s) numbered from `first_offset` and stamped with
    `leader_epoch` (and `now_ms` as their LogAppendTime when `log_append_time`)."""
    view = memoryview(buf)
    next_offset = first_offset
    parts: list = []
    entries = []
    base_offsets = []
    producer_batches: list[tuple[RecordBatch, int, int]] = []
    max_ts = NO_TIMESTAMP
    records = 0
    for pos, batch, summary in parsed:
        size = batch.size_in_bytes
        if log_append_time:
            copy = bytearray(view[pos:pos + size])
            set_offset_and_epoch(copy, 0, next_offset, leader_epoch)
            set_log_append_time(copy, 0, size, now_ms)
            parts.append(copy)
        else:
            # Patch the 16 bytes before the magic (base offset, length, leader epoch): they
            # are outside the CRC, and the payload is written as received, without a copy.
            parts.append(_OFFSET_LENGTH_EPOCH.pack(next_offset, batch.batch_length, leader_epoch))
            parts.append(view[pos + _OFFSET_LENGTH_EPOCH.size:pos + size])
        batch_max_ts = now_ms if log_append_time else batch.max_timestamp
        if batch.producer_id >= 0:
            producer_batches.append((batch, next_offset, batch_max_ts))
        last = next_offset + batch.last_offset_delta
        entries.append((pos, last, batch_max_ts, size))
        base_offsets.append(next_offset)
        max_ts = max(max_ts, batch_max_ts)
        records += summary.record_count
        next_offset = last + 1
    return PreparedAppend(parts, entries, tuple(base_offsets), max_ts, records, producer_batches)


def check_follower_offsets(buf: bytes, parsed: list, log_end_offset: int) -> PreparedAppend:
    """A follower's batches (`split_and_validate`'s), kept as they are: their offsets must start
    at or above `log_end_offset` and increase (InvalidRecordError)."""
    expected = log_end_offset
    entries = []
    max_ts = NO_TIMESTAMP
    records = 0
    for pos, batch, summary in parsed:
        if batch.base_offset < expected:
            raise InvalidRecordError(f"batch offset {batch.base_offset} is below the expected "
                                     f"next offset {expected}")
        entries.append((pos, batch.last_offset, batch.max_timestamp, batch.size_in_bytes))
        expected = batch.last_offset + 1
        max_ts = max(max_ts, batch.max_timestamp)
        records += summary.record_count
    return PreparedAppend([buf], entries, tuple(b.base_offset for _, b, _ in parsed), max_ts, records,
                          [(b, b.base_offset, b.max_timestamp) for _, b, _ in parsed if b.producer_id >= 0])
