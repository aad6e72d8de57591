"""compaction/vectorized._chunks(keep_batches=False): the map's decode keeps only each batch's base
offset, never the batch (whose buffer is a view that keeps its whole read of the segment alive),
and decodes the same columns as with the batches kept."""

from __future__ import annotations

import gc
import random

import pytest

from lakelog.compaction import vectorized
from lakelog.logstore.record_batch import Record, RecordBatch, build_batch


class _Tracked(bytearray):
    """A batch buffer whose release the test can see (bytes objects take no weak references)."""

    alive = 0

    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        _Tracked.alive += 1

    def __del__(self) -> None:
        _Tracked.alive -= 1


def _batches(seed: int, tracked: bool = False):
    rng = random.Random(seed)
    offset = 0
    for _ in range(rng.randint(1, 40)):
        recs = [Record(offset + i, 1_000 + i, None if rng.random() < 0.1 else b"k%d" % rng.randrange(50),
                       b"v" * rng.randrange(30)) for i in range(rng.randint(1, 20))]
        data = build_batch(recs, base_offset=offset)
        yield RecordBatch(_Tracked(data) if tracked else data)
        offset += len(recs) + rng.randint(0, 3)


@pytest.mark.parametrize("seed", range(20))
def test_spans_hold_base_offsets_and_the_columns_are_the_same(seed, monkeypatch):
    if not vectorized.available():
        pytest.fail("the native decoder is not built (make native)")
    monkeypatch.setattr(vectorized, "CHUNK_ROWS", random.Random(seed).choice([7, 64, 100_000]))
    kept = list(vectorized._chunks(_batches(seed), ["offset", "key"], 1 << 20))
    light = list(vectorized._chunks(_batches(seed), ["offset", "key"], 1 << 20, keep_batches=False))
    assert len(kept) == len(light)
    for (spans_k, n_k, cols_k), (spans_l, n_l, cols_l) in zip(kept, light):
        assert n_k == n_l and all(cols_k[c].equals(cols_l[c]) for c in ("offset", "key"))
        assert [(b.base_offset, r0, r1) for b, r0, r1 in spans_k] == [(b.base_offset, r0, r1) for b, r0, r1 in spans_l]
        assert all(isinstance(b, vectorized.BatchStart) for b, _, _ in spans_l)


def test_a_chunk_in_progress_holds_no_batch_buffer(monkeypatch):
    """With the batches kept, every batch of a chunk stays alive until the chunk is yielded; the
    map's decode lets each go once decoded."""
    if not vectorized.available():
        pytest.fail("the native decoder is not built (make native)")
    monkeypatch.setattr(vectorized, "CHUNK_ROWS", 1_000_000)
    for keep, most in ((True, 10), (False, 2)):
        gc.collect()
        _Tracked.alive = 0
        peak = 0

        def counted():
            nonlocal peak
            for b in _batches(3, tracked=True):
                peak = max(peak, _Tracked.alive)
                yield b

        chunks = list(vectorized._chunks(counted(), ["offset", "key"], 1 << 20, keep_batches=keep))
        assert len(chunks) == 1
        assert (peak >= most) if keep else (peak <= most), (keep, peak)
