"""Follower side of replication: one fetcher task per leader node, one fetch session with it.

A fetcher owns the follower partitions whose leader is its node, and fetches them all in one fetch
session (`sessions.py`): the first request names every partition, later ones only the partitions
whose fetch state changed since (appended to, truncated, added, paused, forgotten), so an idle
round names none and costs the same at any partition count. Only changed partitions (`_dirty`:
named in the last answer, added or removed by the metadata, truncated) and ended pauses are looked
at when the next request is built. Any failed request ends the session: the next one opens a new
session with a full request. Before a partition fetches for
the first time in a leader epoch (after a restart, or when it sees a new leader) it asks the leader
OffsetsForLeaderEpoch for its own latest epoch and truncates to the answer (KIP-101 / KIP-279,
`truncation.py`) — never to its own high watermark. Then it long-polls the leader with its fetch
offset (= its LEO, which is how the leader learns it), appends what comes back (CRC-checked again)
and sets its HW to min(leader HW, own LEO).

Replication throttle (`cluster/throttles.py`): a partition whose replica here is throttled and out
of the ISR asks for at most what the follower quota allows now, and is left out of the request
while the quota is spent.

Errors per partition: OFFSET_OUT_OF_RANGE below the leader's log start restarts the log empty at
the leader's start offset; above the leader's LEO it truncates again. FENCED / UNKNOWN leader
epoch and NOT_LEADER pause the partition until the node's metadata moves it. A failed request
backs off `replica.fetch.backoff.ms`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from typing import TYPE_CHECKING

from lakelog.ingest_api.cluster.metadata_follower import cancel_task
from lakelog.ingest_api.replication.events import Role
from lakelog.ingest_api.replication.partition import Partition, PartitionKey
from lakelog.ingest_api.replication import wire
from lakelog.ingest_api.replication.truncation import (
    AskAgain,
    Truncate,
    first_request,
    follower_truncation_offset,
)

if TYPE_CHECKING:
    from lakelog.ingest_api.node import Node

log = logging.getLogger("lakelog.replication")

#: Most OffsetsForLeaderEpoch rounds for one truncation (KIP-279 needs at most a few).
MAX_TRUNCATION_ROUNDS = 16
#: Truncating at least this many partitions at once is reported at INFO (a restart, a failover).
TRUNCATION_REPORT_MIN = 10
#: Retry delay when the leader has not applied the metadata this node has (about a Raft round trip).
LAGGING_LEADER_RETRY_S = 0.05


class ReplicaFetcher:
    def __init__(self, node: "Node", leader_id: int) -> None:
        self.node = node
        self.leader_id = leader_id
        self.keys: set[PartitionKey] = set()
        self._changed = asyncio.Event()
        self._task: asyncio.Task | None = None
        #: key -> (leader epoch it was paused in, monotonic time the pause ends)
        self._paused: dict[PartitionKey, tuple[int, float]] = {}
        #: Partitions whose fetch state may have changed since the last request: only these are
        #: looked at when the next request is built (an idle, caught-up partition is not).
        self._dirty: set[PartitionKey] = set()
        #: Throttled partitions (out of the ISR, a follower rate set): looked at every round.
        self._throttled: set[PartitionKey] = set()
        #: The fetch session with the leader (`sessions.py`); id 0: the next request opens one.
        self._session_id = 0
        self._session_epoch = 0
        #: key -> (fetch offset, leader epoch, log start, max bytes) as the session last carried it.
        self._sent: dict[PartitionKey, tuple[int, int, int, int]] = {}
        #: Operation counts (tests, metrics): requests sent, partitions looked at building them.
        self.requests = 0
        self.partitions_examined = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"fetcher-{self.leader_id}")

    async def stop(self) -> None:
        await cancel_task(self._task)
        self._task = None

    def add(self, key: PartitionKey) -> None:
        self.keys.add(key)
        self._paused.pop(key, None)
        self._dirty.add(key)
        self._changed.set()

    def remove(self, key: PartitionKey) -> None:
        self.keys.discard(key)
        self._paused.pop(key, None)
        self._dirty.add(key)
        self._changed.set()

    def _reset_session(self) -> None:
        """The next request opens a new session and names every partition."""
        self._session_id = 0
        self._sent.clear()

    def _eligible(self, key: PartitionKey, now: float) -> Partition | None:
        p = self.node.local_partition(key)
        if key not in self.keys or p is None or p.role != Role.FOLLOWER or p.leader_id != self.leader_id:
            return None
        paused = self._paused.get(key)
        if paused is not None:
            if paused[0] == p.leader_epoch and now < paused[1]:
                return None
            del self._paused[key]
        return p

    def _plan(self) -> tuple[list[Partition], dict[PartitionKey, Partition], list[PartitionKey]]:
        """(partitions to truncate first, partitions whose fetch state the next request carries,
        partitions to forget): a full pass over `keys` only when a session opens, otherwise over
        the changed partitions and the pauses that ended."""
        now = time.monotonic()
        if self._session_id == 0:
            look = set(self.keys) | self._dirty | set(self._sent)
        else:
            look = self._dirty | {k for k, (_, until) in self._paused.items() if until <= now}
        look |= self._throttled
        self._dirty, self._throttled = set(), set()
        need, fetch, forget = [], {}, []
        for key in look:
            self.partitions_examined += 1
            p = self._eligible(key, now)
            if p is None or p.needs_truncation:
                if p is not None:
                    need.append(p)
                if key in self._sent:
                    forget.append(key)
                continue
            fetch[key] = p
        return need, fetch, forget

    async def _run(self) -> None:
        cfg = self.node.config
        backoff = cfg.replica_fetch_backoff_ms / 1000
        while True:
            try:
                need, fetch, forget = self._plan()
                if need:
                    await self._truncate(need)
                    for p in need:
                        self._dirty.add(p.key)
                if (fetch or forget or self._sent) and await self._fetch(fetch, forget):
                    continue
                if self._dirty:  # truncated, or changed meanwhile: plan again at once
                    continue
                # Nothing to fetch (or every partition's throttle quota is spent): wait for a change,
                # a pause to end, or the backoff.
                self._changed.clear()
                now = time.monotonic()
                wait = min([backoff] + [max(0.0, until - now) for _, until in self._paused.values()])
                try:
                    await asyncio.wait_for(self._changed.wait(), max(wait, 0.01))
                except asyncio.TimeoutError:
                    pass
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a peer down, a bad answer: back off and retry in a new session
                log.info("fetch from node %s failed: %s", self.leader_id, e)
                self._reset_session()
                await asyncio.sleep(backoff)

    # ------------------------------------------------------------------ truncation

    async def _truncate(self, parts: list[Partition]) -> None:
        started = time.monotonic()
        rounds = await self._truncate_rounds(parts)
        if len(parts) >= TRUNCATION_REPORT_MIN:
            log.info("truncation of %d partitions following node %d: %d OffsetsForLeaderEpoch round(s), %.1f s",
                     len(parts), self.leader_id, rounds, time.monotonic() - started)

    async def _truncate_rounds(self, parts: list[Partition]) -> int:
        """The truncation of `parts`; returns the OffsetsForLeaderEpoch rounds it took."""
        epochs_at_start = {p.key: p.leader_epoch for p in parts}
        asking: dict[PartitionKey, int] = {}
        for p in parts:
            step = first_request(p.log.epochs.entries, p.log.log_end_offset, high_watermark=p.high_watermark)
            if isinstance(step, Truncate):
                self._apply_truncation(p, step.offset)
            else:
                asking[p.key] = step.epoch
        for rounds in range(MAX_TRUNCATION_ROUNDS):
            if not asking:
                return rounds
            body = {"replica_id": self.node.node_id,
                    "partitions": [{"topic": k.topic, "partition": k.partition,
                                    "current_leader_epoch": epochs_at_start[k], "leader_epoch": e}
                                   for k, e in asking.items()]}
            resp = await self.node.peers.post_json(self.leader_id, "/internal/replication/epoch_end_offsets", body,
                                                   timeout_s=self.node.config.request_timeout_ms / 1000)
            if resp.status_code != 200:
                raise RuntimeError(f"OffsetsForLeaderEpoch answered {resp.status_code}: {resp.text[:200]}")
            answers = {(a["topic"], a["partition"]): a for a in resp.json()["partitions"]}
            for key in list(asking):
                a = answers.get((key.topic, key.partition))
                p = self.node.local_partition(key)
                if a is None or p is None or p.leader_epoch != epochs_at_start[key] or p.role != Role.FOLLOWER:
                    del asking[key]
                    continue
                if a["error_code"] != wire.NONE:
                    self._pause(p, a.get("error"), int(a["error_code"]))
                    del asking[key]
                    continue
                step = follower_truncation_offset(p.log.epochs.entries, p.log.log_end_offset,
                                                  (int(a["leader_epoch"]), int(a["end_offset"])),
                                                  high_watermark=p.high_watermark)
                if isinstance(step, AskAgain):
                    # The records above `truncate_to` diverge from the leader: cut them now, ask again.
                    self._apply_truncation(p, step.truncate_to, final=False)
                    asking[key] = step.epoch
                    continue
                self._apply_truncation(p, step.offset)
                del asking[key]
        for key in asking:
            log.warning("%s: no truncation point after %d rounds; retrying", key, MAX_TRUNCATION_ROUNDS)
        return MAX_TRUNCATION_ROUNDS

    def _apply_truncation(self, p: Partition, offset: int, *, final: bool = True) -> None:
        leo = p.log.log_end_offset
        if offset < p.log.log_start_offset:
            p.log.truncate_fully_and_start_at(offset)
        else:
            p.log.truncate_to(offset)  # also drops an epoch entry left at the LEO when offset >= LEO
        if offset < leo:
            log.info("%s: truncated from %d to %d (leader epoch %d, leader node %d)", p.key, leo,
                     p.log.log_end_offset, p.leader_epoch, self.leader_id)
        p.truncated(final=final)

    def _pause(self, p: Partition, reason: str | None, code: int = wire.FENCED_LEADER_EPOCH) -> None:
        """Back off one partition until the metadata moves it, or a while passes.

        When the leader merely lags this node's metadata (it does not host the partition yet, or does
        not know this leader epoch yet) it catches up within a Raft round trip: retry after
        `LAGGING_LEADER_RETRY_S`. Otherwise (this node's epoch is the stale one) wait
        replica.fetch.backoff.ms, or until the metadata moves the partition.
        """
        lagging = code in (wire.UNKNOWN_LEADER_EPOCH, wire.UNKNOWN_TOPIC_OR_PARTITION, wire.NOT_LEADER_OR_FOLLOWER)
        backoff = self.node.config.replica_fetch_backoff_ms / 1000
        delay = min(LAGGING_LEADER_RETRY_S, backoff) if lagging else backoff
        log.info("%s: fetching from node %d in leader epoch %d backs off %.0f ms: %s", p.key, self.leader_id,
                 p.leader_epoch, delay * 1000, reason)
        self._paused[p.key] = (p.leader_epoch, time.monotonic() + delay)

    # ------------------------------------------------------------------ fetch

    async def _fetch(self, fetch: dict[PartitionKey, Partition], forget: list[PartitionKey]) -> bool:
        """One request of the session: the fetch states that changed (all of them when the session
        opens), the partitions forgotten; then the answer's partitions. False when nothing was sent
        (every partition throttled with its quota spent, or none left)."""
        cfg = self.node.config
        replicas = self.node.replicas
        now = time.monotonic()
        limits: dict[PartitionKey, tuple[int, int]] = {}  # throttled: key -> (rate, bytes allowed now)
        entries = []
        for key, p in fetch.items():
            max_bytes = cfg.replica_fetch_max_bytes
            rate = replicas.follower_throttle_rate(p)
            if rate is not None:
                limits[key] = (rate, min(max_bytes, replicas.follower_quota.allowance(rate, now)))
                max_bytes = limits[key][1]
                self._throttled.add(key)  # the allowance changes with time: looked at every round
                if max_bytes <= 0:  # its quota is spent: out of this request until it refills
                    if key in self._sent:
                        forget.append(key)
                    continue
            state = (p.log.log_end_offset, p.leader_epoch, p.log.log_start_offset, max_bytes)
            if self._session_id == 0 or self._sent.get(key) != state:
                entries.append((key, state))
        for key in forget:
            self._sent.pop(key, None)
        for key, state in entries:
            self._sent[key] = state
        if not self._sent and not forget:
            return False  # nothing to fetch, nothing to tell the leader
        if self._session_id == 0:
            self._session_id = random.randrange(1, 1 << 31)
            self._session_epoch = 0
        else:
            self._session_epoch += 1
        body = {"replica_id": self.node.node_id, "broker_epoch": self.node.broker_epoch,
                "session_id": self._session_id, "session_epoch": self._session_epoch,
                "max_wait_ms": cfg.replica_fetch_wait_max_ms, "max_bytes": cfg.replica_fetch_response_max_bytes,
                "partitions": [{"topic": k.topic, "partition": k.partition, "fetch_offset": st[0],
                                "current_leader_epoch": st[1], "log_start_offset": st[2], "max_bytes": st[3]}
                               for k, st in entries],
                "forgotten": [{"topic": k.topic, "partition": k.partition} for k in forget]}
        timeout = (cfg.replica_fetch_wait_max_ms + cfg.request_timeout_ms) / 1000
        self.requests += 1
        incremental = self._session_epoch > 0
        resp = await self.node.peers.request(self.leader_id, "POST", "/internal/replication/fetch",
                                             json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"}, timeout_s=timeout)
        if resp.status_code != 200:
            self._reset_session()
            if incremental:  # the leader lost the session (it restarted): open a new one at once
                log.info("fetch session with node %s refused (%s): opening a new one", self.leader_id,
                         resp.text[:200])
                return True
            raise RuntimeError(f"replica fetch answered {resp.status_code}: {resp.text[:200]}")
        for data in wire.decode_fetch_response(resp.content):
            key = PartitionKey(data.topic, data.partition)
            sent = self._sent.get(key)
            p = self.node.local_partition(key)
            self._dirty.add(key)
            if sent is None or p is None or p.role != Role.FOLLOWER or p.leader_id != self.leader_id \
                    or p.leader_epoch != sent[1] or p.needs_truncation:
                continue  # the partition moved while the request was out
            if data.error_code == wire.NONE:
                if key in limits:
                    replicas.follower_quota.record(limits[key][0], len(data.records), time.monotonic())
                p.append_as_follower(data.records, data.high_watermark, data.log_start_offset)
            elif data.error_code == wire.OFFSET_OUT_OF_RANGE:
                if p.log.log_end_offset < data.log_start_offset:
                    log.info("%s: fetch offset %d below the leader's log start %d; restarting the log there",
                             key, p.log.log_end_offset, data.log_start_offset)
                    p.restart_at(data.log_start_offset)
                else:
                    p.must_truncate()
            else:
                self._pause(p, data.error, data.error_code)
        return True
