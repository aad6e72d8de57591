"""Cluster (replication) benchmarks: acks=all on a 3-node cluster against acks=1 on one node, same run.

    python bench/cluster.py            # default, a few minutes on 2 cores
    python bench/cluster.py --quick    # a smoke run, about a minute, no profile (use with --no-write)
    python bench/cluster.py --only throughput,failover   # a subset; implies --no-write
    python bench/cluster.py --no-write # print only, leave docs/benchmarks.md alone
    python bench/cluster.py --profile  # profile the nodes even when the throughput target is met
    python bench/cluster.py --base-rev REV  # also an RF=3 cluster running the tree of git revision REV

Every server is a real `lakelog node` process on loopback, started and stopped by this script (each
in its own session; SIGKILL of its process group if it does not stop in time; also on Ctrl-C,
SIGTERM or a failure of the bench). Two clusters run side by side during the throughput and latency
cases, with the default broker settings (apart from `log.cleaner.enable=false`, as in
`bench/node.py`) and the same fixed glibc malloc thresholds as `bench/node.py`:

* "RF=3": three nodes, every node a controller voter; topics with replication factor 3 and
  `min.insync.replicas=2`, produced with acks=all;
* "RF=1": one node (a quorum of itself); topics with replication factor 1, produced with acks=1.

What is measured:

* throughput — the binary fast path (`POST /topics/{t}/partitions/{p}`, `Content-Type:
  application/vnd.kafka.recordbatch`, ~1 MiB RecordBatch v2 bodies of 1000 x 1 KiB records),
  sent to the partition's leader (found with `GET /topics/{t}/partitions/{p}` -> "leader", and the
  broker's host and port from `/v3/clusters/{id}/brokers/{leader}`): RF=3 acks=all against RF=1
  acks=1, 1 connection (1 partition) and 4 connections (4 partitions, each connection to its
  partition's leader), alternated rounds after a warm-up, medians, each run on a fresh topic
  [target >= 0.5x]. For information, in the same rounds: RF=3 acks=all sent to a non-leader (one
  forwarding hop), and RF=3 acks=1 (which splits the cost of acks=all into "three copies of the
  work on the machine" and "waiting for the followers"). Each node's CPU (/proc/PID/stat), the
  client's and the whole machine's (/proc/stat), and the requests each cluster served by route
  (its nodes' /metrics: replica fetches, Raft messages) are sampled around every run. When the
  target is missed (or with --profile), fresh profiled nodes (`_serve`: `run_node` with cProfile
  on SIGUSR1 / SIGUSR2) say where the CPU goes, net of a profile of the same idle nodes.
* latency — small batches (one record, 1 KiB value) at a fixed 200 requests/s, and 50/s, open loop
  (latency from each request's scheduled time, late sends counted), RF=3 acks=all against RF=1
  acks=1 (and RF=3 acks=1 for information): p50 / p99 / max.
* failover — an acks=all producer runs against an RF=3 topic; the partition leader is SIGKILLed;
  the time from the kill to the first successful acks=all produce (the client retries on 503 and
  connection errors, moving to the next node: any node forwards). Repeated, the killed node
  restarted and the full ISR awaited between runs; with the default broker settings (a real
  deployment: `broker.session.timeout.ms` 9000 dominates) and with `FAST_CLUSTER` of
  tests/support/nodes.py (the test suite's settings).

With `--base-rev REV` (an A/B against an earlier tree, in the same run), a third cluster, "RF=3 at REV",
runs the nodes of that git revision (`git archive REV`, imported ahead of this tree through
PYTHONPATH) and takes its turn in the throughput rounds (RF=3 acks=all to the leader) and the latency
slices (RF=3 acks=all at both rates); its rows are marked "information".

The idle clusters' CPU is measured first (the 3-node cluster's Raft heartbeats run all the time), and
the nodes' WARNING / ERROR log lines and replication events are summarised at the end. The figures go
to the "Cluster (replication)" section of docs/benchmarks.md (`--no-write` to skip), rewritten
through `bench.harness.rewrite_section`. Temporary data lives under `--dir` (default /tmp) and is
removed at the end (after a failure other than Ctrl-C, the node logs are kept next to it).
"""

from __future__ import annotations

