"""Slow, not dead: a follower whose replication traffic crawls, and a follower whose disk crawls, on
3 real nodes (RF 3, min.insync.replicas 2) under idempotent acks=all load.

* Slow follower: every answer to the follower's replica fetches is held back (`FaultNet.slow`)
  longer than `replica.lag.time.max.ms`; its heartbeats and Raft traffic go through untouched.
* Slow disk: the follower's node started with the test-only disk seam
  (`logstore/disk_delay.py`); writing the delay file makes each of its segment writes and fsyncs
  wait, deleting it restores the disk.

Either way the leader shrinks the slow follower out of the ISR (it is not fenced: its controller
session is fine), acks=all produce keeps being acknowledged through the other two nodes, which keep
serving; the metrics show the partition under-replicated. Once the fault is healed the follower
catches up and rejoins the ISR. The history check finds no acknowledged record lost or duplicated.

No timed assertions: success counts and ISR membership with bounded waits. Seeded (the choices of
the load and of the slow follower; LAKELOG_FAULT_SEED replays them).
"""

from __future__ import annotations

import random
import re
import time

import httpx
import pytest

from tests.faults.test_replication_faults import _seed, check, running
from tests.support.faults import (
    IdempotentLoad,
    ProxiedCluster,
    broker_fenced,
    create_topic,
    drain,
    isr_of,
    own_offsets,
    partition_state,
    read_range,
    wait_for,
    wait_full_isr,
    wait_live_leader,
)
from tests.support.history import History
from tests.support.nodes import Cluster, NodeProcess

pytestmark = pytest.mark.timeout(240)

#: How long each answer to the slow follower's fetches is held back (past replica.lag.time.max.ms, 1.5 s).
FETCH_DELAY_S = 3.0
#: Idle time with the follower slowed before the load starts (a few ISR checks, every lag / 2).
IDLE_S = 3.0
#: How long each segment write / fsync of the slow disk takes.
DISK_DELAY_MS = 2500
#: Sessions long enough that a node stalled by its slow disk is not fenced meanwhile.
SLOW_DISK_OVERRIDES = {"broker.session.timeout.ms": "12000"}


def under_replicated(url: str, topic: str) -> bool:
    text = httpx.get(f"{url}/metrics", timeout=5).text
    pattern = r'^lakelog_partition_under_replicated\{partition="0",topic="%s"\} 1\.0$' % re.escape(topic)
    return re.search(pattern, text, re.M) is not None


def isr_on(node: NodeProcess, topic: str) -> list[int]:
    return isr_of(partition_state(node.url, topic, 0))


def slow_follower_scenario(cluster: Cluster, topic: str, rng: random.Random, slow_down, heal) -> None:
    """The shared steps: pick a follower, slow it, watch it leave the ISR under load, heal, rejoin."""
    create_topic(cluster.node(1).url, topic, partitions=1, rf=3, min_insync_replicas="2")
    wait_full_isr(cluster.nodes, topic, [0])
    leader_id = wait_live_leader(cluster.nodes, topic, 0, {1, 2, 3})
    slow_id = rng.choice([n.node_id for n in cluster.nodes if n.node_id != leader_id])
    healthy = [n for n in cluster.nodes if n.node_id != slow_id]
    history = History()
    print(f"slowing node {slow_id} (leader: node {leader_id})")
    slow_down(slow_id, leader_id)
    # Idle a few ISR checks first: a slow follower of an idle partition stays in the ISR (it holds
    # the LEO); once the load starts it lags and must leave.
    time.sleep(IDLE_S)
    load = IdempotentLoad(topic, [0], lambda: list(healthy), history, rng.randrange(2**32)).start()
    leader = cluster.node(leader_id)
    try:
        wait_for(lambda: slow_id not in isr_on(leader, topic), 40,
                 f"the leader to shrink slow node {slow_id} out of the ISR")
        assert not broker_fenced(leader.url, slow_id), "the slow node was fenced, not shrunk out by its lag"
        wait_for(lambda: under_replicated(leader.url, topic), 10, "lakelog_partition_under_replicated 1")
        # acks=all keeps being acknowledged with the slow follower out; the other two serve.
        load.wait_progress(30, timeout_s=40, what="acks=all produce while a follower is slow")
        hw = own_offsets(leader.url, topic, 0)
        assert hw is not None and hw[1] > 0
        assert read_range(leader.url, topic, 0, hw[0], min(hw[1], hw[0] + 5))
        for n in healthy:
            assert partition_state(n.url, topic, 0)["leader"] == leader_id
        heal(slow_id)
        print(f"node {slow_id} healed")
        wait_for(lambda: slow_id in isr_on(leader, topic), 60, f"node {slow_id} to rejoin the ISR")
        load.wait_progress(10, what="acks=all produce after the follower rejoined")
    finally:
        load.stop()
    wait_full_isr(cluster.nodes, topic, [0], timeout_s=60)
    drained = drain(cluster.nodes, topic, [0], min_end=load.min_end())
    check(history, load, drained)


def test_a_slow_follower_leaves_the_isr_and_rejoins_when_healed(tmp_path):
    seed = _seed("slow follower")
    rng = random.Random(seed)
    with running(ProxiedCluster(tmp_path, 3)) as cluster:
        net = cluster.net

        def slow_down(slow_id: int, leader_id: int) -> None:
            for n in cluster.nodes:  # wherever the leadership goes, the follower's fetches crawl
                if n.node_id != slow_id:
                    net.slow(slow_id, n.node_id, FETCH_DELAY_S)

        slow_follower_scenario(cluster, f"slowfollower-{rng.randrange(1000)}", rng, slow_down,
                               lambda slow_id: net.heal())
        assert net.delayed > 0, "no fetch answer was held back"


def test_a_slow_disk_on_a_follower_leaves_the_isr_and_rejoins_when_restored(tmp_path):
    seed = _seed("slow follower disk")
    rng = random.Random(seed)
    cluster = Cluster(tmp_path, 3, overrides=dict(SLOW_DISK_OVERRIDES))
    delay_files = {n.node_id: tmp_path / f"disk-delay-{n.node_id}" for n in cluster.nodes}
    for n in cluster.nodes:
        n.env["LAKELOG_TEST_DISK_DELAY_FILE"] = str(delay_files[n.node_id])
    with running(cluster):
        slow_follower_scenario(cluster, f"slowdisk-{rng.randrange(1000)}", rng,
                               lambda slow_id, leader_id: delay_files[slow_id].write_text(str(DISK_DELAY_MS)),
                               lambda slow_id: delay_files[slow_id].unlink())
