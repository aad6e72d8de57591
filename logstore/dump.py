"""`lakelog dump-log`: print segment files the way Kafka's DumpLogSegments tool does.

Reads any `.log`, `.index`, `.timeindex` or `.txnindex` file in Kafka's formats (ours or a Kafka broker's),
named by its base offset in 20 digits (`00000000000000005376.log`), or a remote tier object's name
(`00000000000000005376-<segment id>.log`, 32 hex digits of segment id: a segment downloaded from
the remote tier as it is stored; its indexes are found beside it under the same stem). Lakelog's
transient suffixes (`.cleaned`, `.swap`, `.deleted`, see segment.py) may follow the segment suffix.

`.log` output: a heading, then one line per batch and one line per record:

    Dumping /data/t-0/00000000000000000000.log
    Log starting offset: 0
    baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 producerId: -1
        producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false
        deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000000 size: 86 magic: 2
        compresscodec: NONE crc: 3783425053 isvalid: true
    | offset: 0 position: 0 CreateTime: 1700000000000 keysize: 1 valuesize: 5 magic: 2
        compresscodec: NONE producerId: -1 producerEpoch: -1 sequence: -1 isTransactional: false
        headerKeys: [] key: k payload: hello
    | offset: 1 position: 0 CreateTime: 1700000000000 keysize: -1 valuesize: 5 magic: 2
        compresscodec: NONE producerId: -1 producerEpoch: -1 sequence: -1 isTransactional: false
        headerKeys: [] payload: world

(each indented continuation belongs to the line above: one line per batch, one per record).

The batch line is Kafka 3.x's. The record line is the older DumpLogSegments record layout the
feature asked for (`offset position CreateTime keysize valuesize magic compresscodec producerId
producerEpoch sequence isTransactional headerKeys`), prefixed with `| ` as Kafka 3.x does:

  * `position` is the position of the record's batch (records inside a batch have none);
  * the timestamp is labelled `LogAppendTime` in a LogAppendTime batch and is then the batch's max
    timestamp, as a Kafka consumer sees it;
  * `sequence` is baseSequence + offset delta (wrapping at 2^31 as Kafka's), or -1;
  * `compresscodec` is Kafka's enum name, NONE GZIP SNAPPY LZ4 ZSTD (UNKNOWN(n) for ids 5-7), on
    both lines (Kafka 3.x prints the lower-case codec name on its batch line);
  * `headerKeys: [a,b]` lists header keys joined by commas.

With `--print-data-log`, ` key: K` (only when the key is not null) and ` payload: V` follow. A
null value (a tombstone) prints no `payload:` field, as Kafka's tool does: `valuesize: -1` marks it,
and a literal value "null" stays distinguishable. Keys and values are decoded as UTF-8 with invalid
bytes written as `\\xNN` (errors="backslashreplace"); control characters are escaped too (`\\n`,
`\\r`, `\\xNN`) so one record stays one line. Control batches print each record's type whatever
the flag: ` endTxnMarker: COMMIT coordinatorEpoch: N` for transaction markers (key: int16 version,
int16 type; value: int16 version, int32 coordinator epoch), ` controlType: NAME(id)` otherwise.

Damage: a batch whose CRC-32C does not match prints `isvalid: false`; its records are still
decoded when they can be, and the dump goes on with the next batch. Messages of magic 0 and 1
(pre-0.11 formats) print one line with their CRC-32 check, undecoded. Where no batch can be framed
any more (a torn tail, or an impossible length field) the tool prints
`Found N invalid bytes at the end of FILE` (FILE as given on the command line; Kafka prints the
bare name) and, on the next line, where and why; then it stops reading that file. Like Kafka, this
is not an error (exit code 0).

`.index` output: `offset: O position: P` per entry; `.timeindex`: `timestamp: T offset: O`;
`.txnindex`: `version: 0 producerId: P firstOffset: F lastOffset: L lastStableOffset: S`
(dump_index.py). After
the entries come notes for entries out of order, a torn partial entry, zero entries at the end
(Kafka preallocates index files of active segments), and entries that do not match the `.log` next
to the index (when there is one): an offset index entry (O, P) must point at a batch holding O (as
LogSegment.translate_offset checks), a time index entry (T, O) at an offset whose batch has max
timestamp T. With `verify_index_only` only those notes are printed (and a one-line verdict).

Exit codes (the worst over all paths): 0 dumped (damage found inside a file is reported on
stdout, not an error); 1 a path that is not a segment file (missing, a directory, not named by a
20-digit base offset, unreadable); 2 an unknown suffix; 141 the reader of stdout went away (as a
process killed by SIGPIPE). Errors go to `err` (stderr).

Bounds: a file is read through one window of `chunk_bytes` (or one batch, if larger); batches
above `max_decoded_batch_bytes` print their header line, with the CRC computed chunk by chunk,
but not their records; compressed records inflate to at most 64 MiB per batch.

Concurrency: reads only; safe to run against the files of a live log (the active segment is
dumped up to its size when opened).
"""

