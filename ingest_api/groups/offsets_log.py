"""The committed offsets as records of the `__consumer_offsets` partitions this node coordinates:
appending commits and tombstones (acks=all), transactional commits, and reading a partition back.

Commits: appended as one batch (key = group/topic/partition, value = offset, metadata, commit
timestamp; see offsets_codec.py) with acks=all to the coordinator partition, and put in the
coordinator's cache only once the append is acknowledged — so a commit that was answered survives
the coordinator's node (it is on every in-sync replica). The cache keeps, per (group, partition),
the log offset of the commit it holds: a later record wins, whichever path (append, marker, load)
brings it.

Transactional commits (TxnOffsetCommit) are a transactional batch of the producer, pending in the
coordinator until the transaction's COMMIT / ABORT marker lands in the partition (`complete_txn`).
Offsets of empty groups older than `offsets.retention.minutes` get tombstones (`expire`) the local
cleaner compacts away.

Loading (`read`, on a thread; `replay`, on the event loop): every decided offset record in log
order, and the transactional commits still open at the log end.

Concurrency: everything runs on the server's event loop except `read`.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from lakelog.ingest_api.errors import LeaderNotAvailableError, NodeError, NotLeaderOrFollowerError
from lakelog.ingest_api.groups.assignors import TopicPartition
from lakelog.ingest_api.groups.coordinator import GroupCoordinator
from lakelog.ingest_api.groups.errors import NotCoordinatorError
from lakelog.ingest_api.groups.hashing import OFFSETS_TOPIC, coordinator_partition
from lakelog.ingest_api.groups.offsets_codec import (
    CommittedOffset,
    OffsetKey,
    OffsetsRecordError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from lakelog.ingest_api.replication.coordinator_partitions import CoordinatorPartitions, read_log_batches
from lakelog.ingest_api.replication.partition import monotonic_ms, now_ms
from lakelog.logstore.producer_state import increment_sequence
from lakelog.logstore.record_batch import NO_SEQUENCE, Record, build_batch

log = logging.getLogger("lakelog.groups")

#: Control record types (the int16 after the control key's version): Kafka's ABORT and COMMIT.
CONTROL_ABORT, CONTROL_COMMIT = 0, 1

#: What a load reads: the decided offset records (log offset, key, value or None for a tombstone)
#: in log order, and the open transactional commits by producer id.
OffsetsRead = tuple[list[tuple[int, OffsetKey, CommittedOffset | None]],
                    dict[int, list[tuple[int, OffsetKey, CommittedOffset]]]]


class OffsetsLog:
    def __init__(self, node: Any, coordinator: GroupCoordinator, hosting: CoordinatorPartitions) -> None:
        """`node`: `produce_batches` and `partition`; `hosting`: which partitions are loaded here."""
        self.node = node
        self.coordinator = coordinator
        self.hosting = hosting
        #: (group, topic-partition) -> log offset of the commit in the cache (later commits win).
        self._commit_positions: dict[tuple[str, TopicPartition], int] = {}
        #: __consumer_offsets partition -> the lock that orders its transactional commit batches.
        self._txn_locks: dict[int, asyncio.Lock] = {}

    async def append(self, p: int, entries: list[tuple[OffsetKey, CommittedOffset | None]], now: int) -> None:
        """Append commits (or tombstones) with acks=all, then put them in the cache. `now`: the wall
        clock, the records' timestamp."""
        batch = build_batch([Record(i, now, encode_key(k), encode_value(v) if v is not None else None)
                             for i, (k, v) in enumerate(entries)])
        try:
            info = await self.node.produce_batches(OFFSETS_TOPIC, p, batch, "all")
        except (NotLeaderOrFollowerError, LeaderNotAvailableError) as e:
            raise NotCoordinatorError(f"the coordinator of {OFFSETS_TOPIC}-{p} moved: {e}") from None
        if not self.hosting.is_loaded(p):
            return  # leadership moved meanwhile: the new coordinator reads the commit from the log
        for i, (k, v) in enumerate(entries):
            tp, pos = TopicPartition(k.topic, k.partition), info.first_offset + i
            if self._commit_positions.get((k.group, tp), -1) < pos:
                self._commit_positions[(k.group, tp)] = pos
                self.coordinator.apply_offset(k.group, tp, v, monotonic_ms())

    async def append_txn(self, p: int, group: str, producer_id: int, producer_epoch: int,
                         parsed: list[tuple[OffsetKey, CommittedOffset]], now: int) -> None:
        """Append a producer's commits as its transactional batch (acks=all; the partition's producer
        state fences an older epoch); they stay pending in the cache until `complete_txn`."""
        pid, epoch = producer_id, producer_epoch
        lock = self._txn_locks.setdefault(p, asyncio.Lock())
        async with lock:  # one transactional batch at a time per partition: sequences follow the log
            part = self.node.partition(OFFSETS_TOPIC, p)
            known = part.log.producer_state.get(pid)
            seq = (increment_sequence(known.last_seq, 1)
                   if known is not None and known.producer_epoch == epoch and known.last_seq != NO_SEQUENCE else 0)
            batch = build_batch([Record(i, now, encode_key(k), encode_value(v)) for i, (k, v) in enumerate(parsed)],
                                producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=True)
            try:
                info = await self.node.produce_batches(OFFSETS_TOPIC, p, batch, "all")
            except (NotLeaderOrFollowerError, LeaderNotAvailableError) as e:
                raise NotCoordinatorError(f"the coordinator of {OFFSETS_TOPIC}-{p} moved: {e}") from None
        if self.hosting.is_loaded(p):
            for i, (k, v) in enumerate(parsed):
                self.coordinator.apply_txn_offset(pid, group, TopicPartition(k.topic, k.partition),
                                                  info.first_offset + i, v)

    def complete_txn(self, p: int, producer_id: int, commit: bool) -> None:
        """The producer's COMMIT / ABORT marker is in partition `p` (appended here, the leader, with
        acks=all): its pending commits of p's groups are decided."""
        if not self.hosting.is_loaded(p):
            return  # a coordinator loading p reads the marker from the log
        n = self.hosting.num_partitions()
        now = monotonic_ms()
        for group, tp, pos, value in self.coordinator.complete_txn(
                producer_id, commit, lambda g: coordinator_partition(g, n) == p):
            if self._commit_positions.get((group, tp), -1) < pos:
                self._commit_positions[(group, tp)] = pos
                self.coordinator.apply_offset(group, tp, value, now)

    async def expire(self) -> None:
        """Tombstones for the committed offsets of empty groups past their retention."""
        n = self.hosting.num_partitions()
        by_partition: dict[int, list[tuple[OffsetKey, None]]] = {}
        for group, tp in self.coordinator.expired_offsets(monotonic_ms(), wall_ms=now_ms()):
            p = coordinator_partition(group, n)
            if self.hosting.is_loaded(p):
                by_partition.setdefault(p, []).append((OffsetKey(group, tp.topic, tp.partition), None))
        for p, entries in by_partition.items():
            try:
                await self.append(p, entries, now_ms())  # type: ignore[arg-type]
                log.info("%s-%d: expired %d committed offsets of empty groups", OFFSETS_TOPIC, p, len(entries))
            except NodeError as e:
                log.info("%s-%d: expiring offsets failed (retried later): %s", OFFSETS_TOPIC, p, e)

    def replay(self, loaded: OffsetsRead) -> int:
        """Put what `read` found in the cache (the groups of its partition already forgotten);
        returns how many decided records it held."""
        entries, open_txns = loaded
        now = monotonic_ms()
        for log_offset, key, value in entries:
            tp = TopicPartition(key.topic, key.partition)
            self.coordinator.apply_offset(key.group, tp, value, now)
            self._commit_positions[(key.group, tp)] = log_offset
        for pid, commits in open_txns.items():
            for log_offset, key, value in commits:
                self.coordinator.apply_txn_offset(pid, key.group, TopicPartition(key.topic, key.partition),
                                                  log_offset, value)
        return len(entries)

    def forget(self, p: int) -> None:
        """Partition `p` is no longer coordinated here: drop its commit positions."""
        n = self.hosting.num_partitions()
        for key in [k for k in self._commit_positions if coordinator_partition(k[0], n) == p]:
            del self._commit_positions[key]

    @staticmethod
    def read(plog: Any, p: int) -> OffsetsRead:
        """Every decided offset record of a `__consumer_offsets` log, in log order, and the
        transactional commits still open at its end, by producer id (on a thread). A transactional
        commit counts at its COMMIT marker (in the marker's place in the order) and never after ABORT."""
        out: list[tuple[int, OffsetKey, CommittedOffset | None]] = []
        open_txns: dict[int, list[tuple[int, OffsetKey, CommittedOffset]]] = {}
        for offset, batch in read_log_batches(plog):
            if batch.is_control:
                commits = open_txns.pop(batch.producer_id, [])
                if _control_type(batch) == CONTROL_COMMIT:
                    out.extend(commits)
                continue
            for rec in batch.records():
                if rec.offset < offset or rec.key is None:
                    continue
                try:
                    entry = (rec.offset, decode_key(rec.key), decode_value(rec.value))
                except OffsetsRecordError as e:
                    log.error("%s-%d: skipping the record at offset %d: %s", OFFSETS_TOPIC, p, rec.offset, e)
                    continue
                if batch.is_transactional and entry[2] is not None:
                    open_txns.setdefault(batch.producer_id, []).append(entry)  # type: ignore[arg-type]
                else:
                    out.append(entry)
        out.sort(key=lambda e: e[0])  # committed transactional offsets count at their own positions
        return out, open_txns


def _control_type(batch: Any) -> int:
    """The type of a control batch's record (its key: int16 version, int16 type); -1 if unreadable."""
    for rec in batch.records():
        key = rec.key
        if key is not None and len(key) >= 4:
            return int.from_bytes(bytes(key[2:4]), "big", signed=True)
    return -1