import argparse
import atexit
import datetime as _dt
import itertools
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/cluster.py` puts bench/ on the path, not the root
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.harness import (  # noqa: E402
    MB,
    MiB,
    OtherCpu,
    alternate,
    command_line,
    conditions,
    git_revision,
    load_average,
    machine_info,
    markdown_table,
    missed_targets,
    paired_ratio,
    rewrite_section,
    text_table,
)
from lakelog.ingest_api.config.node import NodeConfig  # noqa: E402
from lakelog.ingest_api.records.formats import RECORDBATCH  # noqa: E402
from lakelog.logstore.record_batch import Record, build_batch  # noqa: E402
from tests.support.nodes import FAST_CLUSTER  # noqa: E402

DOC_PATH = ROOT / "docs" / "benchmarks.md"
SECTION = "cluster"

LAKELOG = str(Path(sys.executable).with_name("lakelog"))
#: `python -c` program running the CLI of the `lakelog` package first on PYTHONPATH (`--base-rev`).
RUN_CLI = "import sys; from lakelog.cli.main import main; sys.argv[0] = 'lakelog'; sys.exit(main())"
#: The same fixed glibc malloc thresholds as bench/node.py gives its servers (see MALLOC_TUNABLES there).
MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=134217728"
#: Every node of every cluster: no background cleaner competing for the CPUs (as bench/node.py).
BASE_SETTINGS = {"log.cleaner.enable": "false"}
CLUSTER_SECRET = "bench-cluster-secret-0123456789abcdef"
#: Broker keys that decide how fast a failover is, reported with their values for each settings row.
FAILOVER_KEYS = ("broker.session.timeout.ms", "broker.heartbeat.interval.ms", "controller.tick.ms",
                 "controller.quorum.election.timeout.ms", "replica.fetch.backoff.ms", "replica.fetch.wait.max.ms",
                 "replica.lag.time.max.ms", "request.timeout.ms")
DEFAULTS = NodeConfig({})

HTTP_TIMEOUT_S = 120.0
TIMESTAMP_MS = 1_700_000_000_000
RECORD_VALUE_BYTES = 1024
RECORDS_PER_BATCH = 1000
DISTINCT_BODIES = 16
MIN_ISR = 2
TARGET = 0.5
LATENCY_RATE = 200
#: A second, lower rate for RF=3 acks=all and RF=1: latency without the queueing a busy machine adds.
LATENCY_LOW_RATE = 50
LATENCY_WORKERS = 4
LATENCY_SLICES = 5
SMALL_VALUE_BYTES = 1024
#: Failover producer: at most one request per this interval while it succeeds; after an error it
#: moves to the next node of the ring and waits the retry backoff.
FAILOVER_INTERVAL_S = 0.010
FAILOVER_RETRY_BACKOFF_S = 0.020
FAILOVER_STEADY_S = 1.0
FAILOVER_GIVE_UP_S = 120.0
METADATA_POLL_S = 0.05

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

HEADERS = ("Benchmark", "RF=3 cluster", "Reference: RF=1, acks=1 (same run)", "Ratio", "Target", "Result")


# ---------------------------------------------------------------------------------------------
# Node processes; every one started is registered so nothing outlives the bench


_STARTED: list["NodeProc"] = []
_STARTED_LOCK = threading.Lock()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_all_started() -> None:
    """SIGKILL every node process group this bench started that is still running (atexit, last resort)."""
    with _STARTED_LOCK:
        procs = list(_STARTED)
    for n in procs:
        n.kill()


@dataclass
class NodeProc:
    """One `lakelog node` process: own session, output to a log file; `kill()` is SIGKILL of its group."""

    node_id: int
    port: int
    data_dir: Path
    log_path: Path
    settings: dict[str, str]
    proc: subprocess.Popen | None = None
    starts: int = 0
    #: When set, the node runs through `python bench/cluster.py _serve` with cProfile signals (SIGUSR1
    #: starts a profile of the main thread, SIGUSR2 writes it here).
    profile_out: Path | None = None
    #: When set, the node runs the `lakelog` package found in this directory (`--base-rev`).
    tree: Path | None = None
    #: When set, the node also listens for Kafka clients (PLAINTEXT) on this port.
    kafka_port: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def listeners(self) -> str:
        return self.url + (f",PLAINTEXT://127.0.0.1:{self.kafka_port}" if self.kafka_port is not None else "")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        settings = {"node.id": str(self.node_id), "log.dirs": str(self.data_dir), "listeners": self.listeners,
                    **self.settings}
        env = dict(os.environ, GLIBC_TUNABLES=MALLOC_TUNABLES)
        if self.tree is not None:
            args = [sys.executable, "-c", RUN_CLI, "node"]
            for k, v in settings.items():
                args += ["--set", f"{k}={v}"]
            env["PYTHONPATH"] = str(self.tree)
        elif self.profile_out is None:
            args = [LAKELOG, "node"]
            for k, v in settings.items():
                args += ["--set", f"{k}={v}"]
        else:
            args = [sys.executable, str(Path(__file__).resolve()), "_serve", "--profile-out", str(self.profile_out),
                    *(f"{k}={v}" for k, v in settings.items())]
        with open(self.log_path, "ab") as log:
            log.write(f"\n=== bench start {self.starts + 1} at {time.time():.3f}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                         cwd=ROOT, env=env)
        self.starts += 1
        with _STARTED_LOCK:
            if self not in _STARTED:
                _STARTED.append(self)

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"node {self.node_id} exited with {self.proc and self.proc.returncode}:\n"
                                   f"{self.read_log()}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"node {self.node_id} on port {self.port} not ready after {timeout_s}s:\n{self.read_log()}")

    def read_log(self, tail: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-tail:] if self.log_path.exists() else ""

    def cpu_s(self) -> float:
        """User + system CPU seconds of the process (all threads) so far; 0 when it is not running."""
        if not self.running:
            return 0.0
        try:
            with open(f"/proc/{self.proc.pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS

    def kill(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass

    def send(self, sig: int) -> None:
        if self.running:
            self.proc.send_signal(sig)

    def terminate(self) -> None:
        if self.running:
            try:
                self.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass


class Cluster:
    """`size` node processes on loopback forming one cluster (every node a controller voter)."""

    def __init__(self, root: Path, name: str, size: int, settings: dict[str, str], *, profile: bool = False,
                 tree: Path | None = None, kafka: bool = False) -> None:
        self.name = name
        self.size = size
        self.settings = {**BASE_SETTINGS, **settings}
        ports = [free_port() for _ in range(size)]
        common = dict(self.settings)
        if size > 1:
            common.update({"controller.quorum.voters": ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports)),
                           "cluster.secret": CLUSTER_SECRET, "cluster.id": f"bench{name}".ljust(21, "0")[:21]})
        self.nodes = [NodeProc(i + 1, p, root / f"{name}-node-{i + 1}", root / f"{name}-node-{i + 1}.log", common,
                               profile_out=(root / f"{name}-node-{i + 1}.prof") if profile else None,
                               tree=tree, kafka_port=free_port() if kafka else None)
                      for i, p in enumerate(ports)]
        self._cluster_id: str | None = None
        self._local = threading.local()

    @property
    def bootstrap(self) -> str:
        """The Kafka clients' `bootstrap.servers` (a cluster made with `kafka=True`)."""
        return ",".join(f"127.0.0.1:{n.kafka_port}" for n in self.nodes if n.kafka_port is not None)

    def start(self, timeout_s: float = 90.0) -> "Cluster":
        for n in self.nodes:
            n.start()
        for n in self.nodes:
            n.wait_ready(timeout_s)
        return self

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM every node, then SIGKILL of any process group still there after `grace_s`."""
        for n in self.nodes:
            n.terminate()
        deadline = time.monotonic() + grace_s
        for n in self.nodes:
            if n.proc is not None:
                try:
                    n.proc.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
            n.kill()

    def node(self, node_id: int) -> NodeProc:
        return self.nodes[node_id - 1]

    def live(self) -> list[NodeProc]:
        return [n for n in self.nodes if n.running]

    def cpu_s(self) -> dict[int, float]:
        return {n.node_id: n.cpu_s() for n in self.nodes}

    # ------------------------------------------------------------------ admin

    def _client(self) -> httpx.Client:
        """One admin client per thread (an `httpx.get` builds a new client, and an SSL context, per call)."""
        c = getattr(self._local, "client", None)
        if c is None:
            c = self._local.client = httpx.Client(timeout=HTTP_TIMEOUT_S)
        return c

    def _get(self, node: NodeProc, path: str, timeout_s: float = 5.0) -> httpx.Response:
        return self._client().get(node.url + path, timeout=timeout_s)

    def cluster_id(self) -> str:
        if self._cluster_id is None:
            r = _ok(self._get(self.live()[0], "/v3/clusters"), "list clusters")
            self._cluster_id = r.json()["data"][0]["cluster_id"]
        return self._cluster_id

    def controller_id(self) -> int | None:
        """The active controller (Raft leader) as some live node sees it."""
        for n in self.live():
            try:
                r = self._get(n, f"/v3/clusters/{self.cluster_id()}")
                if r.status_code == 200:
                    return int(r.json()["controller"]["related"].rstrip("/").rsplit("/", 1)[1])
            except (httpx.HTTPError, ValueError, KeyError):
                continue
        return None

    def create_topic(self, name: str, partitions: int, rf: int, min_isr: int | None) -> None:
        body: dict = {"topic_name": name, "partitions_count": partitions, "replication_factor": rf}
        if min_isr is not None:
            body["configs"] = [{"name": "min.insync.replicas", "value": str(min_isr)}]
        r = self._client().post(self.live()[0].url + f"/v3/clusters/{self.cluster_id()}/topics", json=body)
        if r.status_code != 201:
            raise RuntimeError(f"creating topic {name}: {r.status_code} {r.text[:300]}")
        for p in range(partitions):
            self.wait_partition(name, p, isr_size=rf)

    def delete_topic(self, name: str, timeout_s: float = 30.0) -> None:
        r = self._client().delete(self.live()[0].url + f"/v3/clusters/{self.cluster_id()}/topics/{name}")
        if r.status_code not in (200, 204, 404):
            raise RuntimeError(f"deleting topic {name}: {r.status_code} {r.text[:300]}")
        deadline = time.monotonic() + timeout_s
        for n in self.live():
            while self._get(n, f"/topics/{name}").status_code != 404:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"topic {name} still present on node {n.node_id} after {timeout_s}s")
                time.sleep(0.05)

    def partition_view(self, node: NodeProc, topic: str, partition: int) -> dict | None:
        try:
            r = self._get(node, f"/topics/{topic}/partitions/{partition}", timeout_s=2.0)
        except httpx.HTTPError:
            return None
        return r.json() if r.status_code == 200 else None

    def wait_partition(self, topic: str, partition: int, *, isr_size: int, timeout_s: float = 60.0) -> int:
        """Wait until every live node knows the same leader of the partition and `isr_size` in-sync
        replicas; returns the leader."""
        deadline = time.monotonic() + timeout_s
        last: dict = {}
        while time.monotonic() < deadline:
            views = {n.node_id: self.partition_view(n, topic, partition) for n in self.live()}
            last = views
            leaders = {v["leader"] if v else None for v in views.values()}
            if len(leaders) == 1:
                leader = leaders.pop()
                if leader is not None and leader >= 0 and all(
                        sum(r["in_sync"] for r in v["replicas"]) == isr_size for v in views.values()):
                    return leader
            time.sleep(0.05)
        raise TimeoutError(f"{topic}-{partition}: no agreed leader with {isr_size} in-sync replicas after "
                           f"{timeout_s}s; views {last}")

    def leader_url(self, topic: str, partition: int) -> tuple[int, str]:
        """The partition's leader as `GET /topics/{t}/partitions/{p}` says, and its URL from the broker list."""
        view = self.partition_view(self.live()[0], topic, partition)
        if view is None or view["leader"] < 0:
            raise RuntimeError(f"{topic}-{partition} has no leader: {view}")
        leader = int(view["leader"])
        b = _ok(self._get(self.live()[0], f"/v3/clusters/{self.cluster_id()}/brokers/{leader}"), "broker").json()
        return leader, f"http://{b['host']}:{b['port']}"

    def request_counts(self) -> dict[str, float]:
        """HTTP requests served so far by route, summed over the live nodes (their `/metrics`)."""
        out: dict[str, float] = {}
        for n in self.live():
            try:
                text = self._get(n, "/metrics").text
            except httpx.HTTPError:
                continue
            for line in text.splitlines():
                if line.startswith("lakelog_http_requests_total{"):
                    labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
                    route = labels.get("route", "?")
                    out[route] = out.get(route, 0.0) + float(line.rsplit(" ", 1)[1])
        return out


def wait_committed(client: httpx.Client, topic: str, partition: int, end: int, timeout_s: float = 120.0) -> None:
    """Wait until the partition's end offset on its leader (`client`) reaches `end`: with the ISR full,
    the leader's high watermark is the smallest log end offset of the replicas, so every replica has
    the records below it."""
    deadline = time.monotonic() + timeout_s
    while True:
        r = client.get(f"/topics/{topic}/partitions/{partition}/offsets")
        if r.status_code == 200 and int(r.json()["end_offset"]) >= end:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}-{partition}: end offset {r.status_code} {r.text[:200]} still below {end} "
                               f"after {timeout_s}s")
        time.sleep(0.01)


def count_diff(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {k: v - a.get(k, 0.0) for k, v in b.items() if v - a.get(k, 0.0) > 0}


FETCH_ROUTE = "/internal/replication/fetch"
RAFT_ROUTE = "/internal/raft/messages"


def _ok(r: httpx.Response, what: str) -> httpx.Response:
    if r.status_code != 200:
        raise RuntimeError(f"{what}: HTTP {r.status_code}: {r.text[:300]}")
    return r


# ---------------------------------------------------------------------------------------------
# CPU accounting


def machine_busy_s() -> float:
    """Busy CPU seconds of the whole machine so far (/proc/stat: user, nice, system, irq, softirq)."""
    with open("/proc/stat") as f:
        ticks = [int(x) for x in f.readline().split()[1:8]]
    return (ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6]) / _CLOCK_TICKS


@dataclass
class Snapshot:
    wall: float
    nodes: dict[str, dict[int, float]]  # cluster name -> node id -> CPU seconds
    client: float
    machine: float


@dataclass
class Usage:
    """CPU seconds over one stretch: per node of each cluster, the client process, the machine."""

    wall: float
    nodes: dict[str, dict[int, float]]
    client: float
    machine: float

    def ours(self) -> float:
        return self.client + sum(sum(v.values()) for v in self.nodes.values())

    def others(self) -> float:
        return max(0.0, self.machine - self.ours())


class Meter:
    def __init__(self, clusters: Iterable[Cluster]) -> None:
        self.clusters = list(clusters)

    def snap(self) -> Snapshot:
        return Snapshot(time.perf_counter(), {c.name: c.cpu_s() for c in self.clusters}, time.process_time(),
                        machine_busy_s())

    @staticmethod
    def diff(a: Snapshot, b: Snapshot) -> Usage:
        return Usage(b.wall - a.wall,
                     {name: {i: max(0.0, b.nodes[name][i] - a.nodes[name].get(i, 0.0)) for i in b.nodes[name]}
                      for name in b.nodes},
                     b.client - a.client, b.machine - a.machine)


# ---------------------------------------------------------------------------------------------
# Context, formatting


@dataclass
class Row:
    name: str
    value: str
    reference: str
    ratio: str
    target: str
    result: str


@dataclass
class Scale:
    quick: bool
    factor: float

    @property
    def produce_mib(self) -> int:
        return max(4, int((16 if self.quick else 128) * self.factor))

    @property
    def rounds(self) -> int:
        return 2 if self.quick else 5

    @property
    def latency_s(self) -> float:
        return 1.0 if self.quick else 10.0

    @property
    def failover_runs(self) -> int:
        return 1 if self.quick else 3


@dataclass
class Context:
    scale: Scale
    root: Path
    rows: list[Row] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)
    cpu_rows: list[tuple[str, ...]] = field(default_factory=list)
    failover_rows: list[tuple[str, ...]] = field(default_factory=list)
    causes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # anything odd the runs saw (errors, stalls)
    extra: list[str] = field(default_factory=list)  # paragraphs under "Where the time goes"
    c3: Cluster | None = None
    c1: Cluster | None = None
    #: `--base-rev`: an RF=3 cluster running an earlier tree, and that revision.
    base: Cluster | None = None
    base_rev: str = ""
    idle: dict[str, float] = field(default_factory=dict)  # cluster name -> CPUs used while idle
    clusters: list[Cluster] = field(default_factory=list)

    def log(self, message: str) -> None:
        print(f"  .. {message}", flush=True)

    def start_cluster(self, name: str, size: int, settings: dict[str, str], *, profile: bool = False,
                      tree: Path | None = None) -> Cluster:
        c = Cluster(self.root, name, size, settings, profile=profile, tree=tree)
        self.clusters.append(c)  # registered before starting: stopped whatever happens
        t0 = time.perf_counter()
        c.start()
        self.log(f"cluster {name}: {size} node(s) ready in {time.perf_counter() - t0:.1f} s "
                 f"(pids {', '.join(str(n.proc.pid) for n in c.nodes)})")
        return c

    def stop_clusters(self) -> None:
        for c in self.clusters:
            c.stop()


def fmt_rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s / MB:,.0f} MB/s"


def fmt_ms(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:.2f}" if ms < 10 else f"{ms:.1f}" if ms < 1000 else f"{ms:,.0f}"


def fmt_s(seconds: float) -> str:
    return f"{seconds:.2f} s"


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


# ---------------------------------------------------------------------------------------------
# Request bodies


def big_bodies(count: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    return [build_batch([Record(i, TIMESTAMP_MS, None, rng.randbytes(RECORD_VALUE_BYTES))
                         for i in range(RECORDS_PER_BATCH)]) for _ in range(count)]


def small_bodies(count: int, seed: int = 5) -> list[bytes]:
    rng = random.Random(seed)
    return [build_batch([Record(0, TIMESTAMP_MS, None, rng.randbytes(SMALL_VALUE_BYTES))]) for _ in range(count)]


def produce_path(topic: str, partition: int, acks: str) -> str:
    return f"/topics/{topic}/partitions/{partition}?acks={acks}"


# ---------------------------------------------------------------------------------------------
# Throughput


@dataclass
class CaseLog:
    """What each run of a throughput case measured (warm-up run first)."""

    usage: list[Usage] = field(default_factory=list)  # over the timed stretch
    usage_replicated: list[Usage] = field(default_factory=list)  # until every replica had the data
    request_s: list[list[float]] = field(default_factory=list)  # per request, client side
    catchup_s: list[float] = field(default_factory=list)  # after the last ack until replicas caught up
    leaders: list[set[int]] = field(default_factory=list)
    target_nodes: list[set[int]] = field(default_factory=list)
    counts: list[dict[str, float]] = field(default_factory=list)  # requests served by route, all nodes


@dataclass(frozen=True)
class Case:
    key: str
    label: str
    rf: int
    acks: str
    via_follower: bool = False
    #: Runs on the `--base-rev` cluster.
    base: bool = False


CASES = {
    "rf3-all": Case("rf3-all", "RF=3 acks=all, to the leader", 3, "all"),
    "rf1": Case("rf1", "RF=1 acks=1", 1, "1"),
    "rf3-1": Case("rf3-1", "RF=3 acks=1, to the leader", 3, "1"),
    "rf3-fwd": Case("rf3-fwd", "RF=3 acks=all, through a non-leader", 3, "all", via_follower=True),
    "rf3-all-base": Case("rf3-all-base", "RF=3 acks=all, to the leader, at --base-rev", 3, "all", base=True),
}


def make_run(ctx: Context, meter: Meter, case: Case, conns: int, bodies: list[bytes], requests: int,
             log: CaseLog, executor: ThreadPoolExecutor | None) -> Callable[[], float]:
    counter = itertools.count()
    cluster = ctx.base if case.base else ctx.c3 if case.rf == 3 else ctx.c1
    assert cluster is not None
    prime = small_bodies(1, seed=9)[0]

    def run() -> float:
        topic = f"tp-{case.key}-{conns}c-{next(counter)}"
        cluster.create_topic(topic, conns, case.rf, MIN_ISR if case.rf == 3 else None)
        targets: list[str] = []
        leader_urls: list[str] = []
        leaders: set[int] = set()
        chosen: set[int] = set()
        for p in range(conns):
            leader, url = cluster.leader_url(topic, p)
            leaders.add(leader)
            leader_urls.append(url)
            if case.via_follower:
                other = next(n for n in cluster.live() if n.node_id != leader)
                url = other.url
                chosen.add(other.node_id)
            else:
                chosen.add(leader)
            targets.append(url)
        clients = [httpx.Client(base_url=targets[p], timeout=HTTP_TIMEOUT_S) for p in range(conns)]
        probes = [httpx.Client(base_url=leader_urls[p], timeout=HTTP_TIMEOUT_S) for p in range(conns)]
        headers = {"Content-Type": RECORDBATCH}
        ends = [0] * conns
        try:
            # untimed: open the connections and check the path end to end (one small batch each, same
            # acks), then wait until every replica has it
            for p, c in enumerate(clients):
                r = _ok(c.post(produce_path(topic, p, case.acks), content=prime, headers=headers), "prime")
                ends[p] = int(r.json()["offsets"][0]["offset"]) + 1
                wait_committed(probes[p], topic, p, ends[p])
            durations: list[list[float]] = [[] for _ in range(conns)]

            def job(p: int) -> None:
                c, path, out = clients[p], produce_path(topic, p, case.acks), durations[p]
                for k in range(p, requests, conns):
                    t0 = time.perf_counter()
                    r = _ok(c.post(path, content=bodies[k % len(bodies)], headers=headers), f"produce {case.label}")
                    out.append(time.perf_counter() - t0)
                    ends[p] = max(ends[p], int(r.json()["offsets"][0]["offset"]) + RECORDS_PER_BATCH)

            counts0 = cluster.request_counts()
            s0 = meter.snap()
            if executor is None:
                job(0)
            else:
                for f in [executor.submit(job, p) for p in range(conns)]:
                    f.result()
            s1 = meter.snap()
            for p in range(conns):
                wait_committed(probes[p], topic, p, ends[p])
            s2 = meter.snap()
            counts = count_diff(counts0, cluster.request_counts())
        finally:
            for c in clients + probes:
                c.close()
        log.usage.append(Meter.diff(s0, s1))
        log.usage_replicated.append(Meter.diff(s0, s2))
        log.catchup_s.append(s2.wall - s1.wall)
        log.request_s.append([x for d in durations for x in d])
        log.leaders.append(leaders)
        log.target_nodes.append(chosen)
        log.counts.append(counts)
        cluster.delete_topic(topic)
        return s1.wall - s0.wall

    return run


def bench_throughput(ctx: Context) -> None:
    bodies = big_bodies(DISTINCT_BODIES)
    size = len(bodies[0])
    requests = max(4, ctx.scale.produce_mib * MiB // size)
    nbytes = requests * size
    rounds = ctx.scale.rounds
    meter = Meter(ctx.clusters)
    per_round: dict[str, list[float]] = {}
    summaries: dict[int, dict[str, dict]] = {}
    for conns in (1, 4):
        keys = ["rf3-all", "rf1", "rf3-1"] + (["rf3-fwd"] if conns == 1 else []) + \
            (["rf3-all-base"] if ctx.base is not None else [])
        logs = {k: CaseLog() for k in keys}
        executor = ThreadPoolExecutor(max_workers=conns) if conns > 1 else None
        try:
            timings = alternate({k: make_run(ctx, meter, CASES[k], conns, bodies, requests, logs[k], executor)
                                 for k in keys}, rounds=rounds, warmup=1)
        finally:
            if executor is not None:
                executor.shutdown()
        ref = timings["rf1"]
        label = f"{conns} connection" + ("s" if conns > 1 else "") + \
            (" (1 partition)" if conns == 1 else f" ({conns} partitions, each connection to its partition's leader)")
        summaries[conns] = {}
        for k in keys:
            t = timings[k]
            ratio = paired_ratio(ref, t)
            per_round[f"{k}-{conns}"] = [r / x for x, r in zip(t.samples, ref.samples)]
            cl = ctx.base if CASES[k].base else ctx.c3 if CASES[k].rf == 3 else ctx.c1
            summaries[conns][k] = summarize(logs[k], nbytes, requests, cl, t.rate(nbytes), ratio,
                                            ctx.idle.get(cl.name, 0.0))
            ctx.log(f"{conns}c {CASES[k].label}: {fmt_rate(t.rate(nbytes))}"
                    + (f", {ratio:.2f}x of RF=1" if k != "rf1" else "")
                    + f" (spread {t.spread():.0%}); per round "
                    + ", ".join(f"{x:.2f}" for x in per_round[f'{k}-{conns}']))
        s = summaries[conns]
        main = s["rf3-all"]
        ctx.rows.append(Row(f"Produce, binary fast path, 1 MiB requests, {label}: RF=3 acks=all "
                            f"(min.insync.replicas={MIN_ISR}) to the leader",
                            fmt_rate(main["rate"]), fmt_rate(s["rf1"]["rate"]), f"{main['ratio']:.2f}x",
                            f">= {TARGET:.2f}x", "met" if main["ratio"] >= TARGET else "MISSED"))
        if conns == 1:
            fwd = s["rf3-fwd"]
            ctx.rows.append(Row(f"Produce, 1 MiB requests, {label}: RF=3 acks=all through a non-leader "
                                "(forwarded to the leader, one hop)", fmt_rate(fwd["rate"]),
                                fmt_rate(s["rf1"]["rate"]), f"{fwd['ratio']:.2f}x", "information", "info"))
        if "rf3-all-base" in s:
            b = s["rf3-all-base"]
            ctx.rows.append(Row(f"Produce, 1 MiB requests, {label}: RF=3 acks=all to the leader, nodes at "
                                f"{ctx.base_rev} (A/B, same rounds)", fmt_rate(b["rate"]), fmt_rate(s["rf1"]["rate"]),
                                f"{b['ratio']:.2f}x", "information", "info"))
        a1 = s["rf3-1"]
        ctx.rows.append(Row(f"Produce, 1 MiB requests, {label}: RF=3 acks=1 to the leader (diagnostic: the "
                            "followers still copy everything, nobody waits for them)",
                            f"{fmt_rate(a1['rate'])} acked; {fmt_rate(a1['rate_replicated'])} until all 3 "
                            f"replicas had it", fmt_rate(s["rf1"]["rate"]), f"{a1['ratio']:.2f}x",
                            "information", "info"))
        for k in keys:
            add_cpu_row(ctx, f"1 MiB, {conns} conn.", CASES[k], summaries[conns][k])
        if main["ratio"] < TARGET:
            ctx.causes.append(cause_sentence(conns, s, ctx.idle.get("rf3")))
    ctx.setup.append(
        f"**Throughput**: {DISTINCT_BODIES} distinct RecordBatch v2 bodies of {size:,} B ({RECORDS_PER_BATCH} "
        f"records, random {RECORD_VALUE_BYTES} B values, no key, uncompressed, `build_batch`), cycled; {requests} "
        f"requests ({nbytes / MiB:,.0f} MiB) per run; `POST /topics/T/partitions/P?acks=...` with "
        f"`Content-Type: {RECORDBATCH}`. Each run on a fresh topic (untimed: created with `POST "
        f"/v3/clusters/C/topics` with `replication_factor` 3 and `min.insync.replicas={MIN_ISR}`, or 1; waited "
        f"for until every node agrees on the leader and the full ISR; the leader's URL taken from `GET "
        f"/topics/T/partitions/P` -> \"leader\" and `/v3/clusters/C/brokers/{{leader}}`; each connection opened "
        f"with one small batch, same acks; deleted after the run, waited for on every node). One keep-alive "
        f"`httpx.Client` per connection, one thread each; with 4 connections, connection i writes partition i "
        f"of a 4-partition topic, whose leaders the controller spread over the 3 nodes. The cases alternate "
        f"round by round ({rounds} rounds after a warm-up round, order reversed every other round); medians; a "
        f"ratio is the median over rounds of RF=1 time / RF=3 time within a round. Per-round ratios: "
        + "; ".join(f"{CASES[k.rsplit('-', 1)[0]].label}, {k.rsplit('-', 1)[1]} conn.: "
                    + ", ".join(f"{x:.2f}" for x in v) for k, v in per_round.items() if not k.startswith("rf1"))
        + ". \"Until all 3 replicas had it\" (acks=1) adds the time after the last acknowledgement until the "
        "leader's end offset (`GET /topics/T/partitions/P/offsets`, its high watermark: the smallest log end offset "
        "of the full ISR) reached the last record; the CPU per MB counts until then, for every case.")


