"""Appending to the partition log: leader and follower appends, roll and flush (`PartitionLog`, log.py).

`LogAppender` is the part of `PartitionLog` that writes: `append_as_leader` (validate producer
batches, assign offsets from the LEO, stamp the leader epoch, check idempotent producers) and
`append_as_follower` (batches that already carry offsets and epochs), both all-or-nothing; `roll`
(seal the active segment, snapshot the producer state, start a segment at the LEO); `flush` and the
flush policy (`flush.messages`, `flush.ms`), which advance the recovery point. `AppendInfo` is what
an append answers.

Concurrency: every public method takes the log's lock (`_locked` methods expect it held).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Callable

from lakelog.infra.errors import invariant
from lakelog.logstore.checkpoint import write_checkpoint
from lakelog.logstore.errors import CorruptBatchError, CorruptRecordError, InvalidRecordError, RecordTooLargeError
from lakelog.logstore.log_loader import RECOVERY_POINT_FILE
from lakelog.logstore.log_state import LogState
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
from lakelog.logstore.segment import LogSegment

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



class LogAppender(LogState):
    """Appends, roll and flush of `PartitionLog` (module doc); the log's state is made in log.py."""

    _unflushed_records: int
    _last_flush_ms: int
    _listeners: list[Callable[[int], None]]

    def append_as_leader(self, data: bytes | bytearray | memoryview, leader_epoch: int, *,
                         consecutive_offsets: bool = True) -> AppendInfo:
        """Validate producer batches, assign offsets from the LEO, stamp `leader_epoch`, append.

        All batches are validated before any byte is written: on any error nothing is appended.
        Batches of idempotent producers (producer id >= 0) are checked against the producer
        state: InvalidProducerEpochError, OutOfOrderSequenceError, MixedDuplicateBatchesError;
        a request of duplicates only appends nothing and returns the original offsets with
        `duplicate=True`.
        """
        buf = data if isinstance(data, (bytes, memoryview)) else bytes(data)
        parsed = self._split_and_validate(buf, for_leader=consecutive_offsets)
        view = memoryview(buf)
        with self._lock:
            self._check_open()
            next_offset = self.log_end_offset
            first_offset = next_offset
            now = self._now_ms()
            log_append = self.config.log_append_time
            entries = []
            parts: list = []
            base_offsets = []
            max_ts = NO_TIMESTAMP
            records = 0
            idempotent: list[tuple[RecordBatch, int, int]] = []  # (batch, base offset, max timestamp)
            for pos, batch, summary in parsed:
                size = batch.size_in_bytes
                if log_append:
                    copy = bytearray(view[pos:pos + size])
                    set_offset_and_epoch(copy, 0, next_offset, leader_epoch)
                    set_log_append_time(copy, 0, size, now)
                    parts.append(copy)
                else:
                    # Patch the 16 bytes before the magic (base offset, length, leader epoch): they
                    # are outside the CRC, and the payload is written as received, without a copy.
                    parts.append(_OFFSET_LENGTH_EPOCH.pack(next_offset, batch.batch_length, leader_epoch))
                    parts.append(view[pos + _OFFSET_LENGTH_EPOCH.size:pos + size])
                batch_max_ts = now if log_append else batch.max_timestamp
                if batch.producer_id >= 0:
                    idempotent.append((batch, next_offset, batch_max_ts))
                last = next_offset + batch.last_offset_delta
                entries.append((pos, last, batch_max_ts, batch.size_in_bytes))
                base_offsets.append(next_offset)
                max_ts = max(max_ts, batch_max_ts)
                records += summary.record_count
                next_offset = last + 1
            if idempotent:
                duplicates = self._producers.check_leader_append([b for _, b, _ in parsed])
                if duplicates is not None:
                    return self._duplicate_info(duplicates)
            if leader_epoch >= 0 and leader_epoch > self.epochs.latest_epoch:
                self.epochs.assign(leader_epoch, first_offset)
            self._append_locked(parts, entries, max_ts, now, first_offset)
            for batch, base, batch_max_ts in idempotent:
                self._producers.apply(batch.producer_id, batch.producer_epoch, batch.base_sequence, base,
                                      batch.last_offset_delta, batch_max_ts)
            self._unflushed_records += records
            info = AppendInfo(first_offset, next_offset - 1, max_ts, now if log_append else -1, records,
                              len(parsed), len(buf), self.log_start_offset, tuple(base_offsets))
            self._after_append(now)
            return info

    def append_as_follower(self, data: bytes | bytearray | memoryview) -> AppendInfo:
        """Append batches that already carry offsets and epochs (replication, restore).

        They must start at or above the LEO and increase; CRCs are checked; bytes are kept as is.
        """
        buf = bytes(data)
        parsed = self._split_and_validate(buf, for_leader=False)
        with self._lock:
            self._check_open()
            expected = self.log_end_offset
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
            first = parsed[0][1].base_offset
            if first > self.log_end_offset and self.active_segment.is_empty is False:
                # A gap (the leader's log start moved past ours): start a fresh segment there.
                self._roll_locked(first)
            elif first > self.log_end_offset:
                self._reset_active_to(first)
            for _, batch, _ in parsed:
                if batch.partition_leader_epoch > self.epochs.latest_epoch:
                    self.epochs.assign(batch.partition_leader_epoch, batch.base_offset)
            now = self._now_ms()
            self._append_locked([buf], entries, max_ts, now, first)
            # Unchecked: the leader checked them, and the state must end as the leader's.
            for _, batch, _ in parsed:
                if batch.producer_id >= 0:
                    self._producers.apply_batch(batch)
            self._unflushed_records += records
            info = AppendInfo(first, expected - 1, max_ts, -1, records, len(parsed), len(buf),
                              self.log_start_offset, tuple(b.base_offset for _, b, _ in parsed))
            self._after_append(now)
            return info

    def _duplicate_info(self, duplicates: tuple[BatchMetadata, ...]) -> AppendInfo:
        max_ts = max(d.max_timestamp for d in duplicates)
        return AppendInfo(min(d.first_offset for d in duplicates), max(d.last_offset for d in duplicates), max_ts,
                          max_ts if self.config.log_append_time else -1, 0, 0, 0, self.log_start_offset,
                          tuple(d.first_offset for d in duplicates), duplicate=True)

    def _split_and_validate(self, buf: bytes | bytearray, *, for_leader: bool) -> list:
        if not buf:
            raise InvalidRecordError("no record batches in the request")
        cfg = self.config
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

    def _append_locked(self, parts: list, entries: list, max_ts: int, now: int, first_offset: int) -> None:
        seg = self.active_segment
        last_offset = entries[-1][1]
        size = sum(e[3] for e in entries)
        if seg.should_roll(size, max_ts, last_offset, self.config.segment_bytes,
                           self.config.segment_ms, now):
            seg = self._roll_locked(first_offset)
        seg.append(parts, entries)

    def _after_append(self, now: int) -> None:
        cfg = self.config
        if self._unflushed_records >= cfg.flush_messages or now - self._last_flush_ms >= cfg.flush_ms:
            self._flush_locked()
        leo = self.log_end_offset
        for listener in self._listeners:
            listener(leo)

    # ------------------------------------------------------------------ roll and flush

    def roll(self) -> LogSegment:
        """Seal the active segment and start a new one at the LEO."""
        with self._lock:
            self._check_open()
            return self._roll_locked(self.log_end_offset)

    def _roll_locked(self, new_base: int) -> LogSegment:
        old = self.active_segment
        if old.is_empty and old.base_offset == new_base:
            return old
        invariant(new_base >= old.next_offset, f"new segment base {new_base} below LEO {old.next_offset}")
        if old.is_empty:
            self._segments.pop()
            self._bases.pop()
            old.delete_files()
        else:
            old.on_become_inactive()
            # Sealed segments are flushed once, so recovery only ever re-reads the active one.
            old.flush()
        # The state covers every batch below the LEO, and no batch lies in [LEO, new_base).
        self._producers.remove_expired(self._now_ms())
        self._producers.take_snapshot(new_base)
        seg = LogSegment(self.directory, new_base, self._segment_config(), created_ms=self._now_ms())
        self._add_segment(seg)
        self.recovery_point = new_base
        write_checkpoint(self.directory / RECOVERY_POINT_FILE, [(new_base,)])
        return seg

    def _reset_active_to(self, new_base: int) -> None:
        old = self._segments.pop()
        self._bases.pop()
        old.delete_files()
        self._add_segment(LogSegment(self.directory, new_base, self._segment_config(), created_ms=self._now_ms()))

    def flush(self) -> None:
        """fsync every segment with unflushed bytes and advance the recovery point to the LEO."""
        with self._lock:
            self._check_open()
            self._flush_locked()

    def _flush_locked(self) -> None:
        for seg in self._segments:
            seg.flush()
        self._unflushed_records = 0
        self._last_flush_ms = self._now_ms()
        if self.recovery_point != self.log_end_offset:
            self.recovery_point = self.log_end_offset
            # Recovery restarts from the segment holding the recovery point.
            write_checkpoint(self.directory / RECOVERY_POINT_FILE, [(self.recovery_point,)])

    def flush_if_due(self) -> None:
        """For a periodic task: flush when `flush.ms` has passed since the last flush."""
        with self._lock:
            if not self._closed and self._unflushed_records and \
                    self._now_ms() - self._last_flush_ms >= self.config.flush_ms:
                self._flush_locked()
