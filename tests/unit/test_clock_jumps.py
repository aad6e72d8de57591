"""A wall clock that jumps (NTP stepping it, an operator setting it) moves no duration: replica lag
(`replica.lag.time.max.ms`) and the object store's probe interval run on the monotonic clock, so a
jump of minutes forward neither shrinks the ISR at once nor, backwards, keeps a silent follower in
it. The wall clock is faked (`time.time` / `time.time_ns` jump); the monotonic clock is not."""

from __future__ import annotations

import time

import pytest

from lakelog.ingest_api.replication.partition import Partition, PartitionKey
from lakelog.logstore.log import PartitionLog

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
    seen = list(sessions.caught_up(p.key, 3, p.log.log_end_offset))
    assert [r for r, _, _ in seen] == [2]
    for replica_id, offset, at_ms in seen:
        p.on_follower_fetch(replica_id, offset, now=at_ms)
    proposal = p.tick(LAG_MAX_MS, now=monotonic_ms() + LAG_MAX_MS + 1000)
    assert proposal is not None and 2 not in proposal.new_isr, "a follower silent past the lag bound stayed in the ISR"
    p.log.close()
