"""What an append answers, and how a request's batches are checked before one (`PartitionLog`, log.py).

`AppendInfo` is what `append_as_leader` / `append_as_follower` answer; `split_and_validate` cuts a
request into batches and validates each against the topic config (Kafka's LogValidator) before
anything is written, so an append is all-or-nothing.

Pure: bytes and config in, batches out.
"""

from __future__ import annotations

from dataclasses import dataclass

from lakelog.infra.config import LogConfig
from lakelog.logstore.errors import CorruptBatchError, CorruptRecordError, InvalidRecordError, RecordTooLargeError
from lakelog.logstore.record_batch import TruncatedBatchError, iter_batches, validate_batch


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
