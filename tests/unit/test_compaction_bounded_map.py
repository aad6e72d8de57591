"""compaction/bounded_map.py: the key -> latest offset map merged from parts within a byte bound
equals merging part by part (checking the bound after each), never holds more than the bound
(merged map + waiting parts, counted here after every step), does linear work where it can, and
the driver's merge of the map tasks' maps (remote_split.merge_partials) keeps the merged map
within the bound."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from lakelog.compaction.bounded_map import ENTRY_OVERHEAD_BYTES, BoundedLatestMap, latest, map_bytes
from lakelog.compaction.errors import OffsetMapTooSmallError
from lakelog.compaction.remote_split import PartialMap, _to_ipc, merge_partials


def _part(pairs: list[tuple[bytes, int]]) -> pa.Table:
    return latest(pa.table({"key": pa.array([k for k, _ in pairs], pa.binary()),
                            "offset": pa.array([o for _, o in pairs], pa.int64())}))


def _as_dict(table: pa.Table) -> dict[bytes, int]:
    return dict(zip(table.column("key").to_pylist(), table.column("offset").to_pylist()))


def _reference(parts: list[pa.Table], max_bytes: int) -> tuple[dict[bytes, int], int | None]:
    """Part by part: the map of the longest prefix that fits, and the index of the first part that does not."""
    merged: dict[bytes, int] = {}
    for i, part in enumerate(parts):
        grown = {**merged, **{k: max(o, merged.get(k, -1)) for k, o in _as_dict(part).items()}}
        if sum(len(k) + ENTRY_OVERHEAD_BYTES for k in grown) > max_bytes:
            return merged, i
        merged = grown
    return merged, None


def _held(builder: BoundedLatestMap) -> int:
    """What the builder holds, counted from its tables (not from its own counters): the merged
    map's keys plus every waiting part's."""
    return map_bytes(builder._map.column("key")) + sum(map_bytes(p.column("key")) for p in builder._waiting)


def _build(parts: list[pa.Table], max_bytes: int) -> tuple[BoundedLatestMap, int | None]:
    builder: BoundedLatestMap[int] = BoundedLatestMap(max_bytes)
    failed = None
    peak = 0
    for i, part in enumerate(parts):
        failed = builder.add(part, i)
        peak = max(peak, _held(builder))
        assert _held(builder) <= max_bytes, (i, _held(builder), max_bytes)
        if failed is not None:
            break
    failed = builder.finish() if failed is None else failed
    assert _held(builder) <= max_bytes
    assert builder.peak_bytes == max(peak, _held(builder))
    return builder, failed


@pytest.mark.parametrize("seed", range(40))
def test_the_map_equals_merging_part_by_part(seed):
    rng = random.Random(seed)
    print("seed", seed)
    offset = 0
    parts = []
    universe = rng.choice([20, 200, 2000])
    for _ in range(rng.randint(1, 30)):
        pairs = []
        for _ in range(rng.randint(0, 300)):
            pairs.append((b"k%d" % rng.randrange(universe), offset))
            offset += 1
        parts.append(_part(pairs))
    max_bytes = rng.choice([0, 15, 200, 2_000, 20_000, 1 << 30])
    builder, failed = _build(parts, max_bytes)
    expected, expected_failed = _reference(parts, max_bytes)
    assert failed == expected_failed
    assert _as_dict(builder.table) == expected
    assert map_bytes(builder.table.column("key")) <= max_bytes


@pytest.mark.parametrize("seed", range(60))
def test_the_map_never_holds_more_than_its_bound(seed):
    """Where the earlier merge let parts wait until they held as much as the map (up to twice the
    bound): a map that fills to a random share of the bound with keys of its own, then parts that
    repeat some of its keys and bring new ones. After every part, the map and the waiting parts
    together stay within the bound, the peak reaches at most the bound, and the map and the first
    part that does not fit are the part-by-part reference's."""
    rng = random.Random(seed)
    print("seed", seed)
    max_bytes = rng.choice([500, 3_000, 20_000, 100_000])
    first = []
    offset = 0
    while sum(len(k) + ENTRY_OVERHEAD_BYTES for k, _ in first) < max_bytes * rng.uniform(0.3, 0.95):
        first.append((b"base-%d" % len(first), offset))
        offset += 1
    parts = [_part(first)]
    fresh = 0
    for _ in range(rng.randint(5, 60)):
        pairs = []
        for _ in range(rng.randint(1, 80)):
            if rng.random() < rng.choice([0.0, 0.05, 0.5, 0.95]):
                pairs.append((b"new-%d" % fresh, offset))
                fresh += 1
            else:
                pairs.append((first[rng.randrange(len(first))][0], offset))
            offset += 1
        parts.append(_part(pairs))
    builder, failed = _build(parts, max_bytes)
    expected, expected_failed = _reference(parts, max_bytes)
    assert failed == expected_failed
    assert _as_dict(builder.table) == expected
    assert builder.peak_bytes <= max_bytes


