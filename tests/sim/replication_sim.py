"""A deterministic simulation of one partition replicated on 2-3 replicas: the shipped replication state
machine over the real storage engine.

Each replica keeps its log in a real `logstore.log.PartitionLog` (in a temporary directory, with
small segments so rolls, index lookups and multi-segment truncation happen): leaders append with
`append_as_leader(data, epoch)`, followers with `append_as_follower`, truncation goes through
`truncate_to`, and OffsetsForLeaderEpoch is answered by `end_offset_for_epoch` (cross-checked against
`ingest_api.replication.truncation.leader_epoch_end_offset`). Each replica's replication rules are
the node's own `ingest_api.replication.core.ReplicaCore` — HW, followers' LEOs, catch-up times, ISR
shrink and expansion proposals, the produce purgatory, the leader epoch's start offset — which this
module hosts exactly as `ingest_api/replication/partition.py` does on a node: it turns each step into events
(`BecomeLeader` / `BecomeFollower` from the controller's metadata, `Appended`, `FollowerFetch`,
`FollowerAppended`, `Truncated`, `AwaitCommit`, `Tick` with the simulated clock, `IsrChangeAnswered`)
and carries out the effects (`StampLeaderEpoch`, `HighWatermarkAdvanced`, `CompleteProduce`,
`ProposeIsr`, ...). Around it, the simulation plays the controller and the network:

  * the controller: partition state (leader, leader epoch, partition epoch, ISR) published to every
    live replica at once; an ISR change a leader proposes is committed at once when its epochs are
    current (refused otherwise); a crash the controller notices removes the replica from the ISR
    (never the last member: it stays, offline, until it returns);
  * leader/follower fetch, split into two steps so that a response can be in flight while other
    things happen: `fetch(f)` (the leader reads and steps `FollowerFetch`: f's fetch offset becomes
    its "remote LEO", the HW may advance, an ISR expansion may be proposed) and `deliver(f)` (the
    follower appends and steps `FollowerAppended`: HW = min(leader HW, own LEO)); a response from an
    older leader epoch is dropped;
  * time: `tick_clock` steps `Tick` on the leader with `replica_lag_ticks` as the lag limit, so the
    leader proposes dropping followers that have not caught up;
  * produce with acks=all waits in the core's purgatory until the HW passes its last offset and fails
    if the ISR is smaller than `min.insync.replicas` (at append and at completion); acks=1 returns at
    once. `isr_join_requires_epoch_start` switches the core's KAFKA-7128 rule (`ReplicationRules`);
  * crashes: a process crash loses only memory (the HW, in-flight fetches): the HW comes back from a
    checkpoint written only at `checkpoint_hw` steps, so it is stale, as Kafka's
    `replication-offset-checkpoint`. A power loss also loses what was not fsynced: the tail of the
    active segment after the recovery point is cut (at a random batch boundary, sometimes leaving a
    torn batch), and recovery on reopen has to cope. A crash the controller notices ("fenced";
    always for a leader and for a power loss) removes the replica from the ISR;
  * elections: the first live ISR member in replica order, with the leader epoch bumped (and, with
    `stamp_epoch_on_election`, recorded at the LEO in the new leader's epoch cache at once, as Kafka
    and the ingest node do); an empty choice leaves the partition offline unless unclean election
    is enabled. Controlled leader moves (preferred-leader election) bump the epoch too;
  * truncation when a replica becomes a follower, by `TruncationPolicy`:
      HW                         truncate to the own HW (Kafka before 0.11): KIP-101's data loss
                                 and divergence;
      LEADER_EPOCH_SINGLE_ROUND  one OffsetsForLeaderEpoch round, min(end offset, LEO) (Kafka 0.11,
                                 before KIP-279): divergence after fast leader fail-overs;
      LEADER_EPOCH               the full KIP-101/KIP-279 rule of `truncation.py`, the intermediate
                                 truncations applied to the real log as Kafka does.

`Checker` raises `Violation` (naming the seed and the last steps) as soon as one of these fails:
  * every record a leader ever exposed below its HW ("committed") is in the log of every later
    leader at the same offset with the same batch (CRC), and no offset is committed twice with
    different contents: so no record acknowledged with acks=all is lost;
  * the leader's HW never goes backwards within an epoch; HW <= LEO on every live replica; the
    leader is in the ISR, and holds the controller's ISR and epoch; no replica holds a leader epoch
    above the controller's; the state machine's own invariants (checked by `invariant()` in every
    step) hold;
  * under LEADER_EPOCH a follower never fetches above the leader's LEO, never appends a batch that
    does not start at its LEO, and the pure `resolve_truncation` agrees with the stepwise exchange;
  * after a final heal (everyone restarted, fetching until caught up): a new acks=all produce is
    acknowledged, all replicas hold identical logs (same base offset, last offset, leader epoch
    and CRC for every batch) and every acknowledged record is in it, at its acknowledged offset;
    with `check_epoch_cache`, every replica's leader-epoch cache describes its log exactly.
Losses the protocol does not promise to prevent are "forgiven" and listed, never silently ignored:
records lost when the last ISR member lost power, and records lost to an unclean election.

Run one seed with a trace:  python -m tests.sim.replication_sim --seed 17 --trace
Replay a design-document scenario:  python -m tests.sim.replication_sim --scenario hw-data-loss --policy hw
Override a setting:  ... --set isr_join_requires_epoch_start=false --set stamp_epoch_on_election=true
"""

from __future__ import annotations

import argparse
import enum
import os
import random
import shutil
import sys
import tempfile
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Callable

from lakelog.infra.config import LogConfig
from lakelog.infra.errors import InvariantViolation
from lakelog.ingest_api.replication import core as rc
from lakelog.ingest_api.replication.core import ReplicaCore
from lakelog.ingest_api.replication.events import ReplicationRules
from lakelog.ingest_api.replication.truncation import (
    AskAgain,
    Truncate,
    first_request,
    follower_truncation_offset,
    leader_epoch_end_offset,
    resolve_truncation,
)
from lakelog.logstore.errors import InvalidRecordError
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import Record, RecordBatch, build_batch, iter_batches

#: Small segments and a dense index: rolls, index lookups and truncation across segments happen.
LOG_CONFIG = {"segment.bytes": 400, "segment.index.bytes": 4096, "index.interval.bytes": 128}


class TruncationPolicy(enum.Enum):
    """What a replica does to its log when it becomes a follower (see the module docstring)."""

    HW = "hw"
    LEADER_EPOCH_SINGLE_ROUND = "kip101"
    LEADER_EPOCH = "leader_epoch"


class Violation(AssertionError):
    """A replication invariant did not hold in a simulated run."""


