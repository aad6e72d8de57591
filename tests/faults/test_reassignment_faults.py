"""Partition reassignment interrupted by faults, on real 4-node clusters under acks=all load.

Each test preloads a partition (about 1.5 MB) and moves it with the catch-up throttled (60 KB/s, so
the move is still in progress when the fault hits — checked, not assumed), while an idempotent
acks=all producer keeps writing (`tests.support.faults.IdempotentLoad`). Then:

1. the partition's leader, which the move removes, is SIGKILLed: a surviving original replica
   leads, the new replica follows it, the throttle is lifted, the killed node comes back and the
   move completes; the removed replicas delete their logs;
2. the active controller is SIGKILLed: the next controller reads the move from the metadata log
   and finishes it;
3. the leader is SIGKILLed and the move is cancelled: the partition is back on its original
   replicas, the new replica deletes what it fetched.

Each ends by reading the partition from its leader and checking the history: no acknowledged
record lost or duplicated, each at the offset its acknowledgement named (tests/support/history.py).
Seeded (LAKELOG_FAULT_SEED replays the choices); every wait bounded; every process stopped.
"""

from __future__ import annotations

import base64
import random

import httpx
import pytest

from tests.faults.test_replication_faults import Up, _seed, check, running
from tests.support.faults import (
    BINARY,
    IdempotentLoad,
    cluster_id,
    controller_id,
    create_topic,
    drain,
    partition_state,
    replicas_of,
    wait_for,
    wait_full_isr,
    wait_live_leader,
)
from tests.support.history import History
from tests.support.nodes import Cluster

pytestmark = pytest.mark.timeout(240)

RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
THROTTLE_BYTES_PER_S = 60_000
PRELOAD_RECORDS, PRELOAD_RECORD_BYTES = 150, 10_000
#: 503s answered before the append (not ready, not the leader, no leader): a plain retry cannot duplicate.
REFUSED_BEFORE_APPEND = (50301, 50302, 50306)
#: A loaded machine (2 cores, other test runs) delays heartbeats: a little more room than FAST_CLUSTER.
SETTINGS = {"broker.session.timeout.ms": "3000", "replica.lag.time.max.ms": "3000",
            "controller.quorum.election.timeout.ms": "1500"}


def _call(method: str, url: str, expect: int, json: dict | None = None) -> httpx.Response:
    """An idempotent admin call, sent again while a node answers 503 (not ready on a loaded machine)."""
    def once():
        r = httpx.request(method, url, json=json, timeout=30)
        if r.status_code == 503:
            return None
        assert r.status_code == expect, (method, url, r.status_code, r.text)
        return r
    return wait_for(once, 60, f"{method} {url}")


def _v3(url: str) -> str:
    return f"{url}/v3/clusters/{cluster_id(url)}"


def _preload(url: str, topic: str, history: History) -> None:
    """About 1.5 MB acknowledged (acks=all) before the load starts, recorded in the history."""
    for start in range(0, PRELOAD_RECORDS, 25):
        values = [f"pre{i}-" + "x" * PRELOAD_RECORD_BYTES for i in range(start, start + 25)]
        body = {"records": [{"value": base64.b64encode(v.encode()).decode()} for v in values]}

        def send(body=body):
            r = httpx.post(f"{url}/topics/{topic}/partitions/0?acks=all", timeout=30,
                           headers={"Content-Type": BINARY}, json=body)
            # Refused before anything was appended (not ready, not the leader): safe to send again.
            if r.status_code == 503 and r.json().get("error_code") in REFUSED_BEFORE_APPEND:
                return None
            assert r.status_code == 200, r.text
            return r
        r = wait_for(send, 30, "a preload batch acknowledged")
        for v, o in zip(values, r.json()["offsets"]):
            history.produced(0, v, True, o["offset"])


def _throttle(v3: str, topic: str, on: bool) -> None:
    for key in RATE_KEYS:
        if on:
            _call("PUT", f"{v3}/broker-configs/{key}", 204, {"value": str(THROTTLE_BYTES_PER_S)})
        else:
            _call("DELETE", f"{v3}/broker-configs/{key}", 204)
    if on:
        _call("POST", f"{v3}/topics/{topic}/configs:alter", 204, {"data": [
            {"name": "leader.replication.throttled.replicas", "value": "*"},
            {"name": "follower.replication.throttled.replicas", "value": "*"}]})