from __future__ import annotations

import os
import struct
import sys
import zlib
from typing import Iterable, TextIO

from lakelog.infra.errors import LakelogError
from lakelog.logstore.compression import Compression
from lakelog.logstore.record_batch import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_OFFSET,
    NO_SEQUENCE,
    Record,
    RecordBatch,
    TimestampType,
)
from lakelog.logstore.dump_index import dump_offset_index, dump_time_index, dump_txn_index
from lakelog.logstore.dump_paths import (
    EXIT_BROKEN_PIPE,
    EXIT_NOT_A_SEGMENT,
    EXIT_OK,
    MAGIC_BYTE,
    MIN_V2_LENGTH,
    DumpPathError,
    FileWindow,
    SegmentFile,
    classify,
    open_segment,
)
from lakelog.logstore.segment import INDEX_SUFFIX, LOG_SUFFIX, TXN_INDEX_SUFFIX

#: Bytes read at a time from a file.
DEFAULT_CHUNK_BYTES = 1024 * 1024
#: Largest batch whose records are decoded; larger ones print their header line only.
DEFAULT_MAX_DECODED_BATCH_BYTES = 64 * 1024 * 1024

#: Magic 0 and 1 messages: offset int64, size int32, crc uint32 (CRC-32 of magic .. end), magic int8.
_LEGACY_CRC = struct.Struct(">I")
_LEGACY_CRC_OFFSET = 12
_LEGACY_MIN_SIZE = {0: 14, 1: 22}  # crc + magic + attributes (+ timestamp) + key and value lengths
#: Shortest length field any magic can have: what framing needs before it can read the magic.
_MIN_ANY_LENGTH = min(_LEGACY_MIN_SIZE.values())

_CONTROL_KEY = struct.Struct(">hh")  # version, type
_END_TXN_VALUE = struct.Struct(">hi")  # version, coordinator epoch
_CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER",
                  4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}
_END_TXN_TYPES = (0, 1)

_INT32_MAX = 0x7FFFFFFF

#: Keeps one record on one line: C0 controls, DEL, and what str.splitlines also splits on.
_ESCAPES = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F, 0x85] if c != 0x09}
_ESCAPES.update({0x0A: "\\n", 0x0D: "\\r", 0x2028: "\\u2028", 0x2029: "\\u2029"})

def dump_files(paths: Iterable[str | os.PathLike], *, print_data_log: bool, out: TextIO,
               verify_index_only: bool = False, err: TextIO | None = None,
               chunk_bytes: int = DEFAULT_CHUNK_BYTES,
               max_decoded_batch_bytes: int = DEFAULT_MAX_DECODED_BATCH_BYTES) -> int:
    """Dump each path to `out`; return the exit code (the worst over the paths).

    `verify_index_only` prints only the notes of index files (as Kafka's --verify-index-only);
    it does not change how `.log` files are dumped.
    """
    err = sys.stderr if err is None else err
    chunk_bytes = max(chunk_bytes, HEADER_SIZE)
    code = EXIT_OK
    try:
        for path in paths:
            try:
                seg = classify(path)
                out.write(f"Dumping {path}\n")
                if seg.suffix == LOG_SUFFIX:
                    _dump_log(seg, str(path), print_data_log, out, chunk_bytes, max_decoded_batch_bytes)
                elif seg.suffix == INDEX_SUFFIX:
                    dump_offset_index(seg, str(path), verify_index_only, out, chunk_bytes)
                elif seg.suffix == TXN_INDEX_SUFFIX:
                    dump_txn_index(seg, str(path), verify_index_only, out, chunk_bytes)
                else:
                    dump_time_index(seg, str(path), verify_index_only, out, chunk_bytes)
            except DumpPathError as e:
                out.flush()
                err.write(f"lakelog dump-log: {e}\n")
                code = max(code, e.exit_code)
            except OSError as e:
                if isinstance(e, BrokenPipeError):
                    raise
                out.flush()
                err.write(f"lakelog dump-log: {path}: cannot read: {e.strerror or e}\n")
                code = max(code, EXIT_NOT_A_SEGMENT)
        out.flush()
    except BrokenPipeError:
        # The reader (`| head`) has gone: stop quietly, and keep the interpreter's final flush
        # of stdout from failing again.
        if out is sys.stdout:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        return EXIT_BROKEN_PIPE
    return code