def summarize(log: CaseLog, nbytes: int, requests: int, cluster: Cluster, rate: float, ratio: float,
              idle_cpus: float) -> dict:
    runs = log.usage[1:]
    reps = log.usage_replicated[1:]
    name = cluster.name
    leaders = log.leaders[1:]
    targets = log.target_nodes[1:]

    def med(f: Callable[[int], float]) -> float:
        return statistics.median(f(i) for i in range(len(runs)))

    mb = nbytes / MB
    total = med(lambda i: sum(reps[i].nodes[name].values()) / mb)
    # with one partition: the leader's and each follower's share; with several, leaders are spread
    leader_cpu = med(lambda i: sum(reps[i].nodes[name][n] for n in leaders[i]) / mb) if len(leaders[0]) == 1 else None
    follower_cpu = (med(lambda i: sum(v for n, v in reps[i].nodes[name].items()
                                      if n not in leaders[i] and n not in targets[i]) / mb
                        / max(1, len([n for n in reps[i].nodes[name] if n not in leaders[i]
                                      and n not in targets[i]])))
                    if cluster.size > 1 and len(leaders[0]) == 1 else None)
    forward_cpu = (med(lambda i: sum(reps[i].nodes[name][n] for n in targets[i] if n not in leaders[i]) / mb)
                   if any(t - l for t, l in zip(targets, leaders)) else None)
    latencies = [x for r in log.request_s[1:] for x in r]
    return {
        "rate": rate, "ratio": ratio,
        "rate_replicated": nbytes / statistics.median(u.wall for u in reps),
        "cpu_net": med(lambda i: max(0.0, sum(reps[i].nodes[name].values()) - idle_cpus * reps[i].wall) / mb),
        "cpu_total": total, "cpu_leader": leader_cpu, "cpu_follower": follower_cpu, "cpu_forwarder": forward_cpu,
        "cpu_nodes": med(lambda i: sum(runs[i].nodes[name].values()) / mb),
        "client": med(lambda i: runs[i].client / mb),
        "busy": med(lambda i: runs[i].machine / runs[i].wall),
        "ours": med(lambda i: runs[i].ours() / runs[i].wall),
        "others": med(lambda i: runs[i].others() / runs[i].wall),
        "req_p50": statistics.median(latencies), "catchup": statistics.median(log.catchup_s[1:]),
        "idle_other_cluster": med(lambda i: sum(sum(v.values()) for k, v in runs[i].nodes.items() if k != name)
                                  / runs[i].wall),
        "fetches_per_req": statistics.median(c.get(FETCH_ROUTE, 0.0) / requests for c in log.counts[1:]),
        "raft_per_s": med(lambda i: log.counts[1:][i].get(RAFT_ROUTE, 0.0) / reps[i].wall),
    }


