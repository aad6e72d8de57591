"""Scale benchmark: what a 3-node cluster costs at many partitions, idle and when a node dies.

    python bench/scale.py                        # 1,000 replicas per node: idle, produce, failover
    python bench/scale.py --replicas 300,1000    # several sizes, one fresh cluster each
    python bench/scale.py --only idle --profile  # idle CPU, and a cProfile of one idle node
    python bench/scale.py --no-write             # print only, leave docs/benchmarks.md alone
    python bench/scale.py --replicas 30,300,3000 --only idle,produce,failover --peer kafka
                                                 # issue 27's table: Lakelog, then Apache Kafka 4.1, per size

Every server is a real `lakelog node` process on loopback (`bench/cluster.py`'s `Cluster`, default
broker settings apart from `log.cleaner.enable=false`), started and stopped by this script. Topics
have 100 partitions (the last one fewer: 30 replicas is one topic of 30), replication factor 3,
`min.insync.replicas=2`, so with 3 nodes every node holds every partition: N replicas per node is N
partitions. With `--peer kafka`, after each size's Lakelog cluster has stopped, three Apache Kafka
4.1 brokers (KRaft) hold the same topics and are measured the same way (idle, produce, failover;
bench/scale_kafka.py states their settings, equal to Lakelog's defaults that matter here).

Open files: every segment holds 4 files open (logstore/open_files.py), so 3,000 replicas per node
need about 13,000 descriptors per node. The bench lifts its soft RLIMIT_NOFILE to the hard limit
(the nodes and brokers inherit it) and refuses to start a size the hard limit cannot hold.

What is measured, per size:

* idle — each node's CPU seconds (user + system, /proc/PID/stat) over `--idle-s` of no traffic,
  after the cluster settled (every ISR full), as CPU seconds per minute, and its RSS. CPU seconds
  rather than wall-clock shares hold up on a machine shared with other work.
* profile (`--profile`) — the nodes run through `bench/cluster.py _serve` (cProfile of the main
  thread on SIGUSR1 / SIGUSR2); one idle node's top functions by own time over the idle window.
* produce — one acks=all JSON record to each partition in turn, sent to its leader: p50 / p99 / max.
* failover — SIGKILL of one node (not the active controller); the seconds until every partition
  took an acks=all produce again, and the refusals or delivery errors meanwhile. The default probe
  (`--probe kafka`) is the one the Kafka peer gets (bench/scale_kafka.py `failover_probe`): the
  nodes listen for Kafka clients too, and confluent-kafka (acks=all, linger.ms=0) queues one record
  to every partition right after the kill; librdkafka batches them per leader, retries and follows
  the leader moves itself, and the last acknowledgement is the time every partition was writable.
  `--probe http` sends acks=all JSON produces instead, each partition through one of the live
  nodes in turn, `--probe-threads` (8) at a time, in sweeps over the pending partitions: its last
  success also includes one sweep's time (at 3,000 partitions on a shared machine the sweep took
  as long as the failover itself), so the sweep over the healthy cluster is timed first and
  printed beside it. Either way the seconds by which half and 99% of the partitions were writable
  are printed, and the cluster's own part: the seconds until a live node's metadata shows every
  partition with a leader other than the dead node and the dead node out of every ISR (polled
  every second from a thread beside the probe).
* restart — a clean stop (SIGTERM) of one node that is not the active controller, then its start
  again: the seconds the stop took, from the start until the node serves (`/readyz` answers 200),
  and until every partition lists it in the ISR again (polled every second); and the phases the
  restarted node's log names (`startup phase` lines at INFO).
* restart-crash — the same after a SIGKILL (no clean-shutdown marker: every log is recovered).

The figures go to the "scale" section of docs/benchmarks.md through `bench.harness.rewrite_section`.
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import json
import pstats
import shutil
import signal
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/scale.py` puts bench/ on the path, not the root
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.cluster import Cluster, NodeProc, kill_all_started  # noqa: E402
from bench.harness import command_line, git_revision, load_average, markdown_table, rewrite_section  # noqa: E402
from bench.scale_kafka import KafkaScale, failover_probe  # noqa: E402
from lakelog.logstore.open_files import files_needed, lift_soft_limit  # noqa: E402

DOC_PATH = ROOT / "docs" / "benchmarks.md"
SECTION = "scale"
PARTITIONS_PER_TOPIC = 100
REPLICATION_FACTOR = 3
JSON_V2 = "application/vnd.kafka.json.v2+json"
SETTLE_S = 10.0
#: Timeouts raised over the defaults so that a machine shared with other work (a load average of 10+
#: on 2 cores) does not fence nodes or depose the Raft leader while 3,000 logs open; they change
#: no per-partition work. The failover time then includes `broker.session.timeout.ms`.
TOLERANT = {"broker.session.timeout.ms": "20000", "controller.quorum.election.timeout.ms": "5000",
            "request.timeout.ms": "60000"}
FAILOVER_GIVE_UP_S = 300.0
#: Lines of a restarted node's log that mark its way back to serving (`restart`).
PHASE_MARKS = (b"startup phase", b"truncation of", b"started: cluster", b"registered with broker epoch",
               b"metadata", b"snapshot")


def topic_layout(replicas: int) -> list[int]:
    """Partitions of each topic: full topics of PARTITIONS_PER_TOPIC, then the remainder."""
    full, rest = divmod(replicas, PARTITIONS_PER_TOPIC)
    return [PARTITIONS_PER_TOPIC] * full + ([rest] if rest else [])


def rss_mib(n: NodeProc) -> float:
    try:
        for line in Path(f"/proc/{n.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except (OSError, AttributeError):
        pass
    return 0.0


def partition_views(client: httpx.Client, node: NodeProc, topics: list[str]) -> dict[tuple[str, int], dict]:
    out = {}
    for t in topics:
        r = client.get(node.url + f"/topics/{t}/partitions", timeout=30)
        if r.status_code != 200:
            raise RuntimeError(f"{t} on node {node.node_id}: {r.status_code}")
        for v in r.json():
            out[(t, v["partition"])] = v
    return out


def wait_settled(cluster: Cluster, topics: list[str], timeout_s: float) -> float | None:
    """Wait until every live node sees every partition with a leader and a full ISR; returns the
    seconds, or None when it did not within `timeout_s`."""
    t0 = time.monotonic()
    client = httpx.Client()
    try:
        while True:
            try:
                ok = all(all(v["leader"] >= 0 and all(r["in_sync"] for r in v["replicas"])
                             for v in partition_views(client, n, topics).values()) for n in cluster.live())
            except (httpx.HTTPError, RuntimeError):
                ok = False
            if ok:
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout_s:
                return None
            time.sleep(1.0)
    finally:
        client.close()


def create_topics(cluster: Cluster, layout: list[int], settle_s: float) -> tuple[list[str], float | None]:
    topics = [f"scale-{i:03d}" for i in range(len(layout))]
    t0 = time.monotonic()
    with httpx.Client(timeout=300) as c:
        cid = cluster.cluster_id()
        for t, partitions in zip(topics, layout):
            body = {"topic_name": t, "partitions_count": partitions, "replication_factor": REPLICATION_FACTOR,
                    "configs": [{"name": "min.insync.replicas", "value": "2"}]}
            for attempt in range(60):  # a node busy opening the last topic's logs may answer 503 a while
                r = c.post(cluster.live()[attempt % 3].url + f"/v3/clusters/{cid}/topics", json=body)
                if r.status_code == 201 or (r.status_code in (400, 409) and "already exists" in r.text):
                    break
                if r.status_code != 503:
                    raise RuntimeError(f"creating {t}: {r.status_code} {r.text[:300]}")
                time.sleep(1.0)
            else:
                raise RuntimeError(f"creating {t}: {r.status_code} {r.text[:300]}")
    if wait_settled(cluster, topics, settle_s) is None:
        return topics, None
    return topics, time.monotonic() - t0


def idle(cluster: Cluster, window_s: float) -> dict[int, tuple[float, float]]:
    """node id -> (CPU seconds per minute over the window, RSS MiB at its end)."""
    cpu0 = cluster.cpu_s()
    t0 = time.monotonic()
    time.sleep(window_s)
    wall = time.monotonic() - t0
    cpu1 = cluster.cpu_s()
    return {n.node_id: ((cpu1[n.node_id] - cpu0[n.node_id]) * 60 / wall, rss_mib(n)) for n in cluster.nodes}


def profile_idle(cluster: Cluster, node: NodeProc, window_s: float, limit: int = 25) -> list[str]:
    assert node.profile_out is not None
    node.profile_out.unlink(missing_ok=True)
    node.send(signal.SIGUSR1)
    time.sleep(window_s)
    node.send(signal.SIGUSR2)
    deadline = time.monotonic() + 30
    while not node.profile_out.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    st = pstats.Stats(str(node.profile_out))
    total = st.total_tt  # type: ignore[attr-defined]
    rows = sorted(st.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:limit]  # type: ignore[attr-defined]
    out = [f"main-thread CPU under the profiler: {total:.2f} s in {window_s:.0f} s", "",
           "| own s | cum s | calls | function |", "|---:|---:|---:|---|"]
    for (file, line, name), (_cc, nc, tt, ct, _callers) in rows:
        short = file.replace(str(ROOT) + "/", "").rsplit("site-packages/", 1)[-1]
        out.append(f"| {tt:.3f} | {ct:.3f} | {nc} | `{short}:{line}({name})` |")
    return out


def leaders(cluster: Cluster, topics: list[str]) -> dict[tuple[str, int], int]:
    """Each partition's leader as the first live node that answers says."""
    with httpx.Client() as c:
        for n in cluster.live():
            try:
                return {k: v["leader"] for k, v in partition_views(c, n, topics).items()}
            except (httpx.HTTPError, RuntimeError):
                continue
    raise RuntimeError("no live node answers for the partitions")


