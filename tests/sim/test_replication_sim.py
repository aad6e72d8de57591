"""Follower truncation (KIP-101 / KIP-279) and the replication simulation on the real storage engine.

1. The pure rule of `ingest_api.replication.truncation`: worked examples, Kafka's corner cases, the
   leader's answer against the storage engine's own cache, and a property over random histories
   (the offset the exchange picks is exactly where the follower's and the leader's logs part).
2. The design documents' scenarios, scripted: the broken rule must be caught (a Violation is
   expected), the leader-epoch rule must pass with identical logs on every replica.
3. Random runs under the leader-epoch rule: `LAKELOG_REPL_SEEDS` seeds (default 300 with a tmpfs
   at /dev/shm for the logs, 100 without: every fsync then hits a disk) from
   `LAKELOG_REPL_SEED_START` (default 0), `LAKELOG_REPL_STEPS` steps each (default 150). A failure
   names its seed; replay it with `python -m tests.sim.replication_sim --seed N --trace`.
"""

from __future__ import annotations

import os
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lakelog.infra.errors import InvariantViolation
from lakelog.logstore.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_OFFSET
from lakelog.ingest_api.replication.truncation import (
    AskAgain,
    Truncate,
    first_request,
    follower_truncation_offset,
    leader_epoch_end_offset,
    resolve_truncation,
)
from lakelog.logstore.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_OFFSET
from lakelog.logstore.leader_epoch import LeaderEpochCache
from tests.sim.replication_sim import (
    SCENARIOS,
    TruncationPolicy,
    Violation,
    default_base_dir,
    run_scenario,
    run_seed,
)

SEEDS = int(os.environ.get("LAKELOG_REPL_SEEDS", "300" if default_base_dir() else "100"))
SEED_START = int(os.environ.get("LAKELOG_REPL_SEED_START", "0"))
STEPS = int(os.environ.get("LAKELOG_REPL_STEPS", "150"))
BATCH = 50

HW = TruncationPolicy.HW
SINGLE_ROUND = TruncationPolicy.LEADER_EPOCH_SINGLE_ROUND
LEADER_EPOCH = TruncationPolicy.LEADER_EPOCH


# ---------------------------------------------------------------------------------------------
# 1. The rule


def test_same_epoch_truncates_to_the_shorter_log():
    # The leader's copy of our latest epoch goes further: nothing to cut (the design documents' case 1).
    assert follower_truncation_offset([(0, 0), (2, 5)], 8, (2, 11), high_watermark=3) == Truncate(8)
    # It ends earlier (the follower got records of that epoch that the leader lost): cut there.
    assert follower_truncation_offset([(0, 0), (2, 5)], 8, (2, 6), high_watermark=3) == Truncate(6)


def test_older_epoch_the_follower_has_truncates_to_where_either_copy_ends():
    # We wrote epoch 2 from 5; the leader never had epoch 2 and its epoch 1 runs to 7 (KIP-279): the
    # records from 5 on are ours alone. Taking only min(7, LEO) would keep them.
    assert follower_truncation_offset([(0, 0), (1, 3), (2, 5)], 9, (1, 7), high_watermark=0) == Truncate(5)


def test_epoch_the_follower_never_had_asks_again():
    # Leader: (0,0) (1,3) (3,6). Follower: (0,0) (2,5). Asked about 2, the leader answers (1, 6); we
    # never had epoch 1, so everything after our epoch 0 (from 5) diverges and epoch 0 is next.
    assert follower_truncation_offset([(0, 0), (2, 5)], 6, (1, 6), high_watermark=0) == AskAgain(0, 5)
    assert follower_truncation_offset([(0, 0)], 5, (0, 3), high_watermark=0) == Truncate(3)
    leader = [(0, 0), (1, 3), (3, 6)]
    asked: list[int] = []

    def ask(epoch: int) -> tuple[int, int]:
        asked.append(epoch)
        return leader_epoch_end_offset(leader, 7, epoch)

    assert resolve_truncation([(0, 0), (2, 5)], 6, ask, high_watermark=0) == 3
    assert asked == [2, 0]


