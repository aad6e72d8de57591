"""The vocabulary of the Raft core (`raft/core.py`): log entries, snapshots, the configuration, the
messages voters exchange with their JSON wire form, and the events a host feeds the core and the
effects the core answers with. Plain values, no behaviour beyond (de)serialising and checking them.
"""

from __future__ import annotations

import base64
import enum
from dataclasses import dataclass
from typing import Any, Union

from lakelog.infra.config import ConfigError
from lakelog.infra.errors import ErrorKind, LakelogError

NO_NODE = -1  # voted_for / leader_id when there is none (kept an int so it fits every wire and file)
MAX_WIRE_INT = 2**63 - 1  # terms, indexes and ids fit a signed 64-bit integer (and the log's u64 fields)


# ---------------------------------------------------------------------------------------------
# Errors

class RaftError(LakelogError):
    """Root of the Raft package's errors."""


class MessageFormatError(RaftError):
    """A Raft message (dict from the wire) is malformed: a missing field, a wrong type, a bad value."""

    kind = ErrorKind.INVALID_REQUEST


class EntryTooLargeError(RaftError):
    """A proposed payload is larger than `max_entry_bytes`."""

    kind = ErrorKind.INVALID_REQUEST


# ---------------------------------------------------------------------------------------------
# Log entries, snapshots, configuration

class Role(enum.IntEnum):
    FOLLOWER = 0
    PRE_CANDIDATE = 1
    CANDIDATE = 2
    LEADER = 3


class EntryKind(enum.IntEnum):
    NO_OP = 0  # appended by every new leader at the start of its term; carries no command
    COMMAND = 1  # a payload for the replicated state machine


@dataclass(frozen=True, slots=True)
class Entry:
    index: int
    term: int
    kind: EntryKind
    payload: bytes = b""

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "term": self.term, "kind": int(self.kind),
                "payload": base64.b64encode(self.payload).decode("ascii")}

    @classmethod
    def from_dict(cls, d: Any) -> Entry:
        d = _mapping(d, "entry")
        kind = _int(d, "kind")
        if kind not in EntryKind._value2member_map_:
            raise MessageFormatError(f"entry kind {kind} is unknown")
        return cls(_int(d, "index", 1), _int(d, "term", 1), EntryKind(kind), _bytes(d, "payload"))


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The replicated state machine's state after applying every entry up to `last_index`."""

    last_index: int
    last_term: int
    data: bytes

    def to_dict(self) -> dict[str, Any]:
        return {"last_index": self.last_index, "last_term": self.last_term,
                "data": base64.b64encode(self.data).decode("ascii")}

    @classmethod
    def from_dict(cls, d: Any) -> Snapshot:
        d = _mapping(d, "snapshot")
        return cls(_int(d, "last_index", 1), _int(d, "last_term", 1), _bytes(d, "data"))


@dataclass(frozen=True)
class RaftConfig:
    """Timing and limits of one voter. Times are in ticks of the host's clock (e.g. 100 ms)."""

    election_timeout_ticks: int = 10  # a follower campaigns after a random [T, 2T) ticks without a leader
    heartbeat_interval_ticks: int = 2  # a leader sends AppendEntries to every peer this often
    max_entries_per_append: int = 64  # entries in one AppendEntries
    max_append_bytes: int = 1 << 20  # payload bytes in one AppendEntries (at least one entry is sent)
    max_entry_bytes: int = 1 << 20  # largest proposed payload
    pre_vote: bool = True
    check_quorum: bool = True

    def __post_init__(self) -> None:
        if self.election_timeout_ticks < 2:
            raise ConfigError("election_timeout_ticks must be >= 2")
        if not 1 <= self.heartbeat_interval_ticks < self.election_timeout_ticks:
            raise ConfigError("heartbeat_interval_ticks must be in [1, election_timeout_ticks)")
        if self.max_entries_per_append < 1 or self.max_append_bytes < 1 or self.max_entry_bytes < 1:
            raise ConfigError("max_entries_per_append, max_append_bytes and max_entry_bytes must be >= 1")


@dataclass(frozen=True)
class DurableState:
    """What survives a crash: loaded by the storage layer, handed to a new core on restart."""

    term: int = 0
    voted_for: int = NO_NODE
    snapshot: Snapshot | None = None
    entries: tuple[Entry, ...] = ()


# ---------------------------------------------------------------------------------------------
# Messages. Every message carries the sender's term and id; `to_dict` / `message_from_dict` are the
# JSON-friendly wire form (bytes as base64).

@dataclass(frozen=True, slots=True)
class RequestVote:
    term: int  # for a pre-vote: the term the sender would campaign in (its term + 1)
    sender: int
    last_log_index: int
    last_log_term: int
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class RequestVoteResponse:
    term: int  # a granted pre-vote echoes the request's term
    sender: int
    granted: bool
    pre_vote: bool = False


@dataclass(frozen=True, slots=True)
class AppendEntries:
    term: int
    sender: int
    prev_log_index: int
    prev_log_term: int
    entries: tuple[Entry, ...]
    leader_commit: int


@dataclass(frozen=True, slots=True)
class AppendEntriesResponse:
    term: int
    sender: int
    success: bool
    match_index: int  # on success: the follower's log equals the leader's up to here
    conflict_index: int = 0  # on failure: where the leader may retry from (hint)
    conflict_term: int = 0  # on failure: the follower's term at prev_log_index, 0 if it has none


@dataclass(frozen=True, slots=True)
class InstallSnapshot:
    term: int
    sender: int
    snapshot: Snapshot


@dataclass(frozen=True, slots=True)
class InstallSnapshotResponse:
    term: int
    sender: int
    match_index: int