# ---------------------------------------------------------------------------------------------
# .log


def _dump_log(seg: SegmentFile, shown: str, print_data_log: bool, out: TextIO, chunk_bytes: int,
              max_decoded_batch_bytes: int) -> None:
    out.write(f"Log starting offset: {seg.base_offset}\n")
    fd, size = open_segment(seg)
    try:
        window = FileWindow(fd, size, chunk_bytes)
        pos = 0
        while pos < size:
            reason = _dump_one(window, pos, print_data_log, out, max_decoded_batch_bytes)
            if isinstance(reason, str):
                out.write(f"Found {size - pos} invalid bytes at the end of {shown}\n")
                out.write(f"  at position {pos}: {reason}\n")
                return
            pos += reason
    finally:
        os.close(fd)


def _dump_one(window: FileWindow, pos: int, print_data_log: bool, out: TextIO,
              max_decoded_batch_bytes: int) -> int | str:
    """Print the batch at `pos`; return its size, or why no batch can be framed there."""
    left = window.size - pos
    if left < LOG_OVERHEAD:
        return f"{left} bytes are too few for a batch's offset and length"
    head = window.get(pos, min(left, HEADER_SIZE))
    if len(head) < LOG_OVERHEAD:
        return "the file shrank while it was read"
    base_offset, length = struct.unpack_from(">qi", head, 0)
    size = length + LOG_OVERHEAD
    if length < _MIN_ANY_LENGTH:
        return f"batch length {length} is impossible"
    if size > left:
        return f"a batch of {size} bytes runs past the end of the file ({left} bytes left)"
    if len(head) <= MAGIC_OFFSET:
        return "the file shrank while it was read"
    (magic,) = MAGIC_BYTE.unpack_from(head, MAGIC_OFFSET)
    if magic != MAGIC:
        _print_other_magic(window, pos, base_offset, size, magic, out, max_decoded_batch_bytes)
        return size
    if length < MIN_V2_LENGTH:
        return f"batch length {length} is shorter than a magic 2 batch header"
    if size <= max_decoded_batch_bytes:
        buf = window.get(pos, size)
        if len(buf) < size:
            return "the file shrank while it was read"
        batch = RecordBatch(buf)
        valid = batch.is_valid()
    else:
        batch = RecordBatch(head)
        valid = window.crc32c(pos + ATTRIBUTES_OFFSET, pos + size) == batch.crc
    out.write(_batch_line(batch, pos, size, valid))
    if size > max_decoded_batch_bytes:
        out.write(f"| records not shown: the batch of {size} bytes is larger than the dump's limit "
                  f"of {max_decoded_batch_bytes} bytes\n")
        return size
    try:
        records = batch.records()
    except LakelogError as e:
        out.write(f"| records cannot be decoded: {e}\n")
        return size
    prefix = _record_prefix(batch)
    for record in records:
        out.write(_record_line(batch, pos, record, prefix, print_data_log))
    return size


def _print_other_magic(window: FileWindow, pos: int, offset: int, size: int, magic: int,
                       out: TextIO, max_decoded_batch_bytes: int) -> None:
    if magic not in _LEGACY_MIN_SIZE:
        out.write(f"offset: {offset} position: {pos} size: {size} magic: {magic} isvalid: false "
                  f"(unknown magic; not decoded)\n")
        return
    if size - LOG_OVERHEAD < _LEGACY_MIN_SIZE[magic]:
        valid_text = "false"
    elif size <= max_decoded_batch_bytes:
        buf = window.get(pos, size)
        valid = len(buf) == size and zlib.crc32(buf[MAGIC_OFFSET:]) == \
            _LEGACY_CRC.unpack_from(buf, _LEGACY_CRC_OFFSET)[0]
        valid_text = _bool(valid)
    else:
        valid_text = "unchecked"
    out.write(f"offset: {offset} position: {pos} size: {size} magic: {magic} isvalid: {valid_text} "
              f"(a magic {magic} message; only magic 2 batches are decoded)\n")