def test_undefined_answer_falls_back_to_the_high_watermark():
    assert follower_truncation_offset([(0, 0)], 9, (UNDEFINED_EPOCH, UNDEFINED_OFFSET), high_watermark=4) == Truncate(4)
    assert follower_truncation_offset([(0, 0)], 3, (UNDEFINED_EPOCH, UNDEFINED_OFFSET), high_watermark=4) == Truncate(3)
    # A leader that tracks no epochs but gives an end offset (Kafka before KIP-279).
    assert follower_truncation_offset([(0, 0)], 9, (UNDEFINED_EPOCH, 6), high_watermark=4) == Truncate(6)


def test_first_request_asks_for_the_latest_epoch_or_truncates_to_hw_without_epochs():
    assert first_request([(0, 0), (4, 10)], 12, high_watermark=2) == AskAgain(4, 12)
    assert first_request([], 7, high_watermark=2) == Truncate(2)
    assert first_request([], 0, high_watermark=0) == Truncate(0)


def test_leader_epoch_below_the_followers_first_uses_kafkas_answer_for_the_follower_side():
    # The follower's log starts in epoch 3 (at 10); the leader answers about its epoch 1 ending at 15.
    # Kafka's follower-side lookup gives (1, 10): nothing we hold is from epoch 1, so cut at 10.
    assert follower_truncation_offset([(3, 10)], 20, (1, 15), high_watermark=12) == Truncate(10)


def test_protocol_violations_are_refused():
    with pytest.raises(InvariantViolation):  # answered an epoch above the one asked
        follower_truncation_offset([(0, 0), (2, 5)], 8, (3, 8), high_watermark=0)
    with pytest.raises(InvariantViolation):  # entries must increase
        follower_truncation_offset([(2, 0), (1, 5)], 8, (1, 8), high_watermark=0)
    with pytest.raises(InvariantViolation):  # an entry past the log end
        first_request([(0, 0), (1, 9)], 8, high_watermark=0)
    with pytest.raises(InvariantViolation):
        follower_truncation_offset([(0, 0)], 8, (0, -5), high_watermark=0)


@pytest.mark.parametrize("requested", [-1, 0, 1, 2, 3, 4, 5, 6, 9])
def test_leader_answer_is_the_storage_engines(tmp_path, requested):
    cache = LeaderEpochCache(tmp_path)
    for epoch, start in [(1, 0), (3, 10), (5, 20)]:
        cache.assign(epoch, start)
    assert leader_epoch_end_offset(cache.entries, 42, requested) == cache.end_offset_for(requested, 42)


def _entries(log: list[int]) -> list[tuple[int, int]]:
    return [(e, i) for i, e in enumerate(log) if i == 0 or log[i - 1] != e]


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_exchange_finds_exactly_where_the_logs_part(seed):
    """Random histories of three replicas, each log a list of per-offset epochs. A record is named by
    (offset, epoch): one leader writes an epoch, each offset once. Leaders change at random (clean or
    not), append, lose unflushed tails (a leader that does steps down), and followers sync with the
    exchange then copy part of the leader's log. Every sync must cut at exactly the longest common
    prefix: never keep a record the leader does not have, never cut one it has."""
    rng = random.Random(seed)
    logs: list[list[int]] = [[], [], []]
    epoch, leader = -1, None
    for _ in range(60):
        op = rng.random()
        if leader is None or op < 0.12:
            leader, epoch = rng.randrange(3), epoch + 1
        elif op < 0.45:
            logs[leader] += [epoch] * rng.randint(1, 3)
        elif op < 0.9:
            f = rng.choice([r for r in range(3) if r != leader])
            lead = logs[leader]
            offset = resolve_truncation(_entries(logs[f]), len(logs[f]),
                                        lambda e: leader_epoch_end_offset(_entries(lead), len(lead), e),
                                        high_watermark=0)
            assert offset == _common_prefix(logs[f], lead), (logs[f], lead)
            logs[f] = logs[f][:offset] + lead[offset:offset + rng.randint(0, len(lead))]
        else:
            r = rng.randrange(3)
            logs[r] = logs[r][:rng.randint(0, len(logs[r]))]
            if r == leader:
                leader = None


# ---------------------------------------------------------------------------------------------
# 2. The scenarios


def test_hw_truncation_loses_an_acknowledged_record():
    """The design documents' data-loss case: caught under the old rule ..."""
    with pytest.raises(Violation, match="lacks committed offset 1"):
        run_scenario("hw-data-loss", HW)


