"""Idempotent and transactional producer state of one partition, and its `<offset>.snapshot` files.

Snapshot file `<20-digit offset>.snapshot` (Kafka's name) in the partition directory; all integers
big-endian:

    offset  size  field
    0       4     magic             b"LKPS"
    4       2     version           int16   = 2 (version 1, without the two transaction fields of
                                        an entry, is still read; any other is refused)
    6       4     crc               uint32  CRC-32C of bytes 10 .. end of file
    10      8     snapshot offset   int64   the state covers every batch below it; = the name
    18      4     producer count    int32
    22      ...   producer entries, in eviction order (least recently written first):

        0       8     producer id        int64   >= 0
        8       2     producer epoch     int16
        10      8     last offset        int64   last offset of the producer's last batch
        18      8     last timestamp     int64   max timestamp of that batch (what expiry measures)
        26      8     current txn first  int64   first offset of its open transaction, -1 if none
        34      4     coordinator epoch  int32   of the last marker written for it, -1 if none
        38      1     batch count        uint8   0 .. 5
        39      ...   batch count x 28 bytes, oldest first:
                          0   4  first sequence     int32
                          4   4  last sequence      int32
                          8   8  first offset       int64
                          16  4  last offset delta  int32  (last offset = first offset + delta)
                          20  8  max timestamp      int64

The file must end exactly after the last entry. Written crash-safely (temp file, fsync, rename,
fsync the directory): after a crash a snapshot is whole or absent. A snapshot whose magic, CRC,
framing or name does not check out is corrupt: the loader deletes it and falls back to the next
older one (the log is replayed from there). A snapshot of another version is refused with
UnsupportedFormatVersionError rather than guessed at or silently thrown away (as the
clean-shutdown marker is).

Rules (Kafka's `ProducerStateManager` / `ProducerAppendInfo`, 3.x, for a client's data batch with
producer id >= 0; batches with producer id -1 are not tracked):
  * a producer epoch below the known one -> InvalidProducerEpochError (a fenced producer);
  * a duplicate — same epoch, and (first sequence, last sequence) equal to one of the producer's
    last 5 batches — appends nothing and is answered with that batch's original offsets;
  * a higher epoch starts a new sequence: first sequence 0, else OutOfOrderSequenceError (and the
    cached batches are dropped);
  * the same epoch continues the sequence: first sequence = last sequence + 1, wrapping from
    2^31 - 1 to 0, else OutOfOrderSequenceError;
  * an unknown producer id (never seen, expired, or evicted) is accepted with any epoch and
    sequence (KIP-360, Kafka >= 2.5): the broker cannot tell a new producer from one whose state
    was dropped, so it does not raise UNKNOWN_PRODUCER_ID;
  * a producer batch needs epoch >= 0 and base sequence >= 0 (Kafka's LogValidator);
  * a request whose batches are all duplicates is answered with their original offsets; a request
    mixing duplicates with new batches is refused (MixedDuplicateBatchesError) — a Kafka client
    sends one batch per partition, and a half-appended request has no single answer.
  * a transactional batch (attribute bit 4) opens a transaction for its producer unless one is
    open (its first offset is the transaction's); a non-transactional batch of a producer whose
    transaction is open -> InvalidTxnStateError (Kafka's INVALID_TXN_STATE);
  * a COMMIT / ABORT marker (control_record.py) with an epoch below the producer's ->
    InvalidProducerEpochError, with a coordinator epoch below the last marker's ->
    TransactionCoordinatorFencedError; it closes the producer's open transaction, if any, and
    answers it as a `CompletedTxn`.
Followers and recovery apply batches without these checks (the leader checked them); a control
batch updates its producer's epoch, last offset and coordinator epoch, and closes its transaction.

Transactions and the last stable offset (Kafka's ongoing / unreplicated transactions): an open
transaction is "ongoing" from its first offset; once its marker lands it is "unreplicated" until
the high watermark passes the marker (`on_high_watermark`): until then a read_committed reader
below the HW could not yet see whether it committed. `first_unstable_offset` is the first offset
of the earliest ongoing or unreplicated transaction; the log's LSO is min(it, HW). Ongoing
transactions live in the producer entries, so snapshots carry them and recovery rebuilds them;
unreplicated ones are rebuilt by the replay above the snapshot. A producer with an open
transaction is neither expired nor evicted (unless every tracked producer has one).

Bounds: at most `max_producer_ids` producers are tracked; a new one beyond that evicts the least
recently written producer (the order is the log's, so every replica evicts the same one) and that
producer then counts as unknown. Producers whose last timestamp is `producer_id_expiration_ms` or
more older than now are dropped by `remove_expired` (Kafka's `producer.id.expiration.ms`), which
the partition log calls before each snapshot.

Invariants: at most 5 batches per producer, oldest first, offsets increasing; an ongoing
transaction's first offset is at most its producer's last offset; producers are
ordered by their last write (ascending last offset), which is the eviction order and the order of
a snapshot's entries. Concurrency: not thread-safe; the owning partition log serialises every
call under its lock.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Iterable, Mapping, Sequence

from lakelog.infra.config import ConfigError
from lakelog.infra.errors import invariant
from lakelog.logstore.control_record import EndTransactionMarker, batch_marker
from lakelog.logstore.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    MixedDuplicateBatchesError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
    UnsupportedFormatVersionError,
)
from lakelog.logstore.fileutil import atomic_write, fsync_dir
from lakelog.logstore.record_batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, RecordBatch, crc32c

#: Batches remembered per producer for duplicate detection (Kafka's NUM_BATCHES_TO_RETAIN).
NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_MAGIC = b"LKPS"
SNAPSHOT_VERSION = 2
#: The version before the transaction fields; still read.
SNAPSHOT_VERSION_1 = 1
NO_TXN = -1
NO_COORDINATOR_EPOCH = -1
INT32_MAX = 2**31 - 1

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
DEFAULT_MAX_PRODUCER_IDS = 10_000
#: Two roll snapshots survive a clean-close snapshot, so a truncation into the previous segment
#: still starts from a snapshot.
DEFAULT_SNAPSHOTS_TO_KEEP = 3

_MAGIC_VERSION = struct.Struct(">4sh")
_HEADER = struct.Struct(">4shIqi")
_ENTRY = struct.Struct(">qhqqqiB")
_ENTRY_V1 = struct.Struct(">qhqqB")
_BATCH = struct.Struct(">iiqiq")
assert _MAGIC_VERSION.size == 6 and _HEADER.size == 22 and _ENTRY.size == 39 and _ENTRY_V1.size == 27
assert _BATCH.size == 28
_CRC_START = 10


def increment_sequence(sequence: int, increment: int) -> int:
    """`sequence + increment` in int32 sequence space: past 2^31 - 1 it wraps to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def in_sequence(last_sequence: int, next_sequence: int) -> bool:
    """Whether `next_sequence` directly follows `last_sequence` (with the wrap to 0)."""
    return next_sequence == last_sequence + 1 or (next_sequence == 0 and last_sequence == INT32_MAX)


