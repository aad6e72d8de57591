"""The consumer's decoder of binary fetch responses (client/fetching.py): the native path
(`_batchbuild.decode_records`) and the pure-Python reference give the same messages; control batches
are skipped, records below the asked offset dropped, LogAppendTime honoured, corruption refused."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.client import fetching
from lakelog.logstore.compression import Compression
from lakelog.logstore.errors import CorruptRecordError
from lakelog.logstore.record_batch import CRC_OFFSET, HEADER_SIZE, Record, TimestampType, build_batch

headers = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=16)), max_size=3)
records = st.lists(st.tuples(st.none() | st.binary(max_size=200), st.none() | st.binary(max_size=1500), headers,
                             st.integers(0, 10_000)), min_size=1, max_size=25)


def _batch(base: int, recs, codec=Compression.NONE, **kw) -> bytes:
    ts0 = 1_700_000_000_000
    return build_batch([Record(base + i, ts0 + dt, k, v, tuple(h)) for i, (k, v, h, dt) in enumerate(recs)],
                       base_offset=base, compression=codec, **kw)


def test_the_native_decoder_is_built():
    assert fetching.NATIVE


@settings(max_examples=150, deadline=None)
@given(first=records, second=records, codec=st.sampled_from(list(Compression)), skip=st.integers(0, 30))
def test_native_and_python_decode_the_same_messages(first, second, codec, skip):
    data = _batch(100, first, codec) + _batch(100 + len(first), second, codec)
    asked = 100 + min(skip, len(first) + len(second) - 1)
    native = fetching.decode_fetch(data, "t", 3, asked, native=True)
    python = fetching.decode_fetch(data, "t", 3, asked, native=False)
    assert native == python
    assert native.next_offset == 100 + len(first) + len(second)
    expected = [(100 + i, k, v, [tuple(x) for x in h]) for i, (k, v, h, _) in enumerate(first + second)]
    assert [(m.offset, m.key, m.value, m.headers) for m in native.messages] == [e for e in expected if e[0] >= asked]
    assert all(type(m) is fetching.Message and m.topic == "t" and m.partition == 3 for m in native.messages)


def test_control_batches_are_skipped_and_log_append_time_applies():
    ctrl = build_batch([Record(5, 1, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], base_offset=5, is_control=True,
                       is_transactional=True, producer_id=1, producer_epoch=0, base_sequence=-1)
    data = _batch(0, [(b"k", b"v", [], 0)] * 5) + ctrl + _batch(6, [(None, b"x", [], 7)],
                                                                timestamp_type=TimestampType.LOG_APPEND_TIME,
                                                                log_append_time=42)
    for native in (True, False):
        got = fetching.decode_fetch(data, "t", 0, 3, native=native)
        assert [m.offset for m in got.messages] == [3, 4, 6] and got.next_offset == 7
        assert got.messages[-1].timestamp == 42


def test_corruption_is_refused():
    good = bytearray(_batch(0, [(b"k", b"v" * 50, [("h", b"1")], 0)] * 3))
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    for native in (True, False):
        with pytest.raises(CorruptRecordError, match="CRC"):
            fetching.decode_fetch(bytes(bad_crc), "t", 0, 0, native=native)
        with pytest.raises(CorruptRecordError):
            fetching.decode_fetch(bytes(good[:-3]), "t", 0, 0, native=native)  # torn
    # A record whose length lies (the CRC recomputed so only the record walk can catch it).
    from lakelog.logstore.record_batch import crc32c, ATTRIBUTES_OFFSET
    import struct
    lying = bytearray(good)
    lying[HEADER_SIZE] = 0x7E  # first record's varint length: 63, past its real end
    struct.pack_into(">I", lying, CRC_OFFSET, crc32c(bytes(lying[ATTRIBUTES_OFFSET:])))
    with pytest.raises(CorruptRecordError, match="malformed record"):
        fetching.decode_fetch(bytes(lying), "t", 0, 0, native=True)


def test_the_native_decoder_refuses_bad_arguments():
    from lakelog.logstore import _batchbuild

    with pytest.raises(TypeError):
        _batchbuild.decode_records(b"", 0, 0, -1, 0, "t", 0, dict)
