"""A checker for produce/consume histories of a partitioned topic, for fault tests on real clusters.

A fault test records every produce attempt (`ProduceAttempt`: partition, value id, whether the
client was told it was acknowledged — True, False, or None when the outcome is unknown, e.g. a
timeout — and the acknowledged offset), then drains every partition from the log start to the end
and hands the drained records, in the order consumed, as (partition, offset, value id) triples.

`check_history` reports every violation of what Kafka promises with acks=all (min.insync.replicas
honoured, no unclean leader election):

  lost_acked_write       an acknowledged value is never consumed;
  acked_offset_mismatch  an acknowledged offset holds another value, or the value was consumed
                         somewhere else than the offset its acknowledgement named;
  duplicate              a value is consumed more than once (allowed with `allow_duplicates`, for
                         producers without idempotence that retried);
  reordered              two values acknowledged in one order are consumed in the other (checked per
                         partition when `single_producer_per_partition`: attempts are listed in the
                         order their acknowledgements arrived);
  offsets_not_increasing offsets of one partition do not strictly increase in consumption order;
  wrong_partition        a value is consumed in a partition it was never produced to;
  unknown_value          a consumed value was never produced at all.

Values whose produce failed or timed out may or may not appear: never a violation, only counted.

`check_consumer_views` takes what consumers saw at different times (snapshots, or one observation
at a time through `OffsetObserver`) and reports `truncation_visible`: an offset read with one value
and later with another, i.e. a log truncated below what consumers had already been given (what an
unclean leader election, or a broken truncation rule, shows to applications).

Every check returns a `HistoryResult` listing each violation with its details; `assert_ok()` raises
`HistoryViolation` with the whole report. `History` is a thread-safe recorder for tests with
several producer threads.
"""

from __future__ import annotations

import enum
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Sequence, Union

ValueId = Union[int, str]
#: (partition, offset, value id), as consumed.
ConsumedRecord = tuple[int, int, ValueId]

#: Violations listed in a report before "... and N more".
REPORT_LIMIT = 50


class Kind(enum.Enum):
    """What went wrong."""

    LOST_ACKED_WRITE = "lost_acked_write"
    ACKED_OFFSET_MISMATCH = "acked_offset_mismatch"
    DUPLICATE = "duplicate"
    REORDERED = "reordered"
    OFFSETS_NOT_INCREASING = "offsets_not_increasing"
    WRONG_PARTITION = "wrong_partition"
    UNKNOWN_VALUE = "unknown_value"
    TRUNCATION_VISIBLE = "truncation_visible"


@dataclass(frozen=True)
class ProduceAttempt:
    """One produce request for one value, as the client saw its outcome."""

    partition: int
    value_id: ValueId
    acked: bool | None  # True: acknowledged; False: refused with an error; None: unknown (timeout)
    offset: int | None = None  # the offset the acknowledgement named, if any


@dataclass(frozen=True)
class HistoryIssue:
    """One violation, with enough context to find it in the logs."""

    kind: Kind
    detail: str
    partition: int | None = None
    offset: int | None = None
    value_id: ValueId | None = None

    def __str__(self) -> str:
        where = []
        if self.partition is not None:
            where.append(f"partition {self.partition}")
        if self.offset is not None:
            where.append(f"offset {self.offset}")
        if self.value_id is not None:
            where.append(f"value {self.value_id!r}")
        return f"{self.kind.value} ({', '.join(where)}): {self.detail}" if where else f"{self.kind.value}: {self.detail}"


class HistoryViolation(AssertionError):
    """A produce/consume history broke a delivery guarantee."""


