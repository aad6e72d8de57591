"""Where a follower truncates its log when it starts following a (new) leader: KIP-101 / KIP-279.

A follower that restarts, or that sees a new leader epoch, must cut its log back to the longest
prefix it shares with the leader before it fetches again. It must NOT cut to its own high watermark
(HW): the HW a follower holds lags the leader's by one fetch round and its checkpoint lags further,
so cutting to it can delete records the leader already acknowledged. If the follower then becomes
leader, those acknowledged records are gone for good (KIP-101 scenario 1, the "data loss" case of the
design documents). Cutting to the HW also fails the other way round: after both replicas lost an
unflushed tail, a follower whose HW is above the point where the logs part keeps records the new
leader never had (KIP-101 scenario 2, "divergence").

The protocol (OffsetsForLeaderEpoch, with KIP-279's multi-round fix):

1. The follower asks for its latest epoch E (the last entry of its leader-epoch cache).
2. The leader answers (E_L, end_L): E_L is its largest epoch <= E, end_L where E_L ended on the
   leader (the start offset of its next epoch, or its log end offset (LEO) if E_L is its latest).
3. If the follower has E_L too, both copies of epoch E_L come from the one leader that wrote it,
   so they agree up to where the shorter one ends: truncate to min(follower's end of E_L, end_L,
   follower LEO). Done.
4. If the follower never had E_L, every follower epoch above its largest epoch F <= E_L is unknown
   to the leader: truncate (safely) to where F ends on the follower, and ask again for F itself
   (`AskAgain.epoch`, not whatever the cache's latest epoch is after the cut). Epochs asked
   strictly decrease, so this ends.
5. An UNDEFINED answer (-1, -1) means the leader knows no epoch at or below E; Kafka then falls back
   to the follower's HW (this is the only place the HW is used).

`first_request` and `follower_truncation_offset` are one step each, for a node that sends real
requests (and may truncate at each intermediate step, as Kafka does); `resolve_truncation` runs the
whole exchange against a callable. `leader_epoch_end_offset` is the leader's side: it answers with
the storage engine's own `LeaderEpochCache.end_offset_for`, over a list of entries held in memory.

Invariants (checked with `invariant()`): epoch entries strictly increase in epoch and do not
decrease in start offset, and every start offset is at or below the LEO; a leader answers with an
epoch at or below the epoch asked; the offset to truncate to is in [0, follower LEO]; each further
request asks for a strictly smaller epoch.

After truncating to the returned offset the caller must also lower its HW to min(HW, new LEO).
Call the log's truncation even when the offset is at or above the LEO: no record goes, but an
epoch this replica stamped at its LEO when it was elected (and never wrote in) must leave the
cache, as Kafka's `UnifiedLog.truncateTo` does; a stale entry there later mislabels fetched records
(see tests/sim/replication_sim.py, scenario "stale-epoch-stamp").

Everything here is pure: no I/O, no clocks, safe to call from any thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence, Union

from lakelog.infra.errors import invariant
from lakelog.logstore.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_OFFSET, LeaderEpochCache

__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_OFFSET",
    "AskAgain",
    "Truncate",
    "TruncationStep",
    "first_request",
    "follower_truncation_offset",
    "leader_epoch_end_offset",
    "resolve_truncation",
]


@dataclass(frozen=True, slots=True)
class Truncate:
    """Final answer: truncate the log to `offset` (remove every record at or above it), then fetch."""

    offset: int


@dataclass(frozen=True, slots=True)
class AskAgain:
    """Not done yet: records at or above `truncate_to` diverge from the leader (they may be cut
    now), and the leader must be asked again, about `epoch` (the follower's largest epoch below the
    one the leader answered with). Ask about `epoch` itself, not the log's latest epoch after the
    cut: a cut at the LEO removes nothing, and an entry a leader stamped at its LEO on election
    (without appending) may still be the latest one then."""

    epoch: int
    truncate_to: int


TruncationStep = Union[Truncate, AskAgain]


class _EpochEntries(LeaderEpochCache):
    """A LeaderEpochCache over entries held in memory: its answers, never its file."""

    def __init__(self, entries: Sequence[tuple[int, int]]) -> None:  # noqa: D107 - no file is read
        self.path = None  # type: ignore[assignment]
        self._entries = [(int(e), int(o)) for e, o in entries]
        self._check()

    def _persist(self) -> None:
        invariant(False, "an in-memory view of leader epoch entries is read-only")


def _checked(entries: Sequence[tuple[int, int]], leo: int) -> _EpochEntries:
    view = _EpochEntries(entries)
    invariant(leo >= 0, f"log end offset {leo} is negative")
    for epoch, start in view.entries:
        invariant(epoch >= 0 and 0 <= start <= leo,
                  f"leader epoch entry ({epoch}, {start}) is outside the log [0, {leo}]")
    return view


def leader_epoch_end_offset(local_epochs: Sequence[tuple[int, int]], leo: int,
                            requested_epoch: int) -> tuple[int, int]:
    """The leader's OffsetsForLeaderEpoch answer: (largest epoch <= requested, its end offset).

    Exactly `LeaderEpochCache.end_offset_for` (what `PartitionLog.end_offset_for_epoch` answers),
    over `local_epochs` = [(epoch, start offset)] ascending and the leader's `leo`.
    (UNDEFINED_EPOCH, UNDEFINED_OFFSET) when the leader knows no epoch at or below the request.
    """
    return _checked(local_epochs, leo).end_offset_for(requested_epoch, leo)


def first_request(local_epochs: Sequence[tuple[int, int]], local_leo: int, *,
                  high_watermark: int) -> TruncationStep:
    """What a follower does before its first OffsetsForLeaderEpoch request.

    With epochs: ask for the latest one (nothing is known to diverge yet). Without any (an empty
    log, or batches written before leader epochs were recorded) there is nothing to ask about, and
    Kafka truncates to the HW.
    """
    view = _checked(local_epochs, local_leo)
    if not view.entries:
        return Truncate(max(0, min(high_watermark, local_leo)))
    return AskAgain(view.latest_epoch, local_leo)


def follower_truncation_offset(local_epochs: Sequence[tuple[int, int]], local_leo: int,
                               leader_answer: tuple[int, int], *, high_watermark: int,
                               asked_epoch: int | None = None) -> TruncationStep:
    """One step of the follower's side, given the leader's answer to a request for `asked_epoch`
    (default: the follower's latest epoch, the last of `local_epochs`; after an `AskAgain`, pass its
    `epoch`).

    `local_epochs` are the follower's (epoch, start offset) entries, ascending, and `local_leo` its
    LEO, both as they are now (after any intermediate truncation). `high_watermark` is the
    follower's HW, used only when the leader answers UNDEFINED. Entries that share a start offset
    (an epoch with no records, which `LeaderEpochCache.assign` keeps) are harmless: only an epoch's
    leader writes it, so an epoch empty here was stamped by this replica and has no records anywhere.
    """
    view = _checked(local_epochs, local_leo)
    leader_epoch, leader_end = leader_answer
    if leader_end == UNDEFINED_OFFSET:
        # The leader knows no epoch at or below ours (Kafka: "leader replied with an unknown
        # offset"): the initial fetch offset, the HW, is all that is left.
        return Truncate(max(0, min(high_watermark, local_leo)))
    invariant(leader_end >= 0, f"leader answered a negative end offset {leader_answer}")
    if leader_epoch == UNDEFINED_EPOCH:
        # A leader that does not track epochs (Kafka before KIP-279) only gives an end offset.
        return Truncate(min(leader_end, local_leo))
    if not view.entries:
        # We track no epochs; the leader's end offset for what it holds is the best bound we have.
        return Truncate(min(leader_end, local_leo))
    asked = view.latest_epoch if asked_epoch is None else asked_epoch
    invariant(leader_epoch <= asked,
              f"leader answered epoch {leader_epoch} to a request for epoch {asked}")
    # Our own (largest epoch <= leader's, its end), by the same lookup a leader answers with. Below
    # our first entry it is (leader's epoch, our first start): nothing we hold is from that epoch.
    follower_epoch, follower_end = view.end_offset_for(leader_epoch, local_leo)
    if follower_epoch == leader_epoch:
        return Truncate(max(0, min(follower_end, leader_end, local_leo)))
    # We never had the leader's epoch: what we wrote after `follower_epoch` diverges (KIP-279).
    invariant(follower_epoch < leader_epoch, f"local epoch {follower_epoch} above {leader_epoch}")
    return AskAgain(follower_epoch, min(follower_end, local_leo))


def resolve_truncation(local_epochs: Sequence[tuple[int, int]], local_leo: int,
                       ask: Callable[[int], tuple[int, int]], *, high_watermark: int) -> int:
    """Run the whole exchange: `ask(epoch)` is the leader's answer. Returns the offset to truncate to.

    Intermediate truncations are applied to a copy of the entries only (dropping entries that start
    at or above the cut, as Kafka's log does); the caller truncates once, to the returned offset.
    """
    entries = list(local_epochs)
    leo = local_leo
    step = first_request(entries, leo, high_watermark=high_watermark)
    asked: int | None = None
    for _ in range(len(entries) + 1):
        if isinstance(step, Truncate):
            invariant(0 <= step.offset <= local_leo, f"truncation offset {step.offset} outside [0, {local_leo}]")
            return step.offset
        invariant(asked is None or step.epoch < asked,
                  f"asking for epoch {step.epoch} after epoch {asked}: the exchange would not end")
        if asked is not None:
            leo = step.truncate_to
            entries = [(e, o) for e, o in entries if o < leo]
        asked = step.epoch
        step = follower_truncation_offset(entries, leo, ask(asked), high_watermark=high_watermark,
                                          asked_epoch=asked)
    invariant(False, "the OffsetsForLeaderEpoch exchange did not end")
    raise AssertionError("unreachable")