@dataclass(frozen=True)
class SimConfig:
    """The partition's settings and the simulation's switches. Random runs draw them from the seed."""

    replicas: int = 3
    min_insync_replicas: int = 1
    policy: TruncationPolicy = TruncationPolicy.LEADER_EPOCH
    isr_join_requires_epoch_start: bool = True
    unclean_leader_election: bool = False
    replica_lag_ticks: int = 6
    power_loss: bool = True  # random runs: may crashes lose unflushed data?
    # A new leader records (epoch, LEO) in its cache at once, as Kafka and the ingest node do; without
    # it the entry appears with the first append (both must give the same answers).
    stamp_epoch_on_election: bool = True
    # At the end, every replica's leader-epoch cache must describe its log exactly (Kafka's does).
    # Off by default while `PartitionLog.truncate_to` / `LeaderEpochCache.assign` keep stale entries.
    check_epoch_cache: bool = True

    @staticmethod
    def random(rng: random.Random, policy: TruncationPolicy) -> "SimConfig":
        replicas = rng.choice((2, 3, 3))
        return SimConfig(replicas=replicas, min_insync_replicas=rng.choice((1, 2)) if replicas == 3 else 1,
                         policy=policy, replica_lag_ticks=rng.choice((3, 6, 12)), power_loss=rng.random() < 0.5,
                         stamp_epoch_on_election=rng.random() < 0.5)


@dataclass
class FetchResponse:
    """What the leader answered a follower's fetch; it waits in flight until `deliver`."""

    leader_epoch: int
    fetch_offset: int
    records: bytes
    leader_hw: int
    leader_log_start: int = 0
    out_of_range_leo: int | None = None  # the leader's LEO when the fetch offset was above it


@dataclass
class Produce:
    """One produce request: its values, where they went, and what the client was told."""

    value_ids: list[int]
    acks: str  # "all" or "1"
    leader_epoch: int = -1
    first_offset: int = -1
    last_offset: int = -1
    outcome: str = "pending"  # pending, acked, refused, failed (leader changed: unknown to the client)

    @property
    def acked(self) -> bool:
        return self.outcome == "acked"


@dataclass
class Replica:
    """One replica: its log and its replication state machine (both None while down: a crash loses
    the process's memory), its HW checkpoint, the fetch response in flight to it."""

    rid: int
    directory: Path
    log: PartitionLog | None = None
    core: ReplicaCore | None = None
    hw_checkpoint: int = 0  # the durable, periodically written HW
    inflight: FetchResponse | None = None

    @property
    def alive(self) -> bool:
        return self.log is not None

    @property
    def high_watermark(self) -> int:
        return self.core.high_watermark if self.core is not None else 0

    @property
    def needs_truncation(self) -> bool:
        return self.core is not None and self.core.needs_truncation

    @property
    def leo(self) -> int:
        assert self.log is not None
        return self.log.log_end_offset


def _value(value_id: int) -> bytes:
    return b"v%d" % value_id


def batch_summary(log: PartitionLog) -> list[tuple[int, int, int, int]]:
    """(base offset, last offset, partition leader epoch, CRC) of every batch: a log's identity."""
    return [(b.base_offset, b.last_offset, b.partition_leader_epoch, b.crc) for b in log.batches()]


def default_base_dir() -> str | None:
    """tmpfs when there is one: fsync is free there, and the simulation fsyncs a lot."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


class Checker:
    """Watches a run; raises Violation as soon as an invariant fails (see the module docstring)."""

    def __init__(self, cluster: "Cluster") -> None:
        self.cluster = cluster
        self.committed: dict[int, tuple[int, int]] = {}  # offset -> (batch base offset, CRC)
        self.acked: dict[int, tuple[int, bytes]] = {}  # value id -> (offset, value), acks=all
        self.forgiven: list[str] = []
        self.forgiven_ids: set[int] = set()
        self.leader_hw: dict[int, int] = {}  # epoch -> highest HW its leader reached

    def fail(self, message: str) -> None:
        self.cluster.fail(message)

    # -- committed records

    def on_hw_advance(self, leader: Replica, epoch: int, old_hw: int, new_hw: int) -> None:
        if new_hw < self.leader_hw.get(epoch, 0):
            self.fail(f"HW went backwards on leader {leader.rid} in epoch {epoch}: "
                      f"{self.leader_hw[epoch]} -> {new_hw}")
        self.leader_hw[epoch] = max(self.leader_hw.get(epoch, 0), new_hw)
        assert leader.log is not None
        for b in leader.log.batches(old_hw, max_offset=new_hw):
            for offset in range(max(b.base_offset, old_hw), b.last_offset + 1):
                seen = self.committed.get(offset)
                if seen is not None and seen != (b.base_offset, b.crc):
                    self.fail(f"offset {offset} was committed as batch {seen} and again, by leader "
                              f"{leader.rid} in epoch {epoch}, as batch {(b.base_offset, b.crc)}")
                self.committed[offset] = (b.base_offset, b.crc)

    def check_holds_committed(self, replica: Replica, why: str) -> None:
        """Every committed record is in `replica`'s log, unchanged."""
        if not self.committed:
            return
        assert replica.log is not None
        top = max(self.committed)
        held: dict[int, tuple[int, int]] = {}
        for b in replica.log.batches(min(self.committed), max_offset=None):
            for offset in range(b.base_offset, b.last_offset + 1):
                held[offset] = (b.base_offset, b.crc)
            if b.last_offset >= top:
                break
        for offset in sorted(self.committed):
            if held.get(offset) != self.committed[offset]:
                lost = [pid for pid, (o, _) in self.acked.items() if o == offset]
                self.fail(f"{why}: replica {replica.rid} (LEO {replica.leo}) lacks committed offset "
                          f"{offset} (batch {self.committed[offset]}, has {held.get(offset)}); "
                          f"acknowledged value ids there: {lost}")

    def forgive_from(self, offset: int, reason: str) -> None:
        """Records at or above `offset` may be lost: the protocol does not promise otherwise."""
        dropped = [o for o in self.committed if o >= offset]
        ids = [vid for vid, (o, _) in self.acked.items() if o >= offset and vid not in self.forgiven_ids]
        if not dropped and not ids:
            return
        for o in dropped:
            del self.committed[o]
        self.forgiven_ids.update(ids)
        self.forgiven.append(f"{reason}: offsets >= {offset} (acknowledged value ids {sorted(ids)})")

    def check_epoch_cache(self, r: Replica) -> None:
        """The cache holds exactly one (epoch, start) entry per run of batches with that epoch; the
        leader may also hold its own epoch stamped at the LEO with nothing appended yet."""
        c = self.cluster
        derived: list[tuple[int, int]] = []
        for b in r.log.batches():  # type: ignore[union-attr]
            if not derived or derived[-1][0] != b.partition_leader_epoch:
                derived.append((b.partition_leader_epoch, b.base_offset))
        cache = r.log.epochs.entries  # type: ignore[union-attr]
        if r.rid == c.leader and cache and cache[-1] == (c.leader_epoch, r.leo) and cache[-1] not in derived:
            cache = cache[:-1]
        if cache != derived:
            self.fail(f"replica {r.rid}: leader epoch cache {cache} does not describe its log, whose batches "
                      f"say {derived}")

    def on_ack(self, p: Produce) -> None:
        for i, vid in enumerate(p.value_ids):
            self.acked[vid] = (p.first_offset + i, _value(vid))

    # -- every step

    def after_step(self) -> None:
        c = self.cluster
        for r in c.replicas:
            if r.alive:
                if not 0 <= r.high_watermark <= r.leo:
                    self.fail(f"replica {r.rid}: HW {r.high_watermark} outside [0, LEO {r.leo}]")
                if r.log.latest_epoch > c.leader_epoch:
                    self.fail(f"replica {r.rid} holds epoch {r.log.latest_epoch} above the controller's "
                              f"{c.leader_epoch}")
        if c.leader is not None:
            hw = c.replicas[c.leader].high_watermark
            if hw < self.leader_hw.get(c.leader_epoch, 0):
                self.fail(f"HW went backwards on leader {c.leader} in epoch {c.leader_epoch}: "
                          f"{self.leader_hw[c.leader_epoch]} -> {hw}")
            if c.leader not in c.isr:
                self.fail(f"leader {c.leader} is not in the ISR {c.isr}")
            core = c.replicas[c.leader].core
            if core is not None and (list(core.isr) != c.isr or core.leader_epoch != c.leader_epoch):
                self.fail(f"leader {c.leader} holds ISR {list(core.isr)} in epoch {core.leader_epoch}, the "
                          f"controller's are {c.isr} in epoch {c.leader_epoch}")
            if not c.replicas[c.leader].alive:
                self.fail(f"leader {c.leader} is down")

    # -- the end of a run

    def final_check(self) -> None:
        c = self.cluster
        logs = {r.rid: batch_summary(r.log) for r in c.replicas}  # type: ignore[arg-type]
        first = logs[c.replicas[0].rid]
        for rid, summary in logs.items():
            if summary != first:
                at = next((i for i, (a, b) in enumerate(zip(first, summary)) if a != b), min(len(first), len(summary)))
                self.fail(f"replicas diverged: replica 0 and replica {rid} differ at batch #{at}: "
                          f"{first[at:at + 2]} vs {summary[at:at + 2]} (lengths {len(first)}, {len(summary)})")
        leader = c.replicas[c.leader]  # type: ignore[index]
        if c.config.check_epoch_cache:
            for r in c.replicas:
                self.check_epoch_cache(r)
        self.check_holds_committed(leader, "final log")
        values: dict[int, bytes | None] = {}
        for b in leader.log.batches():  # type: ignore[union-attr]
            for rec in b.records():
                values[rec.offset] = rec.value
        for vid, (offset, value) in sorted(self.acked.items()):
            if vid in self.forgiven_ids:
                continue
            if values.get(offset) != value:
                self.fail(f"acknowledged value id {vid} (acks=all, offset {offset}) is lost: the final "
                          f"log holds {values.get(offset)!r} there")