Message = Union[RequestVote, RequestVoteResponse, AppendEntries, AppendEntriesResponse,
                InstallSnapshot, InstallSnapshotResponse]
_MESSAGE_TYPES = {cls.__name__: cls for cls in (RequestVote, RequestVoteResponse, AppendEntries,
                                                AppendEntriesResponse, InstallSnapshot,
                                                InstallSnapshotResponse)}


def message_to_dict(m: Message) -> dict[str, Any]:
    d: dict[str, Any] = {"type": type(m).__name__}
    for name in m.__slots__:  # type: ignore[union-attr]
        v = getattr(m, name)
        if isinstance(v, Snapshot):
            v = v.to_dict()
        elif isinstance(v, tuple):
            v = [e.to_dict() for e in v]
        d[name] = v
    return d


def message_from_dict(d: Any) -> Message:
    """Decode and validate a message; raises MessageFormatError, never trusts the peer's types."""
    d = _mapping(d, "message")
    cls = _MESSAGE_TYPES.get(d.get("type"))  # type: ignore[arg-type]
    if cls is None:
        raise MessageFormatError(f"unknown message type {d.get('type')!r}")
    kwargs: dict[str, Any] = {}
    for name in cls.__slots__:
        if name == "entries":
            raw = d.get("entries")
            if not isinstance(raw, list):
                raise MessageFormatError("entries must be a list")
            kwargs[name] = tuple(Entry.from_dict(e) for e in raw)
        elif name == "snapshot":
            kwargs[name] = Snapshot.from_dict(d.get("snapshot"))
        elif name in ("granted", "pre_vote", "success"):
            if type(d.get(name)) is not bool:
                raise MessageFormatError(f"{cls.__name__}.{name} must be a boolean")
            kwargs[name] = d[name]
        else:
            kwargs[name] = _int(d, name)
    m = cls(**kwargs)
    if isinstance(m, AppendEntries):
        prev_index, prev_term = m.prev_log_index, m.prev_log_term
        for e in m.entries:
            if e.index != prev_index + 1 or e.term < prev_term or e.term > m.term:
                raise MessageFormatError(f"AppendEntries entries are not contiguous after "
                                         f"{m.prev_log_index} with terms in [{m.prev_log_term}, {m.term}]")
            prev_index, prev_term = e.index, e.term
    return m


def _mapping(d: Any, what: str) -> dict:
    if not isinstance(d, dict):
        raise MessageFormatError(f"{what} must be an object")
    return d


def _int(d: dict, name: str, minimum: int = 0) -> int:
    v = d.get(name)
    if type(v) is not int or not minimum <= v <= MAX_WIRE_INT:
        raise MessageFormatError(f"field {name!r} must be an integer in [{minimum}, 2^63), got {v!r}")
    return v


def _bytes(d: dict, name: str) -> bytes:
    v = d.get(name)
    try:
        return base64.b64decode(v, validate=True)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise MessageFormatError(f"field {name!r} must be base64 text") from None


# ---------------------------------------------------------------------------------------------
# Events and effects

@dataclass(frozen=True, slots=True)
class Tick:
    """One tick of the host's clock: drives election timeouts, heartbeats and check quorum."""


@dataclass(frozen=True, slots=True)
class Receive:
    message: Message


@dataclass(frozen=True, slots=True)
class Propose:
    payload: bytes


@dataclass(frozen=True, slots=True)
class ProposeMany:
    """Several client proposals at once: consecutive entries, one PersistEntries (group commit).

    The effects hold one `Proposed` (or one `ProposalRefused`) per payload, in the payloads' order.
    """

    payloads: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class CompactLog:
    """The host snapshotted the state machine at an applied index; drop the log up to it."""

    snapshot: Snapshot


@dataclass(frozen=True, slots=True)
class StepDown:
    """The host no longer trusts this voter's leadership (its clock jumped: a pause, see lease.py).

    A leader becomes a follower of no known leader in the same term, as check quorum would make it
    an election timeout later; it can lead again only by winning a new term. Anything else: no-op.
    """


Event = Union[Tick, Receive, Propose, ProposeMany, CompactLog, StepDown]


@dataclass(frozen=True, slots=True)
class PersistState:
    """Make (term, voted_for) durable (the `quorum-state` file)."""

    term: int
    voted_for: int


@dataclass(frozen=True, slots=True)
class PersistEntries:
    """Make the durable log equal to log[:first_index] + entries (truncating any suffix first)."""

    first_index: int
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class PersistSnapshot:
    """Write the snapshot, then drop the log up to it (keep_log_after) or the whole log."""

    snapshot: Snapshot
    keep_log_after: bool


@dataclass(frozen=True, slots=True)
class Send:
    to: int
    message: Message


@dataclass(frozen=True, slots=True)
class Apply:
    """Apply a committed entry to the state machine (entries come in index order, each once)."""

    entry: Entry


@dataclass(frozen=True, slots=True)
class RestoreSnapshot:
    """Replace the state machine's state with the snapshot's (after it was persisted)."""

    snapshot: Snapshot


@dataclass(frozen=True, slots=True)
class RoleChanged:
    role: Role
    term: int
    leader_id: int


@dataclass(frozen=True, slots=True)
class Proposed:
    """The leader appended the proposal at (term, index); it is acknowledged when that entry is applied."""

    term: int
    index: int


@dataclass(frozen=True, slots=True)
class ProposalRefused:
    """Not the leader: the client should retry at `leader_id` (NO_NODE if unknown)."""

    term: int
    leader_id: int


Effect = Union[PersistState, PersistEntries, PersistSnapshot, Send, Apply, RestoreSnapshot,
               RoleChanged, Proposed, ProposalRefused]
_PERSIST = (PersistState, PersistEntries, PersistSnapshot)
