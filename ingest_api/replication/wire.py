"""Wire format of replica fetch responses (leader -> follower), and the fetch request body.

A replica fetch request is JSON:

    {"replica_id": int, "broker_epoch": int, "max_wait_ms": int, "max_bytes": int,
     "session_id": int, "session_epoch": int,
     "partitions": [{"topic": str, "partition": int, "fetch_offset": int,
                     "current_leader_epoch": int, "log_start_offset": int, "max_bytes": int}],
     "forgotten": [{"topic": str, "partition": int}]}

`session_epoch` 0 opens a fetch session (`sessions.py`) and names every partition; a higher epoch
names only the partitions whose fetch state changed, and the response then carries only the
partitions with records, an error, or a high watermark / log start / LEO not sent before.

The response carries record batches as they are stored, so it is framed bytes rather than JSON:

    offset  size  field
    0       4     magic b"LKRF"
    4       1     version (1)
    5       4     header length H, u32 big-endian
    9       H     header: UTF-8 JSON {"partitions": [{"topic", "partition", "error_code", "error",
                  "high_watermark", "log_start_offset", "log_end_offset", "size"}]}
    9+H     ...   the partitions' record bytes, concatenated in header order (`size` bytes each)

The batches keep their own CRC-32C, checked again by the follower's append; a frame whose sizes
do not add up to its length is refused.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass

from lakelog.infra.errors import ErrorKind, LakelogError

MAGIC = b"LKRF"
VERSION = 1
_HEAD = struct.Struct(">4sBI")
assert _HEAD.size == 9
MAX_HEADER_BYTES = 16 * 1024 * 1024

# Partition-level error codes (Kafka's numbers).
NONE = 0
OFFSET_OUT_OF_RANGE = 1
UNKNOWN_TOPIC_OR_PARTITION = 3
NOT_LEADER_OR_FOLLOWER = 6
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75


class ReplicaWireError(LakelogError):
    """A replica fetch response is malformed."""

    kind = ErrorKind.CORRUPT


@dataclass
class PartitionData:
    topic: str
    partition: int
    error_code: int
    error: str | None
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    records: bytes | memoryview

    def header(self) -> dict:
        return {"topic": self.topic, "partition": self.partition, "error_code": self.error_code,
                "error": self.error, "high_watermark": self.high_watermark,
                "log_start_offset": self.log_start_offset, "log_end_offset": self.log_end_offset,
                "size": len(self.records)}


def encode_fetch_response(parts: list[PartitionData]) -> list[bytes | memoryview]:
    """The response as a list of buffers (the record bytes are not copied)."""
    header = json.dumps({"partitions": [p.header() for p in parts]}, separators=(",", ":")).encode()
    out: list[bytes | memoryview] = [_HEAD.pack(MAGIC, VERSION, len(header)), header]
    out.extend(p.records for p in parts if len(p.records))
    return out


def decode_fetch_response(buf: bytes) -> list[PartitionData]:
    if len(buf) < _HEAD.size:
        raise ReplicaWireError(f"replica fetch response of {len(buf)} bytes is shorter than its header")
    magic, version, hlen = _HEAD.unpack_from(buf, 0)
    if magic != MAGIC:
        raise ReplicaWireError(f"replica fetch response has magic {magic!r}, not {MAGIC!r}")
    if version != VERSION:
        raise ReplicaWireError(f"replica fetch response version {version} is not {VERSION}")
    if hlen > MAX_HEADER_BYTES or _HEAD.size + hlen > len(buf):
        raise ReplicaWireError(f"replica fetch response header length {hlen} is out of bounds")
    try:
        header = json.loads(bytes(buf[_HEAD.size:_HEAD.size + hlen]))
        entries = header["partitions"]
    except (ValueError, KeyError, TypeError) as e:
        raise ReplicaWireError(f"replica fetch response header is not valid: {e}") from None
    view = memoryview(buf)
    pos = _HEAD.size + hlen
    out = []
    for e in entries:
        try:
            size = int(e["size"])
            if size < 0 or pos + size > len(buf):
                raise ReplicaWireError(f"partition {e.get('topic')}-{e.get('partition')} claims {size} bytes "
                                       f"past the end of the response")
            out.append(PartitionData(str(e["topic"]), int(e["partition"]), int(e["error_code"]), e.get("error"),
                                     int(e["high_watermark"]), int(e["log_start_offset"]),
                                     int(e["log_end_offset"]), view[pos:pos + size]))
        except (KeyError, TypeError, ValueError) as err:
            raise ReplicaWireError(f"replica fetch response entry is not valid: {err}") from None
        pos += size
    if pos != len(buf):
        raise ReplicaWireError(f"replica fetch response has {len(buf) - pos} trailing bytes")
    return out
