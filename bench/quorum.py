"""Controller quorum (metadata log) benchmarks: many partitions created, moved and stopped at once.

    python bench/quorum.py                 # default, ~10 minutes on 2 cores
    python bench/quorum.py --rounds 1 --no-write   # a smoke run
    python bench/quorum.py --only create,shutdown  # a subset; implies --no-write

Every server is a real `lakelog node` process on loopback (tests/support/nodes.py, with the
default broker settings instead of the tests' `FAST_CLUSTER`: a 1 s election timeout, a 9 s broker
session, a 10 s controlled-shutdown timeout), or a real `lakelog up`. Each case runs on a fresh cluster, once with the metadata log's group
commit on (the default) and once with `controller.quorum.append.max.entries=1` (one entry per
append and per fsync, and one proposal per Raft step: how the quorum wrote before group commit), in
alternated rounds; the ratio is "grouped time / one-entry time" of the same round, medians over rounds.

* create   — a 3-node cluster (every node a voter), one topic of `--create-partitions` (200)
             partitions, replication factor 3, created through the v3 API: the time of the POST (it
             answers once the controller applied the records), until every node lists a leader
             for every partition, and until every node serves its replica of every partition (its
             `/metrics` lists the partition's log end offset: the log is open, durable and
             registered; the issue 27 goal for 1,000 partitions is < 2 s).
             `python bench/quorum.py --only create --create-partitions 1000` measures that size.
* shutdown — a 3-node cluster with one topic of `--shutdown-partitions` (150) partitions, RF 3,
             preferred leaders spread over the nodes: SIGTERM of node 1 (its controlled shutdown
             moves ~1/3 of the leaderships away, one metadata record each) until its process exits;
             then SIGTERM of the other two at once until both exit. "timed out" counts the nodes
             that logged "controlled shutdown timed out".
* up-stop  — `lakelog up` (3 nodes) with `--up-partitions` (48) partitions in 2 topics, RF 3:
             SIGINT (Ctrl-C) until it exits (0 expected).

Figures are printed and written to the "Controller quorum" section of docs/benchmarks.md (`--no-write`
to skip), with the machine's load average before and after (the machine is shared: read the ratios).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.harness import command_line, git_revision, load_average, markdown_table, rewrite_section  # noqa: E402
from lakelog.ingest_api.config.node import NODE_CONFIG  # noqa: E402
from tests.support.nodes import FAST_CLUSTER, LAKELOG, Cluster, free_port_block  # noqa: E402

GROUPED = "grouped"
ONE_ENTRY = "one entry"
#: The key that turns group commit off for the baseline (1 = one entry per append and fsync).
BATCH_KEY = "controller.quorum.append.max.entries"
SETTINGS = {GROUPED: {}, ONE_ENTRY: {BATCH_KEY: "1"}}
#: A real deployment's settings, not the test suite's fast ones.
DEFAULTS = {k: str(NODE_CONFIG.keys[k].default) for k in FAST_CLUSTER}


def _cluster_id(c: httpx.Client) -> str:
    return c.get("/v3/clusters").json()["data"][0]["cluster_id"]


def _create_topic(url: str, name: str, partitions: int, rf: int = 3) -> float:
    """Seconds of the v3 create call."""
    with httpx.Client(base_url=url, timeout=120) as c:
        cid = _cluster_id(c)
        started = time.perf_counter()
        r = c.post(f"/v3/clusters/{cid}/topics",
                   json={"topic_name": name, "partitions_count": partitions, "replication_factor": rf})
        took = time.perf_counter() - started
        if r.status_code != 201:
            raise RuntimeError(f"create {name}: {r.status_code} {r.text}")
        return took


def _wait(done: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout_s}s")
        time.sleep(0.05)


def _all_led(urls: list[str], topic: str, partitions: int, *, spread: bool = False) -> Callable[[], bool]:
    """Every node lists a leader (and, with `spread`, the preferred one) for every partition."""
    def check() -> bool:
        for url in urls:
            try:
                r = httpx.get(f"{url}/topics/{topic}/partitions", timeout=5)
            except httpx.HTTPError:
                return False
            if r.status_code != 200:
                return False
            parts = r.json()
            if len(parts) != partitions or any(p.get("leader") in (None, -1) for p in parts):
                return False
            if spread and any(p["leader"] != p["replicas"][0]["broker"] for p in parts):
                return False
        return True
    return check


def _replicas_open(urls: list[str], topic: str, partitions: int) -> Callable[[], bool]:
    """Every node serves its replica of every partition of `topic` (RF 3 on 3 nodes: all of them)."""
    needle = "lakelog_partition_log_end_offset{"
    label = f'topic="{topic}"'

    def check() -> bool:
        for url in urls:
            try:
                r = httpx.get(f"{url}/metrics", timeout=10)
            except httpx.HTTPError:
                return False
            if r.status_code != 200:
                return False
            if sum(1 for line in r.text.splitlines() if line.startswith(needle) and label in line) < partitions:
                return False
        return True
    return check


def _timed_out(cluster: Cluster) -> int:
    return sum("controlled shutdown timed out" in n.read_log() for n in cluster.nodes)


def case_create(root: Path, setting: str, partitions: int) -> dict[str, float]:
    cluster = Cluster(root, 3, overrides={**DEFAULTS, **SETTINGS[setting]}).start()
    try:
        urls = [n.url for n in cluster.nodes]
        started = time.perf_counter()
        post_s = _create_topic(urls[0], "big", partitions)
        wait_s = 120 + partitions * 0.1  # a loaded machine: 1,000 partitions may take minutes, not hang
        _wait(_all_led(urls, "big", partitions), wait_s, "leaders everywhere")
        led_s = time.perf_counter() - started
        _wait(_replicas_open(urls, "big", partitions), wait_s, "replicas open everywhere")
        return {"POST": post_s, "led everywhere": led_s, "replicas open everywhere": time.perf_counter() - started}
    finally:
        cluster.stop()


def _stop(nodes: list, timeout_s: float = 60) -> float:
    started = time.perf_counter()
    for n in nodes:
        n.proc.send_signal(signal.SIGTERM)
    for n in nodes:
        n.proc.wait(timeout_s)
    return time.perf_counter() - started


def case_shutdown(root: Path, setting: str, partitions: int) -> dict[str, float]:
    cluster = Cluster(root, 3, overrides={**DEFAULTS, **SETTINGS[setting]}).start()
    try:
        urls = [n.url for n in cluster.nodes]
        _create_topic(urls[0], "big", partitions)
        _wait(_all_led(urls, "big", partitions, spread=True), 120, "preferred leaders everywhere")
        one = _stop([cluster.node(1)])
        rest = _stop([cluster.node(2), cluster.node(3)])
        return {"node 1 stop": one, "last 2 stop": rest, "timed out": float(_timed_out(cluster))}
    finally:
        cluster.stop()


def case_up_stop(root: Path, setting: str, partitions: int) -> dict[str, float]:
    base = free_port_block(3)
    data = root / "data"
    args = [LAKELOG, "up", "--nodes", "3", "--data-dir", str(data), "--http-port", str(base)]
    for k, v in SETTINGS[setting].items():
        args += ["--set", f"{k}={v}"]
    log = open(root / "up.log", "wb")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        urls = [f"http://127.0.0.1:{base + i}" for i in range(3)]
        ready = _all_ready(urls)
        _wait(lambda: proc.poll() is not None or ready(), 120, "lakelog up ready")
        if proc.poll() is not None:
            raise RuntimeError(f"lakelog up exited {proc.returncode}: {(root / 'up.log').read_text()}")
        half = partitions // 2
        _create_topic(urls[0], "a", half)
        _create_topic(urls[0], "b", partitions - half)
        _wait(_all_led(urls, "a", half, spread=True), 120, "preferred leaders of a")
        _wait(_all_led(urls, "b", partitions - half, spread=True), 120, "preferred leaders of b")
        started = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(120)
        took = time.perf_counter() - started
        timed_out = sum("controlled shutdown timed out" in p.read_text(errors="replace")
                        for p in data.glob("node-*/node.log*"))
        return {"stop": took, "exit code": float(code), "timed out": float(timed_out)}
    finally:
        log.close()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _all_ready(urls: list[str]) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return all(httpx.get(f"{u}/readyz", timeout=2).status_code == 200 for u in urls)
        except httpx.HTTPError:
            return False
    return check


CASES = {"create": case_create, "shutdown": case_shutdown, "up-stop": case_up_stop}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="", help="comma-separated cases: " + ",".join(CASES))
    ap.add_argument("--create-partitions", type=int, default=200)
    ap.add_argument("--shutdown-partitions", type=int, default=150)
    ap.add_argument("--up-partitions", type=int, default=48)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    only = [c for c in args.only.split(",") if c] or list(CASES)
    sizes = {"create": args.create_partitions, "shutdown": args.shutdown_partitions, "up-stop": args.up_partitions}
    load_before = load_average()
    uptime_before = _uptime()
    results: dict[str, dict[str, dict[str, list[float]]]] = {c: {GROUPED: {}, ONE_ENTRY: {}} for c in only}
    for case in only:
        for r in range(args.rounds):
            order = [GROUPED, ONE_ENTRY] if r % 2 == 0 else [ONE_ENTRY, GROUPED]
            for setting in order:
                with tempfile.TemporaryDirectory(prefix=f"lakelog-bench-quorum-{case}-", dir=args.dir) as tmp:
                    figures = CASES[case](Path(tmp), setting, sizes[case])
                print(f"{case} round {r + 1} {setting}: " + ", ".join(f"{k} {v:.2f}" for k, v in figures.items()),
                      flush=True)
                for k, v in figures.items():
                    results[case][setting].setdefault(k, []).append(v)
    load_after = load_average()
    uptime_after = _uptime()
    rows = []
    for case in only:
        for measure, grouped in results[case][GROUPED].items():
            single = results[case][ONE_ENTRY][measure]
            if measure in ("timed out", "exit code"):
                rows.append([f"{case} ({sizes[case]} partitions)", measure, _ints(grouped), _ints(single), ""])
                continue
            ratio = statistics.median(g / s for g, s in zip(grouped, single))
            rows.append([f"{case} ({sizes[case]} partitions)", f"{measure} (s)",
                         f"{statistics.median(grouped):.2f} ({min(grouped):.2f}-{max(grouped):.2f})",
                         f"{statistics.median(single):.2f} ({min(single):.2f}-{max(single):.2f})",
                         f"{ratio:.2f}x"])
    table = markdown_table(["case", "measure", "group commit: median (range)",
                            f"`{BATCH_KEY}=1`: median (range)", "time vs one entry"], rows)
    print(table)
    print(f"uptime before: {uptime_before}\nuptime after:  {uptime_after}")
    if not args.no_write and not args.only:
        body = "\n".join([
            "## Controller quorum (`bench/quorum.py`)", "",
            f"Real node processes on loopback (3 voters), a fresh cluster per run, {args.rounds} alternated rounds; "
            f"each run once with the metadata log's group commit (default) and once with `{BATCH_KEY}=1` "
            "(one entry per append and fsync, one proposal per Raft step: the quorum before group commit). "
            "Ratios pair the runs of one round.", "",
            table, "",
            f"`{command_line()}` at {git_revision(ROOT)}; load average {load_before} before, {load_after} after "
            f"(`uptime`: \"{uptime_before}\" / \"{uptime_after}\"). {args.note}".rstrip(),
        ])
        rewrite_section(ROOT / "docs" / "benchmarks.md", "quorum", body)
    return 0


def _ints(values: list[float]) -> str:
    return ", ".join(str(int(v)) for v in values)


def _uptime() -> str:
    try:
        return re.sub(r"\s+", " ", subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