class Cluster:
    """One partition on `config.replicas` replicas; the controller state lives here too.

    Nothing happens unless a method is called: scripted scenarios call them one by one, `run_seed`
    calls them at random. Each method is one atomic step of the simulation.
    """

    def __init__(self, config: SimConfig, *, seed: int = 0, base_dir: str | None = None) -> None:
        self.config = config
        self.seed = seed
        self.name = f"seed {seed}"
        self.replay_args = f"--seed {seed} --policy {config.policy.value}"
        self.rng = random.Random(f"cluster-{seed}")  # the cluster's own choices (power-loss cuts)
        self.root = Path(tempfile.mkdtemp(prefix="lakelog-replsim-", dir=base_dir or default_base_dir()))
        self.tick = 0
        self.trace: list[str] = []
        self.replicas = [Replica(i, self.root / f"replica-{i}" / "topic-0") for i in range(config.replicas)]
        self.leader: int | None = None
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.isr: list[int] = []
        self.rules = ReplicationRules(isr_join_requires_epoch_start=config.isr_join_requires_epoch_start)
        self.pending: dict[int, Produce] = {}  # acks=all produces in the leader's purgatory, by request id
        self.produced: list[Produce] = []
        self.next_value_id = 0
        self.checker = Checker(self)
        self.log_config = LogConfig(LOG_CONFIG)
        for r in self.replicas:
            r.log = self._open_log(r)
            r.core = self._new_core(r, 0)

    # ------------------------------------------------------------------ plumbing

    def _clock(self) -> float:
        return 1_700_000_000 + self.tick

    def _open_log(self, r: Replica) -> PartitionLog:
        return PartitionLog(r.directory, self.log_config, clock=self._clock)

    def _new_core(self, r: Replica, high_watermark: int) -> ReplicaCore:
        assert r.log is not None
        return ReplicaCore(r.rid, high_watermark=high_watermark, leo=r.leo, log_start_offset=r.log.log_start_offset,
                           rules=self.rules)

    def _step(self, r: Replica, event: object) -> None:
        """Step replica `r`'s state machine and carry out its effects, as `ingest_api.replication.partition` does."""
        assert r.core is not None and r.log is not None
        try:
            effects = r.core.step(event)  # type: ignore[arg-type]
        except InvariantViolation as e:
            self.fail(f"replica {r.rid}'s state machine refused {event}: {e}")
        for e in effects:
            if isinstance(e, rc.StampLeaderEpoch):
                if self.config.stamp_epoch_on_election:
                    r.log.epochs.assign(e.leader_epoch, e.start_offset)
            elif isinstance(e, rc.IncrementLogStart):
                r.log.maybe_increment_log_start_offset(e.offset)
            elif isinstance(e, rc.HighWatermarkAdvanced):
                self.checker.on_hw_advance(r, r.core.leader_epoch, e.old, e.new)
            elif isinstance(e, rc.CompleteProduce):
                self._complete(e)
            elif isinstance(e, rc.ProposeIsr):
                self._alter_partition(r, e)
            elif isinstance(e, rc.NewLeaderEpoch) and e.role == rc.Role.FOLLOWER:
                r.inflight = None
                if self.config.policy is TruncationPolicy.HW:
                    self._truncate(r, r.high_watermark, "to own HW on becoming follower")
                    self._step(r, rc.Truncated(r.leo, r.log.log_start_offset, final=True))

    def _complete(self, e: "rc.CompleteProduce") -> None:
        p = self.pending.pop(e.request_id, None)
        if p is None:
            return
        if e.outcome is rc.ProduceOutcome.COMMITTED:
            p.outcome = "acked"
            self.checker.on_ack(p)
        elif e.outcome is rc.ProduceOutcome.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
            p.outcome = "refused"
        else:
            p.outcome = "failed"  # the leader changed: unknown to the client
        self.note(f"produce {p.value_ids}@{p.first_offset} {p.outcome}")

    def note(self, event: str) -> None:
        self.trace.append(f"t={self.tick} e={self.leader_epoch} L={self.leader} isr={self.isr}: {event}")

    def fail(self, message: str) -> None:
        tail = "\n  ".join(self.trace[-25:])
        raise Violation(f"{self.name} ({self.config.policy.value}): {message}\n"
                        f"replay: python -m tests.sim.replication_sim {self.replay_args} --trace\n"
                        f"last steps:\n  {tail}")

    def close(self) -> None:
        for r in self.replicas:
            if r.log is not None:
                for seg in r.log.segments:
                    seg.close()
                r.log = None
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _step_done(self) -> None:
        self.checker.after_step()

    # ------------------------------------------------------------------ controller

    def start(self) -> "Cluster":
        """Replica 0 leads epoch 0 with every replica in the ISR."""
        self.isr = [r.rid for r in self.replicas]
        self._elect(0, why="initial")
        self._step_done()
        return self

    def _publish(self) -> None:
        """The controller's metadata reaches every live replica (at once: the simulation's metadata log
        has no delay): the leader is told to lead, the others to follow."""
        replicas = tuple(r.rid for r in self.replicas)
        order = sorted((r for r in self.replicas if r.alive), key=lambda r: r.rid != self.leader)
        for r in order:
            assert r.log is not None
            if r.rid == self.leader:
                self._step(r, rc.BecomeLeader(self.leader_epoch, self.partition_epoch, replicas, tuple(self.isr),
                                              r.leo, r.log.log_start_offset, self.tick))
            else:
                self._step(r, rc.BecomeFollower(-1 if self.leader is None else self.leader, self.leader_epoch,
                                                self.partition_epoch, replicas, tuple(self.isr), r.leo,
                                                r.log.log_start_offset))

    def _elect(self, rid: int, *, why: str) -> None:
        old = self.leader
        self.leader = rid
        self.leader_epoch += 1
        self.partition_epoch += 1
        self.note(f"elect {rid} ({why}), was {old}")
        self.checker.check_holds_committed(self.replicas[rid], f"leader {rid} elected in epoch {self.leader_epoch}")
        self.replicas[rid].inflight = None
        self._publish()

    def _elect_after_failure(self) -> None:
        """The leader is gone: first live ISR member, else unclean (if enabled), else offline."""
        live = [rid for rid in self.isr if self.replicas[rid].alive]
        if live:
            self._elect(live[0], why="clean")
            return
        if self.config.unclean_leader_election:
            candidates = [r.rid for r in self.replicas if r.alive]
            if candidates:
                rid = candidates[0]
                leo = self.replicas[rid].leo
                self.checker.forgive_from(self._first_difference(self.replicas[rid]),
                                          f"unclean election of replica {rid} (LEO {leo})")
                self.isr = [rid]
                self._elect(rid, why="unclean")
                return
        self.leader = None
        self.note("partition offline")

    def _first_difference(self, r: Replica) -> int:
        """The first committed offset `r` does not hold unchanged (its LEO if it holds them all)."""
        held: dict[int, tuple[int, int]] = {}
        for b in r.log.batches():  # type: ignore[union-attr]
            for offset in range(b.base_offset, b.last_offset + 1):
                held[offset] = (b.base_offset, b.crc)
        for offset in sorted(self.checker.committed):
            if held.get(offset) != self.checker.committed[offset]:
                return offset
        return r.leo

    def _remove_from_isr(self, rid: int, why: str) -> bool:
        """The controller takes `rid` out of the ISR (never the last member), a new partition epoch."""
        if rid in self.isr and len(self.isr) > 1:
            self.isr = [i for i in self.isr if i != rid]
            self.partition_epoch += 1
            self.note(f"ISR shrinks: {rid} out ({why})")
            return True
        return False

    def _alter_partition(self, leader: Replica, proposal: "rc.ProposeIsr") -> None:
        """The leader's AlterPartition: committed at once when its epochs are current, refused otherwise."""
        accepted = (leader.rid == self.leader and proposal.leader_epoch == self.leader_epoch
                    and proposal.partition_epoch == self.partition_epoch)
        if accepted:
            new_isr = list(proposal.new_isr)
            grew = [r for r in new_isr if r not in self.isr]
            self.note(f"ISR expands: {grew[0]} in at LEO {leader.core.remote[grew[0]].leo}" if grew  # type: ignore[union-attr]
                      else f"ISR shrinks: {[r for r in self.isr if r not in new_isr]} out (lagging)")
            self.isr = new_isr
            self.partition_epoch += 1
            self._publish()
        self._step(leader, rc.IsrChangeAnswered(proposal.partition_epoch, accepted))

    # ------------------------------------------------------------------ leader side

    def produce(self, records: int = 1, acks: str = "all") -> Produce:
        """A client's produce to the current leader (refused when there is none or the ISR is too small)."""
        ids = list(range(self.next_value_id, self.next_value_id + records))
        self.next_value_id += records
        p = Produce(ids, acks)
        self.produced.append(p)
        if self.leader is None:
            p.outcome = "failed"
            self.note(f"produce {ids}: no leader")
            return p
        leader = self.replicas[self.leader]
        assert leader.core is not None and leader.log is not None
        if leader.core.append_refusal(acks, self.config.min_insync_replicas) is not None:
            p.outcome = "refused"  # NOT_ENOUGH_REPLICAS
            self.note(f"produce {ids}: NOT_ENOUGH_REPLICAS")
            return p
        ts = int(self._clock() * 1000)
        batch = build_batch([Record(i, ts, None, _value(vid)) for i, vid in enumerate(ids)], base_offset=0)
        info = leader.log.append_as_leader(batch, self.leader_epoch)
        p.leader_epoch, p.first_offset, p.last_offset = self.leader_epoch, info.first_offset, info.last_offset
        self.note(f"produce {ids} acks={acks} -> {leader.rid}@{info.first_offset}")
        self._step(leader, rc.Appended(leader.leo))
        if acks == "1":
            p.outcome = "acked"
        else:
            request_id = len(self.produced)
            self.pending[request_id] = p
            self._step(leader, rc.AwaitCommit(request_id, info.last_offset + 1, self.config.min_insync_replicas))
        self._step_done()
        return p

    def _handle_fetch(self, leader: Replica, f: Replica, offset: int, max_bytes: int) -> FetchResponse:
        assert leader.log is not None
        leo = leader.leo
        if offset > leo:
            return FetchResponse(self.leader_epoch, offset, b"", leader.high_watermark, out_of_range_leo=leo)
        self._step(leader, rc.FollowerFetch(f.rid, offset, leo, self.tick))
        records = b""
        if offset < leo:
            records = bytes(leader.log.read(offset, max_bytes).records)
        return FetchResponse(self.leader_epoch, offset, records, leader.high_watermark, leader.log.log_start_offset)

    def tick_clock(self) -> None:
        """Time passes; the leader proposes dropping followers that have not caught up for too long."""
        self.tick += 1
        if self.leader is not None:
            self._step(self.replicas[self.leader], rc.Tick(self.tick, self.config.replica_lag_ticks))
        self._step_done()

    # ------------------------------------------------------------------ follower side

    def _truncate(self, r: Replica, offset: int, why: str) -> None:
        before = r.leo
        # Always call the log, as Kafka's fetcher calls truncateTo: a cut at or above the LEO removes
        # no records but must still drop epoch entries at the LEO (an epoch stamped on election).
        r.log.truncate_to(min(offset, before))  # type: ignore[union-attr]
        if r.leo != before:
            self.note(f"replica {r.rid} truncates {why}: LEO {before} -> {r.leo}")
        self._step(r, rc.Truncated(r.leo, r.log.log_start_offset, final=False))  # type: ignore[union-attr]

    def truncate(self, rid: int) -> None:
        """A pending truncation (on becoming a follower) runs against the current leader."""
        r = self.replicas[rid]
        if not r.alive or not r.needs_truncation or self.leader is None or rid == self.leader:
            return
        leader = self.replicas[self.leader]
        if self.config.policy is TruncationPolicy.LEADER_EPOCH:
            self._truncate_leader_epoch(r, leader)
        else:
            self._truncate_single_round(r, leader)
        self._step(r, rc.Truncated(r.leo, r.log.log_start_offset, final=True))  # type: ignore[union-attr]
        self._step_done()

    def _ask(self, leader: Replica, epoch: int) -> tuple[int, int]:
        answer = leader.log.end_offset_for_epoch(epoch)  # type: ignore[union-attr]
        pure = leader_epoch_end_offset(leader.log.epochs.entries, leader.leo, epoch)  # type: ignore[union-attr]
        if tuple(answer) != tuple(pure):
            self.fail(f"leader {leader.rid}: end_offset_for_epoch({epoch}) = {answer}, "
                      f"leader_epoch_end_offset = {pure}")
        return answer

    def _truncate_leader_epoch(self, r: Replica, leader: Replica) -> None:
        log = r.log
        assert log is not None
        expected = resolve_truncation(log.epochs.entries, r.leo, lambda e: self._ask(leader, e),
                                      high_watermark=r.high_watermark)
        # As the ingest node's fetcher does: ask, cut at each intermediate answer, ask `step.epoch`.
        step = first_request(log.epochs.entries, r.leo, high_watermark=r.high_watermark)
        rounds, most_rounds = 0, len(log.epochs.entries) + 1  # each round asks a smaller epoch
        while isinstance(step, AskAgain):
            rounds += 1
            if rounds > most_rounds:
                self.fail(f"replica {r.rid}: the OffsetsForLeaderEpoch exchange does not end (epoch {step.epoch})")
            asked = step.epoch
            answer = self._ask(leader, asked)
            self.note(f"replica {r.rid} asks epoch {asked}: leader answers {answer}")
            step = follower_truncation_offset(log.epochs.entries, r.leo, answer, high_watermark=r.high_watermark,
                                              asked_epoch=asked)
            if isinstance(step, AskAgain):
                self._truncate(r, step.truncate_to, f"(KIP-279 intermediate, then ask epoch {step.epoch})")
        assert isinstance(step, Truncate)
        if step.offset != expected:
            self.fail(f"replica {r.rid}: stepwise truncation to {step.offset}, resolve_truncation says {expected}")
        self._truncate(r, step.offset, f"after OffsetsForLeaderEpoch ({rounds} round(s))")

    def _truncate_single_round(self, r: Replica, leader: Replica) -> None:
        latest = r.log.latest_epoch  # type: ignore[union-attr]
        if latest < 0:
            self._truncate(r, r.high_watermark, "to own HW (no epochs)")
            return
        epoch, end = self._ask(leader, latest)
        self.note(f"replica {r.rid} asks epoch {latest}: leader answers {(epoch, end)}")
        self._truncate(r, r.high_watermark if end < 0 else end, "after one OffsetsForLeaderEpoch round")

    def fetch(self, rid: int, max_bytes: int = 1 << 20) -> None:
        """Follower `rid` sends a fetch at its LEO, which the leader handles now; the response waits
        in flight for `deliver`. A follower that still has to truncate does only that."""
        r = self.replicas[rid]
        if not r.alive or self.leader is None or rid == self.leader or r.inflight is not None:
            return
        if r.needs_truncation:
            self.truncate(rid)
            return
        leader = self.replicas[self.leader]
        r.inflight = self._handle_fetch(leader, r, r.leo, max_bytes)
        self.note(f"fetch {rid}@{r.inflight.fetch_offset}: {len(r.inflight.records)} bytes, "
                  f"leader HW {r.inflight.leader_hw}")
        self._step_done()

    def deliver(self, rid: int) -> None:
        """The in-flight fetch response reaches follower `rid`."""
        r = self.replicas[rid]
        resp, r.inflight = r.inflight, None
        if resp is None or not r.alive:
            return
        if resp.leader_epoch != self.leader_epoch or rid == self.leader or r.leo != resp.fetch_offset:
            self.note(f"deliver {rid}: stale response dropped")
            return
        if resp.out_of_range_leo is not None:
            if self.config.policy is TruncationPolicy.LEADER_EPOCH:
                self.fail(f"replica {rid} fetched at {resp.fetch_offset}, above the leader's LEO "
                          f"{resp.out_of_range_leo}, after truncating by leader epoch")
            # OFFSET_OUT_OF_RANGE above the leader's log end: Kafka truncates to the leader's LEO.
            self._truncate(r, resp.out_of_range_leo, "to the leader's LEO (offset out of range)")
            self._step_done()
            return
        if resp.records:
            first = next(iter_batches(resp.records))[1]
            if first.base_offset != r.leo:
                self.fail(f"replica {rid} at LEO {r.leo} got a batch starting at {first.base_offset}: "
                          "its log and the leader's disagree on batch boundaries (replication is stuck)")
            try:
                r.log.append_as_follower(resp.records)  # type: ignore[union-attr]
            except InvalidRecordError as e:
                self.fail(f"replica {rid}: append_as_follower refused the leader's batches: {e}")
        self._step(r, rc.FollowerAppended(r.leo, r.log.log_start_offset, resp.leader_hw,  # type: ignore[union-attr]
                                          resp.leader_log_start))
        self.note(f"deliver {rid}: LEO {r.leo}, HW {r.high_watermark}")
        self._step_done()

    def replicate(self, rid: int, max_bytes: int = 1 << 20) -> None:
        """fetch then deliver (truncating first if needed)."""
        if self.replicas[rid].needs_truncation:
            self.truncate(rid)
        self.fetch(rid, max_bytes)
        self.deliver(rid)

    # ------------------------------------------------------------------ faults

    def checkpoint_hw(self, rid: int) -> None:
        """The periodic HW checkpoint (Kafka's replication-offset-checkpoint) of replica `rid`."""
        r = self.replicas[rid]
        if r.alive:
            r.hw_checkpoint = r.high_watermark
            self.note(f"checkpoint HW of {rid}: {r.hw_checkpoint}")

    def flush(self, rid: int) -> None:
        """fsync replica `rid`'s log (advances its recovery point to the LEO)."""
        r = self.replicas[rid]
        if r.alive:
            r.log.flush()  # type: ignore[union-attr]
            self.note(f"flush {rid} at {r.leo}")

    def _power_loss(self, r: Replica, log: PartitionLog, *, lose_all_unflushed: bool) -> int:
        """Cut the active segment's unflushed tail, as a power loss would. Returns the surviving LEO."""
        flushed = log.recovery_point
        active = log.segments[-1]
        path = active.log_path
        data = path.read_bytes()
        cuts = [(b.base_offset, pos) for pos, b in iter_batches(data) if b.base_offset >= flushed]
        cuts.append((log.log_end_offset, len(data)))
        offset, pos = cuts[0] if lose_all_unflushed else self.rng.choice(cuts)
        torn = 0
        if not lose_all_unflushed and pos < len(data) and self.rng.random() < 0.3:
            torn = self.rng.randrange(1, RecordBatch(data[pos:]).size_in_bytes)
        with open(path, "r+b") as fh:
            fh.truncate(pos + torn)
        self.note(f"power loss on {r.rid}: flushed up to {flushed}, keeps up to {offset}"
                  + (f" plus {torn} torn bytes" if torn else ""))
        return offset

    def crash(self, rid: int, *, power_loss: bool = False, fenced: bool = True,
              lose_all_unflushed: bool = True) -> None:
        self.crash_many([rid], power_loss=power_loss, fenced=fenced, lose_all_unflushed=lose_all_unflushed)

    def crash_many(self, rids: list[int], *, power_loss: bool = False, fenced: bool = True,
                   lose_all_unflushed: bool = True) -> None:
        """Replicas `rids` crash together; then the controller removes them from the ISR (in that order,
        never the last member) and elects a new leader if needed. A leader's crash and a power loss
        are always noticed (fenced); a follower's quick restart may go unnoticed (fenced=False)."""
        surviving: dict[int, int] = {}
        for rid in rids:
            r = self.replicas[rid]
            if not r.alive:
                continue
            log = r.log
            assert log is not None
            for seg in log.segments:
                seg.close()  # the process dies: no clean-shutdown marker, nothing else written
            r.log = None
            r.core = None  # the process's memory: HW, followers' LEOs, the purgatory
            r.inflight = None
            self.note(f"crash {rid}" + (" (power loss)" if power_loss else "") + ("" if fenced else " (unnoticed)"))
            if power_loss:
                surviving[rid] = self._power_loss(r, log, lose_all_unflushed=lose_all_unflushed)
        leader_lost = self.leader in rids
        isr_changed = False
        for rid in rids:
            if fenced or power_loss or rid == self.leader:
                isr_changed |= self._remove_from_isr(rid, "crashed")
        for rid, leo in surviving.items():
            if self.isr == [rid]:
                # The last ISR member lost records it had not fsynced: Kafka promises nothing here.
                self.checker.forgive_from(leo, f"power loss on {rid}, the last ISR member")
        if leader_lost:
            for p in self.pending.values():
                p.outcome = "failed"  # the client's connection to the leader broke
            self.pending.clear()
            self._elect_after_failure()
        elif isr_changed:
            self._publish()
        self._step_done()

    def restart(self, rid: int) -> None:
        """Reopen the log (recovery runs), restore the HW from its checkpoint, rejoin as follower,
        or lead if the partition was offline and this replica may."""
        r = self.replicas[rid]
        if r.alive:
            return
        r.log = self._open_log(r)
        r.core = self._new_core(r, min(r.hw_checkpoint, r.leo))
        self.note(f"restart {rid}: LEO {r.leo}, HW {r.high_watermark} ({r.log.recovery})")
        if self.leader is None:
            self._elect_after_failure()
        else:
            self._publish()
        self._step_done()

    def move_leader(self, rid: int) -> None:
        """Controlled leader change (preferred-leader election) to live ISR member `rid`."""
        if rid == self.leader or rid not in self.isr or not self.replicas[rid].alive or self.leader is None:
            return
        self._elect(rid, why="controlled move")
        self._step_done()

    # ------------------------------------------------------------------ the end of a run

    def heal(self, max_rounds: int = 300) -> Produce:
        """Restart everyone, replicate until every replica is in the ISR and caught up, then produce one
        acks=all record that must be acknowledged. Returns that produce."""
        self.note("heal")
        for r in self.replicas:
            self.restart(r.rid)
        if self.leader is None:
            self.fail("no leader after every replica restarted")
        final: Produce | None = None
        for _ in range(max_rounds):
            for r in self.replicas:
                if r.rid != self.leader:
                    self.deliver(r.rid)  # whatever was in flight
                    self.fetch(r.rid)
                    self.deliver(r.rid)
            leader = self.replicas[self.leader]  # type: ignore[index]
            settled = len(self.isr) == len(self.replicas) and all(
                r.inflight is None and not r.needs_truncation and r.leo == leader.leo
                and r.high_watermark == leader.leo for r in self.replicas if r.rid != leader.rid)
            if settled and final is None:
                final = self.produce(1, "all")
            elif settled and final.acked:
                return final
        self.fail(f"the partition did not converge after {max_rounds} heal rounds: "
                  + ", ".join(f"{r.rid}: LEO {r.leo} HW {r.high_watermark}" for r in self.replicas)
                  + f", final produce {final.outcome if final else 'not sent'}")
        raise AssertionError("unreachable")

    def final_check(self) -> None:
        self.checker.final_check()


