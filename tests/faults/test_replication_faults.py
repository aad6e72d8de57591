"""Replication under faults on real 3-node clusters: crashes, bounces, torn writes, pauses, network
partitions, unclean elections and controller failover.

Each test starts real `lakelog node` processes (`tests.support.nodes.Cluster`, fast failure
detection), runs an idempotent acks=all producer and/or consumers (`tests.support.faults`), injects
its fault, then drains every partition from its current leader and checks the history
(`tests.support.history`): no acknowledged record lost, none duplicated, each at the offset its
acknowledgement named, in acknowledgement order; consumers never see a record change under them.
What the design documents say may be lost (acks=1 records on a deposed or dead leader, acks=all
records after an unclean election) is asserted to be lost exactly so.

Seeded: each test prints its seed (set LAKELOG_FAULT_SEED to replay the test's choices; the
processes' timing is not replayable). Every wait is bounded; every process is stopped in `finally`.
"""

from __future__ import annotations

import base64
import contextlib
import os
import random
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import httpx
import pytest

from tests.support.faults import (
    BINARY,
    FORWARDED,
    HwWatcher,
    IdempotentLoad,
    ProxiedCluster,
    Tailer,
    agreed_leader,
    broker_fenced,
    controller_id,
    create_topic,
    decode_value,
    drain,
    isr_of,
    own_offsets,
    partition_state,
    read_range,
    replica_offsets,
    replicas_of,
    segment_batches,
    segment_values,
    tear_active_segment,
    wait_for,
    wait_full_isr,
    wait_live_leader,
)
from tests.support.history import History, Kind, OffsetObserver
from tests.support.nodes import Cluster, NodeProcess

pytestmark = pytest.mark.timeout(150)


def _seed(name: str) -> int:
    # Fixed per test by default, so a failure replays as it happened; LAKELOG_FAULT_SEED explores others.
    seed = int(os.environ.get("LAKELOG_FAULT_SEED") or zlib.crc32(name.encode()))
    print(f"{name}: seed={seed} (LAKELOG_FAULT_SEED={seed} replays the test's choices)")
    return seed


@contextlib.contextmanager
def running(cluster: Cluster):
    """Start the cluster; stop every process at the end; on failure print the tail of each node's log."""
    try:
        cluster.start()
        yield cluster
    except BaseException:
        for n in cluster.nodes:
            tail = [line for line in n.read_log().splitlines() if '"logger": "httpx"' not in line][-60:]
            print(f"----- node {n.node_id} (port {n.port}) log tail -----")
            print("\n".join(tail))
            _print_live_state(n)
        raise
    finally:
        cluster.stop()


def _print_live_state(node) -> None:
    """For a failure's diagnosis: a running node's view of its topics and its threads' Python stacks."""
    if not node.running:
        return
    try:
        print(f"----- node {node.node_id} /stats/topics -----")
        print(httpx.get(f"{node.url}/stats/topics", timeout=5).text[:4000])
    except httpx.HTTPError as e:
        print(f"(no answer: {e!r})")
    spy = Path(sys.executable).parent / "py-spy"
    if spy.exists():
        out = subprocess.run([str(spy), "dump", "--pid", str(node.proc.pid)], capture_output=True, text=True,
                             timeout=30)
        print(f"----- node {node.node_id} py-spy dump -----")
        print((out.stdout + out.stderr)[-8000:])


