"""The ISR of the partitions this node leads: the periodic check (shrink followers lagging past
replica.lag.time.max.ms, expand caught-up ones), and the AlterPartition requests that propose the
changes to the controller.

* The check (`loop`, every replica.lag.time.max.ms / 2, in slices of `ISR_CHECK_SLICE` partitions
  that yield the event loop between them; and `follower_fetched` on every follower fetch) asks each
  replica's state machine for a proposal.
* Proposals wait in one queue for the next AlterPartition request (one in flight, the changes of
  many partitions in one request: a node back from a pause may propose hundreds together, and a
  request each would crowd out the heartbeats at the controller). A refused change is not sent again
  before its backoff (`RetryBackoff`): it is answered as refused at once, so the replica proposes it
  again later rather than on every follower fetch.
* The answers go back to the replicas' state machines; the committed ISR itself reaches this node
  through the metadata log.

Concurrency: everything runs on the node's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Awaitable, Callable

from lakelog.ingest_api.cluster.backoff import RetryBackoff
from lakelog.ingest_api.replication.events import ProposeIsr, Role
from lakelog.ingest_api.replication.partition import Partition, PartitionKey, monotonic_ms
from lakelog.ingest_api.replication.sessions import FetchSessions

log = logging.getLogger("lakelog.node")

#: Partitions one ISR check looks at before it yields the event loop.
ISR_CHECK_SLICE = 500
#: Most ISR changes one AlterPartition request carries (one request at a time; the rest wait here).
MAX_ISR_CHANGES_PER_REQUEST = 1000


class IsrManager:
    def __init__(self, node_id: int, lag_time_max_ms: int, *, partitions: Callable[[], list[Partition]],
                 fetch_sessions: FetchSessions, controller_call: Callable[..., Awaitable[dict[str, Any]]],
                 broker_epoch: Callable[[], int], isr_eligible: Callable[[int], bool] = lambda node_id: True) -> None:
        """`partitions`: this node's replicas; `fetch_sessions`: followers' sessions with this node as
        their leader; `controller_call(op, args)`: a request to the controller; `isr_eligible(node_id)`:
        the metadata shows that broker unfenced and not shutting down (only then is it proposed into
        an ISR: a dead follower's session still looks caught up for replica.lag.time.max.ms)."""
        self.node_id = node_id
        self.lag_time_max_ms = lag_time_max_ms
        self._partitions = partitions
        self._fetch_sessions = fetch_sessions
        self._controller_call = controller_call
        self._broker_epoch = broker_epoch
        self._isr_eligible = isr_eligible
        self._backoff = RetryBackoff()  # a refused ISR change is not re-sent on every follower fetch
        #: ISR changes waiting for the next AlterPartition request, and the task sending them.
        self._pending: dict[PartitionKey, tuple[Partition, ProposeIsr]] = {}
        self._sender: asyncio.Task | None = None
        #: AlterPartition requests sent (an operation count: tests, metrics).
        self.requests = 0
        #: Partitions the last ISR check looked at (an operation count: tests, metrics).
        self.partitions_checked = 0
        #: ISR changes this node sent as a leader (Kafka's IsrShrinksPerSec / IsrExpandsPerSec; metrics).
        self.shrinks = 0
        self.expands = 0

    async def loop(self) -> None:
        """Every replica.lag.time.max.ms / 2: the ISR check of every partition this node leads, in
        slices of `ISR_CHECK_SLICE` partitions that yield the event loop between them."""
        lag = self.lag_time_max_ms
        interval = max(0.05, lag / 2000)
        while True:
            await asyncio.sleep(interval)
            leading = [p for p in self._partitions() if p.role == Role.LEADER]
            for i in range(0, len(leading), ISR_CHECK_SLICE):
                if i:
                    await asyncio.sleep(0)
                for p in leading[i:i + ISR_CHECK_SLICE]:
                    self.check(p, lag)

    def check(self, p: Partition, lag_max_ms: int) -> None:
        """One partition's ISR check: followers whose fetch session holds it at the LEO count as caught
        up at their session's last request (an idle partition is named in no request); then shrink
        the ISR of members lagging longer than `lag_max_ms`."""
        if p.role != Role.LEADER:
            return
        self.partitions_checked += 1
        for replica_id, offset, at_ms in list(self._fetch_sessions.caught_up(
                p.key, p.leader_epoch, p.log.log_end_offset, since_ms=monotonic_ms() - lag_max_ms)):
            self.follower_fetched(p, replica_id, offset, now=at_ms)
        proposal = p.tick(lag_max_ms)
        if proposal is not None and self._propose(p, proposal):
            self.shrinks += 1
            log.warning("%s: shrinking ISR %s -> %s (%s)", p.key, p.isr, list(proposal.new_isr), proposal.reason)

    def follower_fetched(self, p: Partition, replica_id: int, offset: int, now: int | None = None) -> None:
        """A follower of `p` fetched from `offset` (at `now`, monotonic ms; default: now): expand the
        ISR if it caught up and its broker is eligible."""
        proposal = p.on_follower_fetch(replica_id, offset, now=now, isr_eligible=self._isr_eligible(replica_id))
        if proposal is not None and self._propose(p, proposal):
            self.expands += 1
            log.info("%s: node %d caught up; expanding ISR to %s", p.key, replica_id, list(proposal.new_isr))

    def _propose(self, p: Partition, proposal: ProposeIsr) -> bool:
        """Queue an ISR change for the next AlterPartition request unless a refused one of this
        partition is backing off; True if queued."""
        if not self._backoff.may_send(p.key, time.monotonic()):
            # Not sent: answered as refused, so the replica proposes it again after the backoff
            # (not on every follower fetch, several times a millisecond).
            p.isr_change_answered(proposal.partition_epoch, accepted=False)
            return False
        self._pending[p.key] = (p, proposal)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.get_running_loop().create_task(self._send())
        return True

    async def _send(self) -> None:
        """The queued ISR changes to the controller, many partitions per AlterPartition request
        (`alter_partitions`: applied in one controller round, one metadata entry), one request at a
        time; what is proposed while one is out goes in the next."""
        while self._pending:
            await asyncio.sleep(0)  # the rest of this ISR check slice joins the request
            keys = list(self._pending)[:MAX_ISR_CHANGES_PER_REQUEST]
            batch = [self._pending.pop(k) for k in keys]
            entries = [{"topic": p.key.topic, "partition": p.key.partition, "leader_epoch": pr.leader_epoch,
                        "partition_epoch": pr.partition_epoch, "new_isr": list(pr.new_isr)} for p, pr in batch]
            self.requests += 1
            try:
                answer = await self._controller_call("alter_partitions", {
                    "node_id": self.node_id, "broker_epoch": self._broker_epoch(), "partitions": entries})
                errors = list(answer.get("errors") or [None] * len(batch))
            except asyncio.CancelledError:
                raise
            except Exception as e:
                errors = [str(e)] * len(batch)
            for (p, proposal), error in zip(batch, errors):
                if error is None:
                    self._backoff.accepted(p.key)
                    p.isr_change_answered(proposal.partition_epoch, accepted=True)
                else:
                    log.info("%s: ISR change to %s refused: %s", p.key, list(proposal.new_isr), error)
                    self._backoff.refused(p.key, time.monotonic())
                    p.isr_change_answered(proposal.partition_epoch, accepted=False)