def _bool(flag: bool) -> str:
    return "true" if flag else "false"


def _codec_name(codec: int) -> str:
    try:
        return Compression(codec).name
    except ValueError:
        return f"UNKNOWN({codec})"


def _add_sequence(base_sequence: int, delta: int) -> int:
    """Kafka's sequence arithmetic: -1 stays -1, and sequences wrap from 2^31 - 1 to 0."""
    if base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return (base_sequence + delta) % (_INT32_MAX + 1)


def _batch_line(batch: RecordBatch, pos: int, size: int, valid: bool) -> str:
    horizon = batch.delete_horizon_ms
    horizon_text = "OptionalLong.empty" if horizon is None else f"OptionalLong[{horizon}]"
    return (f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} count: {batch.record_count} "
            f"baseSequence: {batch.base_sequence} "
            f"lastSequence: {_add_sequence(batch.base_sequence, batch.last_offset_delta)} "
            f"producerId: {batch.producer_id} producerEpoch: {batch.producer_epoch} "
            f"partitionLeaderEpoch: {batch.partition_leader_epoch} "
            f"isTransactional: {_bool(batch.is_transactional)} isControl: {_bool(batch.is_control)} "
            f"deleteHorizonMs: {horizon_text} position: {pos} "
            f"{batch.timestamp_type.label}: {batch.max_timestamp} size: {size} magic: {batch.magic} "
            f"compresscodec: {_codec_name(batch.compression)} crc: {batch.crc} isvalid: {_bool(valid)}\n")


def _record_prefix(batch: RecordBatch) -> str:
    """The part of a record line that is the same for every record of the batch."""
    return (f" magic: {batch.magic} compresscodec: {_codec_name(batch.compression)} "
            f"producerId: {batch.producer_id} producerEpoch: {batch.producer_epoch} sequence: ")


def _record_line(batch: RecordBatch, pos: int, record: Record, prefix: str, print_data_log: bool) -> str:
    if batch.timestamp_type == TimestampType.LOG_APPEND_TIME:
        timestamp = batch.max_timestamp
    else:
        timestamp = record.timestamp
    key_size = -1 if record.key is None else len(record.key)
    value_size = -1 if record.value is None else len(record.value)
    sequence = _add_sequence(batch.base_sequence, record.offset - batch.base_offset)
    parts = [f"| offset: {record.offset} position: {pos} "
             f"{batch.timestamp_type.label}: {timestamp} keysize: {key_size} valuesize: {value_size}",
             prefix, str(sequence), f" isTransactional: {_bool(batch.is_transactional)} headerKeys: [",
             ",".join(k for k, _ in record.headers), "]"]
    if batch.is_control:
        parts.append(_control_text(record))
    elif print_data_log:
        if record.key is not None:
            parts.append(f" key: {_text(record.key)}")
        if record.value is not None:
            parts.append(f" payload: {_text(record.value)}")
    parts.append("\n")
    return "".join(parts)


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="backslashreplace").translate(_ESCAPES)


def _control_text(record: Record) -> str:
    key = record.key or b""
    if len(key) < _CONTROL_KEY.size:
        return f" controlType: UNKNOWN (control record key of {len(key)} bytes)"
    _, type_id = _CONTROL_KEY.unpack_from(key, 0)
    name = _CONTROL_TYPES.get(type_id, "UNKNOWN")
    if type_id not in _END_TXN_TYPES:
        return f" controlType: {name}({type_id})"
    value = record.value or b""
    if len(value) < _END_TXN_VALUE.size:
        return f" endTxnMarker: {name} coordinatorEpoch: ? (marker value of {len(value)} bytes)"
    _, coordinator_epoch = _END_TXN_VALUE.unpack_from(value, 0)
    return f" endTxnMarker: {name} coordinatorEpoch: {coordinator_epoch}"
