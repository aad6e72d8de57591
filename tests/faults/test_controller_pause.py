"""A paused active controller (SIGSTOP past the broker session, then SIGCONT) under idempotent load.

Measured before the controller lease (issue 18): the resumed node renewed its own broker session
as the presumed Raft leader and, for ~100 ms, answered from stale state — an end offset below one
the new leader had served, an in-order idempotent retry refused with 40908. Now its clock jump
ends its leadership and voids its session (ingest_api/raft/lease.py, Node._observe_pause): it
answers 503 until it has heard from the new controller and caught up with its metadata.

This scenario did not reproduce the measured race here with the lease disabled (3 runs: the woken
node heard of its successor before it answered anything); it guards the property, and the
lease's proof is the simulation (tests/sim/test_lease_sim.py), which fails without it.

Checked: requests queued in the paused node's socket, and a prober's requests from the moment it
wakes, are answered 503 or with an end offset no lower than what the new leaders had served before
the request was sent; the high watermark each leader reports never goes
back; the idempotent producer is never refused an in-order sequence (IdempotentLoad fails on
40908 / 40909); nothing acknowledged is lost or duplicated.
"""

from __future__ import annotations

import random
import threading
import time

import httpx
import pytest

from tests.faults.test_replication_faults import Up, _seed, assert_hw_monotonic, check, running
from tests.support.faults import (
    FORWARDED,
    HwWatcher,
    IdempotentLoad,
    controller_id,
    create_topic,
    drain,
    partition_state,
    wait_for,
    wait_full_isr,
)
from tests.support.history import History
from tests.support.nodes import Cluster

pytestmark = pytest.mark.timeout(240)


def test_paused_active_controller_resumes_without_stale_answers(tmp_path):
    seed = _seed("SIGSTOP the active controller")
    rng = random.Random(seed)
    topic = f"ctrl-pause-{rng.randrange(1000)}"
    partitions = [0, 1, 2]
    with running(Cluster(tmp_path, 3)) as cluster:
        up = Up(cluster)
        create_topic(cluster.node(1).url, topic, partitions=3, rf=3, min_insync_replicas="2")
        wait_full_isr(cluster.nodes, topic, partitions)
        history = History()
        load = IdempotentLoad(topic, partitions, up, history, rng.randrange(2**32)).start()
        watchers = [HwWatcher(topic, p, up).start() for p in partitions]
        late: dict[int, httpx.Response | Exception] = {}
        try:
            load.wait_progress(20)
            old_id = controller_id(cluster.node(1).url)
            old = cluster.node(old_id)
            others = [n for n in cluster.nodes if n.node_id != old_id]
            led = [p for p in partitions if partition_state(others[0].url, topic, p)["leader"] == old_id]
            cfg = cluster.nodes[0].overrides
            pause_s = (int(cfg["replica.lag.time.max.ms"]) + int(cfg["broker.session.timeout.ms"])) / 1000 + 1.5
            print(f"SIGSTOP node {old_id} (active controller, leads {led}) for {pause_s:.1f}s")
            up.mark_down(old_id)
            old.pause()
            paused_at = time.monotonic()
            wait_for(lambda: controller_id(others[0].url) not in (old_id, None, -1), 20, "a new controller")
            load.wait_progress(10, timeout_s=30, what="produce while the old controller is stopped")
            time.sleep(max(0.0, pause_s - (time.monotonic() - paused_at) - 0.5))

            def ask(p: int) -> None:
                try:
                    late[p] = httpx.get(f"{old.url}/topics/{topic}/partitions/{p}/offsets",
                                        headers={FORWARDED: "0"}, timeout=15)
                except httpx.HTTPError as e:
                    late[p] = e

            threads = [threading.Thread(target=ask, args=(p,), daemon=True) for p in partitions]
            for t in threads:
                t.start()  # they wait in the stopped node's socket
            time.sleep(0.5)
            # And a prober asking the old node again and again from the moment it wakes: each answer
            # is checked against what the leaders had served before the question was asked.
            stop_probe = threading.Event()
            probes: list[tuple[float, int, int]] = []  # (asked at, partition, end offset answered)

            def probe() -> None:
                with httpx.Client(timeout=5) as client:
                    while not stop_probe.is_set():
                        for p in partitions:
                            asked = time.monotonic()
                            try:
                                r = client.get(f"{old.url}/topics/{topic}/partitions/{p}/offsets",
                                               headers={FORWARDED: "0"})
                            except httpx.HTTPError:
                                continue
                            if r.status_code == 200:
                                probes.append((asked, p, int(r.json()["end_offset"])))
                        time.sleep(0.005)

            prober = threading.Thread(target=probe, daemon=True)
            resumed_at = time.monotonic()
            old.resume()
            prober.start()
            for t in threads:
                t.join(20)
            wait_for(lambda: httpx.get(f"{old.url}/readyz", timeout=2).status_code == 200, 30,
                     "the woken node ready again")
            time.sleep(2)
            stop_probe.set()
            prober.join(10)
            up.mark_up(old_id)
            print("late answers of the old controller: " + ", ".join(
                f"{p}: {r.status_code if isinstance(r, httpx.Response) else type(r).__name__}"
                for p, r in sorted(late.items())))
            wait_full_isr(cluster.nodes, topic, partitions, timeout_s=30)
            load.wait_progress(10, timeout_s=30)
        finally:
            load.stop()
            for w in watchers:
                w.stop()
        for w in watchers:
            assert_hw_monotonic(w)
        stale = []
        for asked, p, end in probes:
            served = [hw for at, leader, hw in watchers[p].observations if at < asked and leader != old_id]
            if served and end < max(served):
                stale.append((round(asked - resumed_at, 3), p, end, max(served)))
        print(f"{len(probes)} answers of the woken node checked; stale: {stale[:5]}")
        assert not stale, stale[:10]
        for p, r in late.items():
            if isinstance(r, httpx.Response) and r.status_code == 200:
                before = [hw for at, _, hw in watchers[p].observations if at < resumed_at]
                assert int(r.json()["end_offset"]) >= max(before, default=0), (p, r.json(), max(before))
            else:
                assert not isinstance(r, httpx.Response) or r.status_code in (503, 404, 421), (p, r.text)
        assert not load.errors, load.errors[:5]  # no in-order sequence refused
        drained = drain(cluster.nodes, topic, partitions, min_end=load.min_end())
        check(history, load, drained, min_acked=30)
