"""The active controller's lease (check-quorum in time), and clock-gap detection. Pure: times passed in.

Raft's check quorum (core.py) counts ticks, and a paused process counts none: a leader stopped by
SIGSTOP for longer than the election timeout resumes believing it still leads, while the others
have elected a successor. It steps down once its tick count says so, an election timeout later,
and until then it would answer as the controller (its own broker heartbeat, above all, renewing
its own session). The lease closes that window: the controller acts only while it holds one.

`LeaderLease` (one per voter, driven by the host):
  * `became_leader(term, now)` starts with no lease: a new leader must hear from a quorum first;
  * `acknowledged(peer, term, at)`: a response of this term from `peer` (AppendEntries or
    InstallSnapshot, success or not: the peer knows us as the leader of this term) renews it as of
    `at`, when the peer sent it (the host derives it from the signed send time, never later than
    receipt): an answer that waited in a socket through a pause vouches only for its send time;
  * `observe(now)`, called at every tick, every acknowledgement and every check: a gap since the
    last observation longer than `max_gap_ms` is a pause (SIGSTOP, a VM freeze, a stalled event
    loop). A leader then gives the lease up for good and `take_step_down()` tells the host to step
    the core down (core.StepDown): acknowledgements that were waiting in its sockets during the
    pause were sent before a successor may have been elected, so no acknowledgement can vouch for
    it any more; it leads again only by winning a new term;
  * `valid(now)`: leader, and the quorum-th freshest acknowledgement (this voter counts as `now`)
    is younger than `lease_ms` and newer than the last gap.

Why it is safe (Raft's pre-vote, core.py): a successor needs pre-votes from a quorum of voters that
have not heard from the leader for an election timeout T. That quorum shares a voter with the
quorum behind the lease; that voter's acknowledgement left it when it last heard from the leader,
at least T before the successor could win, and the lease counts from that send. With `lease_ms`
<= T/2 it has lapsed by then as long as clocks run at about the same rate and the send times the
host reads (signed wall-clock stamps) are off by less than T/2; a pause longer than `max_gap_ms`
(the host uses T, at least 2 s) ends the leadership as well; the lease does not depend on it. tests/sim/test_lease_sim.py checks, with pauses,
crashes, partitions, drops and delays, that no two voters ever hold a lease at once.

Invariants: `valid` is False for a non-leader; after `observe` reports a gap, `valid` stays False
until a quorum has acknowledged after it. Not thread-safe: the host calls it from its event loop.
"""

from __future__ import annotations

from lakelog.infra.errors import invariant


class ClockGap:
    """Detects pauses: a gap between two observations of the monotonic clock longer than `max_gap_ms`."""

    def __init__(self, max_gap_ms: float, now_ms: float) -> None:
        invariant(max_gap_ms > 0, "max_gap_ms must be positive")
        self.max_gap_ms = max_gap_ms
        self._last = now_ms
        #: The time of the observation that ended the latest gap (-inf: none yet).
        self.last_gap_at = float("-inf")
        self.gaps = 0

    def observe(self, now_ms: float) -> bool:
        """True if `now_ms` comes after a gap (and records it)."""
        gap = now_ms - self._last > self.max_gap_ms
        if gap:
            self.last_gap_at = now_ms
            self.gaps += 1
        self._last = max(self._last, now_ms)
        return gap


class LeaderLease:
    def __init__(self, node_id: int, voters: list[int] | set[int], lease_ms: float, max_gap_ms: float,
                 now_ms: float) -> None:
        invariant(node_id in voters, f"node {node_id} is not among the voters {sorted(voters)}")
        invariant(0 < lease_ms, "lease_ms must be positive")
        self.node_id = node_id
        self.peers = set(voters) - {node_id}
        self.quorum = len(voters) // 2 + 1
        self.lease_ms = lease_ms
        self.clock = ClockGap(max_gap_ms, now_ms)
        self.term = -1
        self.leading = False
        self._acked: dict[int, float] = {}
        self._step_down = False

    def became_leader(self, term: int, now_ms: float) -> None:
        self.observe(now_ms)
        self.term, self.leading, self._acked = term, True, {}

    def stepped_down(self) -> None:
        self.leading, self._acked = False, {}

    def acknowledged(self, peer: int, term: int, at_ms: float) -> None:
        if self.leading and term == self.term and peer in self.peers:
            self._acked[peer] = max(self._acked.get(peer, float("-inf")), at_ms)

    def observe(self, now_ms: float) -> bool:
        gap = self.clock.observe(now_ms)
        if gap and self.leading and self.peers:  # a lone voter has no successor to fear
            self.stepped_down()
            self._step_down = True
        return gap

    def take_step_down(self) -> bool:
        """True once after a pause ended a leadership: the host must step the core down."""
        pending, self._step_down = self._step_down, False
        return pending

    def confirmed_at(self, now_ms: float) -> float:
        """When a quorum (this voter included, as of `now_ms`) last confirmed the leadership."""
        times = sorted([now_ms, *self._acked.values()], reverse=True)
        return times[self.quorum - 1] if len(times) >= self.quorum else float("-inf")

    def valid(self, now_ms: float) -> bool:
        self.observe(now_ms)
        if not self.leading:
            return False
        at = self.confirmed_at(now_ms)
        return (not self.peers or at > self.clock.last_gap_at) and now_ms - at < self.lease_ms
