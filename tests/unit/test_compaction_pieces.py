"""compaction/remote_split.segment_pieces: a segment larger than compaction.task.max.bytes is cut
for the map tasks at batch starts its offset index names; the pieces cover the segment once, in
order, each within the bound wherever the index has an entry within reach."""

from __future__ import annotations

import random
from array import array

import pytest

from lakelog.compaction.remote_split import segment_pieces
from lakelog.tiering.manifest_model import RemoteSegment, SegmentState

BASE = 1_000


def _segment(size: int) -> RemoteSegment:
    return RemoteSegment(segment_id="s", base_offset=BASE, end_offset=BASE + 10 * size, max_timestamp=0,
                         size_in_bytes=size, leader_epochs=(), state=SegmentState.COPY_FINISHED, state_epoch=0,
                         created_ms=0, updated_ms=0)


@pytest.mark.parametrize("seed", range(200))
def test_pieces_cover_the_segment_at_index_entries_within_the_bound(seed):
    rng = random.Random(seed)
    print("seed", seed)
    size = rng.randint(1, 50_000)
    positions, rel = array("I"), array("I")
    pos, off = 0, 0
    while True:  # an entry starts a batch: positions and offsets strictly increase
        pos += rng.randint(1, rng.choice([50, 500, 5_000]))
        off += rng.randint(1, 20)
        if pos >= size:
            break
        if rng.random() < 0.7:
            positions.append(pos)
            rel.append(off)
    max_bytes = rng.choice([100, 1_000, 10_000, 60_000])
    pieces = segment_pieces(_segment(size), rel, positions, max_bytes)
    entries = {BASE + r: p for r, p in zip(rel, positions)}
    assert sum(b for _, _, b in pieces) == size
    assert pieces[0][0] is None and pieces[-1][1] is None
    start = 0
    for k, (lo, hi, nbytes) in enumerate(pieces):
        if k:
            assert lo == pieces[k - 1][1] and lo in entries and entries[lo] == start
        if hi is not None:
            assert hi in entries and entries[hi] == start + nbytes
            # the farthest entry within the bound, or the first past it when none is within
            within = [p for p in positions if start < p <= start + max_bytes]
            assert entries[hi] == (max(within) if within else min(p for p in positions if p > start))
        else:
            assert nbytes <= max_bytes or not [p for p in positions if p > start]
        start += nbytes
    if size <= max_bytes or not positions:
        assert pieces == [(None, None, size)]


def test_a_segment_within_the_bound_or_without_index_is_one_piece():
    assert segment_pieces(_segment(5_000), array("I", [10]), array("I", [2_000]), 5_000) == [(None, None, 5_000)]
    assert segment_pieces(_segment(5_000), array("I"), array("I"), 100) == [(None, None, 5_000)]
    assert segment_pieces(_segment(5_000), array("I", [10, 20]), array("I", [2_000, 4_000]), 2_500) == [
        (None, BASE + 10, 2_000), (BASE + 10, BASE + 20, 2_000), (BASE + 20, None, 1_000)]
