"""The subscription decoder OffsetDelete reads members' topics with: round-trips, fuzz, bad input."""

from __future__ import annotations

import base64
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lakelog.ingest_api.groups.subscriptions import decode_subscription_topics, member_topics, subscribed_topics

TOPIC = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FFF), min_size=1, max_size=40)


def _encode(topics: list[str], version: int = 3, tail: bytes = b"") -> bytes:
    """Kafka's ConsumerProtocolSubscription layout (tests only: the node never writes one)."""
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        b = t.encode()
        out += struct.pack(">h", len(b)) + b
    return out + tail


@given(st.lists(TOPIC, max_size=20), st.integers(0, 3), st.binary(max_size=30))
def test_topics_round_trip_whatever_follows(topics, version, tail):
    assert decode_subscription_topics(_encode(topics, version, tail)) == topics


@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_fail_with_value_error(data):
    try:
        out = decode_subscription_topics(data)
    except ValueError:
        return
    assert isinstance(out, list)


def test_members_of_both_doors_and_an_unreadable_one():
    kafka_member = [("range", base64.b64encode(_encode(["a", "b"])).decode())]
    http_member = [("range", {"topics": ["c"]})]
    assert subscribed_topics([kafka_member, http_member]) == {"a", "b", "c"}
    assert subscribed_topics([kafka_member, [("range", "not base64!")]]) is None
    with pytest.raises(ValueError, match="byte"):
        decode_subscription_topics(struct.pack(">hi", 0, 2) + struct.pack(">h", 10) + b"abc")
    assert member_topics({"topics": []}) == set()