CPU_HEADERS = ("workload", "case", "MB/s", "node CPU per MB (all nodes, until replicated)",
               "the same net of the idle background", "leader / each follower",
               "client CPU per MB", "CPUs busy: ours / others / whole machine (of 2)", "request p50 (client)",
               "replica fetches per request; Raft messages/s")


def add_cpu_row(ctx: Context, what: str, case: Case, s: dict) -> None:
    if s["cpu_leader"] is not None and s["cpu_follower"] is not None:
        split = f"{s['cpu_leader'] * 1000:,.1f} / {s['cpu_follower'] * 1000:,.1f} ms"
        if s["cpu_forwarder"] is not None:
            split += f" (forwarding node {s['cpu_forwarder'] * 1000:,.1f} ms)"
    elif s["cpu_leader"] is not None:
        split = f"{s['cpu_leader'] * 1000:,.1f} ms (one node)"
    else:
        split = "leaders spread over the nodes"
    ctx.cpu_rows.append((what, case.label, fmt_rate(s["rate"]).removesuffix(" MB/s"),
                         f"{s['cpu_total'] * 1000:,.1f} ms", f"{s['cpu_net'] * 1000:,.1f} ms", split, f"{s['client'] * 1000:,.1f} ms",
                         f"{s['ours']:.2f} / {s['others']:.2f} / {s['busy']:.2f}", f"{fmt_ms(s['req_p50'])} ms",
                         f"{s['fetches_per_req']:.1f}; {s['raft_per_s']:.0f}"))


def cause_sentence(conns: int, s: dict, idle_cpus: float | None) -> str:
    a, r, one = s["rf3-all"], s["rf1"], s["rf3-1"]
    plural = "s" if conns > 1 else ""
    text = (f"**RF=3 acks=all, {conns} connection{plural}** ({a['ratio']:.2f}x): per MB, the three nodes used "
            f"{a['cpu_total'] * 1000:,.1f} ms of CPU until every replica had the data, against "
            f"{r['cpu_total'] * 1000:,.1f} ms for the RF=1 node ({a['cpu_total'] / r['cpu_total']:.1f}x)")
    if a["cpu_leader"] is not None:
        text += f" — leader {a['cpu_leader'] * 1000:,.1f} ms, each follower {a['cpu_follower'] * 1000:,.1f} ms"
    if idle_cpus:
        text += (f"; the idle background of the 3-node cluster ({idle_cpus:.2f} CPUs measured idle: Raft heartbeats) "
                 f"is about {idle_cpus / a['rate_replicated'] * MB * 1000:,.1f} ms of it at this rate")
    text += (f". Each 1 MiB produce costs the leader its own append plus serving {a['fetches_per_req']:.1f} replica "
             f"fetches of the same bytes, and each follower a fetch through the node's peer HTTP client (httpx) "
             f"plus its append (profile below)")
    if a["busy"] >= 1.75:
        text += (f". The machine was CPU-bound during the RF=3 runs: {a['busy']:.2f} of 2 CPUs busy "
                 f"({a['ours']:.2f} the bench's processes, {a['others']:.2f} other processes; "
                 f"{r['busy']:.2f} during the RF=1 runs)")
    else:
        text += (f". The CPUs were not saturated during the RF=3 runs ({a['busy']:.2f} of 2 busy: {a['ours']:.2f} "
                 f"the bench's processes, {a['others']:.2f} other processes; {r['busy']:.2f} during the RF=1 runs): "
                 f"with {conns} connection{plural} the steps of a request run one after another, each in a "
                 f"single-threaded process (leader append, follower fetch and append, the follower's next fetch "
                 f"that moves the HW, the answer), so those per-hop costs add up in the request time")
    text += (f". Request time, median: {fmt_ms(a['req_p50'])} ms with acks=all, {fmt_ms(one['req_p50'])} ms with "
             f"acks=1 on the same cluster, {fmt_ms(r['req_p50'])} ms on RF=1. RF=3 with acks=1 — the same copies, "
             f"nobody waiting for them — was acknowledged at {one['ratio']:.2f}x and fully replicated at "
             f"{one['rate_replicated'] / r['rate']:.2f}x ({fmt_rate(one['rate_replicated'])})")
    if one["rate_replicated"] / r["rate"] < TARGET:
        text += (": replication itself runs below the target on this machine, so the cost of copying through "
                 "the replica fetch path bounds the rate, and waiting for the HW adds "
                 f"{fmt_ms(max(0.0, a['req_p50'] - one['req_p50']))} ms per request on top")
    else:
        text += (": copying alone would meet the target, so what acks=all loses is the wait for the HW "
                 f"({fmt_ms(max(0.0, a['req_p50'] - one['req_p50']))} ms per request)")
    return text + "."


# ---------------------------------------------------------------------------------------------
# Latency: small batches at a fixed rate, open loop


@dataclass
class LatencyResult:
    latencies: list[float] = field(default_factory=list)
    late: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def add(self, other: "LatencyResult") -> None:
        self.latencies += other.latencies
        self.late += other.late
        for k, v in other.errors.items():
            self.errors[k] = self.errors.get(k, 0) + v

    def summary(self) -> str:
        if not self.latencies:
            return "no successful request"
        return (f"{fmt_ms(pct(self.latencies, 0.5))} / {fmt_ms(pct(self.latencies, 0.99))} / "
                f"{fmt_ms(max(self.latencies))} ms")


def open_loop(url: str, path: str, bodies: list[bytes], rate: float, duration_s: float) -> LatencyResult:
    """rate x duration requests on a fixed schedule (request i due at start + i / rate) from
    LATENCY_WORKERS keep-alive connections; latency runs from the due time to the end of the response,
    so a send delayed by busy workers counts (no coordinated omission). Errors are counted, not retried."""
    total = int(rate * duration_s)
    clients = [httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_S) for _ in range(LATENCY_WORKERS)]
    headers = {"Content-Type": RECORDBATCH}
    for c in clients:
        _ok(c.post(path, content=bodies[0], headers=headers), "latency warm-up")
    lock = threading.Lock()
    state = {"next": 0}
    res = LatencyResult()
    start = time.perf_counter() + 0.05

    def worker(c: httpx.Client) -> None:
        while True:
            with lock:
                i = state["next"]
                if i >= total:
                    return
                state["next"] = i + 1
            due = start + i / rate
            now = time.perf_counter()
            if due > now:
                time.sleep(due - now)
            sent = time.perf_counter()
            try:
                r = c.post(path, content=bodies[i % len(bodies)], headers=headers)
                err = None if r.status_code == 200 else f"HTTP {r.status_code} {_error_code(r)}"
            except httpx.HTTPError as e:
                err = type(e).__name__
            done = time.perf_counter()
            with lock:
                if err is None:
                    res.latencies.append(done - due)
                else:
                    res.errors[err] = res.errors.get(err, 0) + 1
                if sent - due > 0.001:
                    res.late += 1

    threads = [threading.Thread(target=worker, args=(c,), daemon=True) for c in clients]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for c in clients:
            c.close()
    return res


def _error_code(r: httpx.Response) -> str:
    try:
        return str(r.json().get("error_code", ""))
    except ValueError:
        return ""


def bench_latency(ctx: Context) -> None:
    assert ctx.c3 is not None and ctx.c1 is not None
    bodies = small_bodies(256)
    meter = Meter(ctx.clusters)
    t3, t1 = "lat-rf3", "lat-rf1"
    ctx.c3.create_topic(t3, 1, 3, MIN_ISR)
    ctx.c1.create_topic(t1, 1, 1, None)
    leader3, url3 = ctx.c3.leader_url(t3, 0)
    _, url1 = ctx.c1.leader_url(t1, 0)
    low = LATENCY_LOW_RATE
    cases = [("RF=3 acks=all", url3, produce_path(t3, 0, "all"), ctx.c3, LATENCY_RATE),
             ("RF=1 acks=1", url1, produce_path(t1, 0, "1"), ctx.c1, LATENCY_RATE),
             ("RF=3 acks=1", url3, produce_path(t3, 0, "1"), ctx.c3, LATENCY_RATE),
             (f"RF=3 acks=all at {low}/s", url3, produce_path(t3, 0, "all"), ctx.c3, low),
             (f"RF=1 acks=1 at {low}/s", url1, produce_path(t1, 0, "1"), ctx.c1, low)]
    tb = "lat-rf3-base"
    leader_b = 0
    if ctx.base is not None:
        ctx.base.create_topic(tb, 1, 3, MIN_ISR)
        leader_b, url_b = ctx.base.leader_url(tb, 0)
        cases += [(f"RF=3 acks=all at {ctx.base_rev}", url_b, produce_path(tb, 0, "all"), ctx.base, LATENCY_RATE),
                  (f"RF=3 acks=all at {low}/s at {ctx.base_rev}", url_b, produce_path(tb, 0, "all"), ctx.base, low)]
    results = {name: LatencyResult() for name, *_ in cases}
    used: dict[str, float] = {name: 0.0 for name, *_ in cases}
    leader_used: dict[str, float] = {name: 0.0 for name, *_ in cases}
    fetches: dict[str, float] = {name: 0.0 for name, *_ in cases}
    sent: dict[str, int] = {name: 0 for name, *_ in cases}
    duration = ctx.scale.latency_s
    for k in range(LATENCY_SLICES):
        for name, url, path, cluster, rate in cases[k % len(cases):] + cases[:k % len(cases)]:
            c0 = cluster.request_counts()
            s0 = meter.snap()
            results[name].add(open_loop(url, path, bodies, rate, duration / LATENCY_SLICES))
            u = Meter.diff(s0, meter.snap())
            sent[name] += int(rate * duration / LATENCY_SLICES) + LATENCY_WORKERS  # + the untimed warm-ups
            fetches[name] += count_diff(c0, cluster.request_counts()).get(FETCH_ROUTE, 0.0)
            used[name] += sum(u.nodes[cluster.name].values())
            leader_used[name] += u.nodes[cluster.name][leader3 if cluster is ctx.c3 else
                                                       leader_b if cluster is ctx.base else 1]
    ctx.c3.delete_topic(t3)
    ctx.c1.delete_topic(t1)
    if ctx.base is not None:
        ctx.base.delete_topic(tb)
    body = f"1 record, {SMALL_VALUE_BYTES} B value, {len(bodies[0]):,} B"
    compare = [("RF=3 acks=all", "RF=1 acks=1", LATENCY_RATE),
               ("RF=3 acks=1", "RF=1 acks=1", LATENCY_RATE),
               (f"RF=3 acks=all at {low}/s", f"RF=1 acks=1 at {low}/s", low)]
    if ctx.base is not None:
        compare += [(f"RF=3 acks=all at {ctx.base_rev}", "RF=1 acks=1", LATENCY_RATE),
                    (f"RF=3 acks=all at {low}/s at {ctx.base_rev}", f"RF=1 acks=1 at {low}/s", low)]
    for name, ref_name, rate in compare:
        r, ref = results[name], results[ref_name]
        ratio = (f"p50 {pct(r.latencies, 0.5) / pct(ref.latencies, 0.5):.1f}x" if r.latencies and ref.latencies
                 else "")
        ctx.rows.append(Row(f"Latency of a small batch ({body}) at {rate} req/s, open loop, to the leader: "
                            f"{name.split(' at ')[0]}: p50 / p99 / max", r.summary(), ref.summary(), ratio,
                            "information", "info"))
    for name, r in results.items():
        n = len(r.latencies) + sum(r.errors.values())
        ctx.log(f"latency {name}: {r.summary()}, {r.late} late sends, errors {r.errors or 'none'}, node CPU "
                f"{used[name] / duration:.0%} of one CPU (leader {leader_used[name] / duration:.0%}), "
                f"{used[name] / sent[name] * 1000:.2f} ms per request; {fetches[name] / sent[name]:.1f} replica "
                f"fetches per request")
        if r.errors:
            ctx.notes.append(f"Latency, {name}: {sum(r.errors.values())} of {n:,} requests failed: "
                             + ", ".join(f"{k} x{v}" for k, v in r.errors.items()) + ".")
    idle3 = ctx.idle.get(ctx.c3.name)
    ctx.setup.append(
        f"**Latency**: per case {duration:g} s at a fixed rate ({LATENCY_RATE} requests/s, and {low}/s for the "
        f"second RF=3 acks=all and RF=1 rows), open loop: request i is due at start + i/rate and its latency runs "
        f"from that due time to the end of the response, from {LATENCY_WORKERS} keep-alive connections (a free "
        f"worker takes the next due request). Body: a RecordBatch v2 of one record with a {SMALL_VALUE_BYTES} B "
        f"random value ({len(bodies[0]):,} B; 256 distinct), `POST /topics/T/partitions/0?acks=...` of a "
        f"1-partition topic, to its leader. The cases take turns in {LATENCY_SLICES} slices, the order rotating, so "
        f"load from other processes falls on all alike. Sends more than 1 ms late (all workers busy): "
        + ", ".join(f"{k} {r.late}" for k, r in results.items()) + ". Node CPU over each case, all nodes of its "
        "cluster (the leader alone), in CPUs: "
        + ", ".join(f"{k} {used[k] / duration:.2f} ({leader_used[k] / duration:.2f})" for k in results)
        + "; node CPU per produce request, all nodes: "
        + ", ".join(f"{k} {used[k] / sent[k] * 1000:.2f} ms" for k in results)
        + (f" (the idle background of the 3-node cluster, {idle3:.2f} CPUs, is "
           f"{idle3 / LATENCY_RATE * 1000:.2f} ms per request at {LATENCY_RATE}/s)" if idle3 else "")
        + "; replica fetch requests served per produce request: "
        + ", ".join(f"{k} {fetches[k] / sent[k]:.1f}" for k in results if k.startswith("RF=3")) + ".")