@dataclass
class HistoryResult:
    """Every violation found, plus counts that describe the history."""

    violations: list[HistoryIssue] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.violations

    def of_kind(self, kind: Kind) -> list[HistoryIssue]:
        return [v for v in self.violations if v.kind is kind]

    @property
    def kinds(self) -> set[Kind]:
        return {v.kind for v in self.violations}

    def add(self, kind: Kind, detail: str, **where: object) -> None:
        self.violations.append(HistoryIssue(kind, detail, **where))  # type: ignore[arg-type]

    def report(self) -> str:
        counts = defaultdict(int)
        for v in self.violations:
            counts[v.kind.value] += 1
        lines = [f"{len(self.violations)} violation(s): " + ", ".join(f"{k} x{n}" for k, n in sorted(counts.items()))]
        lines += [f"  {v}" for v in self.violations[:REPORT_LIMIT]]
        if len(self.violations) > REPORT_LIMIT:
            lines.append(f"  ... and {len(self.violations) - REPORT_LIMIT} more")
        if self.stats:
            lines.append("history: " + ", ".join(f"{k}={v}" for k, v in sorted(self.stats.items())))
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.report() if self.violations else "ok: " + ", ".join(f"{k}={v}" for k, v in sorted(self.stats.items()))

    def assert_ok(self) -> None:
        if self.violations:
            raise HistoryViolation(self.report())


def check_history(attempts: Sequence[ProduceAttempt], consumed: Sequence[ConsumedRecord], *,
                  allow_duplicates: bool = False,
                  single_producer_per_partition: bool = True) -> HistoryResult:
    """Check a final drain of the topic against what producers were told (see the module docstring).

    `attempts` lists acknowledged attempts in the order their acknowledgements arrived (the order a
    recorder appends them); a value retried several times may have several attempts. `consumed` is
    the drain, in the order records were consumed.
    """
    result = HistoryResult()
    attempts_by_value: dict[ValueId, list[ProduceAttempt]] = defaultdict(list)
    for a in attempts:
        attempts_by_value[a.value_id].append(a)

    # Consumption: per-partition offset order, where each value and each offset was seen.
    seen_at: dict[ValueId, list[tuple[int, int]]] = defaultdict(list)  # value -> [(partition, offset)]
    at_offset: dict[tuple[int, int], ValueId] = {}
    last_offset: dict[int, int] = {}
    for partition, offset, value_id in consumed:
        prev = last_offset.get(partition)
        if prev is not None and offset <= prev:
            result.add(Kind.OFFSETS_NOT_INCREASING, f"consumed after offset {prev}",
                       partition=partition, offset=offset, value_id=value_id)
        last_offset[partition] = offset if prev is None else max(prev, offset)
        seen_at[value_id].append((partition, offset))
        at_offset.setdefault((partition, offset), value_id)

    for value_id, places in seen_at.items():
        tried = attempts_by_value.get(value_id)
        if not tried:
            p, o = places[0]
            result.add(Kind.UNKNOWN_VALUE, "consumed but never produced", partition=p, offset=o, value_id=value_id)
            continue
        partitions = {a.partition for a in tried}
        for p, o in places:
            if p not in partitions:
                result.add(Kind.WRONG_PARTITION, f"produced to partition(s) {sorted(partitions)}",
                           partition=p, offset=o, value_id=value_id)
        if len(places) > 1 and not allow_duplicates:
            result.add(Kind.DUPLICATE, f"consumed {len(places)} times, at {places}", value_id=value_id)

    # Acknowledged values: present, at the acknowledged offset.
    acked_values = 0
    for value_id, tried in attempts_by_value.items():
        acked = [a for a in tried if a.acked]
        if not acked:
            continue
        acked_values += 1
        places = seen_at.get(value_id, [])
        if not places:
            a = acked[-1]
            result.add(Kind.LOST_ACKED_WRITE, "acknowledged, never consumed",
                       partition=a.partition, offset=a.offset, value_id=value_id)
            continue
        for a in acked:
            if a.offset is None:
                continue
            holder = at_offset.get((a.partition, a.offset))
            if holder == value_id:
                continue
            elsewhere = [pl for pl in places if pl != (a.partition, a.offset)]
            what = f"holds {holder!r}" if holder is not None else "was not consumed"
            result.add(Kind.ACKED_OFFSET_MISMATCH,
                       f"acknowledged at this offset, which {what}; the value was consumed at {elsewhere}",
                       partition=a.partition, offset=a.offset, value_id=value_id)

    if single_producer_per_partition:
        _check_ack_order(attempts, seen_at, result)

    outcomes = defaultdict(int)
    for value_id, tried in attempts_by_value.items():
        state = "acked" if any(a.acked for a in tried) else \
            "unknown" if any(a.acked is None for a in tried) else "failed"
        outcomes[f"{state}_{'seen' if value_id in seen_at else 'unseen'}"] += 1
    result.stats = {"attempts": len(attempts), "values": len(attempts_by_value), "acked_values": acked_values,
                    "consumed": len(consumed), "partitions": len(last_offset), **outcomes}
    return result