# ---------------------------------------------------------------------------------------------
# Random runs


def run_seed(seed: int, *, policy: TruncationPolicy = TruncationPolicy.LEADER_EPOCH, steps: int = 150,
             trace: bool = False, base_dir: str | None = None, **overrides: object) -> Cluster:
    """One random run: `steps` random events, then heal and check. Raises Violation naming the seed.

    The configuration is drawn from the seed too; `overrides` replace some of its fields.
    """
    rng = random.Random(seed)
    cfg = replace(SimConfig.random(rng, policy), **overrides)  # type: ignore[arg-type]
    c = Cluster(cfg, seed=seed, base_dir=base_dir)
    c.replay_args += _set_args(overrides) + ("" if steps == 150 else f" --steps {steps}")
    try:
        c.start()
        for _ in range(steps):
            _random_step(c, rng)
        c.heal()
        c.final_check()
        return c
    finally:
        if trace:
            print("\n".join(c.trace))
            if c.checker.forgiven:
                print("forgiven:", *c.checker.forgiven, sep="\n  ")
        c.close()


def _random_step(c: Cluster, rng: random.Random) -> None:
    alive = [r.rid for r in c.replicas if r.alive]
    down = [r.rid for r in c.replicas if not r.alive]
    followers = [rid for rid in alive if rid != c.leader]
    inflight = [r.rid for r in c.replicas if r.inflight is not None]
    choices: list[tuple[int, Callable[[], None]]] = [
        (25, lambda: c.produce(rng.randint(1, 3), "all" if rng.random() < 0.85 else "1")),
        (8, c.tick_clock),
    ]
    if followers:
        choices.append((30, lambda: c.fetch(rng.choice(followers), rng.choice((1, 300, 1 << 20)))))
    if inflight:
        choices.append((25, lambda: c.deliver(rng.choice(inflight))))
    if alive:
        choices.append((4, lambda: c.flush(rng.choice(alive))))
        choices.append((4, lambda: c.checkpoint_hw(rng.choice(alive))))

        def crash() -> None:
            rid = rng.choice(alive)
            power = c.config.power_loss and rng.random() < 0.4
            fenced = power or rid == c.leader or rng.random() < 0.6
            c.crash(rid, power_loss=power, fenced=fenced, lose_all_unflushed=False)
        choices.append((3, crash))
    if down:
        choices.append((6, lambda: c.restart(rng.choice(down))))
    movable = [rid for rid in c.isr if rid != c.leader and c.replicas[rid].alive]
    if movable and c.leader is not None:
        choices.append((2, lambda: c.move_leader(rng.choice(movable))))
    total = sum(w for w, _ in choices)
    pick = rng.randrange(total)
    for weight, action in choices:
        if pick < weight:
            action()
            return
        pick -= weight


