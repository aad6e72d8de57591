"""What a consumer instance reads: its subscription or manual assignment, its assigned partitions
and the position of each.

`SubscriptionState` is the instance's bookkeeping, without I/O: a subscription (topics, or a pattern
matched against the topics of the cluster image) or a manual assignment (never both); the assigned
partitions, replaced as a whole by a rebalance or an `assign`, each replacement bumping `version`;
and a position per assigned partition (the next offset `records` returns), kept across a
replacement for the partitions that stay. The group membership (consumer_membership.py) sets the
assignment of a subscription; the fetcher (consumer_records.py) fills and advances the positions.

Concurrency: everything on the server's event loop. Whoever awaits between reading the assignment
and writing a position compares `version` first: a changed version means the assignment moved on;
a fetch waiting for records also waits on `assignment_changed()`, resolved by each replacement.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Mapping

from lakelog.ingest_api.errors import InvalidRequestError, PartitionNotFoundError, TopicNotFoundError
from lakelog.ingest_api.groups.assignors import TopicPartition
from lakelog.ingest_api.groups.consumer_config import MAX_PARTITIONS, MAX_PATTERN_CHARS, MAX_TOPICS
from lakelog.ingest_api.groups.errors import IllegalStateError


class SubscriptionState:
    """Subscription or manual assignment, the assigned partitions and their positions (module doc)."""

    def __init__(self) -> None:
        #: Topics subscribed to ([] with a pattern); None: no subscription.
        self.subscription: list[str] | None = None
        self.pattern: re.Pattern | None = None
        #: Partitions assigned by `assign`; None: no manual assignment.
        self.manual: list[TopicPartition] | None = None
        self.assignment: list[TopicPartition] = []
        #: Bumped by every replacement of the assignment.
        self.version = 0
        self.positions: dict[TopicPartition, int] = {}
        #: Futures of `records` calls waiting for the next replacement of the assignment.
        self._change_waiters: list[asyncio.Future] = []

    def assignment_changed(self) -> asyncio.Future:
        """A future resolved by the next replacement of the assignment (a waiting fetch wakes for it);
        the caller cancels it when it stops waiting."""
        self._change_waiters = [f for f in self._change_waiters if not f.done()]
        fut = asyncio.get_running_loop().create_future()
        self._change_waiters.append(fut)
        return fut

    async def wait_for_assignment_change(self, timeout_s: float) -> None:
        """Return at the next replacement of the assignment, or after `timeout_s`."""
        fut = self.assignment_changed()
        try:
            await asyncio.wait_for(fut, timeout_s)
        except asyncio.TimeoutError:
            pass

    @property
    def subscribed(self) -> bool:
        return self.subscription is not None

    def subscribe(self, topics: list[str] | None, pattern: str | None) -> None:
        """Subscribe to `topics`, or to the topics matching `pattern`; refused with a manual assignment."""
        if self.manual is not None:
            raise IllegalStateError("Subscription to topics, partitions and pattern are mutually exclusive: "
                                    "this instance has a manual assignment")
        if pattern is not None:
            if len(pattern) > MAX_PATTERN_CHARS:
                raise InvalidRequestError(f"topic_pattern is longer than {MAX_PATTERN_CHARS} characters")
            try:
                self.pattern, self.subscription = re.compile(pattern), []
            except re.error as e:
                raise InvalidRequestError(f"topic_pattern is not a valid regular expression: {e}") from None
        else:
            if not topics or len(topics) > MAX_TOPICS or not all(isinstance(t, str) and t for t in topics):
                raise InvalidRequestError(f"topics must be a list of 1 to {MAX_TOPICS} topic names")
            self.pattern, self.subscription = None, sorted(set(topics))

    def unsubscribe(self) -> None:
        self.subscription, self.pattern = None, None
        self.set_assignment([])

    def subscribed_topics(self, topics: Mapping[str, Any]) -> list[str]:
        """The subscribed topics among `topics` (the cluster image's): a pattern matches no internal topic."""
        if self.pattern is not None:
            return sorted(t for t in topics if not t.startswith("__") and self.pattern.fullmatch(t))
        return list(self.subscription or [])

    def assign(self, partitions: list[TopicPartition], topics: Mapping[str, Any]) -> None:
        """A manual assignment of `partitions`, each a partition of one of `topics`; refused with a subscription."""
        if self.subscription is not None:
            raise IllegalStateError("Subscription to topics, partitions and pattern are mutually exclusive: "
                                    "this instance has a subscription")
        if len(partitions) > MAX_PARTITIONS:
            raise InvalidRequestError(f"at most {MAX_PARTITIONS} partitions")
        for tp in partitions:
            t = topics.get(tp.topic)
            if t is None:
                raise TopicNotFoundError(f"Topic {tp.topic} not found.")
            if not 0 <= tp.partition < len(t.partitions):
                raise PartitionNotFoundError(f"Partition {tp.partition} of topic {tp.topic} not found.")
        self.manual = list(dict.fromkeys(partitions))
        self.set_assignment(self.manual)

    def set_assignment(self, new: list[TopicPartition]) -> None:
        """Replace the assignment; the positions of the partitions that stay are kept."""
        keep = set(new)
        self.positions = {tp: o for tp, o in self.positions.items() if tp in keep}
        self.assignment = list(new)
        self.version += 1
        waiters, self._change_waiters = self._change_waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def check_assigned(self, tp: TopicPartition) -> None:
        if tp not in self.assignment:
            raise IllegalStateError(f"No current assignment for partition {tp}")

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.check_assigned(tp)
        if offset < 0:
            raise InvalidRequestError("offset must be >= 0")
        self.positions[tp] = offset

    def clear_positions(self) -> None:
        """Forget every position: the next fetch starts each partition from the committed offsets again."""
        self.positions.clear()

    def consumed(self) -> list[dict[str, Any]]:
        """The position of each assigned partition, as offsets to commit."""
        return [{"topic": tp.topic, "partition": tp.partition, "offset": o}
                for tp, o in self.positions.items() if tp in self.assignment]