# ---------------------------------------------------------------------------------------------
# Failover


@dataclass
class Attempt:
    sent: float
    done: float
    node: int
    ok: bool
    detail: str  # the error, or "" when ok
    offset: int | None = None


class FailoverProducer(threading.Thread):
    """acks=all produce of small batches to one partition, one request at a time (at most one per
    FAILOVER_INTERVAL_S); on a 503, a 504 or a connection error, the next node of the ring after
    FAILOVER_RETRY_BACKOFF_S: any node forwards to the leader."""

    def __init__(self, urls: dict[int, str], first: int, topic: str, bodies: list[bytes], timeout_s: float) -> None:
        super().__init__(daemon=True, name="failover-producer")
        self.urls = urls
        self.ring = sorted(urls)
        self.idx = self.ring.index(first)
        self.topic = topic
        self.bodies = bodies
        self.timeout_s = timeout_s
        self.attempts: list[Attempt] = []
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.unexpected: list[str] = []

    def run(self) -> None:
        clients = {i: httpx.Client(base_url=u, timeout=httpx.Timeout(self.timeout_s, connect=2.0))
                   for i, u in self.urls.items()}
        headers = {"Content-Type": RECORDBATCH}
        path = produce_path(self.topic, 0, "all")
        k = 0
        try:
            while not self.stop_event.is_set():
                node = self.ring[self.idx]
                sent = time.perf_counter()
                ok, detail, offset = False, "", None
                try:
                    r = clients[node].post(path, content=self.bodies[k % len(self.bodies)], headers=headers)
                    if r.status_code == 200:
                        ok, offset = True, int(r.json()["offsets"][0]["offset"])
                    else:
                        detail = f"HTTP {r.status_code} {_error_code(r)}".strip()
                        if r.status_code not in (503, 504):
                            self.unexpected.append(f"{detail}: {r.text[:200]}")
                except httpx.HTTPError as e:
                    detail = type(e).__name__
                done = time.perf_counter()
                with self.lock:
                    self.attempts.append(Attempt(sent, done, node, ok, detail, offset))
                k += 1
                if ok:
                    wait = FAILOVER_INTERVAL_S - (done - sent)
                else:
                    self.idx = (self.idx + 1) % len(self.ring)
                    wait = FAILOVER_RETRY_BACKOFF_S
                if wait > 0:
                    self.stop_event.wait(wait)
        finally:
            for c in clients.values():
                c.close()

    def first_success_after(self, t: float) -> Attempt | None:
        with self.lock:
            for a in self.attempts:
                if a.ok and a.sent >= t:
                    return a
        return None


class MetadataWatch(threading.Thread):
    """Polls one surviving node's view of the partition: when it names a new leader, and when the
    killed node leaves the ISR."""

    def __init__(self, cluster: Cluster, watcher: NodeProc, topic: str, old_leader: int) -> None:
        super().__init__(daemon=True, name="metadata-watch")
        self.cluster, self.watcher, self.topic, self.old = cluster, watcher, topic, old_leader
        self.t_new_leader: float | None = None
        self.new_leader: int | None = None
        self.t_isr_shrunk: float | None = None
        self.t_no_leader: float | None = None
        self.stop_event = threading.Event()

    def run(self) -> None:
        while not self.stop_event.is_set():
            v = self.cluster.partition_view(self.watcher, self.topic, 0)
            now = time.perf_counter()
            if v is not None:
                if v["leader"] < 0 and self.t_no_leader is None:
                    self.t_no_leader = now
                if v["leader"] >= 0 and v["leader"] != self.old and self.t_new_leader is None:
                    self.t_new_leader, self.new_leader = now, v["leader"]
                if self.t_isr_shrunk is None and not any(r["broker"] == self.old and r["in_sync"]
                                                         for r in v["replicas"]):
                    self.t_isr_shrunk = now
            if self.t_new_leader is not None and self.t_isr_shrunk is not None:
                return
            self.stop_event.wait(METADATA_POLL_S)


@dataclass
class FailoverRun:
    killed: int
    was_controller: bool
    failover_s: float | None
    new_leader_s: float | None
    isr_shrunk_s: float | None
    new_leader: int | None
    errors: dict[str, int]
    errors_after: int
    rejoin_s: float | None
    offsets_increasing: bool
    first_ok_node: int | None


def failover_runs(ctx: Context, cluster: Cluster, label: str, runs: int) -> list[FailoverRun]:
    topic = f"failover-{cluster.name}"
    cluster.create_topic(topic, 1, 3, MIN_ISR)
    bodies = small_bodies(64, seed=11)
    timeout_s = int(cluster.settings.get("request.timeout.ms", DEFAULTS.get("request.timeout.ms"))) / 1000 + 5
    out: list[FailoverRun] = []
    for run in range(runs):
        leader = cluster.wait_partition(topic, 0, isr_size=3)
        controller = cluster.controller_id()
        urls = {n.node_id: n.url for n in cluster.nodes}
        producer = FailoverProducer(urls, leader, topic, bodies, timeout_s)
        producer.start()
        t_steady = time.perf_counter()
        # steady state first: acks=all produce succeeding for a while
        while time.perf_counter() - t_steady < FAILOVER_STEADY_S or producer.first_success_after(t_steady) is None:
            if time.perf_counter() - t_steady > 30:
                producer.stop_event.set()
                raise RuntimeError(f"{label}: acks=all produce does not succeed before the kill: "
                                   f"{producer.attempts[-5:]}")
            time.sleep(0.05)
        victim = cluster.node(leader)
        watcher = next(n for n in cluster.live() if n.node_id != leader)
        watch = MetadataWatch(cluster, watcher, topic, leader)
        t_kill = time.perf_counter()
        os.killpg(victim.proc.pid, signal.SIGKILL)
        watch.start()
        victim.proc.wait(10)
        first: Attempt | None = None
        while first is None and time.perf_counter() - t_kill < FAILOVER_GIVE_UP_S:
            time.sleep(0.01)
            first = producer.first_success_after(t_kill)
        # keep producing a little after the recovery: does it stay up?
        if first is not None:
            time.sleep(FAILOVER_STEADY_S)
        producer.stop_event.set()
        producer.join(timeout_s + 5)
        watch.stop_event.set()
        watch.join(5)
        with producer.lock:
            attempts = list(producer.attempts)
        outage = [a for a in attempts if a.done >= t_kill and (first is None or a.sent < first.sent) and not a.ok]
        errors: dict[str, int] = {}
        for a in outage:
            key = f"{a.detail} from node {a.node}" if a.node != leader else f"{a.detail} from the killed node"
            errors[key] = errors.get(key, 0) + 1
        after = [a for a in attempts if first is not None and a.sent > first.sent and not a.ok]
        offsets = [a.offset for a in attempts if a.ok]
        increasing = all(b > a for a, b in zip(offsets, offsets[1:]))
        # bring the killed node back, wait for the full ISR
        t_restart = time.perf_counter()
        victim.start()
        rejoin: float | None = None
        try:
            victim.wait_ready(60)
            cluster.wait_partition(topic, 0, isr_size=3, timeout_s=120)
            rejoin = time.perf_counter() - t_restart
        except (TimeoutError, RuntimeError) as e:
            ctx.notes.append(f"Failover ({label}), run {run + 1}: the restarted node {victim.node_id} did not "
                             f"rejoin the ISR: {str(e)[:300]}")
        r = FailoverRun(
            killed=leader, was_controller=controller == leader,
            failover_s=(first.done - t_kill) if first is not None else None,
            new_leader_s=(watch.t_new_leader - t_kill) if watch.t_new_leader else None,
            isr_shrunk_s=(watch.t_isr_shrunk - t_kill) if watch.t_isr_shrunk else None,
            new_leader=watch.new_leader, errors=errors, errors_after=len(after), rejoin_s=rejoin,
            offsets_increasing=increasing, first_ok_node=first.node if first else None)
        out.append(r)
        ctx.log(f"failover {label} run {run + 1}: killed leader node {leader}"
                f"{' (also the active controller)' if r.was_controller else ''}; new leader "
                f"{r.new_leader} in metadata after {_opt_s(r.new_leader_s)}, first acks=all success after "
                f"{_opt_s(r.failover_s)} (node {r.first_ok_node}); {sum(errors.values())} failed attempts "
                f"({'; '.join(f'{k} x{v}' for k, v in errors.items())}); {r.errors_after} errors after; "
                f"rejoined ISR {_opt_s(rejoin)} after restart; offsets increasing: {increasing}")
        if first is None:
            ctx.notes.append(f"Failover ({label}), run {run + 1}: no successful acks=all produce within "
                             f"{FAILOVER_GIVE_UP_S:.0f} s of killing node {leader}.")
        if r.errors_after:
            kinds = sorted({a.detail for a in after})
            ctx.notes.append(f"Failover ({label}), run {run + 1}: {r.errors_after} failed produce(s) in the "
                             f"{FAILOVER_STEADY_S:g} s after the first success ({', '.join(kinds)}).")
        if not increasing:
            ctx.notes.append(f"Failover ({label}), run {run + 1}: the acknowledged offsets were not strictly "
                             f"increasing across the failover: {offsets}")
        if producer.unexpected:
            ctx.notes.append(f"Failover ({label}), run {run + 1}: unexpected answers: "
                             + "; ".join(producer.unexpected[:3]))
    cluster.delete_topic(topic)
    return out


