"""`Partition`, the host of the replication state machine on a node: the log, the clock, the futures.

The rules are `ReplicaCore`'s (test_replication_core.py); here, that their effects reach the log and
the waiting requests: produces complete or fail with the node's errors, long-polls wake up, the
leader epoch is stamped, the follower follows the leader's log start.
"""

from __future__ import annotations

import asyncio

import pytest

from lakelog.ingest_api.errors import (
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    OffsetNotAvailableError,
    ProduceTimeoutError,
)
from lakelog.ingest_api.replication.partition import Partition, PartitionKey
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import Record, build_batch


def batch(n: int = 1) -> bytes:
    return build_batch([Record(i, 1_700_000_000_000, None, b"v%d" % i) for i in range(n)])


def leader(tmp_path, isr=(1, 2)) -> Partition:
    p = Partition(PartitionKey("t", 0), PartitionLog(tmp_path / "t-0"), node_id=1)
    assert p.make_leader(3, 1, [1, 2], list(isr))
    return p


def test_acks_all_completes_when_the_follower_fetches_past_it(tmp_path):
    async def main():
        p = leader(tmp_path)
        assert p.log.epochs.entries == [(3, 0)]  # stamped on election, before any append
        info = p.append_as_leader(batch(2), required_acks="all", min_isr=2)
        waiting = asyncio.ensure_future(p.wait_for_commit(info.last_offset + 1, 5, 2))
        fetch = asyncio.ensure_future(p.wait_for_data(0, 5))
        await asyncio.sleep(0.01)
        assert not waiting.done() and not fetch.done() and p.high_watermark == 0
        assert p.on_follower_fetch(2, 2) is None  # already in the ISR: nothing to propose
        await asyncio.wait_for(asyncio.gather(waiting, fetch), 2)
        assert p.high_watermark == 2 and p.consumer_end_offset() == 2
        p.log.close()

    asyncio.run(main())


def test_produce_outcomes_are_the_nodes_errors(tmp_path):
    async def main():
        p = leader(tmp_path, isr=(1,))
        with pytest.raises(NotEnoughReplicasError):
            p.append_as_leader(batch(), required_acks="all", min_isr=2)
        info = p.append_as_leader(batch(), required_acks="1", min_isr=2)  # acks=1 is not refused
        with pytest.raises(NotEnoughReplicasAfterAppendError):
            await p.wait_for_commit(info.last_offset + 1, 1, 2)
        p.make_leader(3, 2, [1, 2], [1, 2])  # the follower is back in the ISR, unknown LEO: HW holds
        info = p.append_as_leader(batch(), required_acks="all", min_isr=1)
        with pytest.raises(ProduceTimeoutError):
            await p.wait_for_commit(info.last_offset + 1, 0.05, 1)
        assert p.core.waiting_produces() == 0  # a timed-out produce leaves the purgatory
        waiting = asyncio.ensure_future(p.wait_for_commit(info.last_offset + 1, 5, 1))
        await asyncio.sleep(0.01)
        p.make_follower(2, 4, 3, [1, 2], [1, 2])
        with pytest.raises(NotLeaderOrFollowerError, match="stopped leading"):
            await waiting
        assert p.needs_truncation
        p.log.close()

    asyncio.run(main())


def test_close_waiters_fails_produces_with_the_given_error(tmp_path):
    async def main():
        p = leader(tmp_path)
        info = p.append_as_leader(batch(), required_acks="all", min_isr=1)
        waiting = asyncio.ensure_future(p.wait_for_commit(info.last_offset + 1, 5, 1))
        await asyncio.sleep(0.01)
        p.close_waiters(NotLeaderOrFollowerError("t-0: the partition was deleted or moved"))
        with pytest.raises(NotLeaderOrFollowerError, match="deleted or moved"):
            await waiting
        p.log.close()

    asyncio.run(main())


def test_a_lagging_follower_is_proposed_out_and_a_refusal_clears_the_pending_isr(tmp_path):
    p = leader(tmp_path)
    proposal = p.tick(lag_max_ms=100, now=10**13)
    assert proposal is not None and list(proposal.new_isr) == [1] and p.pending_isr == [1]
    assert p.tick(lag_max_ms=100, now=10**13) is None  # one change in flight
    p.isr_change_answered(proposal.partition_epoch, accepted=False)
    assert p.pending_isr is None
    p.log.close()


def test_follower_follows_the_leaders_hw_and_log_start(tmp_path):
    src = leader(tmp_path / "a")
    src.append_as_leader(batch(3))
    data = src.log.read(0, 1 << 20).records
    f = Partition(PartitionKey("t", 0), PartitionLog(tmp_path / "b" / "t-0"), node_id=2)
    f.make_follower(1, 3, 1, [1, 2], [1, 2])
    f.truncated()
    f.append_as_follower(data, leader_hw=2, leader_log_start=1)
    assert (f.log.log_end_offset, f.high_watermark, f.log.log_start_offset) == (3, 2, 1)
    f.restart_at(10)
    assert (f.log.log_end_offset, f.high_watermark, f.log.log_start_offset) == (10, 10, 10)
    src.log.close()
    f.log.close()


def txn_batch(producer_id: int, base_offset: int, n: int = 2) -> bytes:
    return build_batch([Record(base_offset + i, 1_700_000_000_000, None, b"t%d" % i) for i in range(n)],
                       producer_id=producer_id, producer_epoch=0, base_sequence=0, is_transactional=True)


def test_the_lso_a_new_leader_answers_never_goes_below_its_predecessors(tmp_path):
    """KIP-207's rule for the LSO: a follower learns the HW a round late, so as a new leader its own
    HW and LSO start below what the old leader answered; until the HW reaches the start of the new
    leader epoch, OFFSET_NOT_AVAILABLE, then the LSO is at least the old one."""
    old = leader(tmp_path / "a")
    old.append_as_leader(txn_batch(7, 0))  # 0-1: a transaction of producer 7 ...
    old.log.append_control(7, 0, True, 0, 3)  # 2: ... committed
    old.append_as_leader(txn_batch(8, 3, 1))  # 3: producer 8's transaction, still open
    f = Partition(PartitionKey("t", 0), PartitionLog(tmp_path / "b" / "t-0"), node_id=2)
    f.make_follower(1, 3, 1, [1, 2], [1, 2])
    f.truncated()
    f.append_as_follower(old.log.read(0, 1 << 20).records, leader_hw=2, leader_log_start=0)
    old.on_follower_fetch(2, 4)  # the follower has everything: the old leader's HW moves to 4
    answered = old.consumer_stable_offset()
    assert (old.high_watermark, answered) == (4, 3)  # producer 8's open transaction holds the LSO
    assert f.last_stable_offset < answered  # what the follower would say: behind
    f.make_leader(4, 2, [1, 2], [1, 2])
    assert f.epoch_start_offset == 4
    with pytest.raises(OffsetNotAvailableError):
        f.consumer_stable_offset()
    with pytest.raises(OffsetNotAvailableError):
        f.consumer_end_offset()
    f.on_follower_fetch(1, 4)
    assert f.consumer_end_offset() == 4 and f.consumer_stable_offset() == answered
    f.log.append_control(8, 0, False, 0, 4)  # producer 8 aborts (offset 4)
    f.on_follower_fetch(1, 5)
    assert f.consumer_stable_offset() == 5
    old.log.close()
    f.log.close()