def test_leader_epoch_keeps_the_acknowledged_record():
    """... and gone under leader epochs: B asks A instead of trusting its HW."""
    c = run_scenario("hw-data-loss", LEADER_EPOCH)
    assert not c.checker.forgiven
    assert [p.outcome for p in c.produced] == ["acked"] * 3


def test_hw_truncation_lets_logs_diverge_after_both_replicas_lose_power():
    with pytest.raises(Violation, match="replicas diverged"):
        run_scenario("divergence", HW)


def test_leader_epoch_converges_after_both_replicas_lose_power():
    c = run_scenario("divergence", LEADER_EPOCH)
    # m2 is lost, which Kafka allows when every ISR member lost power; it is listed, not ignored.
    assert len(c.checker.forgiven) == 1 and "last ISR member" in c.checker.forgiven[0]


def test_single_round_leader_epoch_diverges_after_a_fast_failover():
    with pytest.raises(Violation, match="replicas diverged"):
        run_scenario("fast-failover", SINGLE_ROUND)


def test_multi_round_leader_epoch_survives_a_fast_failover():
    c = run_scenario("fast-failover", LEADER_EPOCH)
    assert any("KIP-279 intermediate" in line for line in c.trace)
    assert any("asks epoch 0: leader answers (0, 3)" in line for line in c.trace)


def test_isr_join_at_a_stale_hw_loses_an_acknowledged_record():
    """KAFKA-7128: DESIGN.md's "rejoins when its LEO reaches the leader's HW" is not enough."""
    with pytest.raises(Violation, match="lacks committed offset 1"):
        run_scenario("stale-hw-isr-join", LEADER_EPOCH, isr_join_requires_epoch_start=False)
    run_scenario("stale-hw-isr-join", LEADER_EPOCH, isr_join_requires_epoch_start=True)


def test_follower_converges_after_an_unclean_election():
    run_scenario("unclean-election", LEADER_EPOCH)


def test_follower_converges_after_the_whole_isr_lost_its_data():
    run_scenario("whole-isr-power-loss", LEADER_EPOCH)


def test_a_stale_epoch_stamp_does_not_cut_committed_records():
    run_scenario("stale-epoch-stamp", LEADER_EPOCH)


def test_epoch_caches_describe_their_logs():
    for seed in range(SEED_START, SEED_START + 100):
        run_seed(seed, policy=LEADER_EPOCH, steps=STEPS, stamp_epoch_on_election=True, check_epoch_cache=True)


def test_every_scenario_has_a_test():
    assert set(SCENARIOS) == {"hw-data-loss", "divergence", "fast-failover", "stale-hw-isr-join",
                              "unclean-election", "whole-isr-power-loss", "stale-epoch-stamp"}


# ---------------------------------------------------------------------------------------------
# 3. Random runs


@pytest.mark.parametrize("batch", range((SEEDS + BATCH - 1) // BATCH))
def test_random_runs_lose_no_acknowledged_record_and_converge(batch):
    first = SEED_START + batch * BATCH
    for seed in range(first, min(first + BATCH, SEED_START + SEEDS)):
        run_seed(seed, policy=LEADER_EPOCH, steps=STEPS)  # raises Violation naming the seed


@pytest.mark.parametrize("policy", [HW, SINGLE_ROUND])
def test_random_runs_catch_the_broken_rules(policy):
    """The simulation has teeth: the pre-KIP-101 and pre-KIP-279 rules fail a seed soon."""
    for seed in range(200):
        try:
            run_seed(seed, policy=policy, steps=STEPS)
        except Violation as e:
            assert str(e).startswith(f"seed {seed} ({policy.value}): ")
            assert f"--seed {seed} --policy {policy.value}" in str(e)  # the replay command
            return
    pytest.fail(f"{policy} went unnoticed for 200 seeds")


def test_same_seed_same_run():
    a, b = run_seed(7, steps=STEPS), run_seed(7, steps=STEPS)
    assert a.trace == b.trace
    assert [(p.value_ids, p.first_offset, p.outcome) for p in a.produced] == \
        [(p.value_ids, p.first_offset, p.outcome) for p in b.produced]