def _check_ack_order(attempts: Sequence[ProduceAttempt], seen_at: dict[ValueId, list[tuple[int, int]]],
                     result: HistoryResult) -> None:
    """Per partition, each acknowledged value must be consumed after the one acknowledged just before
    it (lost values are skipped: reported elsewhere). Comparing neighbours reports a value that was
    moved once, not once for every value it jumped over."""
    order: dict[int, list[ValueId]] = defaultdict(list)
    listed: set[tuple[int, ValueId]] = set()
    for a in attempts:
        if a.acked and (a.partition, a.value_id) not in listed:
            listed.add((a.partition, a.value_id))
            order[a.partition].append(a.value_id)
    for partition, values in order.items():
        prev: tuple[ValueId, int] | None = None
        for value_id in values:
            offsets = sorted(o for p, o in seen_at.get(value_id, []) if p == partition)
            if not offsets:
                continue
            if prev is not None and offsets[0] <= prev[1]:
                result.add(Kind.REORDERED,
                           f"acknowledged right after {prev[0]!r} (consumed at offset {prev[1]}) but consumed before it",
                           partition=partition, offset=offsets[0], value_id=value_id)
            prev = (value_id, offsets[0])


class OffsetObserver:
    """Remembers which value each (partition, offset) was read with; flags a later, different read.

    Feed it observations in time order (`observe`, or `observe_all` for one consumer snapshot).
    Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._first: dict[tuple[int, int], tuple[ValueId, str]] = {}
        self._reported: set[tuple[int, int, ValueId]] = set()
        self.result = HistoryResult(stats={"observations": 0, "offsets": 0})

    def observe(self, partition: int, offset: int, value_id: ValueId, when: str = "") -> None:
        with self._lock:
            self.result.stats["observations"] += 1
            key = (partition, offset)
            first = self._first.get(key)
            if first is None:
                self._first[key] = (value_id, when)
                self.result.stats["offsets"] += 1
            elif first[0] != value_id and (partition, offset, value_id) not in self._reported:
                self._reported.add((partition, offset, value_id))
                self.result.add(Kind.TRUNCATION_VISIBLE,
                                f"read as {first[0]!r}{' ' + first[1] if first[1] else ''}, "
                                f"later as {value_id!r}{' ' + when if when else ''}",
                                partition=partition, offset=offset, value_id=value_id)

    def observe_all(self, records: Iterable[ConsumedRecord], when: str = "") -> None:
        for partition, offset, value_id in records:
            self.observe(partition, offset, value_id, when)


def check_consumer_views(snapshots: Sequence[Iterable[ConsumedRecord]]) -> HistoryResult:
    """What consumers read at successive times (each snapshot a list of (partition, offset, value
    id)): report every offset read with one value and later with another."""
    observer = OffsetObserver()
    for i, snapshot in enumerate(snapshots):
        observer.observe_all(snapshot, when=f"in snapshot {i}")
    return observer.result


class History:
    """A thread-safe recorder: producers call `produced`, the final drain calls `consumed`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.attempts: list[ProduceAttempt] = []
        self.drained: list[ConsumedRecord] = []

    def produced(self, partition: int, value_id: ValueId, acked: bool | None, offset: int | None = None) -> None:
        """Record an outcome as the client learned it (call it when the response or timeout arrives)."""
        with self._lock:
            self.attempts.append(ProduceAttempt(partition, value_id, acked, offset))

    def consumed(self, partition: int, offset: int, value_id: ValueId) -> None:
        with self._lock:
            self.drained.append((partition, offset, value_id))

    def check(self, **options: bool) -> HistoryResult:
        with self._lock:
            return check_history(list(self.attempts), list(self.drained), **options)
