"""A consumer instance's fetch rounds: where each partition starts, and the records of a `records` call.

`InstanceRecords` is what a `ConsumerInstance` (consumer.py) holds to read: `records` (fetch rounds
of at most `FETCH_ROUND_MS` until records arrive or the timeout passes), `_resolve_positions` (a
newly assigned partition starts at the group's committed offset, else per `auto.offset.reset`;
while the coordinator cannot answer, it waits), `reset_offsets` and `_fetch_round` (one fetch per
assigned partition through its leader, rendered in the instance's format within the bytes and
`max.poll.records` budgets). The assignment and the positions it reads and advances are the
instance's `SubscriptionState` (consumer_subscription.py); it holds no state of its own.

Concurrency: everything on the server's event loop; a round that raced with an assignment change
drops what it fetched.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from lakelog.ingest_api.errors import LeaderNotAvailableError, NotLeaderOrFollowerError, NotReadyError
from lakelog.ingest_api.records.formats import render_record
from lakelog.ingest_api.schemas.rest import SCHEMA_FORMATS, render_schema_record
from lakelog.ingest_api.groups.assignors import TopicPartition
from lakelog.ingest_api.groups.consumer_config import FETCH_ROUND_MS, FORMATS, InstanceConfig
from lakelog.ingest_api.groups.consumer_fetch import fetch_partition, partition_bounds
from lakelog.ingest_api.groups.consumer_subscription import SubscriptionState
from lakelog.ingest_api.groups.errors import (
    CoordinatorLoadInProgressError,
    NoOffsetForPartitionError,
    NotCoordinatorError,
)
from lakelog.ingest_api.groups.service import GroupService
from lakelog.ingest_api.errors import PeerUnavailableError
from lakelog.logstore.errors import OffsetOutOfRangeError
from lakelog.logstore.record_batch import iter_batches

log = logging.getLogger("lakelog.consumers")


class InstanceRecords:
    """The fetch rounds of one consumer instance (module doc)."""

    def __init__(self, node: Any, groups: GroupService, group: str, name: str, cfg: InstanceConfig,
                 owner: str | None, state: SubscriptionState) -> None:
        self.node, self.groups = node, groups
        self.group, self.name, self.cfg = group, name, cfg
        #: The principal the instance reads as (its creator's READ is checked by a remote leader too).
        self.owner = owner
        self._state = state

    async def _resolve_positions(self, tps: list[TopicPartition]) -> None:
        """Positions of newly assigned partitions: the committed offsets, else auto.offset.reset. While
        the coordinator cannot answer, those partitions wait (never reset: that could skip commits)."""
        missing = [tp for tp in tps if tp not in self._state.positions]
        if not missing:
            return
        version = self._state.version
        try:
            doc = await self.groups.call(self.group, "offset_fetch", {
                "partitions": [[tp.topic, tp.partition] for tp in missing]}, timeout_s=5)
        except (NotCoordinatorError, CoordinatorLoadInProgressError, LeaderNotAvailableError, NotReadyError,
                NotLeaderOrFollowerError, PeerUnavailableError) as e:
            log.info("consumer %s/%s: committed offsets not available yet (%s)", self.group, self.name, e)
            return
        found = {(o["topic"], o["partition"]): o["offset"] for o in doc["offsets"]}
        resets = [tp for tp in missing if found.get((tp.topic, tp.partition), -1) < 0]
        reset_to = await self.reset_offsets(resets)
        if version != self._state.version:
            return
        for tp in missing:
            if tp not in self._state.positions:
                committed = found.get((tp.topic, tp.partition), -1)
                self._state.positions[tp] = committed if committed >= 0 else reset_to[tp]

    async def reset_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        if not tps:
            return {}
        if self.cfg.auto_offset_reset == "none":
            raise NoOffsetForPartitionError(f"no committed offset for {[str(tp) for tp in tps]} and "
                                            f"auto.offset.reset=none")
        end = self.cfg.auto_offset_reset == "latest"
        bounds = await asyncio.gather(*(partition_bounds(self.node, tp, self.cfg.isolation_level) for tp in tps))
        return {tp: (b[1] if end else b[0]) for tp, b in zip(tps, bounds)}

    # ------------------------------------------------------------------ records

    async def records(self, timeout_ms: int, max_bytes: int) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout_ms / 1000
        first = True
        while True:
            tps, version = list(self._state.assignment), self._state.version
            if tps:
                await self._resolve_positions(tps)
                remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
                wait_ms = 0 if first else min(remaining_ms, FETCH_ROUND_MS)
                first = False
                ready = [tp for tp in tps if tp in self._state.positions]
                out = await self._fetch_round(ready, wait_ms, max_bytes, version)
                if out:
                    return out
            if time.monotonic() >= deadline:
                return []
            # With read_committed, data above the LSO answers a fetch at once without a record
            # for us: pause rather than spin until the transaction is decided.
            if not tps or self.cfg.isolation_level == "read_committed":
                await asyncio.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    async def _fetch_round(self, tps: list[TopicPartition], wait_ms: int, max_bytes: int,
                           version: int) -> list[dict[str, Any]]:
        fetch_bytes = min(max_bytes, self.node.config.fetch_max_bytes)
        starts = {tp: self._state.positions[tp] for tp in tps}
        results = await asyncio.gather(*(fetch_partition(self.node, tp, starts[tp], fetch_bytes, wait_ms,
                                                         self.owner or "User:ANONYMOUS", self.cfg.isolation_level)
                                         for tp in tps), return_exceptions=True)
        if version != self._state.version:
            return []  # the assignment changed while fetching: positions of kept partitions stay as they were
        fmt = FORMATS[self.cfg.format]
        out: list[dict[str, Any]] = []
        budget_bytes, budget_records = max_bytes, self.cfg.max_poll_records
        for tp, res in zip(tps, results):
            if isinstance(res, OffsetOutOfRangeError):
                reset = await self.reset_offsets([tp])
                if version == self._state.version and self._state.positions.get(tp) == starts[tp]:
                    log.info("consumer %s/%s: %s offset %d out of range; reset to %d", self.group, self.name, tp,
                             starts[tp], reset[tp])
                    self._state.positions[tp] = reset[tp]
                continue
            if isinstance(res, BaseException):
                log.info("consumer %s/%s: fetch of %s failed: %s", self.group, self.name, tp, res)
                continue
            if self._state.positions.get(tp) != starts[tp]:
                continue  # a seek happened meanwhile
            pos = starts[tp]
            full = False
            res, next_offset = res
            for _, batch in iter_batches(res):
                if batch.is_control:
                    pos = max(pos, batch.next_offset)
                    continue
                for rec in batch.records():
                    if rec.offset < pos:
                        continue
                    size = len(rec.key or b"") + len(rec.value or b"")
                    if out and (budget_records <= 0 or size > budget_bytes):
                        full = True
                        break
                    if fmt in SCHEMA_FORMATS:  # decoded by the schema its wire-format id names
                        out.append(render_schema_record(self.node.image.schemas, tp.topic, tp.partition, rec, fmt))
                    else:
                        out.append(render_record(tp.topic, tp.partition, rec, fmt))
                    budget_records -= 1
                    budget_bytes -= size
                    pos = rec.offset + 1
                if full:
                    break
                pos = max(pos, batch.next_offset)
            if not full:  # past batches a read_committed fetch dropped
                pos = max(pos, next_offset)
            self._state.positions[tp] = pos
            if full or budget_records <= 0 or budget_bytes <= 0:
                break
        return out
