"""An idle follower costs the same per fetch round at any partition count (operations, not seconds).

A leader node's replica manager and a follower node's replica manager with its real `ReplicaFetcher`,
in one process: the fetcher's requests go straight to the leader's `replica_fetch` (the wire format
encoded and decoded as between nodes). After one record per partition is replicated, idle rounds
must look at no partition on either side — the follower names none in its requests, the leader
examines none — whether the topic has 8 partitions or 80; an append to one partition is looked at
alone; the ISR check refreshes an idle follower's catching-up time from its session. An acks=all
append costs each follower one fetch: the fetch that moves the HW long-polls instead of being
answered at once with the new HW.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

from lakelog.ingest_api.cluster.image import ClusterImage
from lakelog.ingest_api.config.node import NodeConfig
from lakelog.ingest_api.replication.partition import PartitionKey
from lakelog.ingest_api.replication.replica_manager import ReplicaManager
from lakelog.ingest_api.replication import wire
from lakelog.ingest_api.replication.fetcher import ReplicaFetcher
from lakelog.logstore.record_batch import Record, build_batch
from tests.unit.test_cluster_image import applied, create, part, register

WAIT_MS = 20
#: A long-poll far longer than the test: a request answered before it ends was answered early.
LONG_WAIT_MS = 60_000
IDLE_ROUNDS = 10


@dataclass
class _Response:
    status_code: int
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode(errors="replace")


class _Peers:
    """The follower's peer client: its requests answered by the leader's replica manager in-process."""

    def __init__(self, leader: ReplicaManager) -> None:
        self.leader = leader

    async def request(self, peer, method, path, body, *, headers=None, timeout_s=None) -> _Response:
        assert path == "/internal/replication/fetch"
        try:
            parts = await self.leader.replica_fetch(json.loads(body))
        except Exception as e:  # what the router answers for a refused session
            return _Response(400, str(e).encode())
        return _Response(200, b"".join(bytes(b) for b in wire.encode_fetch_response(parts)))


class _FollowerNode:
    """What a `ReplicaFetcher` reads of its node."""

    def __init__(self, config: NodeConfig, replicas: ReplicaManager | None, peers: _Peers) -> None:
        self.config = config
        self.node_id = config.node_id
        self.broker_epoch = 1
        self.replicas = replicas
        self.peers = peers

    def local_partition(self, key: PartitionKey):
        return self.replicas.local_partition(key)


def _config(node_id: int, tmp_path, wait_ms: int = WAIT_MS) -> NodeConfig:
    return NodeConfig({"node.id": node_id, "log.dirs": str(tmp_path / f"node-{node_id}"),
                       "replica.fetch.wait.max.ms": wait_ms, "replica.fetch.backoff.ms": 50})


async def _no_controller(*args, **kwargs):
    return {}


async def _idle_cost(tmp_path, partitions: int) -> dict[str, float]:
    image = ClusterImage()
    for n in (1, 2):
        applied(image, register(n, 10 + n))
    applied(image, create("t", "id-t", *[part([1, 2]) for _ in range(partitions)]))
    leader = ReplicaManager(_config(1, tmp_path), image, cleaner=None, new_fetcher=lambda n: None,
                            controller_call=_no_controller, broker_epoch=lambda: 11, on_drop=lambda key: None)
    fetchers: list[ReplicaFetcher] = []
    node = _FollowerNode(_config(2, tmp_path), None, _Peers(leader))

    def new_fetcher(leader_id: int) -> ReplicaFetcher:
        fetchers.append(ReplicaFetcher(node, leader_id))  # type: ignore[arg-type]
        return fetchers[-1]

    follower = ReplicaManager(_config(2, tmp_path), image, cleaner=None, new_fetcher=new_fetcher,
                              controller_call=_no_controller, broker_epoch=lambda: 12, on_drop=lambda key: None)
    node.replicas = follower
    assert leader.reconcile_now() and follower.reconcile_now()
    keys = [PartitionKey("t", p) for p in range(partitions)]
    try:
        for k in keys:
            leader.local_partition(k).append_as_leader(build_batch([Record(0, 1_700_000_000_000, None, b"v")]))
        await _until(lambda: all(follower.local_partition(k).high_watermark == 1 for k in keys))
        assert all(leader.local_partition(k).high_watermark == 1 for k in keys)
        await asyncio.sleep(3 * WAIT_MS / 1000)  # the HW answers have gone out

        fetcher = fetchers[0]
        session = leader.fetch_sessions.sessions()[0]
        before = (fetcher.requests, fetcher.partitions_examined, session.partitions_examined, session.rounds)
        await _until(lambda: fetcher.requests >= before[0] + IDLE_ROUNDS)
        rounds = fetcher.requests - before[0]
        idle = {"follower_examined": (fetcher.partitions_examined - before[1]) / rounds,
                "leader_examined": (session.partitions_examined - before[2]) / rounds,
                "leader_rounds": (session.rounds - before[3]) / rounds}

        # One append after the idle rounds: replicated, and only that partition is looked at.
        before = (fetcher.partitions_examined, session.partitions_examined)
        leader.local_partition(keys[-1]).append_as_leader(build_batch([Record(0, 1_700_000_000_000, None, b"w")]))
        await _until(lambda: follower.local_partition(keys[-1]).high_watermark == 2)
        idle["append_follower_examined"] = fetcher.partitions_examined - before[0]
        idle["append_leader_examined"] = session.partitions_examined - before[1]

        # The ISR check: an idle follower is caught up as of its session's last request.
        p = leader.local_partition(keys[0])
        caught_up_before = p.remote[2].last_caught_up_ms
        await asyncio.sleep(2 * WAIT_MS / 1000)
        leader.isr.check(p, lag_max_ms=30_000)
        assert p.remote[2].last_caught_up_ms > caught_up_before
        assert p.isr == [1, 2]
        return idle
    finally:
        await follower.stop_fetchers()
        for rm in (leader, follower):
            for p in rm.partitions():
                p.log.close()


async def _until(cond, timeout_s: float = 30.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting for replication"
        await asyncio.sleep(0.005)


def test_an_idle_fetch_round_looks_at_no_partition_at_any_partition_count(tmp_path):
    small = asyncio.run(_idle_cost(tmp_path / "small", 8))
    large = asyncio.run(_idle_cost(tmp_path / "large", 80))
    for cost in (small, large):
        assert cost["follower_examined"] == 0, cost
        assert cost["leader_examined"] == 0, cost
        assert cost["leader_rounds"] == 1, cost  # one request per round: one session, one long-poll
        assert cost["append_follower_examined"] <= 3, cost
        assert cost["append_leader_examined"] <= 3, cost
    assert large == small


async def _fetches_per_append(tmp_path) -> None:
    image = ClusterImage()
    for n in (1, 2):
        applied(image, register(n, 10 + n))
    applied(image, create("t", "id-t", part([1, 2])))
    leader = ReplicaManager(_config(1, tmp_path, LONG_WAIT_MS), image, cleaner=None, new_fetcher=lambda n: None,
                            controller_call=_no_controller, broker_epoch=lambda: 11, on_drop=lambda key: None)
    fetchers: list[ReplicaFetcher] = []
    node = _FollowerNode(_config(2, tmp_path, LONG_WAIT_MS), None, _Peers(leader))

    def new_fetcher(leader_id: int) -> ReplicaFetcher:
        fetchers.append(ReplicaFetcher(node, leader_id))  # type: ignore[arg-type]
        return fetchers[-1]

    follower = ReplicaManager(_config(2, tmp_path, LONG_WAIT_MS), image, cleaner=None, new_fetcher=new_fetcher,
                              controller_call=_no_controller, broker_epoch=lambda: 12, on_drop=lambda key: None)
    node.replicas = follower
    assert leader.reconcile_now() and follower.reconcile_now()
    key = PartitionKey("t", 0)
    lp, fp = leader.local_partition(key), follower.local_partition(key)
    try:
        await _until(lambda: bool(fetchers) and fetchers[0].requests >= 2)  # the session is open and waiting
        await asyncio.sleep(0.05)
        for n in range(1, 4):
            before = fetchers[0].requests
            commit = asyncio.ensure_future(lp.wait_for_commit(n, timeout_s=30, min_isr=2))
            lp.append_as_leader(build_batch([Record(0, 1_700_000_000_000, None, b"v")]), required_acks="all",
                                min_isr=2)
            await asyncio.wait_for(commit, 30)  # acknowledged by the follower's fetch from offset n
            await asyncio.sleep(0.05)
            # Two requests: the one woken by the append (answered with the record) and the next,
            # whose fetch offset moved the HW; it waits (up to LONG_WAIT_MS) instead of answering the HW.
            assert fetchers[0].requests == before + 1, (n, fetchers[0].requests - before)
            assert lp.high_watermark == n
            assert fp.log.log_end_offset == n
            assert fp.high_watermark == n - 1  # the HW reaches the follower with its next answer
    finally:
        await follower.stop_fetchers()
        for rm in (leader, follower):
            for p in rm.partitions():
                p.log.close()


def test_an_acks_all_append_costs_each_follower_one_fetch(tmp_path):
    asyncio.run(_fetches_per_append(tmp_path))


def _flush_visits(tmp_path, partitions: int) -> list[int]:
    """Partitions the flush scheduler visits in each of its passes: idle, after one append (not due
    yet), idle again, once it falls due (flushed), idle after that."""
    image = ClusterImage()
    applied(image, register(1, 11))
    applied(image, create("t", "id-t", *[part([1]) for _ in range(partitions)], configs={"flush.ms": "100"}))
    rm = ReplicaManager(_config(1, tmp_path), image, cleaner=None, new_fetcher=lambda n: None,
                        controller_call=_no_controller, broker_epoch=lambda: 11, on_drop=lambda key: None)
    assert rm.reconcile_now()
    p = rm.local_partition(PartitionKey("t", partitions - 1))
    visits = []
    try:
        def one_pass() -> None:
            before = rm.flush.partitions_visited
            rm.flush.run_pass()
            visits.append(rm.flush.partitions_visited - before)

        one_pass()
        p.append_as_leader(build_batch([Record(0, 1_700_000_000_000, None, b"v")]))
        one_pass()  # looked at: not due yet (unless this machine is very slow: then flushed here)
        due = p.log.flush_if_due()
        one_pass()  # not due yet, or nothing left to flush: not looked at
        if due is not None:
            time.sleep(max(0.0, due / 1000 - time.monotonic()) + 0.01)
            one_pass()  # due: flushed
            assert p.log.flush_if_due() is None
        one_pass()
        return visits
    finally:
        for q in rm.partitions():
            q.log.close()


def test_the_flush_scheduler_visits_only_partitions_with_unflushed_records(tmp_path):
    small = _flush_visits(tmp_path / "small", 8)
    large = _flush_visits(tmp_path / "large", 80)
    for visits in (small, large):  # the same at 8 and 80 partitions: only the one appended to
        assert visits in ([0, 1, 0, 1, 0], [0, 1, 0, 0]), visits


async def _isr_requests(tmp_path, partitions: int) -> list[int]:
    """The AlterPartition requests a leader sends when every one of its partitions' followers falls
    out of the ISR at once: the number of partitions each request carries."""
    image = ClusterImage()
    for n in (1, 2):
        applied(image, register(n, 10 + n))
    applied(image, create("t", "id-t", *[part([1, 2]) for _ in range(partitions)]))
    calls: list[int] = []

    async def controller(op, args):
        assert op == "alter_partitions"
        calls.append(len(args["partitions"]))
        return {"errors": [None] * len(args["partitions"])}

    rm = ReplicaManager(_config(1, tmp_path), image, cleaner=None, new_fetcher=lambda n: None,
                        controller_call=controller, broker_epoch=lambda: 11, on_drop=lambda key: None)
    assert rm.reconcile_now()
    try:
        for p in rm.partitions():
            rm.isr.check(p, lag_max_ms=-1)  # follower 2 has never fetched: every partition shrinks
        await _until(lambda: sum(calls) == partitions)
        await asyncio.sleep(0.05)
        assert rm.isr.requests == len(calls)
        return calls
    finally:
        for p in rm.partitions():
            p.log.close()


def test_the_isr_changes_of_many_partitions_go_to_the_controller_in_one_request(tmp_path):
    assert asyncio.run(_isr_requests(tmp_path / "small", 8)) == [8]
    assert asyncio.run(_isr_requests(tmp_path / "large", 80)) == [80]


def _cleaner_services(tmp_path, partitions: int) -> list[int]:
    """Logs the cleaner's passes look at: idle logs holding only their active segment, then after
    one of them rolled."""
    from lakelog.compaction.cleaner import LogCleaner
    from lakelog.logstore.log import PartitionLog

    config = NodeConfig({"node.id": 1, "log.dirs": str(tmp_path)}).log_config({})
    logs = [PartitionLog(tmp_path / f"t-{p}", config) for p in range(partitions)]
    cleaner = LogCleaner(interval_ms=1000)
    try:
        for log in logs:
            # A fresh record: nothing is old enough for retention, so the rolled log keeps its segment.
            log.append_as_leader(build_batch([Record(0, int(time.time() * 1000), None, b"v")]), 0)
            cleaner.register(log)
        counts = []
        for roll in (False, True, False):
            if roll:
                logs[-1].roll()
            before = cleaner.logs_serviced
            cleaner.run_once()
            counts.append(cleaner.logs_serviced - before)
        return counts
    finally:
        for log in logs:
            log.close()


def test_the_cleaner_passes_over_logs_with_only_an_active_segment(tmp_path):
    assert _cleaner_services(tmp_path / "small", 8) == [0, 1, 1]
    assert _cleaner_services(tmp_path / "large", 80) == [0, 1, 1]
