"""The coordinator's side of the transaction markers: after a PrepareCommit / PrepareAbort is
acknowledged, one task per transactional id writes a marker to every partition of the transaction
and then has the Complete* record persisted.

Markers are grouped by the partition's leader and written locally (the owner's `write_here`, the
leader side: `Partition.append_txn_marker`, acks=all) or as the signed internal request
`POST /internal/transactions/markers` to the leader's node. A partition whose leader moved or was
unreachable is retried (backoff from 50 ms to 1 s, each attempt bounded by request.timeout.ms) until
every marker is written — at most `transaction.marker.max.attempts` rounds (0: no limit), after
which the coordinator's next tick schedules the markers again. A marker the partition refuses as
superseded (a newer producer epoch or coordinator) counts as written. A deleted topic's markers
have nowhere to go and count as written too.

Concurrency: everything runs on the server's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Awaitable, Callable

from lakelog.ingest_api.cluster.metadata_follower import cancel_task
from lakelog.ingest_api.errors import NodeError
from lakelog.ingest_api.replication.partition import now_ms
from lakelog.ingest_api.transactions.coordinator import Persist, TransactionCoordinator, WriteMarkers

log = logging.getLogger("lakelog.transactions")

#: Backoff between marker attempts, first and longest (seconds).
MARKER_BACKOFF_S = (0.05, 1.0)


class MarkerWriter:
    def __init__(self, node: Any, coordinator: TransactionCoordinator, *,
                 persist: Callable[[Persist], Awaitable[None]],
                 write_here: Callable[[list[dict[str, Any]]], Awaitable[list[dict[str, Any]]]]) -> None:
        """`node`: its `config`, metadata `image`, `node_id` and `peers`; `persist`: appends a
        coordinator change with acks=all and applies it; `write_here`: the markers of partitions this
        node leads, one answer per marker."""
        self.node = node
        self.config = node.config
        self.coordinator = coordinator
        self._persist = persist
        self._write_here = write_here
        #: transactional id -> the task writing its markers.
        self._tasks: dict[str, asyncio.Task] = {}

    def schedule(self, e: WriteMarkers) -> None:
        """Start writing the markers of `e` unless the id's markers are being written already."""
        running = self._tasks.get(e.transactional_id)
        if running is not None and not running.done():
            return
        self._tasks[e.transactional_id] = asyncio.get_running_loop().create_task(
            self._write(e), name=f"markers-{e.transactional_id}")

    def cancel(self, of_id: Callable[[str], bool]) -> None:
        """Stop writing the markers of the ids `of_id` picks (their partition is no longer led here)."""
        for tid in [t for t in self._tasks if of_id(t)]:
            self._tasks.pop(tid).cancel()

    async def settled(self, transactional_id: str, timeout_s: float) -> None:
        """Wait, at most `timeout_s`, for the markers being written for the id's last transaction."""
        task = self._tasks.get(transactional_id)
        if task is not None and not task.done():
            await asyncio.wait({task}, timeout=timeout_s)

    async def stop(self) -> None:
        for t in list(self._tasks.values()):
            await cancel_task(t)
        self._tasks.clear()

    async def _write(self, e: WriteMarkers) -> None:
        """Every marker of `e`, retried per partition until written; then the Complete* record."""
        left = set(e.partitions)
        delay, attempts = MARKER_BACKOFF_S[0], 0
        max_attempts = self.config.transaction_marker_max_attempts
        try:
            while left:
                attempts += 1
                by_leader: dict[int, list[tuple[str, int]]] = {}
                for tp in sorted(left):
                    by_leader.setdefault(self._leader_of(*tp), []).append(tp)
                if len(by_leader) == 1:  # the common case: no task per leader to schedule and await
                    [(leader, tps)] = by_leader.items()
                    results = [await self._send(leader, tps, e)]
                else:
                    results = await asyncio.gather(*(self._send(leader, tps, e) for leader, tps in by_leader.items()))
                for written in results:
                    left -= written
                if not left:
                    break
                if max_attempts and attempts >= max_attempts:
                    log.warning("transaction %s: %d marker(s) not written after %d attempts (retried next tick)",
                                e.transactional_id, len(left), attempts)
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, MARKER_BACKOFF_S[1])
            persist = self.coordinator.markers_written(e.transactional_id, e.producer_id, e.producer_epoch, now_ms())
            if persist is not None:
                await self._persist(persist)
        except asyncio.CancelledError:
            raise
        except NodeError as err:
            log.info("transaction %s: completing it failed (retried next tick): %s", e.transactional_id, err)
        finally:
            if self._tasks.get(e.transactional_id) is asyncio.current_task():
                del self._tasks[e.transactional_id]

    def _leader_of(self, topic: str, partition: int) -> int:
        t = self.node.image.topics.get(topic)
        if t is None or not 0 <= partition < len(t.partitions):
            return -1
        return t.partitions[partition].leader

    async def _send(self, leader: int, tps: list[tuple[str, int]], e: WriteMarkers) -> set[tuple[str, int]]:
        """Write the markers of `tps` on their leader; returns those written (or whose partition is gone)."""
        markers = [{"topic": t, "partition": p, "producer_id": e.producer_id, "producer_epoch": e.producer_epoch,
                    "commit": e.commit, "coordinator_epoch": e.coordinator_epoch} for t, p in tps]
        gone = {tp for tp in tps if tp[0] not in self.node.image.topics}
        if gone:  # a deleted topic's markers have nowhere to go (Kafka drops them too)
            markers = [m for m in markers if (m["topic"], m["partition"]) not in gone]
        if leader < 0 or not markers:
            return gone
        try:
            if leader == self.node.node_id:
                answers = await self._write_here(markers)
            else:
                resp = await self.node.peers.post_json(leader, "/internal/transactions/markers", {"markers": markers},
                                                       timeout_s=self.config.request_timeout_ms / 1000 + 5)
                answers = resp.json().get("results", []) if resp.status_code == 200 else []
        except (NodeError, OSError, ValueError) as err:
            log.info("transaction %s: markers to node %d failed (retrying): %s", e.transactional_id, leader, err)
            return gone
        written = {(a["topic"], int(a["partition"])) for a in answers if a.get("error") is None or a.get("superseded")}
        for a in answers:
            if a.get("superseded"):
                log.warning("transaction %s: marker for %s-%s superseded: %s", e.transactional_id, a["topic"],
                            a["partition"], a["error"])
            elif a.get("error") is not None:
                log.info("transaction %s: marker for %s-%s: %s (retrying)", e.transactional_id, a["topic"],
                         a["partition"], a["error"])
        return written | gone
