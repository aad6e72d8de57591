"""Partition reassignment from this node: list, alter, cancel (Kafka's List/AlterPartitionReassignments).

Reads come from this node's metadata image; changes go to the active controller through
`AdminService.submit` (answered once this node has applied them). The controller's steps are in
`cluster/reassignment.py`; the REST endpoints in `routers/reassignment_v3.py`; the CLI drives these
endpoints (`cli/reassign.py`).

Concurrency: on the node's event loop, like `AdminService`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from lakelog.ingest_api.cluster.errors import NoReassignmentInProgressError
from lakelog.ingest_api.cluster.reassignment import check_target
from lakelog.ingest_api.errors import PartitionNotFoundError, RequestTooLargeError, TopicNotFoundError

#: Most partitions one alter request may name (each is one metadata record).
MAX_REASSIGNMENTS_PER_REQUEST = 10_000


@dataclass(frozen=True)
class Reassignment:
    """A partition being moved: its replicas now (target first), the ones being added and removed."""

    topic: str
    partition: int
    replicas: list[int]
    adding: list[int]
    removing: list[int]

    @property
    def target(self) -> list[int]:
        return [r for r in self.replicas if r not in self.removing]


class ReassignmentService:
    def __init__(self, admin: Any) -> None:
        self.admin = admin

    def list(self, topic: str | None = None) -> list[Reassignment]:
        """Reassignments in progress, by topic and partition (`topic`: only that one's; unknown: none)."""
        self.admin.check_ready()
        image = self.admin.image
        names = sorted(image.topics) if topic is None else [topic] if topic in image.topics else []
        out = []
        for name in names:
            for p, st in enumerate(image.topics[name].partitions):
                if st.reassigning:
                    out.append(Reassignment(name, p, list(st.replicas), list(st.adding), list(st.removing)))
        return out

    def get(self, topic: str, partition: int) -> Reassignment:
        """The reassignment of one partition (NoReassignmentInProgressError when it is not moving)."""
        self._check_partition(topic, partition)
        found = [r for r in self.list(topic) if r.partition == partition]
        if not found:
            raise NoReassignmentInProgressError(f"Reassignment of {topic}-{partition} cannot be found.")
        return found[0]

    def _check_partition(self, topic: str, partition: int) -> None:
        self.admin.check_ready()
        t = self.admin.image.topics.get(topic)
        if t is None:
            raise TopicNotFoundError(f"Topic {topic} not found.")
        if not 0 <= partition < len(t.partitions):
            raise PartitionNotFoundError(f"Partition {partition} of topic {topic} not found.")

    async def elect_preferred_leaders(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Leadership back to each partition's first replica where it is in the ISR and may lead."""
        await self.elect_leaders(partitions, unclean=False)

    async def elect_leaders(self, partitions: Iterable[tuple[str, int]], *, unclean: bool) -> None:
        """Kafka's ElectLeaders on the controller's election path: PREFERRED (`unclean` off) as
        `elect_preferred_leaders`; UNCLEAN elects a leader for each partition that has none, from
        outside the ISR when no ISR member may lead."""
        entries = [{"topic": t, "partition": p} for t, p in partitions]
        if len(entries) > MAX_REASSIGNMENTS_PER_REQUEST:
            raise RequestTooLargeError(f"at most {MAX_REASSIGNMENTS_PER_REQUEST} partitions per election request")
        for e in entries:
            self._check_partition(e["topic"], e["partition"])
        if entries:
            await self.admin.submit("elect_leaders", {"partitions": entries, "unclean": unclean})

    async def alter(self, changes: Iterable[tuple[str, int, list[int] | None]]) -> None:
        """Start, change (target replicas) or cancel (None) reassignments, all or none."""
        self.admin.check_ready()
        entries = [{"topic": t, "partition": p, "replicas": r} for t, p, r in changes]
        if len(entries) > MAX_REASSIGNMENTS_PER_REQUEST:
            raise RequestTooLargeError(f"at most {MAX_REASSIGNMENTS_PER_REQUEST} partitions per reassignment request")
        # The controller checks again against its own image; checking here first answers the usual
        # mistakes with the same error wherever the request lands (not as a forwarded answer).
        image = self.admin.image
        for e in entries:
            self._check_partition(e["topic"], e["partition"])
            where = f"{e['topic']}-{e['partition']}"
            if e["replicas"] is None:
                if not image.topics[e["topic"]].partitions[e["partition"]].reassigning:
                    raise NoReassignmentInProgressError(f"{where}: no reassignment is in progress")
            else:
                check_target(e["replicas"], image.brokers, where)
        if entries:
            await self.admin.submit("alter_partition_reassignments", {"reassignments": entries})