def produce_each(cluster: Cluster, topics: list[str]) -> tuple[list[float], int]:
    """One acks=all record to each partition in turn, at its leader; the latencies in ms of those
    that succeeded, and how many did not."""
    urls = {n.node_id: n.url for n in cluster.nodes}
    out = []
    failed = 0
    with httpx.Client(timeout=30) as c:
        for (t, p), leader in sorted(leaders(cluster, topics).items()):
            if leader not in urls:
                failed += 1
                continue
            t0 = time.perf_counter()
            r = c.post(urls[leader] + f"/topics/{t}/partitions/{p}?acks=all", content=b'{"records":[{"value":1}]}',
                       headers={"Content-Type": JSON_V2})
            if r.status_code == 200:
                out.append((time.perf_counter() - t0) * 1000)
            else:
                failed += 1
    return out, failed


def failover(cluster: Cluster, topics: list[str], layout: list[int], threads: int = 8,
             probe: str = "kafka") -> tuple[float, dict, dict[str, float]]:
    """SIGKILL one node that is not the active controller; seconds until every partition took an
    acks=all produce through a live node, the refusals meanwhile, and the detail: when half and 99%
    were writable, and when a live node's metadata showed the move (`metadata_moved_s`).

    `probe` "kafka": confluent-kafka on the nodes' Kafka listeners queues one record to every
    partition at once, as the Kafka peer is probed (`scale_kafka.failover_probe`). "http": acks=all
    JSON produces, each partition through one of the live nodes in turn, by `threads` threads, in
    sweeps over the pending partitions (its last success also includes one sweep's time: the sweep
    over the healthy cluster is timed first)."""
    controller = cluster.controller_id()
    victim = next(n for n in reversed(cluster.nodes) if n.node_id != controller)
    live = [n for n in cluster.nodes if n is not victim]
    watcher = ThreadPoolExecutor(1)
    moved: list = []

    def kill() -> None:
        victim.kill()
        moved.append(watcher.submit(metadata_moved_s, live[0], victim.node_id, topics, time.monotonic()))

    if probe == "kafka":
        seconds, refused, writable_at = failover_probe(cluster.bootstrap, dict(zip(topics, layout)), kill)
        detail: dict[str, float] = {}
    else:
        seconds, refused, writable_at, detail = _http_failover_probe(live, topics, layout, threads, kill)
    detail["metadata_s"] = moved[0].result()
    watcher.shutdown()
    detail["half_s"] = writable_at[len(writable_at) // 2]
    detail["p99_s"] = writable_at[max(0, int(len(writable_at) * 0.99) - 1)]
    return seconds, refused, detail


def _http_failover_probe(live: list[NodeProc], topics: list[str], layout: list[int], threads: int,
                         kill) -> tuple[float, dict[int, int], list[float], dict[str, float]]:
    every = [(t, p) for t, n in zip(topics, layout) for p in range(n)]
    pending = set(every)
    refused: dict[int, int] = {}
    writable_at: list[float] = []

    def attempt(key: tuple[str, int], url: str) -> tuple[tuple[str, int], int]:
        try:
            r = client.post(url + f"/topics/{key[0]}/partitions/{key[1]}?acks=all",
                            content=b'{"records":[{"value":1}]}', headers={"Content-Type": JSON_V2})
            return key, r.status_code
        except httpx.HTTPError:
            return key, 0

    def node_for(i: int) -> str:
        return live[i % len(live)].url

    with httpx.Client(timeout=30, limits=httpx.Limits(max_connections=2 * threads)) as client, \
            ThreadPoolExecutor(threads) as pool:
        s0 = time.monotonic()
        swept = list(pool.map(lambda ik: attempt(ik[1], node_for(ik[0])), enumerate(every)))
        detail = {"healthy_sweep_s": time.monotonic() - s0,
                  "healthy_refused": float(sum(1 for _, status in swept if status != 200))}
        kill()
        t0 = time.monotonic()
        round_no = 0
        while pending:
            if time.monotonic() - t0 > FAILOVER_GIVE_UP_S:
                raise TimeoutError(f"{len(pending)} partitions still not writable after {FAILOVER_GIVE_UP_S}s")
            base = round_no
            round_no += 1
            for key, status in pool.map(lambda ik: attempt(ik[1], node_for(base + ik[0])), enumerate(sorted(pending))):
                if status == 200:
                    pending.discard(key)
                    writable_at.append(time.monotonic() - t0)
                else:
                    refused[status] = refused.get(status, 0) + 1
            if pending:
                time.sleep(0.2)
    return time.monotonic() - t0, refused, sorted(writable_at), detail


def metadata_moved_s(node: NodeProc, dead: int, topics: list[str], t0: float) -> float:
    """Seconds from `t0` until `node` shows every partition led by another node than `dead`, with
    `dead` out of its ISR (-1.0 when that did not happen within FAILOVER_GIVE_UP_S)."""
    with httpx.Client() as c:
        while time.monotonic() - t0 < FAILOVER_GIVE_UP_S:
            try:
                views = partition_views(c, node, topics).values()
                if all(v["leader"] not in (-1, dead) and not any(r["broker"] == dead and r["in_sync"]
                                                                  for r in v["replicas"]) for v in views):
                    return time.monotonic() - t0
            except (httpx.HTTPError, RuntimeError):
                pass
            time.sleep(1.0)
    return -1.0


def restart(cluster: Cluster, topics: list[str], timeout_s: float, *, crash: bool = False) -> dict:
    """Clean stop (or with `crash`, SIGKILL) and start of one node that is not the active
    controller: seconds to stop, to serve again, and to be back in every ISR."""
    controller = cluster.controller_id()
    node = next(n for n in reversed(cluster.nodes) if n.node_id != controller)
    t0 = time.monotonic()
    if crash:
        node.kill()
    else:
        node.terminate()
    assert node.proc is not None
    node.proc.wait(timeout_s)
    out = {"stop_s": time.monotonic() - t0}
    mark = node.log_path.stat().st_size
    t0, wall0 = time.monotonic(), time.time()
    node.start()
    node.wait_ready(timeout_s)
    out["ready_s"] = time.monotonic() - t0
    settled = wait_settled(cluster, topics, timeout_s)
    out["in_sync_s"] = None if settled is None else time.monotonic() - t0
    out["phases"] = []
    with open(node.log_path, "rb") as f:
        f.seek(mark)
        for line in f:
            if not any(m in line for m in PHASE_MARKS) or b" recovered: " in line:
                continue  # one line per log recovered after a crash: the `startup phase` lines count them
            try:
                doc = json.loads(line)
                at = datetime.datetime.fromisoformat(doc["ts"].replace("Z", "+00:00")).timestamp() - wall0
                out["phases"].append(f"+{at:.1f} s: {doc['msg']}")
            except (ValueError, KeyError):
                out["phases"].append(line.decode(errors="replace").strip())
    return out


def run_size(root: Path, replicas: int, args: argparse.Namespace) -> dict:
    layout = topic_layout(replicas)
    cluster = Cluster(root / f"r{replicas}", f"s{replicas}", 3, TOLERANT if args.tolerant else {}, profile=args.profile,
                      kafka=args.probe == "kafka")
    cluster.start(timeout_s=120)
    result: dict = {"side": "Lakelog", "replicas": sum(layout)}
    try:
        topics, created_s = create_topics(cluster, layout, args.settle_s)
        result["create_s"] = created_s
        if created_s is None:
            print(f"{replicas}: the cluster did not settle within {args.settle_s:.0f} s", flush=True)
        time.sleep(args.rest_s)
        if "idle" in args.only:
            result["load_before"] = load_average()
            result["idle"] = idle(cluster, args.idle_s)
            result["load_after"] = load_average()
            print(f"{replicas} replicas/node idle: " + ", ".join(
                f"node {k}: {c:.2f} CPU s/min, {m:.0f} MiB" for k, (c, m) in result["idle"].items()), flush=True)
            if args.profile:
                result["profile"] = profile_idle(cluster, cluster.nodes[-1], args.idle_s)
                print("\n".join(result["profile"]), flush=True)
        if "produce" in args.only:
            lat, failed = produce_each(cluster, topics)
            lat.sort()
            if lat:
                result["produce"] = (statistics.median(lat), lat[max(0, int(len(lat) * 0.99) - 1)], lat[-1], failed)
                print(f"{replicas}: produce p50 {result['produce'][0]:.1f} ms p99 {result['produce'][1]:.1f} ms, "
                      f"{failed} refused", flush=True)
        for kind in ("restart", "restart-crash"):
            if kind not in args.only:
                continue
            result[kind] = restart(cluster, topics, FAILOVER_GIVE_UP_S, crash=kind == "restart-crash")
            r = result[kind]
            print(f"{replicas}: {'SIGKILL' if kind == 'restart-crash' else 'clean stop'} {r['stop_s']:.1f} s; restart "
                  f"to serving {r['ready_s']:.1f} s, to back in every ISR "
                  f"{r['in_sync_s'] if r['in_sync_s'] is None else round(r['in_sync_s'], 1)} s", flush=True)
            print("\n".join(r["phases"]), flush=True)
        if "failover" in args.only:
            result["failover"] = failover(cluster, topics, layout, args.probe_threads, args.probe)
            d = result["failover"][2]
            print(f"{replicas}: every partition led by a live node, the dead one out of every ISR, {d['metadata_s']:.1f} s "
                  f"after SIGKILL (a live node's metadata, polled every second)", flush=True)
            sweep = (f"; the probe's sweep over every partition of the healthy cluster took {d['healthy_sweep_s']:.1f} s, "
                     f"{d['healthy_refused']:.0f} refused" if "healthy_sweep_s" in d else "")
            print(f"{replicas}: every partition writable {result['failover'][0]:.1f} s after SIGKILL ({args.probe} probe; "
                  f"half by {d['half_s']:.1f} s, 99% by {d['p99_s']:.1f} s{sweep}); "
                  f"refused {result['failover'][1]}", flush=True)
    finally:
        cluster.stop()
    return result


def run_kafka_size(root: Path, replicas: int, args: argparse.Namespace) -> dict:
    """The same size on three Apache Kafka brokers (bench/scale_kafka.py): idle, produce, failover."""
    layout = topic_layout(replicas)
    kafka = KafkaScale(root / f"kafka-r{replicas}", TOLERANT if args.tolerant else {})
    result: dict = {"side": "Kafka 4.1", "replicas": sum(layout), "settings": kafka.settings}
    try:
        topics, created_s = kafka.create_topics(layout, args.settle_s)
        result["create_s"] = created_s
        time.sleep(SETTLE_S)
        if "idle" in args.only:
            result["load_before"] = load_average()
            result["idle"] = kafka.idle(args.idle_s)
            result["load_after"] = load_average()
            print(f"Kafka {replicas} replicas/broker idle: " + ", ".join(
                f"broker {k}: {c:.2f} CPU s/min, {m:.0f} MiB" for k, (c, m) in result["idle"].items()), flush=True)
        if "produce" in args.only:
            lat, failed = kafka.produce_each(topics)
            lat.sort()
            if lat:
                result["produce"] = (statistics.median(lat), lat[max(0, int(len(lat) * 0.99) - 1)], lat[-1], failed)
                print(f"Kafka {replicas}: produce p50 {result['produce'][0]:.1f} ms p99 {result['produce'][1]:.1f} ms, "
                      f"{failed} failed", flush=True)
        if "failover" in args.only:
            result["failover"] = kafka.failover(topics)
            print(f"Kafka {replicas}: every partition writable {result['failover'][0]:.1f} s after SIGKILL; "
                  f"delivery errors {result['failover'][1]}", flush=True)
    finally:
        kafka.stop()
    return result


def check_open_files(sizes: list[int]) -> None:
    """Lift this process's soft open-file limit (the nodes and brokers inherit it); refuse sizes the
    hard limit cannot hold (4 files per segment, one segment per replica, plus the reserve)."""
    limit = lift_soft_limit()
    needed = files_needed(max(sizes))
    print(f"open-file limit: soft {limit.soft} (was {limit.soft_before}), hard {limit.hard}; "
          f"{max(sizes)} replicas per node need about {needed}", flush=True)
    if limit.soft is not None and limit.soft < needed:
        raise SystemExit(f"the open-file limit {limit.soft} is below the {needed} files {max(sizes)} replicas per node "
                         f"need: raise the hard limit (ulimit -Hn) first")


def report(results: list[dict], args: argparse.Namespace) -> str:
    rows = []
    for r in results:
        idle_cells = ["—", "—", "—"]
        if "idle" in r:
            cpus = [c for c, _ in r["idle"].values()]
            rss = [m for _, m in r["idle"].values()]
            idle_cells = [" / ".join(f"{c:.2f}" for c in cpus), f"{max(cpus) / 60 * 100:.1f}%",
                          " / ".join(f"{m:.0f}" for m in rss)]
        prod = "—" if "produce" not in r else "{:.1f} / {:.1f} / {:.1f} ({} refused)".format(*r["produce"])
        fo = "—" if "failover" not in r else f"{r['failover'][0]:.1f} s (refused: {r['failover'][1] or 'none'})"
        if "failover" in r and len(r["failover"]) > 2:
            d = r["failover"][2]
            fo += (f"; half by {d['half_s']:.1f} s, 99% by {d['p99_s']:.1f} s;"
                   + (f" healthy sweep {d['healthy_sweep_s']:.1f} s;" if "healthy_sweep_s" in d else "")
                   + f" leaders and ISRs moved in the metadata {d['metadata_s']:.1f} s")
        created = "not settled" if r["create_s"] is None else f"{r['create_s']:.0f} s"
        rs = r.get("restart")
        rst = "—" if rs is None else (f"stop {rs['stop_s']:.1f} s; serving {rs['ready_s']:.1f} s; all ISRs "
                                      + ("not within the limit" if rs["in_sync_s"] is None else f"{rs['in_sync_s']:.1f} s"))
        rc = r.get("restart-crash")
        if rc is not None:
            rst += ("; after SIGKILL: serving " f"{rc['ready_s']:.1f} s, all ISRs "
                    + ("not within the limit" if rc["in_sync_s"] is None else f"{rc['in_sync_s']:.1f} s"))
        rows.append([r["side"], f"{r['replicas']:,}", created, *idle_cells, prod, fo, rst])
    lines = ["## Scale: many partitions per node on 3 nodes", "",
             f"`{command_line()}` at {git_revision(ROOT)}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
             f"load average before / after the idle windows: "
             + "; ".join(f"{r.get('load_before', '?')} / {r.get('load_after', '?')}" for r in results)
             + ". The machine (2 cores) was shared with other engineers' work: CPU seconds are the nodes' own.",
             "",
             markdown_table(["side", "replicas per node", "create + settle", f"idle CPU s/min, nodes 1/2/3 ({args.idle_s:.0f} s)",
                             "busiest node, % of a core", "RSS MiB", "acks=all produce to each partition, p50 / p99 / max ms",
                             "SIGKILL one node -> all writable", "clean restart of one node"], rows)]
    peers = [r for r in results if "settings" in r]
    if peers:
        lines += ["", "Kafka 4.1 brokers (3, KRaft, broker and controller in one JVM each, 1 GiB heap), "
                  "topics as on Lakelog (RF 3, `min.insync.replicas=2`); broker settings: "
                  + ", ".join(f"`{k}={v}`" for k, v in peers[0]["settings"].items())
                  + "; produce and failover with confluent-kafka (acks=all, linger.ms=0; failover: one record "
                    "queued to every partition right after the SIGKILL of a broker that is not the quorum leader, "
                    "the client following the leader moves itself; the column shows its final delivery errors)."]
    for r in results:
        if "profile" in r:
            lines += ["", f"Profile of node 3, idle, {r['replicas']:,} replicas:", "", *r["profile"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/scale.py")
    parser.add_argument("--replicas", default="1000", help="replicas per node, comma-separated (e.g. 30,300,3000)")
    parser.add_argument("--peer", choices=["kafka"], help="also measure Apache Kafka 4.1 at each size (after Lakelog)")
    parser.add_argument("--idle-s", type=float, default=60.0)
    parser.add_argument("--only", default="idle,produce,failover,restart",
                        help="comma-separated subset of idle, produce, failover, restart, restart-crash "
                             "(the restarts run before failover)")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--tolerant", action="store_true", help="raise the session and election timeouts (TOLERANT)")
    parser.add_argument("--settle-s", type=float, default=300.0, help="most seconds to wait for every ISR to fill")
    parser.add_argument("--rest-s", type=float, default=SETTLE_S,
                        help="seconds between a settled cluster and the first measurement (the ISRs are full "
                             "in the metadata before every node has opened its logs: at 3,000 replicas, use 60)")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--section", default=SECTION, help="the docs/benchmarks.md section to rewrite")
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--probe", choices=["kafka", "http"], default="kafka",
                        help="the failover probe: confluent-kafka on the Kafka listeners, one record queued to every "
                             "partition at once (as the Kafka peer is probed), or HTTP sweeps (--probe-threads)")
    parser.add_argument("--probe-threads", type=int, default=8,
                        help="concurrent acks=all produces of the failover probe (see the module doc)")
    parser.add_argument("--keep", action="store_true", help="keep the node directories and logs under --dir")
    args = parser.parse_args(argv)
    args.only = set(args.only.split(","))
    atexit.register(kill_all_started)
    sizes = [int(n) for n in args.replicas.split(",")]
    check_open_files(sizes)
    root = Path(tempfile.mkdtemp(prefix="lakelog-scale-", dir=args.dir))
    results = []
    for n in sizes:
        results.append(run_size(root, n, args))
        if args.peer == "kafka":
            results.append(run_kafka_size(root, n, args))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)  # kept after a failure: the node logs say why
    text = report(results, args)
    print(text)
    if not args.no_write:
        rewrite_section(DOC_PATH, args.section, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
