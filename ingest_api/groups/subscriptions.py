"""Which topics a group's members are subscribed to, from their join metadata.

HTTP consumer instances join with a JSON document (`{"topics": [...], ...}`). Kafka consumers join
with Kafka's ConsumerProtocolSubscription bytes, kept as base64 text by the coordinator:

    offset  size  type      field
    0       2     int16     version (0-3; later versions only append fields)
    2       4     int32     number of topics N
    6       ..    string[N] topic names, each an int16 length then UTF-8 bytes
    ..      ..              user data, owned partitions, generation, rack (not read here)

Big-endian; no checksum. A member whose metadata cannot be read makes the answer None (unknown),
and callers must then treat every topic as subscribed.
"""

from __future__ import annotations

import base64
import binascii
import struct
from typing import Any, Iterable

HEADER = struct.Struct(">hi")
STRING_LENGTH = struct.Struct(">h")
if HEADER.size != 6 or STRING_LENGTH.size != 2:
    raise AssertionError("the subscription's struct layouts changed size")

#: Most topics one member's subscription may name (a bound on what a malformed one makes us read).
MAX_SUBSCRIBED_TOPICS = 100_000


def decode_subscription_topics(data: bytes) -> list[str]:
    """The topic names of a ConsumerProtocolSubscription; ValueError names the byte position of a fault."""
    if len(data) < HEADER.size:
        raise ValueError(f"a subscription of {len(data)} bytes is shorter than its header")
    version, count = HEADER.unpack_from(data, 0)
    if version < 0 or not 0 <= count <= MAX_SUBSCRIBED_TOPICS:
        raise ValueError(f"subscription version {version} with {count} topics at byte 0")
    pos, topics = HEADER.size, []
    for _ in range(count):
        if pos + 2 > len(data):
            raise ValueError(f"subscription truncated at byte {pos}")
        (n,) = STRING_LENGTH.unpack_from(data, pos)
        pos += 2
        if n < 0 or pos + n > len(data):
            raise ValueError(f"subscription topic of length {n} at byte {pos - 2} runs past the end")
        topics.append(data[pos:pos + n].decode("utf-8"))
        pos += n
    return topics


def member_topics(metadata: Any) -> set[str]:
    """The topics one member's join metadata names (ValueError: unreadable)."""
    if isinstance(metadata, dict):
        return {str(t) for t in metadata.get("topics") or []}
    if isinstance(metadata, str):
        try:
            return set(decode_subscription_topics(base64.b64decode(metadata, validate=True)))
        except (binascii.Error, UnicodeDecodeError) as e:
            raise ValueError(f"unreadable subscription: {e}") from None
    raise ValueError(f"subscription metadata of type {type(metadata).__name__}")


def subscribed_topics(protocols_of_members: Iterable[list[tuple[str, Any]]]) -> set[str] | None:
    """Every topic some member is subscribed to (each member's first protocol: a consumer sends the
    same subscription with every assignor), or None when some member's metadata is unreadable."""
    out: set[str] = set()
    for protocols in protocols_of_members:
        if not protocols:
            continue
        try:
            out |= member_topics(protocols[0][1])
        except ValueError:
            return None
    return out