# ---------------------------------------------------------------------------------------------
# The design documents' scenarios (and two later Kafka fixes), scripted step by step. `run_scenario`
# runs one, heals and checks; a Violation propagates.

A, B, C = 0, 1, 2


def _acked(p: Produce) -> None:
    if not p.acked:
        raise AssertionError(f"the script expected {p} to be acknowledged")


def script_hw_data_loss(c: Cluster) -> None:
    """KIP-101 scenario 1 (the design documents' "data loss" case), min.insync.replicas=1.

    A leads, B follows. m2 is acknowledged once B's fetch at offset 2 moves A's HW to 2, but the
    response carrying HW=2 never reaches B (B's HW, and its checkpoint, stay at 1). B restarts and,
    under the HW rule, truncates to its HW: m2 is gone from B. A dies before B fetches again; B is
    in the ISR and becomes leader; A comes back, follows B, and loses m2 too.
    """
    m1 = c.produce()
    c.replicate(B)
    c.replicate(B)  # fetch at 1: A's HW 1, m1 acknowledged; B learns HW 1
    _acked(m1)
    c.checkpoint_hw(B)
    m2 = c.produce()
    c.replicate(B)  # B has m2 (LEO 2), HW still 1
    c.fetch(B)  # fetch at 2: A's HW 2, m2 acknowledged ... the response is lost
    _acked(m2)
    c.checkpoint_hw(A)
    c.crash(B, fenced=False)  # a quick restart: B stays in the ISR
    c.restart(B)  # HW rule: truncate to HW 1
    c.truncate(B)  # leader-epoch rule: ask A about epoch 0 -> (0, 2): nothing to cut
    c.crash(A)  # B becomes leader (epoch 1)
    c.restart(A)  # A follows B