def snapshot_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def parse_snapshot_offset(name: str) -> int | None:
    stem = name[:-len(SNAPSHOT_SUFFIX)] if name.endswith(SNAPSHOT_SUFFIX) else ""
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """One appended batch of a producer: its sequence range and where the log put it."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    """What the partition knows of one producer id. Immutable: an update builds a new entry."""

    producer_id: int
    producer_epoch: int
    last_offset: int
    last_timestamp: int
    batches: tuple[BatchMetadata, ...] = ()  # oldest first, at most NUM_BATCHES_TO_RETAIN
    current_txn_first_offset: int = NO_TXN  # first offset of the open transaction, -1 if none
    coordinator_epoch: int = NO_COORDINATOR_EPOCH  # of the last marker written for this producer

    @property
    def in_transaction(self) -> bool:
        return self.current_txn_first_offset >= 0

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_batch(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for meta in self.batches:
            if meta.first_seq == first_seq and meta.last_seq == last_seq:
                return meta
        return None


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker closed: its producer, first offset, the marker's offset, the outcome."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(frozen=True, slots=True)
class ProducerSnapshot:
    """The decoded content of one snapshot file."""

    offset: int
    producers: tuple[ProducerStateEntry, ...]


# ---------------------------------------------------------------------------------------------
# Codec (pure)


def encode_snapshot(snapshot: ProducerSnapshot) -> bytes:
    parts = [b""]
    for e in snapshot.producers:
        invariant(len(e.batches) <= NUM_BATCHES_TO_RETAIN, f"producer {e.producer_id} holds {len(e.batches)} batches")
        parts.append(_ENTRY.pack(e.producer_id, e.producer_epoch, e.last_offset, e.last_timestamp,
                                 e.current_txn_first_offset, e.coordinator_epoch, len(e.batches)))
        for b in e.batches:
            parts.append(_BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset - b.first_offset,
                                     b.max_timestamp))
    body = struct.pack(">qi", snapshot.offset, len(snapshot.producers)) + b"".join(parts)
    return _MAGIC_VERSION.pack(SNAPSHOT_MAGIC, SNAPSHOT_VERSION) + struct.pack(">I", crc32c(body)) + body


def decode_snapshot(buf: bytes | memoryview, *, file: str | None = None) -> ProducerSnapshot:
    """Decode a snapshot; CorruptRecordError (naming file and position) on any damage,
    UnsupportedFormatVersionError on another version."""
    if len(buf) < _MAGIC_VERSION.size:
        raise CorruptRecordError(f"producer snapshot of {len(buf)} bytes is shorter than its header", file=file)
    magic, version = _MAGIC_VERSION.unpack_from(buf, 0)
    if magic != SNAPSHOT_MAGIC:
        raise CorruptRecordError(f"producer snapshot has magic {magic!r}, expected {SNAPSHOT_MAGIC!r}",
                                 file=file, position=0)
    if version not in (SNAPSHOT_VERSION, SNAPSHOT_VERSION_1):
        raise UnsupportedFormatVersionError(f"producer snapshot {file or ''} has version {version}, "
                                            f"this code reads version {SNAPSHOT_VERSION}")
    if len(buf) < _HEADER.size:
        raise CorruptRecordError(f"producer snapshot of {len(buf)} bytes is shorter than its header", file=file)
    _, _, crc, offset, count = _HEADER.unpack_from(buf, 0)
    actual = crc32c(memoryview(buf)[_CRC_START:])
    if actual != crc:
        raise CorruptRecordError(f"producer snapshot CRC-32C is {actual:#010x}, header says {crc:#010x}",
                                 file=file, position=6)
    if offset < 0 or count < 0:
        raise CorruptRecordError(f"producer snapshot has offset {offset} and count {count}", file=file, position=10)
    pos = _HEADER.size
    producers: list[ProducerStateEntry] = []
    seen: set[int] = set()
    entry_format = _ENTRY if version == SNAPSHOT_VERSION else _ENTRY_V1
    for i in range(count):
        if pos + entry_format.size > len(buf):
            raise CorruptRecordError(f"producer entry {i} of {count} runs past the end", file=file, position=pos)
        if version == SNAPSHOT_VERSION:
            pid, epoch, last_offset, last_ts, txn_first, coordinator_epoch, n = _ENTRY.unpack_from(buf, pos)
        else:
            pid, epoch, last_offset, last_ts, n = _ENTRY_V1.unpack_from(buf, pos)
            txn_first, coordinator_epoch = NO_TXN, NO_COORDINATOR_EPOCH
        if pid < 0 or pid in seen or n > NUM_BATCHES_TO_RETAIN or txn_first < NO_TXN or txn_first > last_offset:
            raise CorruptRecordError(f"producer entry {i} (producer id {pid}, {n} batches, transaction from "
                                     f"{txn_first}) is invalid", file=file, position=pos)
        pos += entry_format.size
        if pos + n * _BATCH.size > len(buf):
            raise CorruptRecordError(f"batches of producer entry {i} run past the end", file=file, position=pos)
        batches = []
        for _ in range(n):
            first_seq, last_seq, first_offset, delta, max_ts = _BATCH.unpack_from(buf, pos)
            batches.append(BatchMetadata(first_seq, last_seq, first_offset, first_offset + delta, max_ts))
            pos += _BATCH.size
        seen.add(pid)
        producers.append(ProducerStateEntry(pid, epoch, last_offset, last_ts, tuple(batches), txn_first,
                                            coordinator_epoch))
    if pos != len(buf):
        raise CorruptRecordError(f"{len(buf) - pos} bytes follow the last producer entry", file=file, position=pos)
    return ProducerSnapshot(offset, tuple(producers))


# ---------------------------------------------------------------------------------------------
# The state


@dataclass(frozen=True, slots=True)
class SnapshotLoad:
    """What `load_latest_snapshot` did."""

    offset: int | None  # the snapshot the state now comes from; None: no usable snapshot, state empty
    removed: tuple[str, ...]  # corrupt snapshot files deleted on the way


class ProducerStateManager:
    """Per-producer epoch, last 5 batches and last offset of one partition, plus its snapshots."""

    def __init__(self, directory: str | os.PathLike, *,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
                 max_producer_ids: int = DEFAULT_MAX_PRODUCER_IDS,
                 snapshots_to_keep: int = DEFAULT_SNAPSHOTS_TO_KEEP) -> None:
        if producer_id_expiration_ms < 1:
            raise ConfigError(f"producer.id.expiration.ms must be at least 1, got {producer_id_expiration_ms}")
        if max_producer_ids < 1:
            raise ConfigError(f"max producer ids per partition must be at least 1, got {max_producer_ids}")
        if snapshots_to_keep < 1:
            raise ConfigError(f"producer snapshots to keep must be at least 1, got {snapshots_to_keep}")
        self.directory = Path(directory)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.max_producer_ids = max_producer_ids
        self.snapshots_to_keep = snapshots_to_keep
        # Insertion order = order of each producer's last write: the first key is evicted first.
        self._producers: dict[int, ProducerStateEntry] = {}
        self.evicted = 0  # producers dropped by the max_producer_ids bound since construction
        # Transactions whose marker landed but lies at or above the HW, in marker order.
        self._unreplicated: list[CompletedTxn] = []
        # Producer id -> first offset of its open transaction (kept in step with the entries, so
        # the LSO costs the open transactions, not every producer, on each fetch).
        self._ongoing: dict[int, int] = {}

    # ------------------------------------------------------------------ queries

    def __len__(self) -> int:
        return len(self._producers)

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    @property
    def producers(self) -> Mapping[int, ProducerStateEntry]:
        """A read-only live view (entries are immutable); use under the owner's lock."""
        return MappingProxyType(self._producers)

    def copy(self) -> dict[int, ProducerStateEntry]:
        return dict(self._producers)

    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of each open transaction."""
        return dict(self._ongoing)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the earliest ongoing or unreplicated transaction, None if none."""
        firsts = list(self._ongoing.values()) + [t.first_offset for t in self._unreplicated]
        return min(firsts) if firsts else None

    def last_stable_offset_of(self, completed: CompletedTxn) -> int:
        """The LSO right after `completed` closed (what its `.txnindex` entry records): the first
        offset of the earliest transaction still ongoing, else the marker's offset + 1."""
        return min(self._ongoing.values()) if self._ongoing else completed.last_offset + 1

    def on_high_watermark(self, high_watermark: int) -> None:
        """The HW moved: transactions whose marker lies below it are stable."""
        if self._unreplicated and self._unreplicated[0].last_offset < high_watermark:
            self._unreplicated = [t for t in self._unreplicated if t.last_offset >= high_watermark]

    # ------------------------------------------------------------------ the leader's checks

    def check_leader_append(self, batches: Sequence[RecordBatch]) -> tuple[BatchMetadata, ...] | None:
        """Check a client's request against the state, changing nothing.

        Returns None when every producer batch may be appended, or the original metadata of each
        batch when all of them are duplicates. Raises InvalidProducerEpochError,
        OutOfOrderSequenceError, MixedDuplicateBatchesError or InvalidRecordError.
        """
        pending: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last seq) after this request
        pending_txn: dict[int, bool] = {}  # producer id -> in a transaction after this request
        duplicates: list[BatchMetadata] = []
        fresh = 0
        for batch in batches:
            pid = batch.producer_id
            if pid < 0:
                fresh += 1
                continue
            epoch, first_seq = batch.producer_epoch, batch.base_sequence
            if epoch < 0 or first_seq < 0:
                raise InvalidRecordError(f"batch of producer {pid} has epoch {epoch} and base sequence "
                                         f"{first_seq}; an idempotent batch needs both >= 0")
            last_seq = increment_sequence(first_seq, batch.last_offset_delta)
            current = self._producers.get(pid)
            if current is not None and current.producer_epoch == epoch:
                dup = current.find_batch(first_seq, last_seq)
                if dup is not None:
                    duplicates.append(dup)
                    continue
            fresh += 1
            if pid in pending:
                known_epoch, known_last = pending[pid]
            elif current is not None:
                known_epoch, known_last = current.producer_epoch, current.last_seq
            else:
                known_epoch, known_last = NO_PRODUCER_EPOCH, NO_SEQUENCE
            if epoch < known_epoch:
                raise InvalidProducerEpochError(f"producer {pid} has epoch {epoch}, below the partition's "
                                                f"epoch {known_epoch} for it: fenced by a newer producer")
            if epoch != known_epoch:
                if first_seq != 0 and known_epoch != NO_PRODUCER_EPOCH:
                    raise OutOfOrderSequenceError(f"producer {pid} starts epoch {epoch} at sequence {first_seq}; "
                                                  f"a new epoch starts at 0")
            elif not in_sequence(known_last, first_seq):
                raise OutOfOrderSequenceError(f"producer {pid} epoch {epoch} sent sequence {first_seq}, "
                                              f"expected {increment_sequence(known_last, 1)}")
            in_txn = pending_txn.get(pid, current is not None and current.in_transaction)
            if in_txn and not batch.is_transactional:
                raise InvalidTxnStateError(f"producer {pid} sent a non-transactional batch while its transaction "
                                           f"is open")
            pending_txn[pid] = in_txn or batch.is_transactional
            pending[pid] = (epoch, last_seq)
        if not duplicates:
            return None
        if fresh:
            raise MixedDuplicateBatchesError(f"the request holds {len(duplicates)} batch(es) already appended and "
                                             f"{fresh} new one(s); send the new ones on their own")
        return tuple(duplicates)

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Check a COMMIT / ABORT marker the leader is about to write, changing nothing.

        Raises InvalidProducerEpochError for an epoch below the producer's (a marker of a fenced
        producer) and TransactionCoordinatorFencedError for a coordinator epoch below the last
        marker's (a stale coordinator)."""
        current = self._producers.get(producer_id)
        if current is None:
            return
        if producer_epoch < current.producer_epoch:
            raise InvalidProducerEpochError(f"marker for producer {producer_id} has epoch {producer_epoch}, below "
                                            f"the partition's epoch {current.producer_epoch} for it")
        if coordinator_epoch < current.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"marker for producer {producer_id} comes from coordinator epoch {coordinator_epoch}, below "
                f"{current.coordinator_epoch} of its last marker")

    # ------------------------------------------------------------------ updates

    def apply(self, producer_id: int, producer_epoch: int, base_sequence: int, first_offset: int,
              last_offset_delta: int, max_timestamp: int, *, is_control: bool = False,
              is_transactional: bool = False) -> None:
        """Record an appended data batch, unchecked (the leader after its checks, a follower,
        recovery). A control batch goes to `apply_marker`; here it only moves the epoch and last
        offset (a control record of another type than COMMIT / ABORT)."""
        old = self._take(producer_id)
        if old is None:
            batches: tuple[BatchMetadata, ...] = ()
            txn_first, coordinator_epoch = NO_TXN, NO_COORDINATOR_EPOCH
        else:
            # A new epoch starts a new sequence: the old epoch's batches can no longer be duplicates.
            batches = old.batches if old.producer_epoch == producer_epoch else ()
            txn_first, coordinator_epoch = old.current_txn_first_offset, old.coordinator_epoch
        last_offset = first_offset + last_offset_delta
        if not is_control:
            last_seq = increment_sequence(base_sequence, last_offset_delta) if base_sequence >= 0 else NO_SEQUENCE
            meta = BatchMetadata(base_sequence, last_seq, first_offset, last_offset, max_timestamp)
            batches = (batches + (meta,))[-NUM_BATCHES_TO_RETAIN:]
            if is_transactional and txn_first == NO_TXN:
                txn_first = first_offset
        self._producers[producer_id] = ProducerStateEntry(producer_id, producer_epoch, last_offset,
                                                          max_timestamp, batches, txn_first, coordinator_epoch)
        if txn_first != NO_TXN:
            self._ongoing[producer_id] = txn_first

    def apply_marker(self, producer_id: int, producer_epoch: int, offset: int, marker: EndTransactionMarker,
                     max_timestamp: int) -> CompletedTxn | None:
        """Record a COMMIT / ABORT marker at `offset`, unchecked; returns the transaction it
        closed (now unreplicated until the HW passes `offset`), None when none was open."""
        old = self._take(producer_id)
        batches = () if old is None or old.producer_epoch != producer_epoch else old.batches
        completed = None
        if old is not None and old.in_transaction:
            completed = CompletedTxn(producer_id, old.current_txn_first_offset, offset, not marker.commit)
            self._unreplicated.append(completed)
        self._producers[producer_id] = ProducerStateEntry(producer_id, producer_epoch, offset, max_timestamp,
                                                          batches, NO_TXN, marker.coordinator_epoch)
        self._ongoing.pop(producer_id, None)
        return completed

    def apply_batch(self, batch: RecordBatch) -> CompletedTxn | None:
        """Record a stored batch (its header carries the offsets); ignores producer id -1.
        A control batch's marker is decoded from its record; returns the transaction it closed."""
        if batch.producer_id < 0:
            return None
        if batch.is_control:
            marker = batch_marker(batch)
            if marker is not None:
                return self.apply_marker(batch.producer_id, batch.producer_epoch, batch.base_offset, marker,
                                         batch.max_timestamp)
        self.apply(batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.base_offset,
                   batch.last_offset_delta, batch.max_timestamp, is_control=batch.is_control,
                   is_transactional=batch.is_transactional)
        return None

    def clear(self) -> None:
        self._producers.clear()
        self._unreplicated = []
        self._ongoing.clear()

    def remove_expired(self, now_ms: int) -> list[int]:
        """Drop producers whose last timestamp is at least `producer_id_expiration_ms` old, unless
        their transaction is open (the coordinator aborts it; the marker must find it)."""
        limit = now_ms - self.producer_id_expiration_ms
        doomed = [pid for pid, e in self._producers.items() if e.last_timestamp <= limit and not e.in_transaction]
        for pid in doomed:
            del self._producers[pid]
        return doomed

    def _take(self, producer_id: int) -> ProducerStateEntry | None:
        """Remove and return a producer's entry (it is re-inserted as the most recent); a new one
        makes room under `max_producer_ids` first."""
        old = self._producers.pop(producer_id, None)
        if old is None:
            self._make_room()
        return old

    def _make_room(self) -> None:
        """Evict the least recently written producers without an open transaction (any, if all
        have one) until one more fits."""
        while len(self._producers) >= self.max_producer_ids:
            victim = next((pid for pid, e in self._producers.items() if not e.in_transaction),
                          next(iter(self._producers)))
            del self._producers[victim]
            self._ongoing.pop(victim, None)
            self.evicted += 1

    def _replace(self, producers: Iterable[ProducerStateEntry]) -> None:
        self._producers.clear()
        self._unreplicated = []
        self._ongoing.clear()
        for e in producers:
            self._producers.pop(e.producer_id, None)
            self._make_room()
            self._producers[e.producer_id] = e
        self._ongoing = {pid: e.current_txn_first_offset for pid, e in self._producers.items() if e.in_transaction}

    # ------------------------------------------------------------------ snapshots

    def snapshot_path(self, offset: int) -> Path:
        return self.directory / snapshot_name(offset)

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the snapshot files present, ascending."""
        return sorted(o for p in self.directory.iterdir() if (o := parse_snapshot_offset(p.name)) is not None)

    def take_snapshot(self, offset: int) -> Path:
        """Write the current state as of `offset` (crash-safe) and keep only the newest snapshots."""
        path = self.snapshot_path(offset)
        atomic_write(path, encode_snapshot(ProducerSnapshot(offset, tuple(self._producers.values()))))
        offsets = self.snapshot_offsets()
        # No directory fsync: an old snapshot that reappears after a crash is pruned next time
        # and is never preferred to the newer one just written.
        self._delete(offsets[:-self.snapshots_to_keep], durable=False)
        return path

    def load_latest_snapshot(self, max_offset: int) -> SnapshotLoad:
        """Replace the state with the newest readable snapshot at or below `max_offset`.

        Corrupt snapshots met on the way are deleted. With none left the state is empty.
        UnsupportedFormatVersionError propagates: a snapshot of another version is not guessed at.
        """
        removed: list[str] = []
        for offset in reversed([o for o in self.snapshot_offsets() if o <= max_offset]):
            path = self.snapshot_path(offset)
            try:
                snap = decode_snapshot(path.read_bytes(), file=str(path))
                if snap.offset != offset:
                    raise CorruptRecordError(f"producer snapshot holds offset {snap.offset}, its name says "
                                             f"{offset}", file=str(path), position=10)
            except CorruptRecordError:
                path.unlink(missing_ok=True)
                removed.append(path.name)
                continue
            self._replace(snap.producers)
            if removed:
                fsync_dir(self.directory)
            return SnapshotLoad(offset, tuple(removed))
        self.clear()
        if removed:
            fsync_dir(self.directory)
        return SnapshotLoad(None, tuple(removed))

    def delete_snapshots_above(self, offset: int) -> list[int]:
        """Delete snapshots of offsets > `offset` (the log is being truncated to it)."""
        return self._delete([o for o in self.snapshot_offsets() if o > offset])

    def delete_snapshots_below(self, offset: int) -> list[int]:
        """Delete snapshots of offsets < `offset` (the log start offset moved to it)."""
        return self._delete([o for o in self.snapshot_offsets() if o < offset])

    def delete_all_snapshots(self) -> list[int]:
        return self._delete(self.snapshot_offsets())

    def _delete(self, offsets: list[int], *, durable: bool = True) -> list[int]:
        for o in offsets:
            self.snapshot_path(o).unlink(missing_ok=True)
        if offsets and durable:
            fsync_dir(self.directory)
        return offsets

    def __repr__(self) -> str:
        return f"ProducerStateManager({self.directory}, producers={len(self._producers)})"