def _opt_s(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f} s"


def bench_failover(ctx: Context) -> None:
    runs = ctx.scale.failover_runs
    results: dict[str, tuple[dict[str, str], list[FailoverRun]]] = {}
    # default settings: the throughput cluster when it is still up, else a new one
    if ctx.c1 is not None:
        ctx.c1.stop()
    c = ctx.c3 if ctx.c3 is not None else ctx.start_cluster("rf3", 3, {})
    results["default broker settings"] = ({}, failover_runs(ctx, c, "default settings", runs))
    c.stop()
    fast = ctx.start_cluster("fast", 3, dict(FAST_CLUSTER))
    results["FAST_CLUSTER settings (tests/support/nodes.py)"] = (dict(FAST_CLUSTER), failover_runs(
        ctx, fast, "FAST_CLUSTER", runs))
    fast.stop()
    for label, (settings, rs) in results.items():
        done = [r.failover_s for r in rs if r.failover_s is not None]
        keys = ", ".join(f"{k.removeprefix('broker.').removeprefix('controller.')}="
                         f"{settings.get(k, DEFAULTS.get(k))}" for k in ("broker.session.timeout.ms",
                                                                         "broker.heartbeat.interval.ms",
                                                                         "controller.tick.ms"))
        value = (f"median {statistics.median(done):.2f} s (runs: " + ", ".join(_opt_s(r.failover_s) for r in rs) + ")"
                 if done else "no recovery")
        ctx.rows.append(Row(f"Failover: SIGKILL of the partition leader -> first successful acks=all produce, "
                            f"{label} ({keys})", value, "—", "", "information", "info"))
        for i, r in enumerate(rs):
            ctx.failover_rows.append((label.split(" (")[0], str(i + 1),
                                      f"{r.killed}" + (" (and active controller)" if r.was_controller else ""),
                                      _opt_s(r.isr_shrunk_s), f"{_opt_s(r.new_leader_s)} (node {r.new_leader})",
                                      _opt_s(r.failover_s) + (f" (via node {r.first_ok_node})"
                                                              if r.first_ok_node is not None else ""),
                                      _opt_s(r.failover_s - r.new_leader_s)
                                      if r.failover_s is not None and r.new_leader_s is not None else "n/a",
                                      "; ".join(f"{k} x{v}" for k, v in r.errors.items()) or "none",
                                      _opt_s(r.rejoin_s)))
    ctx.setup.append(
        f"**Failover**: a 1-partition topic, replication factor 3, `min.insync.replicas={MIN_ISR}`. A producer "
        f"thread sends one-record batches ({SMALL_VALUE_BYTES} B value) with acks=all, one request at a time, at "
        f"most one per {FAILOVER_INTERVAL_S * 1000:.0f} ms, first to the leader; on an error (503, 504, a "
        f"connection error) it moves to the next node of the ring 1-2-3 and retries after "
        f"{FAILOVER_RETRY_BACKOFF_S * 1000:.0f} ms (any node forwards to the leader it knows); the client timeout "
        f"is `request.timeout.ms` + 5 s. After {FAILOVER_STEADY_S:g} s of successful produce the leader's "
        f"process group gets SIGKILL; the failover time runs from just before the kill to the end of the first "
        f"successful acks=all produce sent after it. A thread polls a surviving node's `GET "
        f"/topics/T/partitions/0` every {METADATA_POLL_S * 1000:.0f} ms: when the killed node left the ISR and when "
        f"a new leader appeared there. The producer runs {FAILOVER_STEADY_S:g} s more (errors there are "
        f"reported), then the killed node is restarted on its data directory and port and the next run waits "
        f"until every node sees the full ISR again. {runs} run(s) per settings row. Default row: the cluster of "
        f"the throughput runs, broker defaults ("
        + ", ".join(f"`{k}` {DEFAULTS.get(k)}" for k in FAILOVER_KEYS) + "). FAST_CLUSTER row: a new cluster "
        "with tests/support/nodes.py's `FAST_CLUSTER` ("
        + ", ".join(f"`{k}` {v}" for k, v in FAST_CLUSTER.items()) + ") — the test suite's settings, not a "
        "deployment's.")


# ---------------------------------------------------------------------------------------------
# Where the time goes: cProfile of the nodes' event loops under the 1-connection throughput case


def serve_main(argv: list[str]) -> int:
    """`python bench/cluster.py _serve --profile-out F KEY=VALUE...`: `run_node` (what `lakelog node`
    runs, minus the command line parsing) with SIGUSR1 starting a cProfile of the main thread (uvicorn's
    event loop, where every handler and the replica fetcher run) in thread CPU time, SIGUSR2 writing it."""
    import cProfile

    parser = argparse.ArgumentParser(prog="bench/cluster.py _serve")
    parser.add_argument("--profile-out", type=Path, required=True)
    parser.add_argument("settings", nargs="*")
    args = parser.parse_args(argv)
    out: Path = args.profile_out
    state: dict[str, cProfile.Profile | None] = {"prof": None}

    def start(signum: int, frame: object) -> None:
        prof = cProfile.Profile(time.thread_time)
        state["prof"] = prof
        prof.enable()

    def stop(signum: int, frame: object) -> None:
        prof = state["prof"]
        if prof is None:
            return
        prof.disable()
        tmp = out.with_name(out.name + ".tmp")
        prof.dump_stats(str(tmp))
        os.replace(tmp, out)
        state["prof"] = None

    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    from lakelog.ingest_api.config.node import NodeConfig as _NodeConfig
    from lakelog.ingest_api.server import run_node

    return run_node(_NodeConfig(dict(kv.split("=", 1) for kv in args.settings)))


_LAYERS = (
    ("ingest_api/replication/", "ingest_api replication (fetcher, wire format, peer client)"),
    ("ingest_api/cluster/auth", "ingest_api internal auth (HMAC signing / verifying)"),
    ("ingest_api/cluster/", "ingest_api cluster (controller, image, quorum)"),
    ("ingest_api/raft/", "ingest_api raft"),
    ("ingest_api/http/routers/", "ingest_api routers"),
    ("ingest_api/", "ingest_api node, partition, app"),
    ("logstore/", "logstore + index (validation, append, read)"),
    ("index/", "logstore + index (validation, append, read)"),
    ("httpx/", "httpx + httpcore (peer client)"),
    ("httpcore/", "httpx + httpcore (peer client)"),
    ("h11/", "h11 (HTTP parsing: server and peer client)"),
    ("uvicorn/", "uvicorn (server transport)"),
    ("starlette/", "starlette + fastapi"),
    ("fastapi/", "starlette + fastapi"),
    ("pydantic", "starlette + fastapi"),
    ("anyio/", "anyio"),
    ("asyncio/", "asyncio event loop"),
    ("selectors.py", "asyncio event loop"),
    ("ssl.py", "asyncio event loop"),
    ("json/", "json"),
    ("prometheus_client/", "prometheus_client"),
)


def _short_fn(filename: str, line: int, name: str) -> str:
    if filename == "~":
        return name
    parts = Path(filename).parts
    for anchor in ("ingest_api", "logstore", "index", "infra", "starlette", "fastapi", "uvicorn", "h11", "httpx",
                   "httpcore", "anyio", "pydantic", "prometheus_client", "asyncio", "json"):
        if anchor in parts:
            return f"{Path(*parts[parts.index(anchor):])}:{line}({name})"
    return f"{Path(filename).name}:{line}({name})"


def _layer(fn: str) -> str:
    for prefix, layer in _LAYERS:
        if fn.startswith(prefix):
            return layer
    low = fn.lower()
    if "importlib" in low:
        return "importlib (failed imports: httpcore's `import sniffio`)"
    if "crc32c" in low:
        return "CRC-32C (C)"
    if "sha256" in low or "hmac" in low or "_hashlib" in low:
        return "SHA-256 / HMAC (hashlib)"
    if "_recordscan" in low:
        return "C record walk"
    if any(k in low for k in ("pwrite", "pread", "posix.write", "posix.read", "'send'", "'recv'", "sock_",
                              "'poll'", "epoll", "select", "fsync")):
        return "syscalls (socket send / recv, epoll, pwritev, pread)"
    if any(k in low for k in ("'join' of", "bytes(", "built-in method builtins.bytes", "'tobytes'",
                              "bytearray", "memoryview")):
        return "bytes copies and buffers (join, bytes(), bytearray)"
    if fn.startswith("<") or fn.startswith("{"):
        return "other built-ins"
    return "other Python"


#: Named parts of the replication path, matched as (file suffix, function name): cumulative CPU time.
_PARTS = (
    ("ingest_api/node.py", "produce_batches", "`Node.produce_batches` (leader: validate + append; the acks=all wait is async)"),
    ("ingest_api/node.py", "replica_fetch", "… `Node.replica_fetch` (leader: serve a follower's fetch, synchronous parts)"),
    ("ingest_api/replication/wire.py", "encode_fetch_response", "… `wire.encode_fetch_response`"),
    ("ingest_api/http/routers/replication.py", "replica_fetch", "`/internal/replication/fetch` route (leader, incl. joining the response)"),
    ("ingest_api/security/cluster_auth.py", "verify", "`auth.verify` (HMAC of internal requests received)"),
    ("ingest_api/security/cluster_auth.py", "sign", "`auth.sign` (HMAC of internal requests sent)"),
    ("ingest_api/replication/fetcher.py", "_fetch", "`ReplicaFetcher._fetch` (follower: request + decode + append)"),
    ("ingest_api/replication/peers.py", "request", "… `PeerClient.request` (follower: the signed httpx call)"),
    ("ingest_api/replication/wire.py", "decode_fetch_response", "… `wire.decode_fetch_response`"),
    ("ingest_api/replication/partition.py", "append_as_follower", "… `Partition.append_as_follower` (validate + append)"),
    ("ingest_api/replication/partition.py", "maybe_advance_high_watermark", "`Partition.maybe_advance_high_watermark`"),
    ("ingest_api/cluster/quorum.py", "_post", "`QuorumHost._post` (Raft messages sent over signed HTTP: heartbeats "
     "every 100 ms from the Raft leader, and the answers)"),
    ("ingest_api/http/routers/internal.py", "raft_message", "`/internal/raft/messages` route (Raft messages received)"),
    ("httpcore/_synchronization.py", "current_async_library", "httpcore `current_async_library` (tries `import "
     "sniffio` on every call; sniffio is not installed, so each call is a failed import that searches sys.path)"),
)


@dataclass
class Profiled:
    label: str
    total: float  # profiled CPU seconds (main thread)
    own: dict[str, float]  # function -> own seconds
    cum: dict[str, float]  # function -> cumulative seconds
    calls: dict[str, int]
    proc_cpu: float  # CPU seconds of the whole process over the profiled stretch (/proc)