def _any_v3(up: Up) -> str:
    return wait_for(lambda: _v3(next(n for n in up() if n.running).url), 20, "a node to answer")


def _moving(up: Up, topic: str) -> dict | None:
    """The partition's reassignment as a live node answers, or None when none is in progress."""
    for n in up():
        try:
            r = httpx.get(f"{_v3(n.url)}/topics/{topic}/partitions/0/reassignment", timeout=5)
        except httpx.HTTPError:
            continue
        if r.status_code == 200:
            return r.json()
        if r.status_code == 404:
            return None
    raise AssertionError("no node answered")


def _start_move(cluster: Cluster, up: Up, topic: str, rng: random.Random) -> tuple[list[int], list[int]]:
    """Move partition 0 off its leader onto the spare node: (original replicas, target)."""
    url = cluster.node(1).url
    original = replicas_of(partition_state(url, topic, 0))
    leader = partition_state(url, topic, 0)["leader"]
    spare = next(n for n in (1, 2, 3, 4) if n not in original)
    kept = [r for r in original if r != leader]
    rng.shuffle(kept)
    target = [spare] + kept
    doc = _call("PATCH", f"{_v3(url)}/topics/{topic}/partitions/0/reassignment", 202, {"replicas": target}).json()
    assert doc["adding_replicas"] == [spare] and doc["removing_replicas"] == [leader], doc
    return original, target


def _setup(cluster: Cluster, topic: str, history: History) -> str:
    url = cluster.node(1).url
    create_topic(url, topic, partitions=1, rf=3, min_insync_replicas="2")
    wait_full_isr(cluster.nodes, topic, [0])
    _preload(url, topic, history)
    _throttle(_v3(url), topic, on=True)
    return url


def _dirs(cluster: Cluster, topic: str) -> set[int]:
    return {n.node_id for n in cluster.nodes if (n.data_dir / f"{topic}-0").exists()}


def _finish(cluster: Cluster, up: Up, topic: str, history: History, load: IdempotentLoad, want: list[int]) -> None:
    """Wait until every node sees `want` as the replicas and only they hold the log; check the history."""
    wait_for(lambda: _moving(up, topic) is None, 90, "the reassignment to end")
    wait_for(lambda: all(replicas_of(partition_state(n.url, topic, 0)) == want for n in cluster.nodes), 30,
             f"every node to see replicas {want}")
    wait_full_isr(cluster.nodes, topic, [0], timeout_s=60)
    load.wait_progress(10, timeout_s=30, what="produce after the reassignment")
    load.stop()
    wait_for(lambda: _dirs(cluster, topic) == set(want), 30, f"only {want} to hold {topic}-0")
    drained = drain(cluster.nodes, topic, [0], min_end=load.min_end())
    check(history, load, drained, min_acked=30)


def test_reassignment_survives_a_killed_leader(tmp_path):
    seed = _seed("reassignment: SIGKILL the leader being removed")
    rng = random.Random(seed)
    topic = f"move-leader-{rng.randrange(1000)}"
    with running(Cluster(tmp_path, 4, overrides=SETTINGS)) as cluster:
        up = Up(cluster)
        history = History()
        _setup(cluster, topic, history)
        load = IdempotentLoad(topic, [0], up, history, rng.randrange(2**32)).start()
        try:
            load.wait_progress(10)
            original, target = _start_move(cluster, up, topic, rng)
            leader = [r for r in original if r not in target][0]
            wait_for(lambda: target[0] in _dirs(cluster, topic), 20, "the new replica to start fetching")
            load.wait_progress(10)
            assert _moving(up, topic) is not None, "the move ended before the fault: the throttle did not hold it"
            print(f"moving {original} -> {target}; SIGKILL node {leader} (the leader, being removed)")
            up.mark_down(leader)
            cluster.node(leader).kill()
            new_leader = wait_live_leader(up(), topic, 0, up.ids(), timeout_s=30)
            assert new_leader in target[1:], new_leader
            load.wait_progress(10, timeout_s=30, what="produce after the kill")
            assert _moving(up, topic) is not None
            _throttle(_any_v3(up), topic, on=False)
            cluster.node(leader).start(wait=False)
            cluster.node(leader).wait_ready(60)
            up.mark_up(leader)
            _finish(cluster, up, topic, history, load, target)
        finally:
            load.stop()


