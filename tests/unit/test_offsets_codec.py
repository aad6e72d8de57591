"""`__consumer_offsets` records: golden bytes, round trips, refusal of unknown versions."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from lakelog.ingest_api.groups.offsets_codec import (
    CommittedOffset,
    OffsetKey,
    OffsetsRecordError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)


def test_golden_bytes():
    assert encode_key(OffsetKey("g", "t", 3)) == bytes.fromhex("0001" "0001" "67" "0001" "74" "00000003")
    assert encode_value(CommittedOffset(42, "m", 7, -1)) == bytes.fromhex(
        "0001" "000000000000002a" "ffffffff" "0001" "6d" "0000000000000007")


@given(st.text(max_size=50), st.text(max_size=50), st.integers(0, 2**31 - 1))
def test_key_round_trip(group, topic, partition):
    k = OffsetKey(group, topic, partition)
    assert decode_key(encode_key(k)) == k


@given(st.integers(0, 2**63 - 1), st.text(max_size=100), st.integers(0, 2**63 - 1), st.integers(-1, 2**31 - 1))
def test_value_round_trip(offset, metadata, ts, epoch):
    v = CommittedOffset(offset, metadata, ts, epoch)
    assert decode_value(encode_value(v)) == v


def test_tombstone_and_refusals():
    assert decode_value(None) is None
    with pytest.raises(OffsetsRecordError, match="unknown version 2"):
        decode_key(bytes.fromhex("0002") + encode_key(OffsetKey("g", "t", 0))[2:])
    with pytest.raises(OffsetsRecordError, match="unknown version"):
        decode_value(bytes.fromhex("0009") + encode_value(CommittedOffset(1))[2:])
    with pytest.raises(OffsetsRecordError):
        decode_value(encode_value(CommittedOffset(1))[:-1])
    with pytest.raises(OffsetsRecordError):
        decode_key(encode_key(OffsetKey("g", "t", 0)) + b"x")
