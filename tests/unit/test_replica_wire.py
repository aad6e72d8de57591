"""The replica fetch response frame (ingest_api/replication/wire.py): golden bytes from the documented
layout, hypothesis round trips, and typed refusals of every malformed frame."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.ingest_api.replication.wire import (
    MAGIC,
    NOT_LEADER_OR_FOLLOWER,
    PartitionData,
    ReplicaWireError,
    decode_fetch_response,
    encode_fetch_response,
)
from lakelog.logstore.record_batch import Record, build_batch, iter_batches

BATCH = build_batch([Record(5, 1_700_000_000_000, b"k", b"v")])
#: The frame of two partitions as the module docstring lays it out, written out by hand.
GOLDEN_HEADER = (b'{"partitions":[{"topic":"orders","partition":0,"error_code":0,"error":null,'
                 b'"high_watermark":6,"log_start_offset":0,"log_end_offset":6,"size":%d},'
                 b'{"topic":"orders","partition":1,"error_code":6,"error":"not the leader",'
                 b'"high_watermark":-1,"log_start_offset":-1,"log_end_offset":-1,"size":0}]}') % len(BATCH)
GOLDEN = b"LKRF" + b"\x01" + struct.pack(">I", len(GOLDEN_HEADER)) + GOLDEN_HEADER + BATCH
PARTS = [PartitionData("orders", 0, 0, None, 6, 0, 6, BATCH),
         PartitionData("orders", 1, NOT_LEADER_OR_FOLLOWER, "not the leader", -1, -1, -1, b"")]


def test_golden_frame():
    assert b"".join(encode_fetch_response(PARTS)) == GOLDEN
    got = decode_fetch_response(GOLDEN)
    assert [(p.topic, p.partition, p.error_code, p.error, p.high_watermark, p.log_start_offset, p.log_end_offset,
             bytes(p.records)) for p in got] == [
        ("orders", 0, 0, None, 6, 0, 6, BATCH), ("orders", 1, 6, "not the leader", -1, -1, -1, b"")]
    ((_, batch),) = list(iter_batches(bytes(got[0].records)))
    assert batch.base_offset == 5


_part = st.builds(PartitionData, st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1),
                  st.sampled_from([0, 1, 3, 6, 74, 75]), st.none() | st.text(max_size=40),
                  st.integers(-1, 2**62), st.integers(-1, 2**62), st.integers(-1, 2**62), st.binary(max_size=300))


@settings(max_examples=200, deadline=None)
@given(st.lists(_part, max_size=6))
def test_round_trip(parts):
    got = decode_fetch_response(b"".join(encode_fetch_response(parts)))
    assert [(p.header(), bytes(p.records)) for p in got] == [(p.header(), bytes(p.records)) for p in parts]


@pytest.mark.parametrize("frame, message", [
    (GOLDEN[:8], "shorter than its header"),
    (b"LKRX" + GOLDEN[4:], "magic"),
    (GOLDEN[:4] + b"\x02" + GOLDEN[5:], "version 2"),
    (GOLDEN[:5] + struct.pack(">I", len(GOLDEN)) + GOLDEN[9:], "header length"),
    (GOLDEN[:-1], "past the end"),
    (GOLDEN + b"\x00", "trailing bytes"),
    (GOLDEN[:9] + b"x" * len(GOLDEN_HEADER) + BATCH, "not valid"),
    (MAGIC + b"\x01" + struct.pack(">I", 2) + b"{}", "not valid"),
])
def test_malformed_frames_are_refused(frame, message):
    with pytest.raises(ReplicaWireError, match=message):
        decode_fetch_response(frame)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_any_truncation_or_flip_is_a_typed_error_or_a_frame(data):
    cut = data.draw(st.integers(0, len(GOLDEN)))
    at = data.draw(st.integers(0, len(GOLDEN) - 1))
    flipped = bytearray(GOLDEN)
    flipped[at] ^= data.draw(st.integers(1, 255))
    for frame in (GOLDEN[:cut], bytes(flipped)):
        try:
            decode_fetch_response(frame)
        except ReplicaWireError:
            pass
