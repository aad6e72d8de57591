"""Following the metadata log from a node that is not a voter.

`MetadataBatch` is the answer of `GET /internal/metadata?from_index=N` (served by `QuorumHost.read_metadata`
through the internal router); `MetadataFollower` polls a voter for it and applies the entries into a local
state machine (the observer nodes of `cluster/observer.py`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import httpx

from lakelog.infra.config import ConfigError
from lakelog.ingest_api.security.cluster_auth import ClusterAuth, check_secret
from lakelog.infra.errors import invariant
from lakelog.ingest_api.cluster.errors import MetadataFollowerError, QuorumTimeoutError, QuorumUnavailableError
from lakelog.ingest_api.cluster.quorum_config import METADATA_PATH, base_url
from lakelog.ingest_api.config.node import NODE_CONFIG
from lakelog.ingest_api.raft.messages import MAX_WIRE_INT, NO_NODE, Entry, MessageFormatError, Snapshot
from lakelog.ingest_api.raft.state_machine import StateMachine

log = logging.getLogger("lakelog.quorum")

METADATA_BATCH_VERSION = 1

# ---------------------------------------------------------------------------------------------
# The metadata fetch answer (wire form shared by the endpoint and MetadataFollower)

@dataclass(frozen=True)
class MetadataBatch:
    """Committed entries after a fetch's `from_index` (and the snapshot first when it is below the log start).

    JSON: {"version": 1, "node_id", "term", "leader_id", "commit_index", "applied_index",
           "snapshot": null | {"last_index", "last_term", "data": base64},
           "entries": [{"index", "term", "kind", "payload": base64}, ...]}
    Entries are contiguous and follow the snapshot (if any) or from_index.
    """

    node_id: int
    term: int
    leader_id: int
    commit_index: int
    applied_index: int
    snapshot: Snapshot | None
    entries: tuple[Entry, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"version": METADATA_BATCH_VERSION, "node_id": self.node_id, "term": self.term,
                "leader_id": self.leader_id, "commit_index": self.commit_index,
                "applied_index": self.applied_index,
                "snapshot": self.snapshot.to_dict() if self.snapshot else None,
                "entries": [e.to_dict() for e in self.entries]}

    @classmethod
    def from_dict(cls, d: Any) -> MetadataBatch:
        if not isinstance(d, dict) or d.get("version") != METADATA_BATCH_VERSION:
            version = d.get("version") if isinstance(d, dict) else None
            raise MetadataFollowerError(f"metadata batch version {version!r} is not {METADATA_BATCH_VERSION}")
        ints = {}
        for name in ("node_id", "term", "leader_id", "commit_index", "applied_index"):
            v = d.get(name)
            if type(v) is not int or not NO_NODE <= v <= MAX_WIRE_INT:
                raise MetadataFollowerError(f"metadata batch field {name!r} must be an integer, got {v!r}")
            ints[name] = v
        entries = d.get("entries")
        if not isinstance(entries, list):
            raise MetadataFollowerError("metadata batch entries must be a list")
        try:
            snapshot = None if d.get("snapshot") is None else Snapshot.from_dict(d["snapshot"])
            parsed = tuple(Entry.from_dict(e) for e in entries)
        except MessageFormatError as e:
            raise MetadataFollowerError(f"malformed metadata batch: {e}") from None
        return cls(snapshot=snapshot, entries=parsed, **ints)


#: The keys a voter answers a metadata fetch by: what this follower asks for unless told otherwise.
_KEY = NODE_CONFIG.keys


# ---------------------------------------------------------------------------------------------
# Observers

class MetadataFollower:
    """Follows the metadata log of a quorum from a node that is not a voter; applies into a local state machine.

    Polls `GET /internal/metadata?from_index=<applied>` on one voter (the leader once known, else any),
    long-polling up to `max_wait_ms`; on an error it moves to the next voter. A snapshot in the answer
    replaces the state machine's state; entries are applied in order, each once. The answers are not
    signed (only requests are): run the cluster network over TLS where that matters.

    Concurrency: call from the event loop it was started in. `state_machine` is only touched by the
    follower's task (or by `poll_once` when not started).
    """

    def __init__(self, node_id: int, voters: Mapping[int, tuple[str, int]], secret: bytes,
                 state_machine: StateMachine, *, applied_index: int = 0, poll_interval_ms: int = 100,
                 max_wait_ms: int = 500, request_timeout_ms: int = 5000,
                 max_entries: int = _KEY["metadata.fetch.max.entries"].default,
                 max_bytes: int = _KEY["metadata.fetch.max.bytes"].default, max_response_bytes: int = 64 << 20,
                 on_applied: Callable[[int], None] | None = None, rng: random.Random | None = None) -> None:
        if not voters:
            raise ConfigError("a metadata follower needs at least one voter")
        self.node_id = node_id
        self.voters = dict(voters)
        self.state_machine = state_machine
        self.on_applied = on_applied
        self.poll_interval_ms = poll_interval_ms
        self.max_wait_ms = max_wait_ms
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_response_bytes = max_response_bytes
        self.applied_index = applied_index
        self.leader_id = NO_NODE
        self.term = 0
        self.failure: BaseException | None = None
        self._secret = check_secret(secret)
        self._request_timeout_s = (request_timeout_ms + max_wait_ms) / 1000
        self._order = sorted(self.voters)
        self._current = (rng or random.Random()).choice(self._order)
        self._client: httpx.AsyncClient | None = None
        self._task: asyncio.Task | None = None
        self._changed = asyncio.Event()

    async def start(self) -> None:
        invariant(self._task is None, "metadata follower already started")
        self._ensure_client()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"metadata-follower-{self.node_id}")

    async def stop(self) -> None:
        await cancel_task(self._task)
        self._task = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def wait_for_applied(self, index: int, timeout_s: float) -> int:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.applied_index < index:
            if self.failure is not None:
                raise QuorumUnavailableError(f"metadata follower {self.node_id} failed: {self.failure}")
            changed = self._changed
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise QuorumTimeoutError(f"metadata follower {self.node_id} did not apply {index} within "
                                         f"{timeout_s}s (applied {self.applied_index})")
            try:
                await asyncio.wait_for(changed.wait(), remaining)
            except (TimeoutError, asyncio.TimeoutError):
                pass
        return self.applied_index

    def _ensure_client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(auth=ClusterAuth(self._secret, self.node_id), trust_env=False,
                                             timeout=httpx.Timeout(self._request_timeout_s))
        return self._client

    async def poll_once(self, max_wait_ms: int = 0) -> int:
        """One fetch from the current voter and its application; the number of entries (or snapshots) applied.

        Raises httpx errors, MetadataFollowerError (the answer is unusable) or a voter's error status.
        """
        client = self._ensure_client()
        url = base_url(self.voters[self._current]) + METADATA_PATH
        params = {"from_index": self.applied_index, "max_entries": self.max_entries, "max_bytes": self.max_bytes,
                  "max_wait_ms": max_wait_ms}
        async with client.stream("GET", url, params=params) as r:
            chunks, size = [], 0
            async for chunk in r.aiter_bytes():
                size += len(chunk)
                if size > self.max_response_bytes:
                    raise MetadataFollowerError(f"metadata answer exceeds {self.max_response_bytes} bytes")
                chunks.append(chunk)
        body = b"".join(chunks)
        if r.status_code != 200:
            raise MetadataFollowerError(f"voter {self._current} answered {r.status_code}: {body[:200]!r}")
        try:
            batch = MetadataBatch.from_dict(json.loads(body))
        except ValueError:
            raise MetadataFollowerError(f"voter {self._current} answered with something other than JSON") from None
        n = self._apply(batch)
        self.term = max(self.term, batch.term)
        if batch.leader_id in self.voters and batch.term >= self.term:
            self.leader_id = batch.leader_id
            self._current = batch.leader_id  # the leader is the most up to date voter
        return n

    def _apply(self, batch: MetadataBatch) -> int:
        n = 0
        if batch.snapshot is not None and batch.snapshot.last_index > self.applied_index:
            self.state_machine.restore(batch.snapshot.data)
            self.applied_index = batch.snapshot.last_index
            n += 1
        for e in batch.entries:
            if e.index <= self.applied_index:
                continue
            if e.index != self.applied_index + 1:
                raise MetadataFollowerError(f"voter {batch.node_id} sent entry {e.index} after applied index "
                                            f"{self.applied_index} (a gap)")
            self.state_machine.apply(e)
            self.applied_index = e.index
            n += 1
        if n:
            if self.on_applied is not None:
                try:
                    self.on_applied(self.applied_index)
                except Exception:
                    log.exception("metadata follower %d: on_applied failed", self.node_id)
            self._changed.set()
            self._changed = asyncio.Event()
        return n

    async def _run(self) -> None:
        while True:
            try:
                n = await self.poll_once(self.max_wait_ms)
            except (httpx.HTTPError, OSError, MetadataFollowerError) as e:
                log.debug("metadata follower %d: fetch from voter %d failed: %r", self.node_id, self._current, e)
                self._current = self._order[(self._order.index(self._current) + 1) % len(self._order)]
                self.leader_id = NO_NODE
                await asyncio.sleep(self.poll_interval_ms / 1000)
                continue
            except Exception as e:  # the state machine failed: its state is unknown, stop following
                self.failure = e
                log.critical("metadata follower %d stops: %s", self.node_id, e, exc_info=e)
                self._changed.set()
                return
            if n == 0:
                await asyncio.sleep(self.poll_interval_ms / 1000)


async def cancel_task(task: asyncio.Task | None) -> None:
    if task is None or task.done():
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    except Exception:
        log.exception("task %s failed while cancelled", task.get_name())
