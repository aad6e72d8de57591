"""A wall clock that jumps (NTP stepping it, an operator setting it) moves no duration: replica lag
(`replica.lag.time.max.ms`, also as a fetch session reports it), consumer group member sessions, the
empty-group age of offsets retention, a log's `flush.ms` and the object store's probe interval run
on the monotonic clock, so a jump of minutes forward neither shrinks the ISR or expires members at
once nor, backwards, keeps a silent follower or member. The wall clock is faked (`time.time` /
`time.time_ns` jump); the monotonic clock is not."""

from __future__ import annotations

import asyncio
import time

import pytest

from lakelog.ingest_api.groups.service import GroupService

from lakelog.ingest_api.replication.partition import Partition, PartitionKey
from lakelog.logstore.log import PartitionLog
from tests.support.faults import wait_for
from tests.unit.test_group_service import FakeNode, loaded

LAG_MAX_MS = 30_000


class JumpingWallClock:
    """`time.time` and `time.time_ns` offset by `jump_s` (the monotonic clock untouched)."""

    def __init__(self, monkeypatch) -> None:
        self.jump_s = 0.0
        real_time, real_ns = time.time, time.time_ns
        monkeypatch.setattr(time, "time", lambda: real_time() + self.jump_s)
        monkeypatch.setattr(time, "time_ns", lambda: real_ns() + int(self.jump_s * 1e9))


def leader_with_follower(tmp_path) -> Partition:
    p = Partition(PartitionKey("t", 0), PartitionLog(tmp_path / "t-0"), node_id=1)
    assert p.make_leader(3, 1, [1, 2], [1, 2])
    p.on_follower_fetch(2, p.log.log_end_offset)
    return p


@pytest.mark.parametrize("jump_s", [600.0, -600.0])
def test_a_wall_clock_jump_does_not_move_the_isr(tmp_path, monkeypatch, jump_s):
    clock = JumpingWallClock(monkeypatch)
    p = leader_with_follower(tmp_path)
    clock.jump_s = jump_s
    assert p.tick(LAG_MAX_MS) is None, "a wall-clock jump shrank the ISR"
    assert p.out_of_sync_replicas(LAG_MAX_MS) == []
    p.log.close()


def test_replica_lag_still_counts_in_monotonic_time(tmp_path):
    p = leader_with_follower(tmp_path)
    from lakelog.ingest_api.replication.partition import monotonic_ms

    later = monotonic_ms() + LAG_MAX_MS + 1  # the follower silent past the lag bound
    proposal = p.tick(LAG_MAX_MS, now=later)
    assert proposal is not None and 2 not in proposal.new_isr
    p.log.close()


def test_a_silent_fetch_session_follower_leaves_the_isr(tmp_path):
    """The ISR check reads a caught-up follower's last request time from its fetch session: that time
    must be on the clock `tick` compares it with, or a follower silent since then stays in the ISR."""
    from lakelog.ingest_api.replication.partition import monotonic_ms
    from lakelog.ingest_api.replication.sessions import FetchSessions

    p = leader_with_follower(tmp_path)
    sessions = FetchSessions()
    sessions.begin(2, {"session_id": 7, "session_epoch": 0, "partitions": [
        {"topic": "t", "partition": 0, "fetch_offset": p.log.log_end_offset, "current_leader_epoch": 3}]})
    seen = list(sessions.caught_up(p.key, 3, p.log.log_end_offset, since_ms=monotonic_ms() - LAG_MAX_MS))
    assert [r for r, _, _ in seen] == [2]
    for replica_id, offset, at_ms in seen:
        p.on_follower_fetch(replica_id, offset, now=at_ms)
    later = monotonic_ms() + LAG_MAX_MS + 1000
    proposal = p.tick(LAG_MAX_MS, now=later)
    assert proposal is not None and 2 not in proposal.new_isr, "a follower silent past the lag bound stayed in the ISR"
    # ... and its silent session does not bring it back: the next check no longer counts it as caught up.
    assert list(sessions.caught_up(p.key, 3, p.log.log_end_offset, since_ms=later - LAG_MAX_MS)) == []
    p.log.close()


async def stable_member(svc: GroupService, group: str, session_timeout_ms: int) -> tuple[str, int]:
    await loaded(svc, group)
    join = await svc.handle("join", {"group_id": group, "member_id": "", "client_id": "c",
                                     "session_timeout_ms": session_timeout_ms, "protocols": [["range", {"topics": ["t"]}]]})
    mid, gen = join["member_id"], join["generation"]
    sync = await svc.handle("sync", {"group_id": group, "member_id": mid, "generation": gen,
                                     "assignments": {mid: [["t", 0]]}})
    assert sync["error"] is None
    return mid, gen


