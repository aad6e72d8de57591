"""One partition's remote compaction round split over several tasks (no pyspark here).

`compaction/remote.py`'s `compact_partition` runs a whole round in one task: on a large partition
that is one core reading every byte twice. The same round, with the same rules and the same
lease / stage / swap protocol, in steps that `spark_log/compaction_job.py` runs as Spark stages:

  1. driver, `open_round`: take the partition's job lease, abandon this job's staged leftovers and
     decide the dirty section (`remote_common.plan_round`); cut the dirty segments into runs of
     at most `compaction.task.max.bytes` (`map_runs`), a larger segment first cut into pieces at
     batch starts its offset index names (`segment_pieces`: a piece is the batches whose last
     offset is in [lo, hi), so pieces meet exactly between two batches);
  2. map tasks, `map_segments`: key -> latest offset over one run's batches of the dirty section,
     over decoded columns, each chunk's keys merged in (bounded_map.BoundedLatestMap: merged
     only when the bound forces it), never holding more than `compaction.offset.map.max.bytes`;
     a task whose map fills up stops at a chunk's first batch and says where
     (`PartialMap.cut_offset`);
  3. driver, `SplitRound.add_partial` (as each wave of map tasks returns) then `SplitRound.merge`:
     the partial maps in offset order (`MapMerge`), latest offset wins per key
     (offsets only grow along the log, so the max is the latest); the merged map keeps the same
     bound: where adding a run's map would pass it, the map ends at that run's first offset, as
     the reference's map ends at the first batch whose keys do not fit, and the rest stays dirty
     (`add_partial` says so, and the partition's later map tasks are not run).
     Then the segments below the map end grouped by `segment.bytes` (as in one task), the groups
     cut into rewrite runs of at most `compaction.task.max.bytes`, and one CAS stages one
     placeholder entry per group (COPY_STARTED, job origin: never readable, owns its objects);
  4. rewrite tasks, `rewrite_run`: each group of a run compacted against the merged map, adjacent
     small outputs merged up to `segment.bytes` (a merged output keeps its first group's id),
     uploaded under the placeholder ids. A run where nothing is dropped or stamped uploads nothing
     (its segments are already clean) and says so;
  5. driver, `SplitRound.finish`: ONE CAS swaps every changed run's outputs in (a group the
     leader's retention moved meanwhile is abandoned, as in one task), abandons the placeholders
     no output used, and stores the new cleaner checkpoint when every replacement swapped; then
     the note for the next round and the deletion of due objects.

Tombstone, delete horizon, `min.compaction.lag.ms` and transaction (control batch) rules are
compactor.py's, applied per batch exactly as in one task; the map's merge is the only new step.
The record set after a split round equals the one-task round's (tests/integration/
test_compaction_tasks.py); segment boundaries may differ, since small outputs are merged within a
run, not across runs, and an unchanged run is not rewritten.

Memory (B = the bound): a map task holds its map and the chunk maps waiting to be merged into it
(at most B together) plus one decoded chunk (vectorized.CHUNK_ROWS / CHUNK_BYTES) and its
chunk map; the driver holds, per partition, the merged map and the maps waiting (at most B
together), plus the maps of the wave it is merging (compaction_job.py); a rewrite task holds
the merged map (B) and one chunk. A merge briefly holds Arrow's result (<= B) beside its inputs.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from array import array
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from lakelog.compaction import task_memory, vectorized
from lakelog.compaction.bounded_map import BoundedLatestMap, entry_bytes, latest
from lakelog.compaction.compactor import CleaningParams, CompactionStats, next_first_dirty_offset
from lakelog.compaction.errors import OffsetMapTooSmallError
from lakelog.compaction.remote_common import (
    COMPACTION_ORIGIN,
    DirtySection,
    PartitionJob,
    PartitionReport,
    current_time_ms,
    delete_due_objects,
    group_below,
    job_commit,
    merge_small,
    plan_round,
    upload_replacement,
    write_group,
    write_job_state,
)
from lakelog.infra.config import LogConfig
from lakelog.infra.errors import invariant
from lakelog.logstore.record_batch import NO_TIMESTAMP
from lakelog.tiering import manifest_transitions
from lakelog.tiering.errors import LeaseHeldError, RemoteCorruptionError
from lakelog.tiering.layout import new_segment_id
from lakelog.tiering.lease import Lease, acquire
from lakelog.tiering.manifest_model import PartitionManifest, RemoteSegment, SegmentState
from lakelog.tiering.manifest_transitions import Replacement
from lakelog.tiering.metadata import ManifestStore
from lakelog.tiering.remote_scan import index_entries, iter_segment_batches, segments_aborted_transactions
from lakelog.tiering.store import ObjectStore

def _to_ipc(table: pa.Table) -> bytearray:
    """The table as an Arrow IPC stream, written straight into the returned bytearray (sized by a
    first pass that only counts): one copy of the map beside it, not an Arrow buffer and a bytes
    copy of it (a map task's peak was the map three times over here)."""
    def write(sink) -> None:
        with pa.ipc.new_stream(sink, table.schema) as w:
            w.write_table(table)

    counter = pa.MockOutputStream()
    write(counter)
    out = bytearray(counter.size())
    write(pa.FixedSizeBufferWriter(pa.py_buffer(out)))
    return out


def _from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


# ---------------------------------------------------------------------------------------------
# step 2: a map task


@dataclass
class PartialMap:
    """What a map task returns (plain data): its run's key -> latest offset and where it stopped."""

    first_offset: int  # the first offset the run maps
    map_ipc: bytes | bytearray  # Arrow IPC stream of (key binary, offset int64), keys distinct
    cut_offset: int | None = None  # the map ends here (a batch's base offset); None: the run is mapped whole
    full: bool = False  # cut because the bound was reached (else: the dirty section ended)
    batches: int = 0
    records: int = 0
    bytes_read: int = 0
    rows_grouped: int = 0  # rows the map's merges aggregated (bounded_map.BoundedLatestMap.rows_grouped)
    peak_map_bytes: int = 0  # the most bytes the task's map held (merged map + waiting chunk maps): <= the bound


def map_segments(store: ObjectStore, topic: str, partition: int, segments: list[RemoteSegment], *,
                 start_offset: int, end_offset: int, max_bytes: int, max_uncompressed_bytes: int,
                 pieces: list[tuple[int | None, int | None]] | None = None) -> PartialMap:
    """key -> latest offset over the batches of `segments` inside the dirty section
    [start_offset, end_offset), in offset order, bounded by `max_bytes` (see the module docstring).

    `pieces` (one per segment, None: every segment whole) limits a segment to the batches whose
    last offset is in [lo, hi) (either end None: open), a piece of a segment cut by `segment_pieces`."""
    invariant(start_offset <= end_offset, f"dirty section [{start_offset}, {end_offset}) is reversed")
    pieces = pieces or [(None, None)] * len(segments)
    invariant(len(pieces) == len(segments), "one piece per segment")
    lo0 = pieces[0][0]
    # A piece that starts inside its segment starts at its first batch (found by the read below).
    state = {"cut": None, "batches": 0, "bytes": 0,
             "first": max(start_offset, segments[0].base_offset) if lo0 is None else None}

    def mapped():
        for seg, (lo, hi) in zip(segments, pieces):
            if seg.end_offset < start_offset or seg.base_offset >= end_offset:
                continue
            low = max(start_offset, seg.base_offset if lo is None else lo)
            from_offset = low if low > seg.base_offset else None
            for _, batch in iter_segment_batches(store, topic, partition, seg, from_offset=from_offset):
                if batch.last_offset < start_offset or (lo is not None and batch.last_offset < lo):
                    continue
                if hi is not None and batch.last_offset >= hi:
                    break  # the piece ends here; the next piece of this segment is another task's
                if state["first"] is None:
                    state["first"] = max(start_offset, batch.base_offset)
                if batch.last_offset >= end_offset:
                    state["cut"] = min(end_offset, max(start_offset, batch.base_offset))
                    return
                state["batches"] += 1
                state["bytes"] += batch.size_in_bytes
                yield batch

    records = 0
    if vectorized.available():
        # Each chunk's keys go to the map as one part; the part's tag is where the map ends and
        # what it counted if that part is the first that does not fit.
        builder: BoundedLatestMap[tuple[int, int, int, int]] = BoundedLatestMap(max_bytes)
        failed = None
        task_memory.bound_retention()
        for spans, _, cols in vectorized._chunks(mapped(), ["offset", "key"], max_uncompressed_bytes,
                                                 keep_batches=False, max_rows=map_chunk_rows(max_bytes)):
            table = pa.table({"key": cols["key"], "offset": cols["offset"]}).filter(pc.is_valid(cols["key"]))
            tag = (spans[0][0].base_offset, state["batches"] - len(spans), records, state["bytes"])
            records += table.num_rows
            failed = builder.add(latest(table), tag)
            del table, cols
            task_memory.release_unused()
            if failed is not None:
                break
        failed = builder.finish() if failed is None else failed
        running = builder.table
        first = _first(state, segments[0], lo0, start_offset)
        if failed is not None:
            cut, batches, mapped_records, bytes_read = failed
            return PartialMap(first, _to_ipc(running), cut, True, batches, mapped_records, bytes_read,
                              rows_grouped=builder.rows_grouped, peak_map_bytes=builder.peak_bytes)
        return PartialMap(first, _to_ipc(running), state["cut"], False, state["batches"], records, state["bytes"],
                          rows_grouped=builder.rows_grouped, peak_map_bytes=builder.peak_bytes)
    else:  # the reference decoder, batch by batch
        seen: dict[bytes, int] = {}
        size = 0
        for batch in mapped():
            if batch.is_control:
                continue
            keyed = [(r.key, r.offset) for r in batch.records(max_uncompressed_bytes) if r.key is not None]
            new = {k for k, _ in keyed if k not in seen}
            grown = size + sum(entry_bytes(len(k)) for k in new)
            if grown > max_bytes:
                return PartialMap(_first(state, segments[0], lo0, start_offset), _to_ipc(_table(seen)),
                                  batch.base_offset, True, state["batches"] - 1, records, state["bytes"],
                                  peak_map_bytes=size)
            seen.update(keyed)
            size, records = grown, records + len(keyed)
    return PartialMap(_first(state, segments[0], lo0, start_offset), _to_ipc(_table(seen)), state["cut"], False,
                      state["batches"], records, state["bytes"], peak_map_bytes=size)


#: A map task decodes at most max_bytes / MAP_CHUNK_ROW_DIVISOR rows at a time (at least
#: MIN_MAP_CHUNK_ROWS, at most vectorized.CHUNK_ROWS): a chunk's map, each key counted at
#: bounded_map.entry_bytes (52 bytes + 3x the key), then takes at most a quarter of the bound
#: with keys of up to ~20 bytes, so the bound, not the chunk, decides where a map ends; and the
#: decoded chunk itself shrinks with the bound.
MAP_CHUNK_ROW_DIVISOR = 512
MIN_MAP_CHUNK_ROWS = 64


def map_chunk_rows(max_bytes: int) -> int:
    """Rows a map task bounded by `max_bytes` decodes at a time (128 MiB: vectorized.CHUNK_ROWS)."""
    return max(MIN_MAP_CHUNK_ROWS, min(vectorized.CHUNK_ROWS, max_bytes // MAP_CHUNK_ROW_DIVISOR))


def _first(state: dict, seg: RemoteSegment, lo: int | None, start_offset: int) -> int:
    """The first offset a run maps: its first segment's base (or the dirty section's start), or
    for a piece cut inside a segment the base offset of the piece's first batch (the previous
    piece's batches all end below it). A piece with no batch read: its lower bound."""
    first = state["first"]
    return first if first is not None else max(start_offset, seg.base_offset if lo is None else lo)


def _table(seen: dict[bytes, int]) -> pa.Table:
    return pa.table({"key": pa.array(list(seen), pa.binary()), "offset": pa.array(list(seen.values()), pa.int64())})


class MapMerge:
    """The driver's merge of one partition's map-task maps, taken one at a time in offset order
    (step 3): latest offset wins per key, within `max_bytes` (bounded_map.BoundedLatestMap), so
    the driver holds the merged map and the maps waiting to be merged into it (at most the bound
    together), never every task's map at once. `add` says when the map has ended: the maps of later
    runs are not needed (their segments stay dirty for the next round)."""

    def __init__(self, *, start_offset: int, end_offset: int, max_bytes: int) -> None:
        self.start_offset, self.max_bytes = start_offset, max_bytes
        self.map_end = end_offset
        self.ended = False
        self.merged = 0  # maps taken
        self._firsts: list[int] = []
        self._builder: BoundedLatestMap[int] = BoundedLatestMap(max_bytes)

    def _too_small(self) -> OffsetMapTooSmallError:
        return OffsetMapTooSmallError(f"the keys of the first decoded chunk at offset {self.start_offset} do not "
                                      f"fit compaction.offset.map.max.bytes={self.max_bytes}")

    def _ended_at(self, failed: int) -> None:
        if failed == 0:
            raise self._too_small()
        self.map_end = self._firsts[failed]
        self.ended = True

    def add(self, p: PartialMap) -> bool:
        """Take the next run's map; True when the merged map has ended (take no more)."""
        invariant(not self.ended, "a map was added after the merged map ended")
        self._firsts.append(p.first_offset)
        self.merged += 1
        failed = self._builder.add(_from_ipc(p.map_ipc), len(self._firsts) - 1)
        if failed is None and p.cut_offset is not None:
            # The run stopped inside (its own bound, or the end of the dirty section): the map
            # ends there, if everything up to it fits.
            failed = self._builder.finish()
            if failed is None:
                if p.full and p.cut_offset <= self.start_offset:
                    raise self._too_small()
                self.map_end = p.cut_offset
                self.ended = True
        if failed is not None:
            self._ended_at(failed)
        return self.ended

    def result(self) -> tuple[vectorized.ArrowOffsetMap, int]:
        """(merged map, map end offset)."""
        failed = self._builder.finish()
        if failed is not None and not self.ended:
            self._ended_at(failed)
        table = self._builder.table
        arrow_map = vectorized.ArrowOffsetMap(table["key"].combine_chunks(), table["offset"].combine_chunks())
        return arrow_map, max(self.start_offset, self.map_end)


def merge_partials(partials: list[PartialMap], *, start_offset: int, end_offset: int, max_bytes: int
                   ) -> tuple[vectorized.ArrowOffsetMap, int]:
    """(merged map, map end offset) of the runs' maps in offset order; OffsetMapTooSmallError when
    not even the section's first decoded chunk fits the bound (as the reference raises when not
    even one batch fits)."""
    merge = MapMerge(start_offset=start_offset, end_offset=end_offset, max_bytes=max_bytes)
    for p in partials:
        if merge.add(p):
            break
    return merge.result()


#: A piece of a segment a map task reads: (segment, lo, hi), its batches whose last offset is in
#: [lo, hi) (None: open at that end); (segment, None, None) is the whole segment.
Piece = tuple[RemoteSegment, "int | None", "int | None"]


def segment_pieces(seg: RemoteSegment, rel_offsets, positions, max_bytes: int
                   ) -> list[tuple[int | None, int | None, int]]:
    """`seg` cut into pieces of at most `max_bytes` of `.log` (when its offset index allows) at
    batch starts its offset index names: [(lo, hi, bytes)], lo / hi as in `Piece`. An entry (O, P)
    says the batch at P ends at offset O, so "last offset >= O" starts exactly at P, and every
    batch before P ends below O. A stretch between two entries larger than `max_bytes` stays one
    piece; a segment of at most `max_bytes`, or without index, is one piece."""
    size = seg.size_in_bytes
    if size <= max_bytes or not len(positions):
        return [(None, None, size)]
    pieces: list[tuple[int | None, int | None, int]] = []
    lo, start = None, 0
    i, n = 0, len(positions)
    while size - start > max_bytes:
        best = None  # the last entry past the piece's start and at most max_bytes from it
        while i < n and positions[i] <= start + max_bytes:
            if positions[i] > start:
                best = i
            i += 1
        if best is None:  # none within reach: the first one past it, if any
            if i == n:
                break
            best, i = i, i + 1
        cut_pos, cut_offset = int(positions[best]), seg.base_offset + int(rel_offsets[best])
        pieces.append((lo, cut_offset, cut_pos - start))
        lo, start = cut_offset, cut_pos
    pieces.append((lo, None, size - start))
    return pieces


def map_runs(segments: list[RemoteSegment], *, start_offset: int, end_offset: int, max_bytes: int,
             index=None) -> list[list[Piece]]:
    """The dirty segments cut into consecutive runs of at most `max_bytes` (at least one piece
    each). With `index` (segment -> (relative offsets, positions) of its offset index), a segment
    larger than `max_bytes` is cut into pieces first (`segment_pieces`), so one large segment's
    map work spreads over several tasks."""
    items: list[tuple[Piece, int]] = []
    for s in segments:
        if s.end_offset < start_offset or s.base_offset >= end_offset:
            continue
        if index is None or s.size_in_bytes <= max_bytes:
            items.append(((s, None, None), s.size_in_bytes))
            continue
        rel, pos = index(s)
        for lo, hi, size in segment_pieces(s, rel, pos, max_bytes):
            if (hi is not None and hi <= start_offset) or (lo is not None and lo >= end_offset):
                continue  # no batch of the dirty section in it
            items.append(((s, lo, hi), size))
    return [[piece for piece, _ in run] for run in _runs(items, lambda it: it[1], max_bytes)]


def _runs(items: list, size, max_bytes: int) -> list[list]:
    runs: list[list] = []
    total = 0
    for item in items:
        if runs and total + size(item) <= max_bytes:
            runs[-1].append(item)
            total += size(item)
        else:
            runs.append([item])
            total = size(item)
    return runs


# ---------------------------------------------------------------------------------------------
# step 4: a rewrite task


@dataclass
class RunResult:
    """What a rewrite task returns: its uploaded outputs and the counts of its batches."""

    outputs: list[tuple[RemoteSegment, tuple[str, ...]]]  # (final entry, ids of the segments it replaces)
    stats: CompactionStats
    changed: bool  # something was dropped or stamped: the outputs replace the run's segments


def rewrite_run(store: ObjectStore, topic: str, partition: int, groups: list[list[RemoteSegment]], ids: list[str],
                map_ipc: bytes | bytearray, map_end: int, config: LogConfig, now_ms: int) -> RunResult:
    """Compact each group of a run against the merged map; upload the outputs under `ids` (one per
    group, staged by the driver) unless nothing changed."""
    invariant(len(groups) == len(ids), "one placeholder id per group")
    params = CleaningParams.from_config(config, now_ms)
    table = _from_ipc(map_ipc)
    arrow_map = vectorized.ArrowOffsetMap(table["key"].combine_chunks(), table["offset"].combine_chunks())
    native = vectorized.available()
    offset_map = None if native else arrow_map.to_offset_map(len(arrow_map))
    stats = CompactionStats()
    staged = []
    with tempfile.TemporaryDirectory(prefix="lakelog-compaction-") as workdir:
        try:
            for g, sid in zip(groups, ids):
                staged.append(write_group(store, topic, partition, g, offset_map, map_end, params, config, stats,
                                           now_ms, workdir, arrow_map=arrow_map if native else None, segment_id=sid))
            if stats.batches_rewritten == 0 and stats.batches_dropped == 0:
                return RunResult([], stats, False)
            staged = merge_small(staged, config, now_ms, workdir)
            for st in staged:
                upload_replacement(store, topic, partition, st)
            return RunResult([(st.entry, tuple(s.segment_id for s in st.group)) for st in staged], stats, True)
        finally:
            for st in staged:
                with contextlib.suppress(OSError):
                    os.close(st.fd)


# ---------------------------------------------------------------------------------------------
# steps 1, 3 and 5: the driver


@dataclass
class RewriteTask:
    """One rewrite task's work (plain data)."""

    groups: list[list[str]]  # segment ids per group
    ids: list[str]  # the placeholder id of each group


@dataclass
class SplitRound:
    """A round in progress on the driver: holds the partition's lease until `finish` or `release`."""

    job: PartitionJob
    config: LogConfig
    section: DirtySection
    max_map_bytes: int
    task_max_bytes: int
    delete_delay_ms: int
    map_end: int = 0
    arrow_map: vectorized.ArrowOffsetMap | None = None
    rewrites: list[RewriteTask] = field(default_factory=list)
    groups: list[list[RemoteSegment]] = field(default_factory=list)
    map_merge: MapMerge | None = None
    _map_tasks: list[list[tuple[str, int | None, int | None]]] | None = None

    @property
    def report(self) -> PartitionReport:
        return self.job.report

    def map_tasks(self) -> list[list[tuple[str, int | None, int | None]]]:
        """Each map task's run: (segment id, lo, hi) per piece (see `Piece`). A segment larger than
        `compaction.task.max.bytes` is cut by its offset index (read once per round)."""
        if self._map_tasks is None:
            s, job = self.section, self.job

            def index(seg: RemoteSegment):
                try:
                    return index_entries(job.store, job.topic, job.partition, seg)
                except RemoteCorruptionError:  # derived data (rebuild-index restores it): map it whole
                    return array("I"), array("I")

            runs = map_runs(s.segments, start_offset=s.first_dirty, end_offset=s.uncleanable,
                            max_bytes=self.task_max_bytes, index=index)
            self._map_tasks = [[(x.segment_id, lo, hi) for x, lo, hi in run] for run in runs]
        return self._map_tasks

    def add_partial(self, partial: PartialMap) -> bool:
        """Step 3, one map task's map at a time, in offset order; True when the merged map has
        ended (the partition's later map tasks need not run)."""
        if self.map_merge is None:
            s = self.section
            self.map_merge = MapMerge(start_offset=s.first_dirty, end_offset=s.uncleanable, max_bytes=self.max_map_bytes)
        return self.map_merge.ended or self.map_merge.add(partial)

    def merge(self, partials: list[PartialMap] | None = None) -> None:
        """Step 3: merge the map tasks' maps (the rest of them, after `add_partial`), plan the
        rewrite runs and stage their placeholders."""
        job = self.job
        for p in partials or []:
            if self.add_partial(p):
                break
        if self.map_merge is None:  # no map task (an empty dirty section): the map ends where it starts
            s = self.section
            self.map_merge = MapMerge(start_offset=s.first_dirty, end_offset=s.uncleanable, max_bytes=self.max_map_bytes)
        self.arrow_map, self.map_end = self.map_merge.result()
        self.groups = group_below(self.section.segments, self.map_end, self.config)
        placeholders = [_placeholder(g, job.now) for g in self.groups]
        runs = _runs(list(zip(self.groups, placeholders)), lambda gp: sum(x.size_in_bytes for x in gp[0]),
                     self.task_max_bytes)
        self.rewrites = [RewriteTask([[x.segment_id for x in g] for g, _ in run], [p.segment_id for _, p in run])
                         for run in runs]
        if placeholders:
            job_commit(job.meta, lambda cur: manifest_transitions.stage_replacements(cur, placeholders))

    def map_ipc(self) -> bytearray:
        return _to_ipc(pa.table({"key": self.arrow_map.keys, "offset": self.arrow_map.offsets}))  # type: ignore[union-attr]

    def renew(self) -> None:
        """Extend the lease; raises LeaseHeldError when it was lost."""
        self.job.lease.renew()

    def release(self) -> None:
        self.job.lease.release()

    def finish(self, results: list[RunResult]) -> PartitionReport:
        """Step 5: one CAS for the whole partition, then the note and due deletions. Releases the lease."""
        job, report, now = self.job, self.job.report, self.job.now
        store, topic, partition, meta = job.store, job.topic, job.partition, job.meta
        try:
            stats = CompactionStats()
            for r in results:
                _add_stats(stats, r.stats)
            changed = [r for r in results if r.changed]
            checkpoint = next_first_dirty_offset(self.map_end, stats.first_kept_for_lag_offset)
            report.records_read, report.records_kept = stats.records_read, stats.records_kept
            report.bytes_read, report.bytes_written = stats.bytes_read, stats.bytes_written
            report.extra.update(map_tasks=len(self.map_tasks()),
                                map_tasks_merged=self.map_merge.merged if self.map_merge else 0,
                                rewrite_tasks=len(self.rewrites),
                                map_keys=len(self.arrow_map or ()), map_end_offset=self.map_end,
                                earliest_delete_horizon_ms=stats.earliest_delete_horizon_ms)
            outputs = [o for r in changed for o in r.outputs]
            replacements = [Replacement(old, (e.segment_id,)) for e, old in outputs]
            final = {e.segment_id: e for e, _ in outputs}

            def swap(cur: PartitionManifest) -> PartitionManifest | None:
                out = cur
                if replacements:
                    out = manifest_transitions.swap_replacements(cur, replacements, epoch=cur.leader_epoch, now_ms=now,
                                                                 delete_after_ms=now + self.delete_delay_ms, updates=final) or cur
                swapped = all((x := out.segment(i)) is not None and x.state == SegmentState.COPY_FINISHED
                              for i in final)
                # Placeholders no output took (merged into an earlier one, or a run with nothing
                # to drop): never written, abandoned at once. Ours are the only staged entries of
                # this origin: the lease is held and leftovers were abandoned when the round began.
                out = manifest_transitions.abandon_copies(out, epoch=cur.leader_epoch, now_ms=now, origin=COMPACTION_ORIGIN) or out
                if swapped:  # the checkpoint only holds if every group was cleaned
                    out = manifest_transitions.set_cleaner_checkpoint(out, checkpoint) or out
                return out if out is not cur else None

            after = job_commit(meta, swap)
            done = {i for i in final if (x := after.segment(i)) is not None and x.state == SegmentState.COPY_FINISHED}
            if changed:
                report.action = "compacted"
                report.reason = self.section.trigger.value if self.section.trigger else "forced"
            else:
                report.reason = "nothing to drop"
            report.segments_replaced = sum(len(old) for e, old in outputs if e.segment_id in done)
            report.segments_written = len(done)
            report.groups_abandoned = len(final) - len(done)
            report.cleaner_checkpoint = after.cleaner_checkpoint
            report.log_start_offset = after.log_start_offset
            if not report.groups_abandoned:
                write_job_state(store, topic, partition, {"earliest_delete_horizon_ms": stats.earliest_delete_horizon_ms})
            report.objects_deleted = delete_due_objects(store, meta, topic, partition, now)
            return report
        finally:
            self.release()


def _placeholder(group: list[RemoteSegment], now_ms: int) -> RemoteSegment:
    """The staged entry of a group's replacement before it is written (its range; sizes come at the swap)."""
    return RemoteSegment(segment_id=new_segment_id(), base_offset=group[0].base_offset, end_offset=group[-1].end_offset,
                         max_timestamp=NO_TIMESTAMP, size_in_bytes=0, leader_epochs=(),
                         state=SegmentState.COPY_STARTED, state_epoch=-1, origin=COMPACTION_ORIGIN,
                         created_ms=now_ms, updated_ms=now_ms)


def _add_stats(total: CompactionStats, part: CompactionStats) -> None:
    for name in ("batches_read", "batches_written", "batches_rewritten", "batches_dropped", "records_read",
                 "records_kept", "dropped_superseded", "dropped_tombstones", "dropped_without_key", "kept_for_lag",
                 "tombstone_batches_stamped", "bytes_read", "bytes_written"):
        setattr(total, name, getattr(total, name) + getattr(part, name))
    for name in ("first_kept_for_lag_offset", "earliest_delete_horizon_ms"):
        a, b = getattr(total, name), getattr(part, name)
        setattr(total, name, b if a is None else a if b is None else min(a, b))


def _below_aborted_transactions(job: PartitionJob, section: DirtySection) -> DirtySection | None:
    """The dirty section ended at the first aborted transaction's first offset: this round maps
    over decoded columns and cannot keep an aborted record from superseding a committed one, so it
    stops below them (the one-task round in remote.py drops them); None when nothing is left."""
    firsts = [e.first_offset for e in segments_aborted_transactions(job.store, job.topic, job.partition, section.segments)
              if e.last_offset >= section.first_dirty]
    if not firsts or min(firsts) >= section.uncleanable:
        return section
    section.uncleanable = max(section.first_dirty, min(firsts))
    if section.uncleanable <= section.first_dirty:
        job.report.reason = f"an aborted transaction starts at the first dirty offset {section.first_dirty}"
        return None
    return section


def open_round(store: ObjectStore, topic: str, partition: int, config: LogConfig, *, owner: str,
               force: bool = False, now_ms: int | None = None, delete_delay_ms: int, max_map_bytes: int,
               task_max_bytes: int, lease_ttl_ms: int = 10 * 60 * 1000) -> SplitRound | PartitionReport:
    """Step 1: a round holding the partition's lease, or the report of a round that does not run."""
    report = PartitionReport(topic, partition)
    try:
        lease: Lease = acquire(store, topic, partition, owner=owner, job="compaction", ttl_ms=lease_ttl_ms)
    except LeaseHeldError as e:
        report.action, report.reason = "skipped", str(e)
        return report
    try:
        meta = ManifestStore(store, topic, partition)
        job = PartitionJob(store, topic, partition, current_time_ms() if now_ms is None else now_ms, lease, meta,
                            meta.load(), report)
        section = plan_round(job, config, force=force)
        if section is not None:
            section = _below_aborted_transactions(job, section)
    except BaseException:
        lease.release()
        raise
    if section is None:
        lease.release()
        return report
    return SplitRound(job, config, section, max_map_bytes, task_max_bytes, delete_delay_ms)