def script_divergence(c: Cluster) -> None:
    """KIP-101 scenario 2: both replicas lose power and come back with different records at offset 1.

    m1 and m2 are replicated and committed (HW 2 on both, checkpointed), but only A fsynced m2. A
    power loss takes both: B comes back first with m1 only, leads (it is the last ISR member) and
    takes m3 at offset 1. A comes back with m1 m2 and HW 2: the HW rule keeps m2, so offset 1 holds
    m2 on A and m3 on B for ever. (Losing m2 itself is allowed: every ISR member lost power.)
    """
    c.produce()
    c.replicate(B)
    c.replicate(B)
    c.flush(A)
    c.flush(B)
    m2 = c.produce()
    c.replicate(B)
    c.replicate(B)  # HW 2 on A and on B
    _acked(m2)
    c.flush(A)  # A fsyncs m2, B does not
    c.checkpoint_hw(A)
    c.checkpoint_hw(B)
    c.crash_many([A, B], power_loss=True)
    c.restart(B)  # the last ISR member: leads epoch 1 with LEO 1
    _acked(c.produce())  # m3 at offset 1
    c.restart(A)


def script_fast_failover(c: Cluster) -> None:
    """KIP-279: leadership moves C -> B -> C quickly enough that a single OffsetsForLeaderEpoch round
    keeps records of an epoch the leader never had.

    Epoch 0 (A): offsets 0-4; B copies all of them, C only 0-2. Epoch 1 (C): 3-5. Epoch 2 (B): 5.
    Epoch 3 (C): 6. B asks C about epoch 2: C answers (1, 6) — its epoch 1 ended at 6. Taking
    min(6, LEO 6) keeps B's epoch-0 records 3-4 and its epoch-2 record 5, which C never had. The full
    rule sees that B never had epoch 1, cuts at 5, asks about epoch 0, gets (0, 3) and cuts at 3.
    """
    for _ in range(3):
        c.produce(1, "1")
    for rid in (B, C, B, C):
        c.replicate(rid)  # B and C at LEO 3; HW 3
    c.produce(1, "1")
    c.produce(1, "1")
    c.replicate(B)  # B at LEO 5, C stays at 3
    c.move_leader(C)  # epoch 1
    for _ in range(3):
        c.produce(1, "1")  # C: offsets 3-5 in epoch 1
    c.move_leader(B)  # epoch 2; C has not fetched, so it has not truncated
    c.produce(1, "1")  # B: offset 5 in epoch 2
    c.move_leader(C)  # epoch 3
    c.produce(1, "1")  # C: offset 6 in epoch 3
    c.truncate(A)
    c.truncate(B)


