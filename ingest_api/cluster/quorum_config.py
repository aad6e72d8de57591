"""The controller quorum's settings: `controller.quorum.voters` parsing and one voter's `QuorumConfig`.

Also the wire paths of the quorum's internal endpoints, shared by the host (`cluster/quorum.py`), the
metadata follower (`cluster/metadata_follower.py`) and the internal router.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from lakelog.infra.config import ConfigError, from_keys, keyed
from lakelog.ingest_api.security.cluster_auth import DEFAULT_MAX_SKEW_MS, check_secret
from lakelog.ingest_api.config.node import NODE_CONFIG
from lakelog.ingest_api.raft.messages import MAX_WIRE_INT, RaftConfig

METADATA_DIR_NAME = "__cluster_metadata-0"
RAFT_MESSAGES_PATH = "/internal/raft/messages"
METADATA_PATH = "/internal/metadata"
_ENTRY_JSON_OVERHEAD = 128  # bytes of JSON around one entry's base64 payload (generous)
_MESSAGE_JSON_OVERHEAD = 1024

# ---------------------------------------------------------------------------------------------
# Configuration

_VOTER = re.compile(r"^(\d+)@(\[[0-9A-Fa-f:.]+\]|[^:\[\]@\s]+):(\d+)$")


def parse_voters(spec: str) -> dict[int, tuple[str, int]]:
    """`controller.quorum.voters` in KRaft's form `1@host:port,2@host:port` (IPv6 as `[::1]`)."""
    voters: dict[int, tuple[str, int]] = {}
    for part in (p.strip() for p in spec.split(",")):
        m = _VOTER.match(part)
        if m is None:
            raise ConfigError(f"controller.quorum.voters: {part!r} is not id@host:port")
        node_id, host, port = int(m[1]), m[2].strip("[]"), int(m[3])
        if not 0 <= node_id <= MAX_WIRE_INT:
            raise ConfigError(f"controller.quorum.voters: node id {node_id} is out of range")
        if not 1 <= port <= 65535:
            raise ConfigError(f"controller.quorum.voters: port {port} of voter {node_id} is out of range")
        if node_id in voters:
            raise ConfigError(f"controller.quorum.voters: voter {node_id} is listed twice")
        voters[node_id] = (host, port)
    return voters


def format_voters(voters: Mapping[int, tuple[str, int]]) -> str:
    return ",".join(f"{i}@{_host(h)}:{p}" for i, (h, p) in sorted(voters.items()))


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def base_url(address: tuple[str, int], tls: bool = False) -> str:
    return f"{'https' if tls else 'http'}://{_host(address[0])}:{address[1]}"


_KEY = NODE_CONFIG.keys


def _heartbeat_of_election(election_timeout_ms: int) -> int:
    return election_timeout_ms // 10