def test_a_wall_clock_jump_forward_keeps_group_members(tmp_path, monkeypatch):
    async def main():
        clock = JumpingWallClock(monkeypatch)
        svc = GroupService(FakeNode(tmp_path, **{"group.initial.rebalance.delay.ms": "0",
                                                 "group.coordinator.tick.ms": "10"}))
        mid, gen = await stable_member(svc, "g", session_timeout_ms=60_000)
        await svc.start()
        try:
            clock.jump_s = 600.0
            ticks = svc.coordinator.tick
            seen = []
            svc.coordinator.tick = lambda now: seen.append(now) or ticks(now)  # count the loop's ticks
            await asyncio.to_thread(wait_for, lambda: len(seen) >= 5, 10, "five coordinator ticks")
            assert mid in svc.coordinator.groups["g"].members, "a wall-clock jump expired a member's session"
            hb = await svc.handle("heartbeat", {"group_id": "g", "member_id": mid, "generation": gen})
            assert hb["error"] is None, hb
        finally:
            await svc.stop()
    asyncio.run(main())


def test_a_member_silent_after_a_wall_clock_jump_back_still_expires(tmp_path, monkeypatch):
    async def main():
        clock = JumpingWallClock(monkeypatch)
        svc = GroupService(FakeNode(tmp_path, **{"group.initial.rebalance.delay.ms": "0",
                                                 "group.coordinator.tick.ms": "10"}))
        mid, _ = await stable_member(svc, "g", session_timeout_ms=300)
        clock.jump_s = -600.0
        await svc.start()
        try:
            await asyncio.to_thread(wait_for, lambda: mid not in svc.coordinator.groups["g"].members, 15,
                                    "the silent member's session to expire")
        finally:
            await svc.stop()
    asyncio.run(main())


def test_offsets_retention_counts_the_empty_group_on_the_monotonic_clock():
    from lakelog.ingest_api.groups.assignors import TopicPartition
    from lakelog.ingest_api.groups.coordinator import CoordinatorConfig, GroupCoordinator
    from lakelog.ingest_api.groups.offsets_codec import CommittedOffset

    c = GroupCoordinator(CoordinatorConfig(offsets_retention_ms=60_000), lambda client: client)
    c.apply_offset("g", TopicPartition("t", 0), CommittedOffset(5, "", 1_000_000), now_ms=10)
    # The wall clock jumped far ahead of the commit; the group has been empty for a second only.
    assert c.expired_offsets(1_010, wall_ms=1_000_000 + 3_600_000) == []
    assert c.expired_offsets(60_010, wall_ms=1_000_000 + 3_600_000) == [("g", TopicPartition("t", 0))]
    # Empty long enough, but committed a moment ago by the wall clock: kept.
    assert c.expired_offsets(60_010, wall_ms=1_000_000 + 1_000) == []


def wall_clocked_log(tmp_path, clock: JumpingWallClock, flush_ms: int) -> PartitionLog:
    from lakelog.infra.config import LogConfig
    return PartitionLog(tmp_path / "f-0", LogConfig({"flush.ms": flush_ms}), clock=lambda: time.time())


def append_one(log: PartitionLog) -> None:
    from lakelog.logstore.record_batch import Record, build_batch
    log.append_as_leader(build_batch([Record(0, int(time.time() * 1000), None, b"v")]), leader_epoch=0)


def test_a_wall_clock_jump_forward_does_not_hurry_flush_ms(tmp_path, monkeypatch):
    clock = JumpingWallClock(monkeypatch)
    log = wall_clocked_log(tmp_path, clock, flush_ms=600_000)
    clock.jump_s = 3600.0
    append_one(log)
    assert log.recovery_point == 0, "the append was fsynced because the wall clock jumped"
    log.close()


def test_flush_ms_still_comes_after_a_wall_clock_jump_back(tmp_path, monkeypatch):
    clock = JumpingWallClock(monkeypatch)
    log = wall_clocked_log(tmp_path, clock, flush_ms=50)
    append_one(log)
    clock.jump_s = -3600.0

    def flushed():
        log.flush_if_due()
        return log.recovery_point == log.log_end_offset
    wait_for(flushed, 10, "the periodic flush after flush.ms")
    log.close()