def _load_profile(path: Path, label: str, proc_cpu: float) -> Profiled:
    import pstats

    st = pstats.Stats(str(path))
    own: dict[str, float] = {}
    cum: dict[str, float] = {}
    calls: dict[str, int] = {}
    for (f, line, name), (_cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        key = _short_fn(f, line, name)
        own[key] = own.get(key, 0.0) + tt
        cum[key] = max(cum.get(key, 0.0), ct)
        calls[key] = calls.get(key, 0) + nc
    return Profiled(label, st.total_tt, own, cum, calls, proc_cpu)  # type: ignore[attr-defined]


def _part_time(p: Profiled, suffix: str, name: str) -> tuple[float, int]:
    t, n = 0.0, 0
    for fn, ct in p.cum.items():
        head, _, rest = fn.partition(":")
        if head.endswith(suffix) and rest.endswith(f"({name})"):
            t, n = t + ct, n + p.calls[fn]
    return t, n


def _wait_profiles(nodes: list[NodeProc], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    for n in nodes:
        assert n.profile_out is not None
        while not n.profile_out.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {n.node_id} wrote no profile:\n{n.read_log()}")
            time.sleep(0.05)


def _net(work: Profiled, idle: Profiled, scale: float) -> Profiled:
    """`work` minus `idle` scaled to the same duration (function by function, floored at 0): the
    profile of the workload net of the cluster's background (Raft heartbeats, broker heartbeats)."""
    own = {k: max(0.0, v - idle.own.get(k, 0.0) * scale) for k, v in work.own.items()}
    cum = {k: max(0.0, v - idle.cum.get(k, 0.0) * scale) for k, v in work.cum.items()}
    calls = {k: max(0, round(v - idle.calls.get(k, 0) * scale)) for k, v in work.calls.items()}
    return Profiled(work.label, max(0.0, work.total - idle.total * scale), own, cum, calls,
                    max(0.0, work.proc_cpu - idle.proc_cpu * scale))


def _profile_stretch(nodes: list[NodeProc], fn: Callable[[], None]) -> tuple[float, dict[int, float]]:
    """Profile every node's main thread while `fn()` runs; returns (wall seconds, node id -> process CPU)."""
    for n in nodes:
        assert n.profile_out is not None
        n.profile_out.unlink(missing_ok=True)
    cpu0 = {n.node_id: n.cpu_s() for n in nodes}
    for n in nodes:
        n.send(signal.SIGUSR1)
    t0 = time.perf_counter()
    time.sleep(0.2)  # the handler runs on the loop's next wake-up
    fn()
    for n in nodes:
        n.send(signal.SIGUSR2)
    wall = time.perf_counter() - t0
    _wait_profiles(nodes)
    return wall, {n.node_id: n.cpu_s() - cpu0[n.node_id] for n in nodes}


def diagnose(ctx: Context) -> None:
    """Fresh, profiled processes: the RF=3 acks=all 1-connection workload and the RF=1 acks=1 one, each
    node's main thread under cProfile, net of a profile of the same idle processes over as long; by
    named part, layer and function, per produce request."""
    bodies = big_bodies(DISTINCT_BODIES, seed=7)
    size = len(bodies[0])
    requests = 12 if ctx.scale.quick else 24
    idle_s = 2.0 if ctx.scale.quick else 4.0
    mb = requests * size / MB
    headers = {"Content-Type": RECORDBATCH}
    prime = small_bodies(1, seed=9)[0]
    gross: dict[str, Profiled] = {}
    profiles: list[Profiled] = []
    walls: dict[int, float] = {}
    rates: dict[int, float] = {}
    for rf, acks in ((3, "all"), (1, "1")):
        c = ctx.start_cluster(f"prof{rf}", rf, {}, profile=True)
        try:
            topic = f"prof-rf{rf}"
            c.create_topic(topic, 1, rf, MIN_ISR if rf == 3 else None)
            leader, url = c.leader_url(topic, 0)
            with httpx.Client(base_url=url, timeout=HTTP_TIMEOUT_S) as client:
                path = produce_path(topic, 0, acks)
                for k in range(4):  # warm-up, unprofiled
                    _ok(client.post(path, content=bodies[k], headers=headers), "warm-up")
                _ok(client.post(path, content=prime, headers=headers), "prime")  # acks=all: replicated when answered
                idle_wall, idle_cpu = _profile_stretch(c.nodes, lambda: time.sleep(idle_s))
                idle = {n.node_id: _load_profile(n.profile_out, "idle", idle_cpu[n.node_id]) for n in c.nodes}
                t: dict[str, float] = {}

                def load() -> None:
                    t0 = time.perf_counter()
                    for k in range(requests):
                        _ok(client.post(path, content=bodies[k % len(bodies)], headers=headers), "profiled produce")
                    t["wall"] = time.perf_counter() - t0

                wall, cpu = _profile_stretch(c.nodes, load)
            rates[rf] = requests * size / t["wall"]
            walls[rf] = wall
            ctx.log(f"profiled RF={rf}: {requests} requests, {fmt_rate(rates[rf])} under the profiler "
                    f"({wall:.1f} s profiled; idle profile {idle_wall:.1f} s)")
            for n in c.nodes:
                role = "RF=1 node" if rf == 1 else ("RF=3 leader" if n.node_id == leader else
                                                   f"RF=3 follower (node {n.node_id})")
                work = _load_profile(n.profile_out, role, cpu[n.node_id])
                gross[role] = work
                profiles.append(_net(work, idle[n.node_id], wall / idle_wall))
        finally:
            c.stop()
    order = [p for p in profiles if p.label == "RF=1 node"] + [p for p in profiles if p.label == "RF=3 leader"] + \
        [p for p in profiles if p.label.startswith("RF=3 follower")][:1]
    layers: dict[str, dict[str, float]] = {}
    for p in order:
        for fn, tt in p.own.items():
            layers.setdefault(_layer(fn), {}).setdefault(p.label, 0.0)
            layers[_layer(fn)][p.label] += tt
    layer_rows = sorted(layers.items(), key=lambda kv: -sum(kv[1].values()))
    head = ("layer (own CPU time, net: µs per produce request, share)", *(p.label for p in order))
    rows = [(name, *(f"{v.get(p.label, 0.0) / requests * 1e6:,.0f} ({v.get(p.label, 0.0) / p.total:.0%})"
                     if p.total and v.get(p.label, 0.0) / p.total >= 0.005 else "" for p in order))
            for name, v in layer_rows if max(v.get(p.label, 0.0) / p.total if p.total else 0 for p in order) >= 0.01]
    rows.append(("**profiled main thread, net, µs per produce request**",
                 *(f"**{p.total / requests * 1e6:,.0f}**" for p in order)))
    rows.append(("the same before subtracting the idle profile",
                 *(f"{gross[p.label].total / requests * 1e6:,.0f}" for p in order)))
    rows.append(("whole process, net (/proc, all threads, unprofiled threads included), µs per produce request",
                 *(f"{p.proc_cpu / requests * 1e6:,.0f}" for p in order)))
    part_rows = []
    for suffix, name, label in _PARTS:
        cells = []
        for p in order:
            tt, n = _part_time(p, suffix, name)
            cells.append(f"{tt / requests * 1e6:,.0f} ({n / requests:.1f} calls)" if n else "")
        if any(cells):
            part_rows.append((label, *cells))
    slow = rates.get(3)
    lines = [
        f"Fresh processes started through `python bench/cluster.py _serve` (the same `run_node`), each node's "
        f"main thread — uvicorn's event loop, which runs every handler, the Raft host and the replica fetcher — "
        f"under cProfile in thread CPU time: first {idle_s:g} s idle, then while one connection sends {requests} "
        f"requests of {size:,} B ({mb:,.0f} MB) with acks=all to the RF=3 leader (then acks=1 to an RF=1 node). "
        f"The figures are the load profile minus the idle one scaled to the same duration (function by function, "
        f"floored at 0), i.e. net of the background (Raft heartbeats), per produce request. Profiling inflates "
        f"Python-level costs several times (the profiled RF=3 run went at {fmt_rate(slow) if slow else 'n/a'}, "
        f"{', '.join(f'RF={k} profiled for {v:.1f} s' for k, v in walls.items())}): compare the parts with each "
        f"other and with the RF=1 column rather than reading absolute µs. The second follower looks like the "
        f"first.", "",
        "Named parts (cumulative CPU time, net, µs per produce request; in brackets calls per produce request — an "
        "`async` function counts once per resume, and its cumulative time covers only the stretches it ran):",
        "", markdown_table(("part", *(p.label for p in order)), part_rows), "",
        "By layer:", "", markdown_table(head, rows), "",
    ]
    for p in order[1:]:
        top = sorted(p.own.items(), key=lambda kv: -kv[1])[:12]
        lines += [f"Top functions by own time, net, {p.label}:", "",
                  markdown_table(("function", "calls per request", "own µs per request", "own %",
                                  "cumulative µs per request"),
                                 [(f"`{fn}`", f"{p.calls[fn] / requests:,.1f}", f"{tt / requests * 1e6:,.0f}",
                                   f"{tt / p.total:.0%}" if p.total else "", f"{p.cum[fn] / requests * 1e6:,.0f}")
                                  for fn, tt in top]), ""]
    ctx.extra += ["#### Profile of the RF=3 acks=all path (1 connection) against RF=1", "", *lines]
    for p in order:
        top = sorted(p.own.items(), key=lambda kv: -kv[1])[:8]
        ctx.log(f"{p.label}: {p.total / requests * 1e6:,.0f} µs/request profiled net (gross "
                f"{gross[p.label].total / requests * 1e6:,.0f}), {p.proc_cpu / requests * 1e6:,.0f} µs/request "
                f"process net; top: " + ", ".join(f"{fn} {tt / p.total:.0%}" for fn, tt in top if p.total))
    for row in part_rows:
        ctx.log(" | ".join(row))
    for name, v in layer_rows[:12]:
        ctx.log(f"layer {name}: " + ", ".join(f"{k} {x / requests * 1e6:,.0f}" for k, x in v.items()))


# ---------------------------------------------------------------------------------------------
# Report


FAILOVER_HEADERS = ("settings", "run", "killed leader", "killed node out of the ISR after", "new leader seen after",
                    "first acks=all success after", "new leader -> first success", "failed attempts during the outage",
                    "rejoined the ISR (restart)")


def render_markdown(ctx: Context, machine: dict[str, str], started: _dt.datetime, seconds: float,
                    load_end: str) -> str:
    lines = [
        "## Cluster (replication)",
        "",
        f"Generated by `bench/cluster.py` on {started:%Y-%m-%d %H:%M} UTC in {seconds:.0f} s. "
        f"Command: `{command_line()}`. Commit: `{git_revision(ROOT)}`.",
        "",
        f"Machine: {machine['nproc']} CPUs ({machine['cpu']}), {machine['memory']} memory, {machine['python']}, "
        f"{machine['kernel']}, temp data on {machine['file system']}. **Every process runs on this one machine**: "
        f"the client, the 1-node cluster and the three nodes of the RF=3 cluster all share its "
        f"{machine['nproc']} CPUs over loopback, so RF=3 here means three node processes competing for two CPUs "
        f"(on real hardware each node has its own). 1-minute load average {machine['load']} at the start, "
        f"{load_end} at the end. {machine['conditions']}",
        "",
        "### What is measured (`bench/cluster.py`)",
        "",
        markdown_table(("Benchmark", "RF=3 side", "Reference, same run", "Target"), [
            ("Throughput", "3-node cluster, topic with replication factor 3 and `min.insync.replicas=2`; binary fast "
             "path `POST /topics/T/partitions/P` (`application/vnd.kafka.recordbatch`), ~1 MiB RecordBatch v2 "
             "bodies, acks=all, sent to the partition leader; 1 and 4 connections",
             "1-node cluster, replication factor 1, same bodies, acks=1; alternated rounds", ">= 0.5x"),
            ("Throughput, forwarded", "the same through a non-leader (one forwarding hop), 1 connection",
             "the same RF=1 runs", "information"),
            ("Throughput, RF=3 acks=1", "the same cluster and requests with acks=1: separates the cost of copying "
             "from the cost of waiting for the followers", "the same RF=1 runs", "information"),
            ("Latency", "one-record 1 KiB batches at 200 (and 50) requests/s, open loop, acks=all to the leader: "
             "p50 / p99 / max", "RF=1 acks=1 on the same schedule", "information"),
            ("Failover", "SIGKILL of the partition leader under acks=all produce -> first successful acks=all "
             "produce; default broker settings and `FAST_CLUSTER`", "—", "information"),
        ]),
        "",
        "### Results",
        "",
        markdown_table(HEADERS, [(r.name, r.value, r.reference, r.ratio, r.target, r.result) for r in ctx.rows]),
        "",
        *missed_targets(ctx.causes),
        "MB/s are 10^6 bytes of request bodies per second of wall time at the median run. A throughput ratio is "
        "RF=3 / RF=1 throughput, the median over rounds of the ratio within a round. Latencies are p50 / p99 / max "
        "in ms, from each request's scheduled send time. Failover times run from the SIGKILL.",
        "",
    ]
    if ctx.notes:
        lines += ["Seen during the run:", "", *(f"- {n}" for n in ctx.notes), ""]
    lines += ["### How each figure was measured", "",
              "- **Processes**: every node is `lakelog node --set node.id=N --set log.dirs=<temp> --set "
              "listeners=http://127.0.0.1:<free port> --set log.cleaner.enable=false`, the RF=3 cluster's nodes "
              "with `controller.quorum.voters` naming all three (each a voter), a `cluster.secret` and a "
              "`cluster.id`; all other keys default (1 GiB segments, no fsync per append), except the "
              "FAST_CLUSTER failover row. Each process runs in its own session with "
              f"`GLIBC_TUNABLES={MALLOC_TUNABLES}` (as in `bench/node.py`). The RF=3 and RF=1 clusters run side "
              "by side during the throughput and latency cases: the idle RF=3 cluster's background (Raft "
              "heartbeats, below) runs during the RF=1 runs too. The client is this process, `httpx.Client` "
              "keep-alive connections."]
    lines += [f"- {s}" for s in ctx.setup]
    lines += ["", "### Where the time goes", ""]
    if ctx.cpu_rows:
        lines += ["CPU per MB of request bodies, medians over the measured runs: each node process from "
                  "/proc/PID/stat (all threads, 10 ms ticks) from the start of a run until every replica had the "
                  "data; the client (this process, all threads) over the timed run; \"CPUs busy\" is CPU time / "
                  "wall time over the timed run, from /proc/stat for the whole machine, \"others\" being the "
                  "machine minus the bench's processes. Request p50 is the client-side time of one 1 MiB request.",
                  "", markdown_table(CPU_HEADERS, ctx.cpu_rows), ""]
    lines += ctx.extra
    if ctx.failover_rows:
        lines += ["Failover runs, times from the SIGKILL (the metadata times as one surviving node showed them, "
                  f"polled every {METADATA_POLL_S * 1000:.0f} ms):", "",
                  markdown_table(FAILOVER_HEADERS, ctx.failover_rows), ""]
    return "\n".join(lines).rstrip() + "\n"


BENCHES: dict[str, Callable[[Context], None]] = {
    "throughput": bench_throughput,
    "latency": bench_latency,
    "failover": bench_failover,
}


def extract_tree(rev: str, root: Path) -> Path:
    """The tree of git revision `rev` as an importable `lakelog` package under `root` (the directory
    to put on PYTHONPATH)."""
    dest = root / "base-tree"
    pkg = dest / "lakelog"
    pkg.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(pkg)], input=archive, check=True)
    return dest