class Up:
    """Which nodes the test's clients may use now (killed and paused nodes are left out)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.down: set[int] = set()
        self._lock = threading.Lock()

    def __call__(self) -> list[NodeProcess]:
        with self._lock:
            return [n for n in self.cluster.nodes if n.node_id not in self.down]

    def ids(self) -> set[int]:
        return {n.node_id for n in self()}

    def mark_down(self, node_id: int) -> None:
        with self._lock:
            self.down.add(node_id)

    def mark_up(self, node_id: int) -> None:
        with self._lock:
            self.down.discard(node_id)


def produce_direct(url: str, topic: str, p: int, values: list[str], acks: str, timeout_s: float = 15.0
                   ) -> httpx.Response | Exception:
    """A plain (not idempotent) produce to one node, marked so that it is served there or refused."""
    try:
        return httpx.post(f"{url}/topics/{topic}/partitions/{p}?acks={acks}", timeout=timeout_s,
                          headers={"Content-Type": BINARY, FORWARDED: "0"},
                          json={"records": [{"value": base64.b64encode(v.encode()).decode()} for v in values]})
    except httpx.HTTPError as e:
        return e


def check(history: History, load: IdempotentLoad, drained: list, *, min_acked: int = 20):
    """The final history check: no loss, no duplicate, acknowledged offsets, order."""
    for p, off, vid in drained:
        history.consumed(p, off, vid)
    result = history.check()
    print(f"load: {load.summary()}; history: {result}")
    assert not load.errors, load.errors
    result.assert_ok()
    assert result.stats["acked_values"] >= min_acked, result
    return result


def assert_hw_monotonic(watcher: HwWatcher) -> list[int]:
    """The end offset leaders told consumers never went backwards; returns the leaders observed."""
    leaders = sorted({leader for _, leader, _ in watcher.observations})
    print(f"{watcher.topic}-{watcher.p}: {len(watcher.observations)} HW observations on leaders {leaders}")
    assert watcher.observations, "no HW observation at all"
    regressions = watcher.regressions()
    assert not regressions, regressions[:10]
    return leaders


# ---------------------------------------------------------------------------------------------
# 1. SIGKILL the leader repeatedly under acks=all load


def test_leader_sigkill_loop_loses_no_acked_record(tmp_path):
    seed = _seed("leader SIGKILL loop")
    rng = random.Random(seed)
    topic, partitions = f"kills-{rng.randrange(1000)}", [0, 1]
    with running(Cluster(tmp_path, 3)) as cluster:
        up = Up(cluster)
        n1 = cluster.node(1)
        create_topic(n1.url, topic, partitions=2, rf=3, min_insync_replicas="2")
        wait_full_isr(cluster.nodes, topic, partitions)
        history = History()
        watchers = [HwWatcher(topic, p, up).start() for p in partitions]
        load = IdempotentLoad(topic, partitions, up, history, rng.randrange(2**32)).start()
        try:
            load.wait_progress(15)
            for round_ in range(3):
                p = rng.choice(partitions)
                leader = wait_live_leader(cluster.nodes, topic, p, up.ids())
                victim = cluster.node(leader)
                print(f"round {round_}: SIGKILL node {leader}, leader of {topic}-{p}")
                up.mark_down(leader)
                victim.kill()
                # A new leader is elected among the survivors, and it serves acks=all.
                for q in partitions:
                    wait_live_leader(up(), topic, q, up.ids(), timeout_s=20)
                load.wait_progress(10, timeout_s=25, what=f"produce after killing node {leader}")
                victim.start(wait=False)
                victim.wait_ready(30)
                up.mark_up(leader)
                wait_full_isr(cluster.nodes, topic, partitions, timeout_s=25)
                load.wait_progress(5)
        finally:
            load.stop()
            for w in watchers:
                w.stop()
        drained = drain(cluster.nodes, topic, partitions, min_end=load.min_end())
        check(history, load, drained, min_acked=50)
        for w in watchers:
            assert_hw_monotonic(w)


# ---------------------------------------------------------------------------------------------
# 2. Bounce a follower, then the leader: replicas end byte-identical


def test_bounced_follower_and_leader_end_with_identical_logs(tmp_path):
    seed = _seed("bounce follower then leader")
    rng = random.Random(seed)
    topic = f"bounce-{rng.randrange(1000)}"
    with running(Cluster(tmp_path, 3)) as cluster:
        up = Up(cluster)
        create_topic(cluster.node(1).url, topic, partitions=1, rf=3, min_insync_replicas="2")
        wait_full_isr(cluster.nodes, topic, [0])
        history = History()
        load = IdempotentLoad(topic, [0], up, history, rng.randrange(2**32)).start()
        try:
            load.wait_progress(15)
            leader = wait_live_leader(cluster.nodes, topic, 0, up.ids())
            follower = rng.choice([r for r in (1, 2, 3) if r != leader])
            for victim_id, role in ((follower, "follower"), (leader, "leader")):
                victim = cluster.node(victim_id)
                print(f"SIGTERM node {victim_id} ({role}), then start it again")
                up.mark_down(victim_id)
                victim.stop()
                load.wait_progress(10, timeout_s=20, what=f"produce while node {victim_id} is down")
                victim.start(wait=False)
                victim.wait_ready(30)
                up.mark_up(victim_id)
                wait_full_isr(cluster.nodes, topic, [0], timeout_s=25)
                load.wait_progress(10)
        finally:
            load.stop()
        drained = drain(cluster.nodes, topic, [0], min_end=load.min_end(), converge=True)
        check(history, load, drained, min_acked=40)
        leos = {n.node_id: replica_offsets(n.url, topic, 0) for n in cluster.nodes}
        print(f"(LEO, HW) per node: {leos}")
        assert len({leo for leo, _ in leos.values()}) == 1, leos
        cluster.stop()
        logs = {n.node_id: segment_batches(n.data_dir, topic, 0) for n in cluster.nodes}
        first = logs[1]
        assert first and first[-1][1] + 1 == leos[1][0], (first[-1:], leos)
        for node_id, batches in logs.items():
            assert batches == first, f"node {node_id}'s log differs from node 1's"
        # The epochs on disk show the two leader changes (the follower bounce moves none).
        epochs = sorted({e for _, _, e, _ in first})
        print(f"{len(first)} batches, leader epochs {epochs}")
        assert len(epochs) >= 2, epochs


# ---------------------------------------------------------------------------------------------
# 3. A torn write on the crashed leader


def test_torn_tail_on_crashed_leader_is_recovered_and_truncated_to_the_epoch(tmp_path):
    seed = _seed("torn tail on the crashed leader")
    rng = random.Random(seed)
    topic = f"torn-{rng.randrange(1000)}"
    with running(Cluster(tmp_path, 3)) as cluster:
        up = Up(cluster)
        create_topic(cluster.node(1).url, topic, partitions=1, rf=3, min_insync_replicas="2")
        wait_full_isr(cluster.nodes, topic, [0])
        history, observer = History(), OffsetObserver()
        load = IdempotentLoad(topic, [0], up, history, rng.randrange(2**32)).start()
        tailer = Tailer(topic, 0, up, observer, rng.randrange(2**32)).start()
        watcher = HwWatcher(topic, 0, up).start()
        try:
            load.wait_progress(20)
            leader_id = wait_live_leader(cluster.nodes, topic, 0, up.ids())
            leader = cluster.node(leader_id)
            followers = [n for n in cluster.nodes if n.node_id != leader_id]
            # Freeze both followers: what the leader takes now exists on the leader alone.
            for f in followers:
                up.mark_down(f.node_id)
                f.pause()
            # A fetch the followers sent just before they froze may still be long-polling on the
            # leader: its answer would carry what is appended next to their sockets. Let it end.
            time.sleep(3 * int(cluster.nodes[0].overrides["replica.fetch.wait.max.ms"]) / 1000)
            unreplicated = []
            for i in range(3):
                values = [f"x{i}-{j}" for j in range(rng.randint(1, 4))]
                r = produce_direct(leader.url, topic, 0, values, acks="1")
                assert not isinstance(r, Exception) and r.status_code == 200, r
                for v, o in zip(values, (o["offset"] for o in r.json()["offsets"])):
                    history.produced(0, v, None)  # acks=1 on a leader about to die: may be lost
                    unreplicated.append((o, v))
            print(f"leader {leader_id} alone holds acks=1 records {unreplicated}")
            up.mark_down(leader_id)
            leader.kill()
            old_epoch = max(e for _, _, e, _ in segment_batches(leader.data_dir, topic, 0))
            torn = tear_active_segment(leader.data_dir, topic, 0, rng)
            print(f"tore {torn.path.name}: cut the batch at offset {torn.cut_batch_base} at byte "
                  f"{torn.cut_at - torn.cut_batch_pos} and appended {torn.garbage} garbage bytes")
            for f in followers:
                f.resume()
                up.mark_up(f.node_id)
            new_leader = wait_live_leader(followers, topic, 0, up.ids(), timeout_s=25)
            load.wait_progress(10, timeout_s=25, what=f"produce through the new leader {new_leader}")
            leader.start(wait=False)
            leader.wait_ready(30)
            up.mark_up(leader_id)
            wait_full_isr(cluster.nodes, topic, [0], timeout_s=25)
            load.wait_progress(10)
        finally:
            load.stop()
            tailer.stop()
            watcher.stop()
        drained = drain(cluster.nodes, topic, [0], min_end=load.min_end())
        check(history, load, drained, min_acked=30)
        assert_hw_monotonic(watcher)
        # The consumer read a prefix of the final log: nothing it saw changed or went away.
        assert tailer.read_count > 0
        observer.observe_all(drained, when="in the final drain")
        observer.result.assert_ok()
        # Nothing only the crashed leader had survived anywhere.
        final = {o: v for _, o, v in drained}
        lost = [(o, v) for o, v in unreplicated if final.get(o) == v or v in final.values()]
        assert not lost, f"records only the dead leader had are visible: {lost}"
        # It recovered from the torn write, then truncated its divergent tail to the new epoch's start.
        log_text = leader.read_log()
        assert f"truncated {torn.torn_bytes} bytes" in log_text, "no recovery of the torn tail in the log"
        cluster.stop()
        logs = {n.node_id: segment_batches(n.data_dir, topic, 0) for n in cluster.nodes}
        assert logs[1] == logs[2] == logs[3], "replicas differ"
        epoch_start = min(b for b, _, e, _ in logs[1] if e > old_epoch)
        if torn.whole_end_offset > epoch_start:
            assert f"truncated from {torn.whole_end_offset} to {epoch_start}" in log_text, \
                f"node {leader_id} did not truncate its recovered LEO {torn.whole_end_offset} to {epoch_start}"
        print(f"recovered LEO {torn.whole_end_offset}, new epoch starts at {epoch_start}")
        values = {v for _, v in segment_values(leader.data_dir, topic, 0)}
        assert not values & {v for _, v in unreplicated}


# ---------------------------------------------------------------------------------------------
# 4. A paused (SIGSTOP) leader is deposed and fenced


def test_paused_leader_is_fenced_and_its_late_writes_never_show(tmp_path):
    seed = _seed("SIGSTOP the leader")
    rng = random.Random(seed)
    topic = f"zombie-{rng.randrange(1000)}"
    with running(Cluster(tmp_path, 3)) as cluster:
        up = Up(cluster)
        create_topic(cluster.node(1).url, topic, partitions=1, rf=3, min_insync_replicas="2")
        wait_full_isr(cluster.nodes, topic, [0])
        history, observer = History(), OffsetObserver()
        load = IdempotentLoad(topic, [0], up, history, rng.randrange(2**32)).start()
        tailer = Tailer(topic, 0, up, observer, rng.randrange(2**32)).start()
        watcher = HwWatcher(topic, 0, up).start()
        late: dict[str, httpx.Response | Exception] = {}
        try:
            load.wait_progress(20)
            old_id = wait_live_leader(cluster.nodes, topic, 0, up.ids())
            old = cluster.node(old_id)
            others = [n for n in cluster.nodes if n.node_id != old_id]
            cfg = cluster.nodes[0].overrides
            pause_s = (int(cfg["replica.lag.time.max.ms"]) + int(cfg["broker.session.timeout.ms"])) / 1000 + 1.5
            print(f"SIGSTOP node {old_id} (leader) for {pause_s:.1f}s")
            up.mark_down(old_id)
            old.pause()
            paused_at = time.monotonic()
            new_id = wait_live_leader(others, topic, 0, up.ids(), timeout_s=20)
            wait_for(lambda: broker_fenced(others[0].url, old_id), 10, f"node {old_id} fenced")
            load.wait_progress(10, timeout_s=20, what=f"produce through the new leader {new_id}")
            time.sleep(max(0.0, pause_s - (time.monotonic() - paused_at) - 0.5))
            # Requests that reach the old leader first thing when it wakes, before it has heard of
            # the new leader: they sit in its socket buffer while it is stopped.
            requests = {
                "acks1": lambda: produce_direct(old.url, topic, 0, [f"z1-{i}" for i in range(3)], acks="1"),
                "acks_all": lambda: produce_direct(old.url, topic, 0, ["zall-0", "zall-1"], acks="all"),
                "fetch": lambda: httpx.get(f"{old.url}/topics/{topic}/partitions/0/records",
                                           params={"offset": 0, "timeout": 0},
                                           headers={"Accept": BINARY, FORWARDED: "0"}, timeout=15),
            }
            threads = [threading.Thread(target=lambda k=k, f=f: late.__setitem__(k, f()), daemon=True)
                       for k, f in requests.items()]
            for t in threads:
                t.start()
            time.sleep(0.5)
            old.resume()
            for t in threads:
                t.join(20)
            up.mark_up(old_id)
            print("late requests to the old leader: " + ", ".join(
                f"{k}: {v.status_code if isinstance(v, httpx.Response) else type(v).__name__}"
                for k, v in late.items()))
            # The old leader learns it was deposed and follows the new leader.
            wait_live_leader(cluster.nodes, topic, 0, up.ids(), timeout_s=20)
            wait_full_isr(cluster.nodes, topic, [0], timeout_s=25)
            assert partition_state(old.url, topic, 0)["leader"] != old_id
            load.wait_progress(10)
        finally:
            load.stop()
            tailer.stop()
            watcher.stop()
        assert_hw_monotonic(watcher)
        for key, values in (("acks1", [f"z1-{i}" for i in range(3)]), ("acks_all", ["zall-0", "zall-1"])):
            r = late.get(key)
            ok = isinstance(r, httpx.Response) and r.status_code == 200
            for i, v in enumerate(values):
                # acks=all acknowledged by a deposed leader would have to survive; acks=1 may vanish.
                history.produced(0, v, True if ok and key == "acks_all" else None,
                                 r.json()["offsets"][i]["offset"] if ok else None)
        drained = drain(cluster.nodes, topic, [0], min_end=load.min_end())
        check(history, load, drained, min_acked=30)
        # What the old leader served on waking, and what the tailer read, are a prefix of the final log.
        r = late.get("fetch")
        if isinstance(r, httpx.Response) and r.status_code == 200:
            observer.observe_all([(0, x["offset"], decode_value(x)) for x in r.json()], when="from the woken leader")
        observer.observe_all(drained, when="in the final drain")
        observer.result.assert_ok()
        # Nothing the deposed leader took after it was deposed is visible.
        seen = {v for _, _, v in drained}
        assert not seen & {f"z1-{i}" for i in range(3)}, "acks=1 writes of the deposed leader are visible"


# ---------------------------------------------------------------------------------------------
# 5. A network partition isolates the leader


def test_partitioned_leader_loses_no_acked_write_and_hw_never_goes_back(tmp_path):
    seed = _seed("network partition of the leader")
    rng = random.Random(seed)
    topic = f"split-{rng.randrange(1000)}"
    with running(ProxiedCluster(tmp_path, 3)) as cluster:
        net = cluster.net
        up = Up(cluster)
        create_topic(cluster.node(1).url, topic, partitions=1, rf=3, min_insync_replicas="2")
        wait_full_isr(cluster.nodes, topic, [0])
        history = History()
        majority: list[NodeProcess] = list(cluster.nodes)  # the side the clients reach

        watcher = HwWatcher(topic, 0, lambda: list(majority)).start()
        load = IdempotentLoad(topic, [0], up, history, rng.randrange(2**32)).start()
        stray: dict[str, httpx.Response | Exception] = {}
        try:
            load.wait_progress(20)
            old_id = wait_live_leader(cluster.nodes, topic, 0, up.ids())
            old = cluster.node(old_id)
            others = [n for n in cluster.nodes if n.node_id != old_id]
            print(f"partition node {old_id} (leader) from nodes {[n.node_id for n in others]} "
                  f"(controller: node {controller_id(others[0].url)})")
            up.mark_down(old_id)  # the producer only reaches the majority side
            majority[:] = others
            net.isolate(old_id, [n.node_id for n in others])
            # The isolated leader cannot replicate: an acks=all write sent to it is never acknowledged.
            t = threading.Thread(target=lambda: stray.__setitem__(
                "acks_all", produce_direct(old.url, topic, 0, ["iso-0", "iso-1"], acks="all", timeout_s=25)),
                daemon=True)
            t.start()
            new_id = wait_live_leader(others, topic, 0, up.ids(), timeout_s=25)
            load.wait_progress(15, timeout_s=25, what=f"produce through the new leader {new_id}")
            print(f"node {new_id} leads on the majority side; healing")
            net.heal()
            majority[:] = cluster.nodes
            up.mark_up(old_id)
            wait_live_leader(cluster.nodes, topic, 0, up.ids(), timeout_s=25)
            wait_full_isr(cluster.nodes, topic, [0], timeout_s=30)
            assert partition_state(old.url, topic, 0)["leader"] != old_id
            load.wait_progress(10)
            t.join(30)
        finally:
            load.stop()
            watcher.stop()
        r = stray.get("acks_all")
        print(f"acks=all to the isolated leader: "
              f"{r.status_code if isinstance(r, httpx.Response) else type(r).__name__ if r else 'no answer'}")
        ok = isinstance(r, httpx.Response) and r.status_code == 200
        for i, v in enumerate(["iso-0", "iso-1"]):
            history.produced(0, v, True if ok else None, r.json()["offsets"][i]["offset"] if ok else None)
        drained = drain(cluster.nodes, topic, [0], min_end=load.min_end())
        check(history, load, drained, min_acked=40)
        print(f"{net.dropped} connections cut")
        assert len(assert_hw_monotonic(watcher)) >= 2, "the watcher never saw the new leader"


# ---------------------------------------------------------------------------------------------
# 6. Unclean leader election: the documented loss, seen by consumers as a truncation


def _produce_acked(url: str, topic: str, values: list[str], history: History, acks: str = "all") -> list[int]:
    r = produce_direct(url, topic, 0, values, acks=acks)
    assert isinstance(r, httpx.Response) and r.status_code == 200, r
    offsets = [o["offset"] for o in r.json()["offsets"]]
    for v, o in zip(values, offsets):
        history.produced(0, v, True, o)
    return offsets


def _read_all(url: str, topic: str) -> list[tuple[int, int, str]]:
    offs = own_offsets(url, topic, 0)
    assert offs is not None, f"{url} does not lead {topic}-0"
    return read_range(url, topic, 0, offs[0], offs[1])


def test_unclean_election_loses_exactly_the_dead_leaders_tail_and_consumers_see_it(tmp_path):
    seed = _seed("unclean leader election")
    rng = random.Random(seed)
    topic = f"unclean-{rng.randrange(1000)}"
    with running(Cluster(tmp_path, 3)) as cluster:
        # Replication factor 2 on three voters: the third keeps the controller quorum alive while
        # the partition's only live replica is the stale one.
        create_topic(cluster.node(1).url, topic, partitions=1, rf=2, min_insync_replicas="1",
                     unclean_leader_election_enable="true")
        wait_full_isr(cluster.nodes, topic, [0])
        st = partition_state(cluster.node(1).url, topic, 0)
        leader_id = st["leader"]
        follower_id = next(r for r in replicas_of(st) if r != leader_id)
        bystander_id = ({1, 2, 3} - {leader_id, follower_id}).pop()
        leader, follower, bystander = cluster.node(leader_id), cluster.node(follower_id), cluster.node(bystander_id)
        print(f"{topic}: leader {leader_id}, follower {follower_id}, controller-quorum bystander {bystander_id}")
        history, observer = History(), OffsetObserver()
        committed = [f"c{i}" for i in range(rng.randint(5, 12))]
        for i in range(0, len(committed), 3):
            _produce_acked(leader.url, topic, committed[i:i + 3], history)
        wait_for(lambda: replica_offsets(follower.url, topic, 0) == (len(committed), len(committed)), 10,
                 "the follower to hold (and know committed) every record")
        # The follower dies; the ISR shrinks to the leader alone, which keeps acknowledging acks=all.
        follower.kill()
        wait_for(lambda: isr_of(partition_state(bystander.url, topic, 0)) == [leader_id], 15,
                 f"the ISR to shrink to [{leader_id}]")
        doomed = [f"d{i}" for i in range(rng.randint(3, 6))]
        doomed_offsets = _produce_acked(leader.url, topic, doomed, history)
        assert doomed_offsets == list(range(len(committed), len(committed) + len(doomed)))
        seen_before = _read_all(leader.url, topic)
        observer.observe_all(seen_before, when="before the unclean election")
        position = seen_before[-1][1] + 1  # the consumer has read the doomed records
        assert position == len(committed) + len(doomed)
        # The leader dies too; the stale follower comes back alone (with the bystander: a quorum).
        leader.kill()
        follower.start(wait=False)
        follower.wait_ready(30)
        up = [follower, bystander]
        wait_live_leader(up, topic, 0, {follower_id}, timeout_s=20)
        st = partition_state(bystander.url, topic, 0)
        assert isr_of(st) == [follower_id], st
        print(f"unclean election: node {follower_id} leads with ISR {isr_of(st)}")
        # New records reuse the offsets only the dead leader had; fewer of them, so the end went back.
        fresh = [f"e{i}" for i in range(rng.randint(1, len(doomed) - 1))]
        fresh_offsets = _produce_acked(follower.url, topic, fresh, history)
        assert fresh_offsets == list(range(len(committed), len(committed) + len(fresh))), fresh_offsets
        end = own_offsets(follower.url, topic, 0)
        assert end is not None and end[1] == len(committed) + len(fresh) < position, (end, position)
        # The consumer that had read past the new end is told so (offset out of range), not left waiting.
        r = httpx.get(f"{follower.url}/topics/{topic}/partitions/0/records", timeout=10,
                      params={"offset": position, "timeout": 0}, headers={"Accept": BINARY})
        assert r.status_code == 416, (r.status_code, r.text)
        # Re-reading shows the truncation: the offsets of the lost records now hold other records.
        seen_after = _read_all(follower.url, topic)
        observer.observe_all(seen_after, when="after the unclean election")
        truncated = observer.result.of_kind(Kind.TRUNCATION_VISIBLE)
        print(f"consumer view: {observer.result}")
        assert sorted(i.offset for i in truncated) == fresh_offsets, truncated
        assert observer.result.kinds == {Kind.TRUNCATION_VISIBLE}
        # Exactly the records only the dead leader had are lost; everything committed before survives.
        for p, off, vid in seen_after:
            history.consumed(p, off, vid)
        result = history.check()
        print(f"history: {result.report()}")
        assert result.kinds == {Kind.LOST_ACKED_WRITE}, result.report()
        assert sorted(i.value_id for i in result.of_kind(Kind.LOST_ACKED_WRITE)) == sorted(doomed)
        assert [v for _, _, v in seen_after] == committed + fresh
        # The old leader comes back as a follower and truncates its divergent tail away.
        leader.start(wait=False)
        leader.wait_ready(30)
        wait_full_isr(cluster.nodes, topic, [0], timeout_s=25)
        expected_leo = len(committed) + len(fresh)
        wait_for(lambda: replica_offsets(leader.url, topic, 0) == (expected_leo, expected_leo), 15,
                 f"node {leader_id} to converge on the new leader's log")
        cluster.stop()
        assert segment_batches(leader.data_dir, topic, 0) == segment_batches(follower.data_dir, topic, 0)
        assert [v for _, v in segment_values(leader.data_dir, topic, 0)] == committed + fresh


# ---------------------------------------------------------------------------------------------
# 7. The active controller dies while leaderships move


def _wait_all_led(nodes: list[NodeProcess], topic: str, partitions: list[int], live: set[int],
                  timeout_s: float = 25.0) -> dict[int, int]:
    """Every partition has a leader among `live`, as every node of `nodes` sees it; returns them."""
    return {p: wait_live_leader(nodes, topic, p, live, timeout_s=timeout_s) for p in partitions}


def test_controller_failover_while_leaderships_move_leaves_no_partition_leaderless(tmp_path):
    seed = _seed("controller failover during leadership moves")
    rng = random.Random(seed)
    topic = f"moves-{rng.randrange(1000)}"
    partitions = [0, 1, 2]
    # Preferred leaders return within a second, so leaderships are spread again before (b).
    with running(Cluster(tmp_path, 3, {"leader.imbalance.check.interval.seconds": "1"})) as cluster:
        up = Up(cluster)
        create_topic(cluster.node(1).url, topic, partitions=3, rf=3, min_insync_replicas="2")
        wait_full_isr(cluster.nodes, topic, partitions)
        history = History()
        load = IdempotentLoad(topic, partitions, up, history, rng.randrange(2**32), pause_s=0.05).start()
        try:
            load.wait_progress(5)
            # (a) A partition leader crashes and, before its leaderships have moved, so does the controller.
            ctrl = controller_id(cluster.node(1).url)
            leaders = {p: partition_state(cluster.node(1).url, topic, p)["leader"] for p in partitions}
            victim = rng.choice(sorted({l for l in leaders.values() if l != ctrl}))
            print(f"(a) SIGKILL node {victim} (leads {[p for p, l in leaders.items() if l == victim]}), "
                  f"then the controller, node {ctrl}")
            for node_id in (victim, ctrl):
                up.mark_down(node_id)
                cluster.node(node_id).kill()
                time.sleep(0.05)
            # Two voters are needed: the controller's node comes back at once (a new incarnation).
            cluster.node(ctrl).start(wait=False)
            cluster.node(ctrl).wait_ready(30)
            up.mark_up(ctrl)
            led = _wait_all_led(up(), topic, partitions, up.ids())
            print(f"(a) leaders now {led}; controller node {controller_id(cluster.node(ctrl).url)}")
            load.wait_progress(3, timeout_s=25, what="produce to every partition after the failover")
            cluster.node(victim).start(wait=False)
            cluster.node(victim).wait_ready(30)
            up.mark_up(victim)
            wait_full_isr(cluster.nodes, topic, partitions, timeout_s=25)
            # (b) A node's controlled shutdown is under way when the controller crashes.
            wait_for(lambda: len({agreed_leader(cluster.nodes, topic, p) for p in partitions}) == 3, 15,
                     "preferred leaders back (one partition per node)")
            ctrl = controller_id(cluster.node(1).url)
            leaders = {p: partition_state(cluster.node(1).url, topic, p)["leader"] for p in partitions}
            leaving = rng.choice(sorted({l for l in leaders.values() if l != ctrl}))
            print(f"(b) SIGTERM node {leaving} (leads {[p for p, l in leaders.items() if l == leaving]}), "
                  f"then SIGKILL the controller, node {ctrl}")
            up.mark_down(leaving)
            stopper = threading.Thread(target=cluster.node(leaving).stop, daemon=True)
            stopper.start()
            # Wait for state: the node has begun its controlled shutdown (it stops answering ready).
            def shutting_down(url=cluster.node(leaving).url) -> bool:
                try:
                    return httpx.get(f"{url}/readyz", timeout=2).status_code == 503
                except httpx.HTTPError:
                    return True  # already gone: its controlled shutdown is over
            wait_for(shutting_down, 15, f"node {leaving} to begin its controlled shutdown")
            up.mark_down(ctrl)
            cluster.node(ctrl).kill()
            cluster.node(ctrl).start(wait=False)
            stopper.join(20)
            assert not cluster.node(leaving).running, f"node {leaving} did not stop"
            cluster.node(ctrl).wait_ready(30)
            up.mark_up(ctrl)
            led = _wait_all_led(up(), topic, partitions, up.ids())
            print(f"(b) leaders now {led}; controller node {controller_id(cluster.node(ctrl).url)}")
            load.wait_progress(3, timeout_s=25, what="produce to every partition after the second failover")
            cluster.node(leaving).start(wait=False)
            cluster.node(leaving).wait_ready(30)
            up.mark_up(leaving)
            wait_full_isr(cluster.nodes, topic, partitions, timeout_s=25)
        finally:
            load.stop()
        drained = drain(cluster.nodes, topic, partitions, min_end=load.min_end())
        check(history, load, drained, min_acked=20)