def test_reassignment_survives_a_killed_active_controller(tmp_path):
    seed = _seed("reassignment: SIGKILL the active controller")
    rng = random.Random(seed)
    topic = f"move-ctrl-{rng.randrange(1000)}"
    with running(Cluster(tmp_path, 4, overrides=SETTINGS)) as cluster:
        up = Up(cluster)
        history = History()
        _setup(cluster, topic, history)
        load = IdempotentLoad(topic, [0], up, history, rng.randrange(2**32)).start()
        try:
            load.wait_progress(10)
            original, target = _start_move(cluster, up, topic, rng)
            wait_for(lambda: target[0] in _dirs(cluster, topic), 20, "the new replica to start fetching")
            assert _moving(up, topic) is not None, "the move ended before the fault: the throttle did not hold it"
            ctrl = controller_id(cluster.node(1).url)
            print(f"moving {original} -> {target}; SIGKILL node {ctrl} (the active controller)")
            up.mark_down(ctrl)
            cluster.node(ctrl).kill()
            survivor = up()[0].url
            wait_for(lambda: controller_id(survivor) not in (-1, ctrl), 30, "a new active controller")
            wait_live_leader(up(), topic, 0, up.ids(), timeout_s=30)
            load.wait_progress(10, timeout_s=30, what="produce after the kill")
            assert _moving(up, topic) is not None  # the new controller knows the move from the log
            _throttle(_any_v3(up), topic, on=False)
            cluster.node(ctrl).start(wait=False)
            cluster.node(ctrl).wait_ready(60)
            up.mark_up(ctrl)
            _finish(cluster, up, topic, history, load, target)
            leader = partition_state(cluster.node(1).url, topic, 0)["leader"]
            assert leader in target, leader
        finally:
            load.stop()


def test_reassignment_cancelled_after_a_killed_leader_rolls_back(tmp_path):
    seed = _seed("reassignment: SIGKILL the leader, then cancel")
    rng = random.Random(seed)
    topic = f"move-cancel-{rng.randrange(1000)}"
    with running(Cluster(tmp_path, 4, overrides=SETTINGS)) as cluster:
        up = Up(cluster)
        history = History()
        _setup(cluster, topic, history)
        load = IdempotentLoad(topic, [0], up, history, rng.randrange(2**32)).start()
        try:
            load.wait_progress(10)
            original, target = _start_move(cluster, up, topic, rng)
            leader = [r for r in original if r not in target][0]
            wait_for(lambda: target[0] in _dirs(cluster, topic), 20, "the new replica to start fetching")
            assert _moving(up, topic) is not None, "the move ended before the fault: the throttle did not hold it"
            print(f"moving {original} -> {target}; SIGKILL node {leader}, then cancel")
            up.mark_down(leader)
            cluster.node(leader).kill()
            wait_live_leader(up(), topic, 0, up.ids(), timeout_s=30)
            load.wait_progress(10, timeout_s=30, what="produce after the kill")
            v3 = _any_v3(up)
            _call("DELETE", f"{v3}/topics/{topic}/partitions/0/reassignment", 204)
            assert sorted(replicas_of(partition_state(up()[0].url, topic, 0))) == sorted(original)
            _throttle(v3, topic, on=False)
            cluster.node(leader).start(wait=False)
            cluster.node(leader).wait_ready(60)
            up.mark_up(leader)
            _finish(cluster, up, topic, history, load, replicas_of(partition_state(cluster.node(1).url, topic, 0)))
            assert sorted(replicas_of(partition_state(cluster.node(1).url, topic, 0))) == sorted(original)
        finally:
            load.stop()