@dataclass(frozen=True)
class QuorumConfig:
    """One voter's settings. Kafka's key names where they exist are noted on each field.

    A `keyed` field takes its default from its declared key (ingest_api/config/node.py) and the node
    builds it from its configuration (`from_keys`); its bounds here are the host's own (>= 1), wider
    than the key's so tests can run a fast, small quorum. The heartbeat is a tenth of the election
    timeout unless given (the node keeps it at least a tick).
    """

    node_id: int  # node.id
    voters: Mapping[int, tuple[str, int]]  # controller.quorum.voters, see parse_voters; host:port of /internal
    secret: bytes  # cluster.secret: HMAC key of internal requests, >= 16 bytes
    data_dir: Path  # the node's data directory (log.dirs); the metadata log goes under it by default
    metadata_log_dir: Path | None = None  # metadata.log.dir: parent of __cluster_metadata-0/ instead of data_dir
    tick_ms: int = keyed(_KEY["controller.quorum.tick.ms"])  # the Raft clock; timeouts become ticks
    election_timeout_ms: int = keyed(_KEY["controller.quorum.election.timeout.ms"])  # [T, 2T) ms
    #: a leader's AppendEntries to each peer at least this often: a tenth of the election timeout
    heartbeat_interval_ms: int = keyed(_KEY["controller.quorum.election.timeout.ms"], _heartbeat_of_election)
    snapshot_interval_entries: int = keyed(_KEY["metadata.snapshot.interval.entries"])
    request_timeout_ms: int = keyed(_KEY["controller.quorum.request.timeout.ms"])  # one message POST, then dropped
    max_message_bytes: int = keyed(_KEY["controller.quorum.message.max.bytes"])  # a snapshot travels whole
    max_entries_per_append: int = keyed(_KEY["controller.quorum.append.request.max.entries"])
    #: controller.quorum.append.max.entries: events stepped as one group (group commit; 1 = one at a time)
    append_max_entries: int = keyed(_KEY["controller.quorum.append.max.entries"])
    max_append_bytes: int = keyed(_KEY["controller.quorum.append.request.max.bytes"])
    max_entry_bytes: int = keyed(_KEY["controller.quorum.entry.max.bytes"])  # largest proposal
    max_inflight_sends_per_peer: int = keyed(_KEY["controller.quorum.peer.max.inflight.sends"])
    max_pending_events: int = keyed(_KEY["controller.quorum.max.pending.events"])  # the inbox's bound
    metadata_fetch_max_entries: int = keyed(_KEY["metadata.fetch.max.entries"])  # per GET /internal/metadata
    metadata_fetch_max_bytes: int = keyed(_KEY["metadata.fetch.max.bytes"])
    metadata_fetch_max_wait_ms: int = keyed(_KEY["metadata.fetch.max.wait.ms"])
    max_clock_skew_ms: int = DEFAULT_MAX_SKEW_MS  # accepted signature timestamp skew
    fsync: bool = True  # False only for tests that do not care about crashes
    tls: Any = None  # an ssl.SSLContext: call peers over HTTPS (ssl.* keys); None = plain HTTP

    def __post_init__(self) -> None:
        object.__setattr__(self, "secret", check_secret(self.secret))
        object.__setattr__(self, "data_dir", Path(self.data_dir))
        if self.metadata_log_dir is not None:
            object.__setattr__(self, "metadata_log_dir", Path(self.metadata_log_dir))
        object.__setattr__(self, "voters", {int(k): (str(h), int(p)) for k, (h, p) in self.voters.items()})
        if self.node_id not in self.voters:
            raise ConfigError(f"node.id {self.node_id} is not one of controller.quorum.voters "
                              f"{format_voters(self.voters)}")
        for name in ("tick_ms", "election_timeout_ms", "heartbeat_interval_ms", "snapshot_interval_entries",
                     "append_max_entries",
                     "request_timeout_ms", "max_message_bytes", "max_inflight_sends_per_peer",
                     "max_pending_events", "metadata_fetch_max_entries", "metadata_fetch_max_bytes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.metadata_fetch_max_wait_ms < 0 or self.max_clock_skew_ms < 0:
            raise ConfigError("metadata_fetch_max_wait_ms and max_clock_skew_ms must be >= 0")
        self.raft_config()  # validates the tick counts and append limits
        largest = max(self.max_append_bytes, self.max_entry_bytes)
        needed = 4 * math.ceil(largest / 3) + self.max_entries_per_append * _ENTRY_JSON_OVERHEAD + _MESSAGE_JSON_OVERHEAD
        if self.max_message_bytes < needed:
            raise ConfigError(f"max_message_bytes {self.max_message_bytes} cannot carry a full AppendEntries "
                              f"(up to {needed} bytes of JSON with max_append_bytes / max_entry_bytes {largest})")

    @classmethod
    def from_keys(cls, config: Any, **fields: Any) -> "QuorumConfig":
        """Every keyed field from a node's configuration, then `fields` (node id, voters, secret, ...)."""
        return from_keys(cls, config, **fields)

    @property
    def directory(self) -> Path:
        """`<metadata.log.dir or data dir>/__cluster_metadata-0`, as Kafka names the metadata log."""
        return (self.metadata_log_dir or self.data_dir) / METADATA_DIR_NAME

    @property
    def election_timeout_ticks(self) -> int:
        return max(2, math.ceil(self.election_timeout_ms / self.tick_ms))

    @property
    def heartbeat_interval_ticks(self) -> int:
        return max(1, math.ceil(self.heartbeat_interval_ms / self.tick_ms))

    def raft_config(self) -> RaftConfig:
        return RaftConfig(election_timeout_ticks=self.election_timeout_ticks,
                          heartbeat_interval_ticks=self.heartbeat_interval_ticks,
                          max_entries_per_append=self.max_entries_per_append,
                          max_append_bytes=self.max_append_bytes, max_entry_bytes=self.max_entry_bytes)

    @property
    def peers(self) -> tuple[int, ...]:
        return tuple(sorted(v for v in self.voters if v != self.node_id))
