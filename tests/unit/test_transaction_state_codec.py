"""`__transaction_state` records: golden bytes (Kafka's TransactionLogKey / TransactionLogValue v0),
round trips, refusal of unknown versions and of malformed bytes."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from lakelog.ingest_api.transactions.state_codec import (
    TransactionStateRecordError,
    TxnRecord,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)


def test_golden_bytes():
    assert encode_key("tx") == bytes.fromhex("0000" "0002" "7478")
    rec = TxnRecord(producer_id=5, producer_epoch=2, timeout_ms=60_000, state=1,
                    partitions=(("t", 0), ("t", 3)), last_update_ms=7, start_ms=6)
    assert encode_value(rec) == bytes.fromhex(
        "0000" "0000000000000005" "0002" "0000ea60" "01"
        "00000001" "0001" "74" "00000002" "00000000" "00000003"
        "0000000000000007" "0000000000000006")


_records = st.builds(
    TxnRecord, producer_id=st.integers(0, 2**63 - 1), producer_epoch=st.integers(-1, 32767),
    timeout_ms=st.integers(1, 2**31 - 1), state=st.integers(0, 7),
    partitions=st.lists(st.tuples(st.text(min_size=1, max_size=20), st.integers(0, 2**31 - 1)), max_size=8,
                        unique=True).map(lambda ps: tuple(sorted(ps))),
    last_update_ms=st.integers(0, 2**62), start_ms=st.integers(-1, 2**62))


@given(st.text(max_size=60))
def test_key_round_trip(tid):
    assert decode_key(encode_key(tid)) == tid


@given(_records)
def test_value_round_trip(rec):
    assert decode_value(encode_value(rec)) == rec


def test_tombstone_and_null_partitions():
    assert decode_value(None) is None
    rec = TxnRecord(1, 0, 10, 0, (), 5, -1)
    raw = bytearray(encode_value(rec))
    raw[17:21] = b"\xff\xff\xff\xff"  # a null partition array (Kafka writes it for no partitions)
    assert decode_value(bytes(raw)) == rec


def test_unknown_versions_are_refused():
    with pytest.raises(TransactionStateRecordError, match="unknown version 1"):
        decode_key(b"\x00\x01\x00\x00")
    raw = b"\x00\x01" + encode_value(TxnRecord(1, 0, 10, 0, (), 5, -1))[2:]
    with pytest.raises(TransactionStateRecordError, match="unknown version 1"):
        decode_value(raw)


@given(st.binary(max_size=80))
def test_fuzzed_bytes_decode_or_raise_typed(raw):
    for decode in (decode_key, decode_value):
        try:
            decode(raw)
        except TransactionStateRecordError:
            pass


def test_truncation_names_the_field():
    raw = encode_value(TxnRecord(1, 0, 10, 1, (("t", 0),), 5, 4))
    with pytest.raises(TransactionStateRecordError, match="value.timestamps: past the end"):
        decode_value(raw[:-3])
    with pytest.raises(TransactionStateRecordError, match="expected"):
        decode_value(raw + b"\x00")