def idle_cost(ctx: Context, seconds: float) -> None:
    """CPU the idle clusters use (heartbeats, Raft ticks, replica fetch long-polls)."""
    meter = Meter(ctx.clusters)
    c0 = {c.name: c.request_counts() for c in ctx.clusters}
    s0 = meter.snap()
    time.sleep(seconds)
    u = Meter.diff(s0, meter.snap())
    counts = {c.name: count_diff(c0[c.name], c.request_counts()) for c in ctx.clusters}
    for name, v in u.nodes.items():
        ctx.idle[name] = sum(v.values()) / u.wall
    text = "; ".join(f"{name} ({len(v)} node{'s' if len(v) > 1 else ''}) {sum(v.values()) / u.wall:.3f} CPUs, serving "
                     + (", ".join(f"{n / u.wall:.0f}/s `{route}`" for route, n in sorted(counts[name].items(),
                                                                                       key=lambda kv: -kv[1])
                                  if route != "/metrics") or "no requests")
                     for name, v in u.nodes.items())
    ctx.log(f"idle clusters over {seconds:g} s: {text}")
    ctx.extra.append(f"Idle cost of the clusters, measured over {seconds:g} s before the runs (no topics): {text}. "
                     f"The idle 3-node cluster's CPU is Raft traffic: the Raft leader sends AppendEntries to each "
                     f"voter every 100 ms and each answer is a request of its own, every one a signed HTTP request "
                     f"through httpx and FastAPI; plus broker heartbeats every 2 s. This background runs during the "
                     f"RF=3 runs too and counts in their CPU per MB. Other processes meanwhile: "
                     f"{u.others() / u.wall:.2f} CPUs.")
    ctx.extra.append("")


def scan_logs(ctx: Context, root: Path) -> None:
    """What the nodes logged at WARNING and above, and their replication events (INFO of
    `lakelog.replication`), grouped by cluster, logger and message (digits folded), into the notes."""
    import json as _json

    found: dict[tuple[str, str, str, str], int] = {}
    for log in sorted(root.glob("*.log")):
        cluster = log.stem.split("-node-")[0]
        for line in log.read_text(errors="replace").splitlines():
            if not line.startswith("{"):
                if line.startswith("Traceback"):
                    found[(cluster, "ERROR", "stderr", "Traceback")] = found.get((cluster, "ERROR", "stderr",
                                                                                  "Traceback"), 0) + 1
                continue
            try:
                rec = _json.loads(line)
            except ValueError:
                continue
            level, logger = rec.get("level", ""), rec.get("logger", "")
            if level in ("WARNING", "ERROR", "CRITICAL") or (logger == "lakelog.replication" and level == "INFO"):
                msg = re.sub(r"\d+", "N", str(rec.get("msg", "")))[:200]
                key = (cluster, level, logger, msg)
                found[key] = found.get(key, 0) + 1
    if not found:
        ctx.notes.append("Node logs: no WARNING or ERROR line, and no replication event logged.")
        return
    items = sorted(found.items(), key=lambda kv: (kv[0][1] == "INFO", -kv[1]))
    shown = [f"{c} cluster, {lvl} `{lg}` x{n}: {m}" for (c, lvl, lg, m), n in items[:16]]
    more = f" (and {len(items) - 16} more kinds)" if len(items) > 16 else ""
    ctx.notes.append("Node logs (digits folded to N; the failover runs kill nodes on purpose): "
                     + "; ".join(shown) + more + ".")


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_serve"]:
        return serve_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes, one failover run each (a smoke run)")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the throughput volume (default 1)")
    parser.add_argument("--only", default="", help=f"comma-separated subset of {', '.join(BENCHES)} "
                        "(implies --no-write)")
    parser.add_argument("--profile", action="store_true",
                        help="profile the nodes under the throughput workload even when its target is met, or "
                        "with --quick (which otherwise skips the profile)")
    parser.add_argument("--dir", default="/tmp", help="where the temporary data goes (default /tmp)")
    parser.add_argument("--no-write", action="store_true", help="do not update docs/benchmarks.md")
    parser.add_argument("--note", default="", help="what else ran on the machine, for the report")
    parser.add_argument("--base-rev", default="", help="also run an RF=3 cluster on the tree of this git revision "
                        "(A/B in the same rounds; implies --no-write)")
    args = parser.parse_args(argv)
    if args.scale <= 0:
        parser.error("--scale must be positive")
    selected = [b.strip() for b in args.only.split(",") if b.strip()] or list(BENCHES)
    unknown = [b for b in selected if b not in BENCHES]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    selected = [b for b in BENCHES if b in selected]  # failover last: it kills nodes
    write = not args.no_write and not args.only and not args.base_rev

    atexit.register(kill_all_started)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_interrupt)
    # Ctrl-C stops the bench (and its nodes) even when started with SIGINT ignored (`cmd &` in a script)
    signal.signal(signal.SIGINT, signal.default_int_handler)

    started = _dt.datetime.now(_dt.timezone.utc)
    machine = machine_info(args.dir)
    others = OtherCpu()
    root = Path(tempfile.mkdtemp(prefix="lakelog-cluster-bench-", dir=args.dir))
    print(f"Cluster benchmarks in {root} ({'quick' if args.quick else 'default'} scale x{args.scale:g})", flush=True)
    t_start = time.perf_counter()
    ctx = Context(Scale(args.quick, args.scale), root)
    failed: BaseException | None = None
    try:
        if "throughput" in selected or "latency" in selected:
            ctx.c3 = ctx.start_cluster("rf3", 3, {})
            ctx.c1 = ctx.start_cluster("rf1", 1, {})
            if args.base_rev:
                ctx.base_rev = args.base_rev
                ctx.base = ctx.start_cluster("rf3base", 3, {}, tree=extract_tree(args.base_rev, root))
            idle_cost(ctx, 1.0 if args.quick else 3.0)
        for name in selected:
            print(f"[{name}]", flush=True)
            t0 = time.perf_counter()
            BENCHES[name](ctx)
            print(f"  .. {name} took {time.perf_counter() - t0:.1f} s", flush=True)
            if name == "throughput" and ((ctx.causes and not args.quick) or args.profile):
                print("[diagnosis: profile of the nodes]", flush=True)
                t0 = time.perf_counter()
                diagnose(ctx)
                print(f"  .. diagnosis took {time.perf_counter() - t0:.1f} s", flush=True)
    except BaseException as e:  # report, stop everything, re-raise below
        failed = e
        for c in ctx.clusters:
            for n in c.nodes:
                if n.proc is not None and n.proc.poll() not in (None, 0, -9):
                    print(f"node {c.name}/{n.node_id} exited with {n.proc.returncode}; log tail:\n{n.read_log(2000)}",
                          file=sys.stderr)
    finally:
        ctx.stop_clusters()
        kill_all_started()
        try:
            scan_logs(ctx, root)
        except OSError as e:
            ctx.notes.append(f"Node logs could not be read: {e}")
        if failed is not None and not isinstance(failed, KeyboardInterrupt):
            keep = root.with_name(root.name + "-logs")
            keep.mkdir(exist_ok=True)
            for log in root.glob("*.log"):
                shutil.copy2(log, keep / log.name)
            print(f"node logs kept in {keep}", file=sys.stderr)
        shutil.rmtree(root, ignore_errors=True)
    if failed is not None:
        raise failed
    seconds = time.perf_counter() - t_start
    machine["conditions"] = conditions(machine["nproc"], others.cpus(), args.note)
    print()
    print(machine["conditions"])
    print()
    print(text_table(HEADERS, [(r.name, r.value, r.reference, r.ratio, r.target, r.result) for r in ctx.rows]))
    for line in missed_targets(ctx.causes):
        print(line)
    if ctx.notes:
        print("\nSeen during the run:")
        for n in ctx.notes:
            print(f"- {n}")
    if ctx.cpu_rows:
        print()
        print(text_table(CPU_HEADERS, ctx.cpu_rows))
    if ctx.failover_rows:
        print()
        print(text_table(FAILOVER_HEADERS, ctx.failover_rows))
    if write:
        rewrite_section(DOC_PATH, SECTION, render_markdown(ctx, machine, started, seconds, load_average()))
        print(f"\nwrote the {SECTION!r} section of {DOC_PATH}")
    missed = [r.name for r in ctx.rows if r.result == "MISSED"]
    print(f"\n{len(missed)} target(s) missed" + (": " + "; ".join(missed) if missed else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
