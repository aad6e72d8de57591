"""The settings of a REST Proxy consumer instance and their limits (groups/consumer.py).

`InstanceConfig` is what a create-instance request configured (`ConsumerManager.parse_config` in
consumer.py checks and bounds it); `FORMATS` maps the v2 consumer formats to their media types;
`validate_name` checks group and instance names; the constants bound a subscription, an
assignment, a fetch round of `records` and the node's shutdown.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lakelog.ingest_api.errors import InvalidRequestError
from lakelog.ingest_api.records.formats import BINARY_V2, JSON_V2
from lakelog.ingest_api.schemas.rest import AVRO_V2, JSONSCHEMA_V2, PROTOBUF_V2

ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
FORMATS = {"json": JSON_V2, "binary": BINARY_V2, "avro": AVRO_V2, "jsonschema": JSONSCHEMA_V2,
           "protobuf": PROTOBUF_V2}
#: Longest wait of one fetch round of `records` (then the round is repeated until the timeout).
FETCH_ROUND_MS = 200
#: Most topics of one subscription / partitions of one assignment.
MAX_TOPICS = 1000
MAX_PARTITIONS = 10_000
MAX_PATTERN_CHARS = 1000
#: Most time the node's shutdown waits for its instances to commit and leave their groups.
STOP_TIMEOUT_S = 2.0
_NAME = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def validate_name(name: str, what: str) -> str:
    if not _NAME.match(name or "") or name in (".", ".."):
        raise InvalidRequestError(f"{what} {name!r} must be 1 to 249 of ASCII letters, digits, '.', '_' and '-'")
    return name


@dataclass(frozen=True)
class InstanceConfig:
    format: str
    auto_offset_reset: str
    auto_commit_enable: bool
    auto_commit_interval_ms: int
    session_timeout_ms: int
    heartbeat_interval_ms: int
    strategies: tuple[str, ...]
    max_poll_records: int
    #: "read_uncommitted" or "read_committed" (Kafka's `isolation.level`): committed records only,
    #: below the last stable offset.
    isolation_level: str = "read_uncommitted"
