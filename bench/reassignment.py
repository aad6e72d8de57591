"""Partition reassignment: how long a move takes, unthrottled and under a replication throttle.

    python bench/reassignment.py            # writes the "Reassignment" section of docs/benchmarks.md
    python bench/reassignment.py --no-write # print only

A real 4-node cluster on loopback (`tests.support.nodes.Cluster`, FAST_CLUSTER settings, with a 3 s broker session and a 1.5 s election timeout), one topic
with one partition, replication factor 2, preloaded with `--mb` MiB (acks=all, 10 KiB records).
Each run moves the partition to the two nodes that do not hold it (both replicas change, the leader
too) through `PATCH .../reassignment` and measures the time until no node reports the move in
progress and every node sees the new replicas (polled every 50 ms). Runs alternate between
unthrottled and throttled ones (`leader/follower.replication.throttled.rate` as the cluster
default, `*.replication.throttled.replicas=*`); the leader's rate is shared by the two new
replicas, so a throttled move should take about 2 x size / rate.
"""

from __future__ import annotations

import argparse
import base64
import datetime as _dt
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402

from bench.harness import rewrite_section  # noqa: E402
from tests.support.faults import cluster_id, create_topic, partition_state, replicas_of, wait_full_isr  # noqa: E402
from tests.support.nodes import Cluster  # noqa: E402

RECORD_BYTES = 10 * 1024
RATE_KEYS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")


def _preload(url: str, topic: str, mib: int) -> int:
    n = mib * 1024 * 1024 // RECORD_BYTES
    for start in range(0, n, 50):
        body = {"records": [{"value": base64.b64encode(b"x" * RECORD_BYTES).decode()}
                            for _ in range(min(50, n - start))]}
        for _ in range(50):
            r = httpx.post(f"{url}/topics/{topic}/partitions/0?acks=all", json=body, timeout=60,
                           headers={"Content-Type": "application/vnd.kafka.binary.v2+json"})
            if r.status_code == 200:
                break
            time.sleep(0.2)
        else:
            raise RuntimeError(f"preload refused: {r.status_code} {r.text}")
    return n * RECORD_BYTES


def _throttle(v3: str, rate: int | None) -> None:
    for key in RATE_KEYS:
        for _ in range(100):
            if rate is None:
                r = httpx.delete(f"{v3}/broker-configs/{key}", timeout=30)
            else:
                r = httpx.put(f"{v3}/broker-configs/{key}", json={"value": str(rate)}, timeout=30)
            if r.status_code != 503:
                break
            time.sleep(0.1)


def _replicas(url: str, topic: str) -> list[int]:
    """The partition's replicas as a node answers (asked again while it answers 503 on a loaded machine)."""
    for _ in range(200):
        try:
            return replicas_of(partition_state(url, topic, 0))
        except (httpx.HTTPError, AssertionError):
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer")


def _move(cluster: Cluster, v3: str, topic: str) -> float:
    url = cluster.node(1).url
    current = _replicas(url, topic)
    target = [n for n in (1, 2, 3, 4) if n not in current]
    started = time.monotonic()
    for _ in range(100):
        r = httpx.patch(f"{v3}/topics/{topic}/partitions/0/reassignment", json={"replicas": target}, timeout=60)
        if r.status_code != 503:
            break
        time.sleep(0.1)
    assert r.status_code == 202, r.text
    deadline = started + 600
    while time.monotonic() < deadline:
        try:
            moving = httpx.get(f"{v3}/topics/{topic}/partitions/0/reassignment", timeout=5).status_code == 200
            if not moving and all(replicas_of(partition_state(n.url, topic, 0)) == target for n in cluster.nodes):
                return time.monotonic() - started
        except (httpx.HTTPError, AssertionError):
            pass
        time.sleep(0.05)
    raise TimeoutError("the move did not complete in 600 s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=8, help="MiB preloaded into the partition (default 8)")
    ap.add_argument("--rates", default="1048576,4194304", help="throttles to measure, bytes/s (default 1 MiB/s, 4 MiB/s)")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each case (default 2)")
    ap.add_argument("--no-write", action="store_true", help="print only")
    args = ap.parse_args()
    rates = [int(x) for x in args.rates.split(",")]
    load_start = os.getloadavg()[0]
    t0 = time.monotonic()
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="lakelog-bench-reassign-") as tmp:
        cluster = Cluster(Path(tmp), 4, overrides={"broker.session.timeout.ms": "3000",
                                                   "controller.quorum.election.timeout.ms": "1500"})
        try:
            cluster.start()
            url = cluster.node(1).url
            v3 = f"{url}/v3/clusters/{cluster_id(url)}"
            create_topic(url, "bench", partitions=1, rf=2)
            wait_full_isr(cluster.nodes, "bench", [0])
            size = _preload(url, "bench", args.mb)
            r = httpx.post(f"{v3}/topics/bench/configs:alter", timeout=30, json={"data": [
                {"name": "leader.replication.throttled.replicas", "value": "*"},
                {"name": "follower.replication.throttled.replicas", "value": "*"}]})
            assert r.status_code == 204, r.text
            for _ in range(args.rounds):
                for rate in [None, *rates]:
                    _throttle(v3, rate)
                    name = "unthrottled" if rate is None else f"throttled at {rate / 1048576:g} MiB/s"
                    took = _move(cluster, v3, "bench")
                    results.setdefault(name, []).append(took)
                    print(f"{name}: {took:.2f} s", flush=True)
        finally:
            cluster.stop()
    load_end = os.getloadavg()[0]
    lines = [f"Generated by `bench/reassignment.py` on {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M} UTC in "
             f"{time.monotonic() - t0:.0f} s. Command: `python bench/reassignment.py`. 4 node processes, the client and "
             f"every other process on one 2-CPU machine; 1-minute load average {load_start:.2f} at the start, "
             f"{load_end:.2f} at the end.", "",
             f"One partition, replication factor 2, {size / 1048576:.1f} MiB (10 KiB records); each run moves both "
             f"replicas (and the leadership) to the two other nodes; time from the PATCH to every node seeing the new "
             f"replicas with no move in progress; {args.rounds} runs per case, alternated. The leader's rate covers "
             f"everything it sends to throttled followers, so two new replicas take at least 2 x size / rate.", "",
             "| Case | Runs (s) | Median (s) | 2 x size / rate (s) |", "|---|---|---|---|"]
    for name, runs in results.items():
        ideal = "—"
        if name.startswith("throttled"):
            rate = float(name.split(" at ")[1].split(" ")[0]) * 1048576
            ideal = f"{2 * size / rate:.1f}"  # two new replicas share the leader's rate
        lines.append(f"| {name} | {', '.join(f'{x:.2f}' for x in runs)} | {statistics.median(runs):.2f} | {ideal} |")
    over = [statistics.median(runs) / (2 * size / (float(n.split(" at ")[1].split(" ")[0]) * 1048576)) - 1
            for n, runs in results.items() if n.startswith("throttled")]
    if over:
        lines += ["", f"Throttled medians: {min(over):.0%} to {max(over):.0%} above 2 x size / rate (the rest: the catch-up "
                      f"of the last records, the ISR change, the leader move and the removal, each a metadata round)."]
    body = "## Reassignment (`bench/reassignment.py`)\n\n" + "\n".join(lines)
    print(body)
    if not args.no_write:
        rewrite_section(Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md", "reassignment", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