def test_a_part_larger_than_the_bound_is_refused_without_a_merge():
    small, big = _part([(b"a", 0)]), _part([(b"k%d" % i, i + 1) for i in range(10)])
    builder, failed = _build([small, big], 10 * 14 - 1)
    assert failed == 1 and _as_dict(builder.table) == {b"a": 0}
    assert builder.rows_grouped == 1  # the small part's merge at finish(); never the big one's


def test_the_merges_do_linear_work_when_every_part_brings_new_keys():
    """Merging each part into the whole map as it comes aggregates chunks x map size rows
    (here 200 parts of 100 new keys: about 2,000,000); the waiting parts keep it linear."""
    parts = [_part([(b"key-%06d" % (i * 100 + j), i * 100 + j) for j in range(100)]) for i in range(200)]
    total = sum(p.num_rows for p in parts)
    for max_bytes in (1 << 30, map_bytes(pa.concat_tables(parts).column("key"))):  # roomy, and exactly full
        builder, failed = _build(parts, max_bytes)
        assert failed is None and builder.table.num_rows == total
        assert builder.rows_grouped <= 3 * total, builder.rows_grouped


def test_the_merges_do_linear_work_when_every_part_repeats_the_keys_near_the_bound():
    """The usual compacted topic: the same keys again and again, the map close to its bound (so
    map + one waiting part is already past it)."""
    keys = 500
    parts = [_part([(b"key-%06d" % j, i * keys + j) for j in range(keys)]) for i in range(300)]
    total = sum(p.num_rows for p in parts)
    max_bytes = map_bytes(parts[0].column("key")) + 10
    builder, failed = _build(parts, max_bytes)
    assert failed is None
    assert _as_dict(builder.table) == {b"key-%06d" % j: 299 * keys + j for j in range(keys)}
    assert builder.rows_grouped <= 3 * total, builder.rows_grouped


def test_the_merges_cost_one_map_per_part_when_a_full_map_sees_its_keys_again():
    """The price of the hard bound: a map close to its bound, then small parts that repeat its
    keys. No part can wait (map + part is past the bound), so each part is merged into the map at
    once: parts x map rows, never more (the earlier merge let them wait, up to twice the bound)."""
    keys = 2000
    base = _part([(b"key-%06d" % j, j) for j in range(keys)])
    parts = [base] + [_part([(b"key-%06d" % ((i * 7 + j) % keys), keys + i * 10 + j) for j in range(10)])
                      for i in range(100)]
    max_bytes = map_bytes(base.column("key")) + 50
    builder, failed = _build(parts, max_bytes)
    assert failed is None and builder.table.num_rows == keys
    assert builder.peak_bytes <= max_bytes
    assert builder.rows_grouped <= 100 * (keys + 10) + keys + 10, builder.rows_grouped


def test_a_part_that_does_not_fit_ends_the_map_and_no_part_is_taken_after_it():
    a, b, c = _part([(b"a", 0), (b"b", 1)]), _part([(b"c", 2)]), _part([(b"a", 3)])
    builder, failed = _build([a, b, c], 2 * 13)
    assert failed == 1 and _as_dict(builder.table) == {b"a": 0, b"b": 1}
    with pytest.raises(ValueError):
        builder.add(c, 2)


# ---------------------------------------------------------------------------------------------
# the driver's merge of the map tasks' maps


def _partial(first: int, pairs: list[tuple[bytes, int]], cut: int | None = None, full: bool = False) -> PartialMap:
    return PartialMap(first, _to_ipc(_part(pairs)), cut, full)


def test_the_merged_map_keeps_the_bound_though_every_task_map_fits_it():
    """Ten map tasks, each within compaction.offset.map.max.bytes, 1,000 distinct keys together:
    the driver's map holds the runs that fit (every key at its latest offset within them) and ends
    where the first run that does not fit starts; the rest stays dirty."""
    runs = [[(b"key-%04d" % (r * 100 + j), r * 1000 + j) for j in range(100)] for r in range(10)]
    partials = [_partial(r * 1000, pairs) for r, pairs in enumerate(runs)]
    one_run = 100 * (8 + ENTRY_OVERHEAD_BYTES)
    bound = 4 * one_run + one_run // 2
    assert all(map_bytes(_part(pairs).column("key")) <= bound for pairs in runs)
    merged, end = merge_partials(partials, start_offset=0, end_offset=10_000, max_bytes=bound)
    assert map_bytes(merged.keys) <= bound
    assert end == 4000
    assert dict(zip(merged.keys.to_pylist(), merged.offsets.to_pylist())) == dict(p for run in runs[:4] for p in run)
    # Runs that repeat the keys share them: all ten fit, the latest offset wins.
    same = [_partial(r * 1000, [(b"key-%04d" % j, r * 1000 + j) for j in range(100)]) for r in range(10)]
    merged, end = merge_partials(same, start_offset=0, end_offset=10_000, max_bytes=bound)
    assert end == 10_000 and merged.offsets.to_pylist() and min(merged.offsets.to_pylist()) == 9000
    # Not even the first run fits: a clear error naming the setting.
    with pytest.raises(OffsetMapTooSmallError, match="compaction.offset.map.max.bytes"):
        merge_partials(partials, start_offset=0, end_offset=10_000, max_bytes=one_run - 1)