def script_stale_hw_isr_join(c: Cluster) -> None:
    """KAFKA-7128: a new leader's HW lags; a follower that reaches only that stale HW must not join
    the ISR, or it can be elected without records that were acknowledged.

    C is out of the ISR with an empty log. A leads, B follows; m2 is acknowledged at HW 2 but B never
    learns it (HW 1). Leadership moves to B (HW 1, epoch start offset 2; A's LEO unknown to B, so
    the HW stays 1). C fetches m1, reaches the stale HW 1 and — without the epoch-start condition —
    joins the ISR. A and B crash: C is elected without m2.
    """
    c.crash(C)
    m1 = c.produce()
    c.replicate(B)
    c.replicate(B)
    _acked(m1)
    m2 = c.produce()
    c.replicate(B)
    c.fetch(B)  # A's HW 2: m2 acknowledged; the response is lost
    _acked(m2)
    c.restart(C)
    c.move_leader(B)
    c.replicate(C, max_bytes=1)  # truncation (nothing to cut), then m1: C's LEO 1 = B's HW
    c.fetch(C, max_bytes=1)  # at LEO 1 >= HW 1: C joins the ISR unless the epoch start (2) is required
    c.crash(A)
    c.crash(B)


def script_unclean_election(c: Cluster) -> None:
    """Unclean election of a replica whose log starts in a later epoch than a follower's latest.

    C (empty log, out of the ISR) is elected uncleanly in epoch 1 and takes m9 at offset 0. B comes
    back with m1 (epoch 0) at offset 0 and HW 1 and asks C about epoch 0, below C's first epoch.
    Kafka's leader answers (0, 0) — the start of its first epoch above — and B truncates to 0. An
    UNDEFINED answer (what `LeaderEpochCache.end_offset_for` gave at first) makes B fall back to its
    HW (1) and keep m1: offset 0 differs between B and C for ever. (Losing m1 is allowed: unclean
    election.)
    """
    c.crash(C)
    c.produce()
    c.replicate(B)
    c.replicate(B)
    c.checkpoint_hw(B)
    c.crash_many([A, B])
    c.restart(C)  # unclean: C leads epoch 1 with an empty log
    c.produce()  # m9 at offset 0
    c.restart(B)
    c.truncate(B)


def script_whole_isr_power_loss(c: Cluster) -> None:
    """The last ISR member loses every unflushed record and comes back leading a later epoch from
    offset 0; a follower holding the old epoch-0 records must truncate to 0, not keep them.

    A leads, B follows: m1, m2 committed (HW 2 on both, B checkpoints it). B crashes (out of the
    ISR); A, the last ISR member, loses power with nothing fsynced (allowed to lose m1, m2), comes
    back, leads epoch 1 from offset 0 and takes m3, m4. B comes back and asks about epoch 0, below
    A's first epoch: Kafka's answer (0, 0) makes B truncate to 0; an UNDEFINED answer (what the
    engine gave at first) makes B fall back to its HW 2 and keep m1, m2 where A has m3, m4.
    """
    c.produce()
    c.produce()
    c.replicate(B)
    c.replicate(B)  # HW 2 on A and B
    c.checkpoint_hw(B)
    c.crash(B)
    c.crash(A, power_loss=True)
    c.restart(A)  # leads epoch 1 with an empty log
    c.produce()
    c.produce()
    c.restart(B)
    c.truncate(B)


def script_stale_epoch_stamp(c: Cluster) -> None:
    """A leader records its epoch at the LEO on election; if it never appends, that entry must go
    when it truncates as a follower, even when the truncation removes no record (Kafka's
    `UnifiedLog.truncateTo` always truncates the epoch cache for this reason). Otherwise the entry
    claims records of an older epoch it later fetches, and its OffsetsForLeaderEpoch answers cut
    committed records from an in-sync follower, which is then elected.

    Epoch 0 (A): m0 committed, m1 at offset 1 only on A. Epoch 1 (B, LEO 1): B stamps (1, 1) and
    writes nothing. Epoch 2 (A): A stamps (2, 2); B truncates to 1 (its LEO: no record goes), then
    fetches m1 (epoch 0) — its cache still says epoch 1 from offset 1 — and m1 is committed (HW 2).
    A writes m2 in epoch 2, which B does not fetch. Epoch 3 (B): A asks about epoch 2, B answers
    (1, 2); A never had epoch 1, cuts at 2, asks about epoch 0 and B answers (0, 1): A cuts the
    committed m1. Leadership moves back to A: m1 is gone.
    """
    c.produce()
    c.replicate(B)
    c.replicate(B)  # m0 committed
    c.produce(1, "1")  # m1 at offset 1, on A only
    c.move_leader(B)  # epoch 1: B stamps (1, 1)
    c.move_leader(A)  # epoch 2: A stamps (2, 2)
    c.truncate(B)  # asks about 1: (0, 2) -> truncate to 1, its LEO
    c.replicate(B)  # m1, an epoch-0 batch
    c.replicate(B)  # HW 2: m1 committed
    c.produce(1, "1")  # m2 at offset 2 in epoch 2, on A only
    c.move_leader(B)  # epoch 3
    c.truncate(A)
    c.move_leader(A)  # epoch 4


#: name -> (script, the configuration it needs besides the policy)
SCENARIOS: dict[str, tuple[Callable[[Cluster], None], dict[str, object]]] = {
    "hw-data-loss": (script_hw_data_loss, {"replicas": 2}),
    "divergence": (script_divergence, {"replicas": 2}),
    "fast-failover": (script_fast_failover, {"replicas": 3}),
    "stale-hw-isr-join": (script_stale_hw_isr_join, {"replicas": 3}),
    "unclean-election": (script_unclean_election, {"replicas": 3, "unclean_leader_election": True}),
    "whole-isr-power-loss": (script_whole_isr_power_loss, {"replicas": 2}),
    "stale-epoch-stamp": (script_stale_epoch_stamp, {"replicas": 2, "stamp_epoch_on_election": True}),
}


def run_scenario(name: str, policy: TruncationPolicy = TruncationPolicy.LEADER_EPOCH, *, trace: bool = False,
                 base_dir: str | None = None, **overrides: object) -> Cluster:
    """Run scripted scenario `name`, heal, check. Returns the (closed) cluster; raises Violation."""
    script, needs = SCENARIOS[name]
    config = SimConfig(**{**needs, "policy": policy, **overrides})  # type: ignore[arg-type]
    c = Cluster(config, base_dir=base_dir)
    c.name = f"scenario {name}"
    c.replay_args = f"--scenario {name} --policy {policy.value}" + _set_args(overrides)
    try:
        c.start()
        script(c)
        c.heal()
        c.final_check()
        return c
    finally:
        if trace:
            print("\n".join(c.trace))
            if c.checker.forgiven:
                print("forgiven:", *c.checker.forgiven, sep="\n  ")
        c.close()


def _set_args(overrides: dict[str, object]) -> str:
    return "".join(f" --set {k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in sorted(overrides.items()))


def _parse_set(items: list[str]) -> dict[str, object]:
    """`--set key=value` pairs, typed by SimConfig's fields."""
    types = {f.name: f.type for f in fields(SimConfig)}
    out: dict[str, object] = {}
    for item in items:
        key, _, value = item.partition("=")
        kind = types.get(key)
        if kind is None or key == "policy":
            raise SystemExit(f"--set: unknown field {key!r} (fields: {', '.join(k for k in types if k != 'policy')})")
        out[key] = value.lower() in ("1", "true", "yes") if kind in (bool, "bool") else int(value)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, help="run one random seed")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--policy", choices=[p.value for p in TruncationPolicy], default="leader_epoch")
    ap.add_argument("--scenario", choices=sorted(SCENARIOS))
    ap.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                    help="override a SimConfig field, e.g. --set isr_join_requires_epoch_start=false")
    ap.add_argument("--trace", action="store_true", help="print every step")
    args = ap.parse_args(argv)
    policy = TruncationPolicy(args.policy)
    overrides = _parse_set(args.set)
    try:
        if args.scenario:
            c = run_scenario(args.scenario, policy, trace=args.trace, **overrides)
        elif args.seed is not None:
            c = run_seed(args.seed, policy=policy, steps=args.steps, trace=args.trace, **overrides)
        else:
            ap.error("give --seed or --scenario")
    except Violation as e:
        print(f"VIOLATION: {e}", file=sys.stderr)
        return 1
    print(f"ok: {len(c.produced)} produce requests, {sum(p.acked for p in c.produced)} acknowledged, "
          f"final epoch {c.leader_epoch}; forgiven: {c.checker.forgiven or 'nothing'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
