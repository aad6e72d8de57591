"""Ingest node benchmarks: a real `lakelog node` process against a bare FastAPI app, same run, same client.

    python bench/node.py            # default scale, about three minutes on 2 cores
    python bench/node.py --quick    # small sizes, under a minute: a smoke run (use with --no-write)
    python bench/node.py --scale 2  # twice the produce, JSON produce and fetch volumes
    python bench/node.py --only produce,fetch --profile   # a subset, always diagnosed; no write

Two server processes run side by side on loopback, with the uvicorn settings of
`ingest_api/server.py` (one worker, `log_config=None`, `access_log=False`, the same limits) and the
same fixed glibc malloc thresholds (`MALLOC_TUNABLES`, see there why):

* the node — `lakelog node` on a temp data dir (`log.cleaner.enable=false`);
* the baseline — the FastAPI app in this file, `POST /append` appends the raw request body to a
  file and `GET /range` serves bytes of a file by `position` and `length` (`os.pread`).

Both are driven by the same client code (httpx.Client, keep-alive connections), case by case
alternated round by round (`bench.harness.alternate`). What is measured (targets in brackets):

* produce  — the binary fast path, `POST /topics/{t}/partitions/{p}` with
             `application/vnd.kafka.recordbatch` bodies of one ~1 MiB RecordBatch v2 (1000 x 1 KiB
             records), against `POST /append` of the same bodies; 1 and 4 connections [>= 0.8x].
* json     — JSON v2 produce to `/topics/{t}` (keyed, 4 partitions), 500 x 1 KiB records per
             request: records/s (information: no target; the baseline, appending the same bodies,
             does none of the per-record work, so the ratio is not a gap to close). The node is
             always profiled on this case, so the report says what the rate is made of.
* fetch    — a consumer loop over ~256 MiB with `Accept: application/vnd.kafka.recordbatch` and
             `max_bytes` 1 MiB, against `GET /range` of the same bytes in ranges of the same size;
             then the same loop with `Accept: application/vnd.kafka.binary.v2+json`: records/s
             (information).
* latency  — JSON produce of one 100 B record at a fixed rate (200 requests/s, open loop: latency
             is counted from each request's scheduled time), acks=all and acks=1; p50 / p99 / max
             (information), and the baseline's `POST /append` of the same bodies on the same schedule.

Every produce run starts from an empty topic / file (re-created / truncated, untimed). Each
server process's CPU time and minor faults (from /proc) are sampled around every run, so the report
says how much server CPU a request costs on each side, and gives the produce and raw fetch ratios in
server CPU too (other processes on the machine disturb it less than wall time; verdicts use wall
time). The CPU other processes used during the run is measured and reported (`--note` says what they
were).

After the runs, on fresh server processes:

* a produce below its 0.8x target, or a raw fetch below 0.8x (no target, but both sides serve the
  same bytes), is diagnosed (with `--profile`: both, whatever their ratio): the same requests go to
  the node and to the baseline with their CPU per request, then both main threads (uvicorn's event
  loop, where every handler runs) are cProfiled in thread CPU time while the same requests run
  (`SIGUSR1` starts the profiler in the server, `SIGUSR2` writes it out);
* JSON produce is profiled on the node alone, every run, the same way.

Every figure is printed and written to the "Ingest node" section of docs/benchmarks.md
(`--no-write` to skip). Temp data lives under `--dir` (default /tmp) and is removed afterwards; both
server processes are always stopped.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as _dt
import importlib.util
import json
import math
import os
import pstats
import random
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
from typing import Callable, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/node.py` puts bench/ on the path, not the root
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from fastapi import FastAPI, Query, Request  # noqa: E402
from fastapi.responses import JSONResponse, Response  # noqa: E402

from bench.harness import (  # noqa: E402
    MB,
    MiB,
    OtherCpu,
    Timing,
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
    stopwatch,
    text_table,
)
from lakelog.ingest_api.records.formats import BINARY_V2, JSON_V2, RECORDBATCH  # noqa: E402
from lakelog.logstore.record_batch import Record, build_batch, iter_batches  # noqa: E402

DOC_PATH = ROOT / "docs" / "benchmarks.md"
SECTION = "node"

#: The node's executable, as tests/support/nodes.py starts it.
LAKELOG = str(Path(sys.executable).with_name("lakelog"))

#: uvicorn settings of the node (ingest_api/server.py `run_node`), given to the baseline too.
UVICORN_SETTINGS = dict(log_config=None, access_log=False, timeout_graceful_shutdown=5,
                        limit_concurrency=1000, timeout_keep_alive=30)

#: glibc malloc settings of both server processes (unless --default-malloc). Left dynamic, glibc
#: moves its mmap and trim thresholds with each process's history, and a process serving 1 MiB
#: bodies either reuses its heap or maps, faults in (~470 minor faults) and trims about 2 MiB per
#: request, ~2.5 ms of system time on this VM; which of the two a process falls into varied from
#: start to start for the node and the baseline alike. Fixed thresholds put both in the same regime.
MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=134217728"

#: Node config for every run: no background cleaner competing for the CPUs.
NODE_OVERRIDES = {"log.cleaner.enable": "false"}

HTTP_TIMEOUT_S = 120.0
#: Record timestamps (ms) of the pre-built batches.
TIMESTAMP_MS = 1_700_000_000_000
RECORD_VALUE_BYTES = 1024
RECORDS_PER_BATCH = 1000  # ~1 MiB batches: 1,033,997 B, under message.max.bytes (1 MiB + 12)
DISTINCT_BODIES = 16
JSON_RECORDS_PER_REQUEST = 500
PARTITIONS = 4
FETCH_MAX_BYTES = MiB
LATENCY_RATE = 200  # requests per second
LATENCY_VALUE_BYTES = 100
LATENCY_WORKERS = 4
#: Each latency case runs in this many slices, the cases taking turns slice by slice (the order
#: rotating), so a burst of load from other processes falls on all of them alike.
LATENCY_SLICES = 5
PRODUCE_TARGET = 0.8
#: A raw fetch has no target, but both sides serve the same bytes in the same responses: a ratio
#: below this is diagnosed like a missed produce target.
FETCH_DIAGNOSE_BELOW = 0.8

HEADERS = ("Benchmark", "Lakelog node", "Baseline (same run)", "Ratio", "Target", "Result")
CPU_HEADERS = ("workload", "server", "server CPU per request", "user", "system", "minor faults per request",
               "client CPU per request")


# ---------------------------------------------------------------------------------------------
# The baseline server: a bare FastAPI app, run as its own uvicorn process


def baseline_app(data_dir: Path) -> FastAPI:
    """`POST /append?file=NAME` appends the raw body to DATA_DIR/NAME.bin; `GET /range?file=NAME&
    position=P&length=N` returns up to N bytes of it from P; `POST /truncate?file=NAME` empties it
    (between runs). Nothing else: no validation, no copy beyond what FastAPI and uvicorn do for
    any handler."""
    app = FastAPI(title="Lakelog bench baseline")
    fds: dict[str, int] = {}

    def fd_of(name: str) -> int:
        fd = fds.get(name)
        if fd is None:
            if not name.isidentifier():
                raise ValueError(f"bad file name {name!r}")
            fd = fds[name] = os.open(data_dir / f"{name}.bin", os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        return fd

    @app.get("/readyz")
    async def readyz():
        return {"ready": True}

    @app.post("/append")
    async def append(request: Request, file: str = Query("produce")):
        body = await request.body()
        fd = fd_of(file)
        view = memoryview(body)
        while view:
            view = view[os.write(fd, view):]
        return JSONResponse({"bytes": len(body)})

    @app.post("/truncate")
    async def truncate(file: str = Query("produce")):
        os.ftruncate(fd_of(file), 0)  # untimed, between runs: every run writes into an empty file
        return JSONResponse({"bytes": 0})

    @app.get("/range")
    async def read_range(file: str = Query("fetch"), position: int = Query(0, ge=0),
                         length: int = Query(MiB, ge=1)):
        return Response(os.pread(fd_of(file), length, position), media_type="application/octet-stream")

    return app


def _serve_baseline(data_dir: str, port: int) -> None:
    import uvicorn

    app = baseline_app(Path(data_dir))
    uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, **UVICORN_SETTINGS)).run()


def _serve_node(overrides: list[str]) -> None:
    from lakelog.ingest_api.config.node import NodeConfig
    from lakelog.ingest_api.server import run_node

    sys.exit(run_node(NodeConfig(dict(kv.split("=", 1) for kv in overrides))))


def _install_profiler_signals(out: Path) -> None:
    """SIGUSR1 starts a fresh cProfile of the main thread; SIGUSR2 stops it and writes the stats
    to `out` (temp file, rename), so the bench reads only a complete file. Signal handlers run in
    the main thread, which is the one running uvicorn's event loop and every async handler."""
    state: dict[str, cProfile.Profile | None] = {"prof": None}

    def start(signum: int, frame: object) -> None:
        # Thread CPU time, not wall time: the loop's idle waits in epoll would otherwise dominate.
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


def serve_main(argv: list[str]) -> int:
    """`python bench/node.py _serve {baseline DIR PORT | node KEY=VALUE...} [--profile-out F]`:
    a server process of the benchmark."""
    parser = argparse.ArgumentParser(prog="bench/node.py _serve")
    parser.add_argument("kind", choices=("baseline", "node"))
    parser.add_argument("rest", nargs="*")
    parser.add_argument("--profile-out", type=Path)
    args = parser.parse_args(argv)
    if args.profile_out is not None:
        _install_profiler_signals(args.profile_out)
    if args.kind == "baseline":
        _serve_baseline(args.rest[0], int(args.rest[1]))
    else:
        _serve_node(args.rest)
    return 0


# ---------------------------------------------------------------------------------------------
# Server processes


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
#: Whether server processes get MALLOC_TUNABLES (main() clears it for --default-malloc).
PIN_MALLOC = True


@dataclass(frozen=True)
class Usage:
    user: float
    system: float
    minor_faults: int

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(self.user + other.user, self.system + other.system, self.minor_faults + other.minor_faults)

    def __sub__(self, other: "Usage") -> "Usage":
        return Usage(self.user - other.user, self.system - other.system, self.minor_faults - other.minor_faults)


@dataclass
class ServerProcess:
    """One server process on loopback (own session, output to a log file); `stop()` is SIGTERM,
    then SIGKILL of its process group if it does not exit in time."""

    name: str
    args: list[str]
    port: int
    log_path: Path
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, ready_path: str, timeout_s: float = 60.0) -> "ServerProcess":
        env = dict(os.environ)
        if PIN_MALLOC:
            env["GLIBC_TUNABLES"] = MALLOC_TUNABLES
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                         cwd=ROOT, env=env)
        try:
            self._wait_ready(ready_path, timeout_s)
        except BaseException:
            self.stop()  # the caller never gets a handle to stop: do it here
            raise
        return self

    def _wait_ready(self, ready_path: str, timeout_s: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.read_log()}")
            try:
                if httpx.get(self.url + ready_path, timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{self.name} on port {self.port} not ready after {timeout_s}s:\n{self.read_log()}")

    def read_log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def usage(self) -> "Usage":
        """CPU seconds (user, system) and minor page faults of the process (all threads) so far."""
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()  # fields[0] is stat field 3 (state)
        return Usage(int(fields[11]) / _CLOCK_TICKS, int(fields[12]) / _CLOCK_TICKS, int(fields[7]))

    def send(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def stop(self, timeout_s: float = 20.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def start_node(root: Path, name: str, *, profile_out: Path | None = None) -> ServerProcess:
    """`lakelog node` as tests/support/nodes.py starts it; with profiling, `run_node` through
    `_serve node`, which is the same code minus the command line parsing."""
    data_dir = root / f"{name}-data"
    port = free_port()
    overrides = {"node.id": "1", "log.dirs": str(data_dir), "listeners": f"http://127.0.0.1:{port}", **NODE_OVERRIDES}
    if profile_out is None:
        args = [LAKELOG, "node"]
        for k, v in overrides.items():
            args += ["--set", f"{k}={v}"]
    else:
        args = [sys.executable, str(Path(__file__).resolve()), "_serve", "node",
                *(f"{k}={v}" for k, v in overrides.items()), "--profile-out", str(profile_out)]
    return ServerProcess(name, args, port, root / f"{name}.log").start("/readyz")


def start_baseline(root: Path, name: str, *, profile_out: Path | None = None) -> ServerProcess:
    data_dir = root / f"{name}-data"
    data_dir.mkdir()
    port = free_port()
    args = [sys.executable, str(Path(__file__).resolve()), "_serve", "baseline", str(data_dir), str(port)]
    if profile_out is not None:
        args += ["--profile-out", str(profile_out)]
    return ServerProcess(name, args, port, root / f"{name}.log").start("/readyz")


def create_topic(node: ServerProcess, name: str, partitions: int, *, replace: bool = False) -> None:
    """Create `name`; with `replace`, delete it first if it exists (its files and page cache go)."""
    with httpx.Client(base_url=node.url, timeout=HTTP_TIMEOUT_S) as c:
        cluster_id = c.get("/v3/clusters").json()["data"][0]["cluster_id"]
        if replace:
            r = c.delete(f"/v3/clusters/{cluster_id}/topics/{name}")
            if r.status_code not in (200, 204, 404):
                raise RuntimeError(f"deleting topic {name}: {r.status_code} {r.text}")
        r = c.post(f"/v3/clusters/{cluster_id}/topics", json={"topic_name": name, "partitions_count": partitions})
        if r.status_code != 201:
            raise RuntimeError(f"creating topic {name}: {r.status_code} {r.text}")


def truncate_file(baseline: ServerProcess, file: str) -> None:
    with httpx.Client(base_url=baseline.url, timeout=HTTP_TIMEOUT_S) as c:
        _check(c.post("/truncate", params={"file": file}), "truncate")


# ---------------------------------------------------------------------------------------------
# Context, rows, formatting


@dataclass
class Row:
    name: str
    value: str
    baseline: str
    ratio: str
    target: str
    result: str  # "met", "MISSED" or "info"


@dataclass
class Finding:
    """A profile or cost table printed under the main table (why a figure is what it is)."""

    title: str
    lines: list[str]


@dataclass
class Scale:
    """Sizes of one run; `--scale` multiplies the produce, JSON produce and fetch volumes."""

    quick: bool
    factor: float

    def mib(self, default: int, quick: int) -> int:
        return max(1, int((quick if self.quick else default) * self.factor))

    @property
    def rounds(self) -> int:
        return 3 if self.quick else 5

    @property
    def latency_s(self) -> float:
        return 2.0 if self.quick else 10.0


@dataclass(frozen=True)
class JsonRun:
    """The JSON produce figures of the main run, for the write-up of its profile."""

    records_per_s: float
    node_cpu: float  # server CPU seconds per request, median
    baseline_cpu: float


@dataclass
class Context:
    scale: Scale
    root: Path
    node: ServerProcess
    baseline: ServerProcess
    rows: list[Row] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    #: One sentence per missed target: its measured cause (from its diagnosis).
    causes: list[str] = field(default_factory=list)
    cpu_rows: list[tuple[str, ...]] = field(default_factory=list)
    to_diagnose: list[str] = field(default_factory=list)
    json_run: JsonRun | None = None

    def log(self, message: str) -> None:
        print(f"  .. {message}", flush=True)


def fmt_rate(bytes_per_s: float) -> str:
    return f"{bytes_per_s / MB:,.0f} MB/s"


def fmt_count_rate(per_s: float, unit: str = "records/s") -> str:
    return f"{per_s:,.0f} {unit}"


def fmt_ms(seconds: float) -> str:
    ms = seconds * 1000
    return f"{ms:.2f}" if ms < 10 else f"{ms:.1f}"


def fmt_us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs"


def verdict_at_least(ratio: float, target: float) -> str:
    return "met" if ratio >= target else "MISSED"


# ---------------------------------------------------------------------------------------------
# Request bodies


def recordbatch_bodies(count: int, seed: int = 1) -> list[bytes]:
    """`count` distinct ~1 MiB RecordBatch v2 bodies: 1000 records, random 1 KiB values, no key."""
    rng = random.Random(seed)
    return [build_batch([Record(i, TIMESTAMP_MS, None, rng.randbytes(RECORD_VALUE_BYTES))
                         for i in range(RECORDS_PER_BATCH)]) for _ in range(count)]


def _text(rng: random.Random, n: int) -> str:
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    return "".join(rng.choices(letters, k=n))


def json_produce_bodies(count: int, records: int, value_chars: int, seed: int = 2) -> list[bytes]:
    """JSON v2 produce bodies: `records` keyed records whose values are JSON strings of
    `value_chars` characters (stored as value_chars + 2 bytes with the quotes)."""
    rng = random.Random(seed)
    return [json.dumps({"records": [{"key": f"user-{rng.randrange(1_000_000):06d}", "value": _text(rng, value_chars)}
                                    for _ in range(records)]}).encode() for _ in range(count)]


# ---------------------------------------------------------------------------------------------
# Client loops and per-run CPU accounting


def _check(r: httpx.Response, what: str) -> httpx.Response:
    if r.status_code != 200:
        raise RuntimeError(f"{what}: HTTP {r.status_code}: {r.text[:500]}")
    return r


def new_client(server: ServerProcess) -> httpx.Client:
    return httpx.Client(base_url=server.url, timeout=HTTP_TIMEOUT_S)


class Pool:
    """`connections` keep-alive clients of one server, each driven by its own thread."""

    def __init__(self, server: ServerProcess, connections: int) -> None:
        self.clients = [new_client(server) for _ in range(connections)]
        self.executor = ThreadPoolExecutor(max_workers=connections) if connections > 1 else None

    def run(self, job: Callable[[int, httpx.Client], None]) -> None:
        """job(i, client) for every connection i, concurrently; waits for all, re-raising errors."""
        if self.executor is None:
            job(0, self.clients[0])
            return
        for f in [self.executor.submit(job, i, c) for i, c in enumerate(self.clients)]:
            f.result()

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown()
        for c in self.clients:
            c.close()


@dataclass
class CpuLog:
    """Server usage and client CPU seconds of each run of a case (warm-up runs included first)."""

    server: list[Usage] = field(default_factory=list)
    client: list[float] = field(default_factory=list)

    def measured(self, warmup: int) -> tuple[float, float]:
        """Median server and client CPU seconds over the measured runs."""
        return (statistics.median(u.user + u.system for u in self.server[warmup:]),
                statistics.median(self.client[warmup:]))

    def cpu_ratio(self, other: "CpuLog", warmup: int) -> float:
        """Median over the measured runs of other's server CPU / this one's, run by run: for paired
        runs from `alternate`, the throughput ratio this side would reach if the server's CPU were
        all that counted (nan when a run used no measurable CPU)."""
        pairs = [(a.user + a.system, b.user + b.system) for a, b in zip(self.server[warmup:], other.server[warmup:])]
        return statistics.median(b / a if a > 0 else math.nan for a, b in pairs)

    def server_split(self, warmup: int) -> Usage:
        """Median user seconds, system seconds and minor faults of the server over the measured runs."""
        runs = self.server[warmup:]
        return Usage(statistics.median(u.user for u in runs), statistics.median(u.system for u in runs),
                     int(statistics.median(u.minor_faults for u in runs)))


def tracked(server: ServerProcess, fn: Callable[[], object], cpu: CpuLog,
            setup: Callable[[], None] | None = None) -> Callable[[], float]:
    """A timed case for `alternate`: `setup()` untimed, then `fn()` timed (wall seconds returned),
    recording the server process's CPU seconds and this process's (all client threads) over `fn`."""

    def run() -> float:
        if setup is not None:
            setup()
        s0, c0 = server.usage(), time.process_time()
        sw = stopwatch()
        fn()
        wall = sw()
        cpu.server.append(server.usage() - s0)
        cpu.client.append(time.process_time() - c0)
        return wall

    return run


def produce_binary(pool: Pool, topic: str, bodies: list[bytes], requests: int) -> Callable[[], None]:
    """`requests` fast-path produces spread over the pool's connections, connection i to partition i."""
    n = len(pool.clients)

    def job(i: int, client: httpx.Client) -> None:
        path = f"/topics/{topic}/partitions/{i % PARTITIONS}"
        headers = {"Content-Type": RECORDBATCH}
        for k in range(i, requests, n):
            _check(client.post(path, content=bodies[k % len(bodies)], headers=headers), "produce")

    return lambda: pool.run(job)


def post_append(pool: Pool, file: str, bodies: list[bytes], requests: int) -> Callable[[], None]:
    n = len(pool.clients)

    def job(i: int, client: httpx.Client) -> None:
        headers = {"Content-Type": "application/octet-stream"}
        for k in range(i, requests, n):
            _check(client.post("/append", params={"file": file}, content=bodies[k % len(bodies)], headers=headers),
                   "append")

    return lambda: pool.run(job)


def produce_json(pool: Pool, topic: str, bodies: list[bytes], requests: int) -> Callable[[], None]:
    n = len(pool.clients)

    def job(i: int, client: httpx.Client) -> None:
        headers = {"Content-Type": JSON_V2}
        for k in range(i, requests, n):
            _check(client.post(f"/topics/{topic}", content=bodies[k % len(bodies)], headers=headers), "json produce")

    return lambda: pool.run(job)


# ---------------------------------------------------------------------------------------------
# Produce (binary fast path)


def bench_produce(ctx: Context) -> None:
    bodies = recordbatch_bodies(DISTINCT_BODIES)
    size = len(bodies[0])
    total_mib = ctx.scale.mib(256, 32)
    requests = max(4, total_mib * MiB // size)
    nbytes = requests * size
    rounds = ctx.scale.rounds + (0 if ctx.scale.quick else 2)  # the noisiest case: more rounds
    per_round: dict[int, list[float]] = {}
    for conns in (1, 4):
        topic, file = f"bench-produce-{conns}", f"produce{conns}"
        node_pool, base_pool = Pool(ctx.node, conns), Pool(ctx.baseline, conns)
        cpu = {"node": CpuLog(), "baseline": CpuLog()}
        try:
            timings = alternate({
                "node": tracked(ctx.node, produce_binary(node_pool, topic, bodies, requests), cpu["node"],
                                lambda: create_topic(ctx.node, topic, PARTITIONS, replace=True)),
                "baseline": tracked(ctx.baseline, post_append(base_pool, file, bodies, requests), cpu["baseline"],
                                    lambda: truncate_file(ctx.baseline, file)),
            }, rounds=rounds, warmup=1)
        finally:
            node_pool.close()
            base_pool.close()
        node_t, base_t = timings["node"], timings["baseline"]
        ratio = paired_ratio(base_t, node_t)
        cpu_ratio = cpu["node"].cpu_ratio(cpu["baseline"], 1)
        per_round[conns] = [b / n for n, b in zip(node_t.samples, base_t.samples)]
        label = f"{conns} connection" + ("s" if conns > 1 else "")
        ctx.rows.append(Row(f"Produce, binary fast path, 1 MiB requests, {label}", fmt_rate(node_t.rate(nbytes)),
                            f"{fmt_rate(base_t.rate(nbytes))} (POST /append)",
                            f"{ratio:.2f}x (server CPU: {cpu_ratio:.2f}x)",
                            f">= {PRODUCE_TARGET:.2f}x", verdict_at_least(ratio, PRODUCE_TARGET)))
        add_cpu_rows(ctx, f"Produce 1 MiB, {label}", requests, cpu)
        ctx.log(f"produce {label}: node {fmt_rate(node_t.rate(nbytes))}, baseline {fmt_rate(base_t.rate(nbytes))}, "
                f"{ratio:.2f}x, server CPU {cpu_ratio:.2f}x (spread {node_t.spread():.0%} / {base_t.spread():.0%})")
        if ratio < PRODUCE_TARGET and "produce" not in ctx.to_diagnose:
            ctx.to_diagnose.append("produce")
    ctx.setup.append(
        f"**Produce**: {DISTINCT_BODIES} distinct RecordBatch v2 bodies of {size:,} B ({RECORDS_PER_BATCH} records, "
        f"random {RECORD_VALUE_BYTES} B values, no key, uncompressed, built with `build_batch`), cycled; "
        f"{requests} requests ({nbytes / MiB:,.0f} MiB) per run. Node: `POST /topics/T/partitions/P` with "
        f"`Content-Type: {RECORDBATCH}` (acks=all, the default; the node validates each batch — CRC-32C, "
        f"record walk — then appends it to the partition log without fsync). Baseline: `POST /append`, "
        f"`await request.body()` then `os.write` to an O_APPEND file. With 4 connections, 4 client threads "
        f"each own a keep-alive `httpx.Client` (connection i writes to partition i of a 4-partition topic; the "
        f"baseline's requests all append to one file). Every run starts empty, untimed: the node's topic is "
        f"deleted and created again, the baseline's file truncated — otherwise the GBs written over the runs "
        f"bring page-cache writeback into the later runs (measured: per-request server CPU grew ~60% over 3 "
        f"GB). {rounds} alternating rounds after a warm-up; medians; the ratio is the median over rounds of "
        f"the per-round ratio. Per-round ratios, 1 connection: "
        + ", ".join(f"{x:.2f}" for x in per_round[1]) + "; 4 connections: "
        + ", ".join(f"{x:.2f}" for x in per_round[4]) + ".")


def add_cpu_rows(ctx: Context, what: str, requests: int, cpu: dict[str, CpuLog], warmup: int = 1) -> None:
    for side, log in cpu.items():
        server, client = log.measured(warmup)
        u = log.server_split(warmup)
        ctx.cpu_rows.append((what, side, fmt_us(server / requests), fmt_us(u.user / requests),
                             fmt_us(u.system / requests), f"{u.minor_faults / requests:,.1f}",
                             fmt_us(client / requests)))


# ---------------------------------------------------------------------------------------------
# JSON produce


def bench_json(ctx: Context) -> None:
    bodies = json_produce_bodies(8, JSON_RECORDS_PER_REQUEST, RECORD_VALUE_BYTES)
    body_bytes = sum(map(len, bodies)) / len(bodies)
    requests = max(4, int((4 if ctx.scale.quick else 40) * ctx.scale.factor))
    records = requests * JSON_RECORDS_PER_REQUEST
    topic = "bench-json"
    node_pool, base_pool = Pool(ctx.node, 1), Pool(ctx.baseline, 1)
    cpu = {"node": CpuLog(), "baseline": CpuLog()}
    try:
        timings = alternate({
            "node": tracked(ctx.node, produce_json(node_pool, topic, bodies, requests), cpu["node"],
                            lambda: create_topic(ctx.node, topic, PARTITIONS, replace=True)),
            "baseline": tracked(ctx.baseline, post_append(base_pool, "json", bodies, requests), cpu["baseline"],
                                lambda: truncate_file(ctx.baseline, "json")),
        }, rounds=ctx.scale.rounds, warmup=1)
    finally:
        node_pool.close()
        base_pool.close()
    node_t, base_t = timings["node"], timings["baseline"]
    ratio = paired_ratio(base_t, node_t)
    nbytes = requests * body_bytes
    ctx.rows.append(Row(f"Produce, JSON v2, {JSON_RECORDS_PER_REQUEST} x 1 KiB records per request (keyed, "
                        f"{PARTITIONS} partitions)",
                        f"{fmt_count_rate(node_t.rate(records))} ({fmt_rate(node_t.rate(nbytes))} of JSON)",
                        f"{fmt_rate(base_t.rate(nbytes))} (POST /append of the same bodies, no per-record work; "
                        f"{fmt_count_rate(base_t.rate(records))})",
                        f"{ratio:.2f}x", "information (no target)", "info"))
    add_cpu_rows(ctx, f"Produce JSON, {JSON_RECORDS_PER_REQUEST} records", requests, cpu)
    ctx.json_run = JsonRun(node_t.rate(records), cpu["node"].measured(1)[0] / requests,
                           cpu["baseline"].measured(1)[0] / requests)
    ctx.log(f"json produce: node {node_t.rate(records):,.0f} records/s, baseline {base_t.rate(records):,.0f}, "
            f"{ratio:.2f}x")
    ctx.setup.append(
        f"**JSON produce**: 8 distinct bodies of {JSON_RECORDS_PER_REQUEST} records (`{{\"key\": \"user-NNNNNN\", "
        f"\"value\": \"<{RECORD_VALUE_BYTES} random letters>\"}}`, random keys, {body_bytes:,.0f} B per body), "
        f"{requests} requests ({records:,} records) per run, one connection, `POST /topics/T` with "
        f"`Content-Type: {JSON_V2}` to a {PARTITIONS}-partition topic (the node parses the JSON, partitions by "
        f"murmur2 of the key, builds one batch per partition). Baseline: `POST /append` of the same bodies, "
        f"which carries the bytes and does none of that per-record work: its figure is the HTTP cost of the "
        f"same bodies, not a target, and the node's rate is accounted for by a profile under \"Where the time "
        f"goes\". Each run starts empty (topic re-created, file truncated; untimed). {ctx.scale.rounds} "
        f"alternating rounds after a warm-up.")


# ---------------------------------------------------------------------------------------------
# Fetch


def consume_raw(client: httpx.Client, topic: str, end_offset: int, max_bytes: int) -> int:
    """Fetch [0, end_offset) with raw batches; next offset = last batch's last offset + 1."""
    offset, nbytes = 0, 0
    headers = {"Accept": RECORDBATCH}
    path = f"/topics/{topic}/partitions/0/records"
    while offset < end_offset:
        r = _check(client.get(path, params={"offset": offset, "max_bytes": max_bytes, "timeout": 0},
                              headers=headers), "fetch")
        data = r.content
        last = None
        for _, batch in iter_batches(data):
            last = batch
        if last is None:
            raise RuntimeError(f"empty fetch at offset {offset} below the end {end_offset}")
        offset = last.last_offset + 1
        nbytes += len(data)
    return nbytes


def consume_json(client: httpx.Client, topic: str, end_offset: int, max_bytes: int) -> int:
    """Fetch [0, end_offset) as binary v2 JSON; next offset = last record's offset + 1."""
    offset, records = 0, 0
    headers = {"Accept": BINARY_V2}
    path = f"/topics/{topic}/partitions/0/records"
    while offset < end_offset:
        out = _check(client.get(path, params={"offset": offset, "max_bytes": max_bytes, "timeout": 0},
                                headers=headers), "fetch json").json()
        if not out:
            raise RuntimeError(f"empty fetch at offset {offset} below the end {end_offset}")
        offset = out[-1]["offset"] + 1
        records += len(out)
    return records


def read_ranges(client: httpx.Client, file: str, size: int, length: int) -> int:
    position = 0
    while position < size:
        r = _check(client.get("/range", params={"file": file, "position": position, "length": length}), "range")
        if not r.content:
            raise RuntimeError(f"empty range at {position} below {size}")
        position += len(r.content)
    return position


def bench_fetch(ctx: Context) -> None:
    bodies = recordbatch_bodies(DISTINCT_BODIES, seed=3)
    size = len(bodies[0])
    batches = max(2, ctx.scale.mib(256, 32) * MiB // size)
    nbytes = batches * size
    records = batches * RECORDS_PER_BATCH
    topic = "bench-fetch"
    create_topic(ctx.node, topic, 1)
    fill = stopwatch()
    with new_client(ctx.node) as nc, new_client(ctx.baseline) as bc:
        for k in range(batches):
            _check(nc.post(f"/topics/{topic}/partitions/0", content=bodies[k % len(bodies)],
                           headers={"Content-Type": RECORDBATCH}), "fill")
            _check(bc.post("/append", params={"file": "fetch"}, content=bodies[k % len(bodies)]), "fill")
    ctx.log(f"filled {nbytes / MiB:,.0f} MiB on both sides in {fill():.1f} s")

    node_client, base_client = new_client(ctx.node), new_client(ctx.baseline)
    cpu = {"node": CpuLog(), "baseline": CpuLog()}
    got: dict[str, int] = {}

    def node_run() -> None:
        got["node"] = consume_raw(node_client, topic, records, FETCH_MAX_BYTES)

    def base_run() -> None:
        got["baseline"] = read_ranges(base_client, "fetch", nbytes, size)

    json_records = min(records, max(RECORDS_PER_BATCH, ctx.scale.mib(32, 8) * MiB // size * RECORDS_PER_BATCH))
    json_rounds = 1 if ctx.scale.quick else 3
    try:
        timings = alternate({"node": tracked(ctx.node, node_run, cpu["node"]),
                             "baseline": tracked(ctx.baseline, base_run, cpu["baseline"])},
                            rounds=ctx.scale.rounds, warmup=1)
        if got["node"] != nbytes or got["baseline"] != nbytes:
            raise RuntimeError(f"fetched {got} bytes, expected {nbytes} on each side")
        json_cpu = {"node": CpuLog()}
        json_t = alternate({"node": tracked(ctx.node, lambda: consume_json(node_client, topic, json_records,
                                                                           FETCH_MAX_BYTES), json_cpu["node"])},
                           rounds=json_rounds, warmup=1)["node"]
    finally:
        node_client.close()
        base_client.close()
    node_t, base_t = timings["node"], timings["baseline"]
    ratio = paired_ratio(base_t, node_t)
    cpu_ratio = cpu["node"].cpu_ratio(cpu["baseline"], 1)
    ctx.rows.append(Row(f"Fetch, raw RecordBatch (`Accept: {RECORDBATCH}`), max_bytes 1 MiB, warm cache",
                        f"{fmt_rate(node_t.rate(nbytes))} ({fmt_count_rate(node_t.rate(records))})",
                        f"{fmt_rate(base_t.rate(nbytes))} (GET /range, same bytes and request count)",
                        f"{ratio:.2f}x (server CPU: {cpu_ratio:.2f}x)", "information", "info"))
    ctx.rows.append(Row(f"Fetch, JSON (`Accept: {BINARY_V2}`), max_bytes 1 MiB",
                        f"{fmt_count_rate(json_t.rate(json_records))} "
                        f"({fmt_rate(json_t.rate(json_records / RECORDS_PER_BATCH * size))} of batches)",
                        f"{fmt_count_rate(node_t.rate(records))} (the raw fetch above)",
                        f"{node_t.rate(records) and json_t.rate(json_records) / node_t.rate(records):.2f}x",
                        "information", "info"))
    add_cpu_rows(ctx, "Fetch raw, 1 MiB", batches, cpu)
    add_cpu_rows(ctx, "Fetch JSON binary v2, 1 MiB", json_records // RECORDS_PER_BATCH,
                 {"node": json_cpu["node"]})
    ctx.log(f"fetch raw: node {fmt_rate(node_t.rate(nbytes))}, baseline {fmt_rate(base_t.rate(nbytes))}, "
            f"{ratio:.2f}x, server CPU {cpu_ratio:.2f}x; json {json_t.rate(json_records):,.0f} records/s")
    if ratio < FETCH_DIAGNOSE_BELOW:
        ctx.to_diagnose.append("fetch")
    ctx.setup.append(
        f"**Fetch**: {batches} batches of {size:,} B ({nbytes / MiB:,.0f} MiB, {records:,} records, 1 KiB random "
        f"values) produced through the fast path to a 1-partition topic, and appended to the baseline's file "
        f"(untimed). Node: a consumer loop `GET /topics/T/partitions/0/records?offset=O&max_bytes=1048576&timeout=0` "
        f"with `Accept: {RECORDBATCH}` from offset 0 to the end, the next offset being the last batch's last "
        f"offset + 1 (`iter_batches` on the client); each response is one whole batch ({size:,} B: two would pass "
        f"1 MiB). Baseline: `GET /range?position=P&length={size}` over its file (`os.pread`), so both sides "
        f"serve the same bytes in the same number of responses. Warm page cache (just written). "
        f"{ctx.scale.rounds} alternating rounds after a warm-up. JSON: the same loop with `Accept: {BINARY_V2}` "
        f"(values base64) over the first {json_records:,} records, next offset = last record's offset + 1, "
        f"the client decoding the JSON; {json_rounds} run(s) after a warm-up.")


# ---------------------------------------------------------------------------------------------
# Latency of small produces at a fixed rate


@dataclass
class LatencyResult:
    latencies: list[float]  # from the scheduled send time to the response (open loop)
    service: list[float]  # from the actual send to the response
    late: int  # requests sent more than 1 ms after their scheduled time

    def pct(self, q: float) -> float:
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, int(q * len(xs)))]

    def summary(self) -> str:
        return f"{fmt_ms(self.pct(0.5))} / {fmt_ms(self.pct(0.99))} / {fmt_ms(max(self.latencies))} ms"


def open_loop(server: ServerProcess, path: str, params: dict[str, str], bodies: list[bytes], content_type: str,
              rate: float, duration_s: float) -> LatencyResult:
    """Send len = rate x duration requests on a fixed schedule (request i at start + i / rate) from
    LATENCY_WORKERS keep-alive connections: a free worker takes the next request and sleeps until its
    time. A slow response delays later requests only when every worker is busy, and that delay
    counts in their latency (no coordinated omission)."""
    total = int(rate * duration_s)
    clients = [new_client(server) for _ in range(LATENCY_WORKERS)]
    headers = {"Content-Type": content_type}
    for c in clients:  # open the connections outside the schedule
        _check(c.post(path, params=params, content=bodies[0], headers=headers), "latency warm-up")
    lock = threading.Lock()
    state = {"next": 0}
    lat: list[float] = []
    svc: list[float] = []
    late = [0]
    errors: list[BaseException] = []
    start = time.perf_counter() + 0.05

    def worker(client: httpx.Client) -> None:
        try:
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
                _check(client.post(path, params=params, content=bodies[i % len(bodies)], headers=headers), path)
                done = time.perf_counter()
                with lock:
                    lat.append(done - due)
                    svc.append(done - sent)
                    if sent - due > 0.001:
                        late[0] += 1
        except BaseException as e:  # noqa: BLE001 - re-raised below in the calling thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(c,), daemon=True) for c in clients]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        for c in clients:
            c.close()
    if errors:
        raise errors[0]
    return LatencyResult(lat, svc, late[0])


def bench_latency(ctx: Context) -> None:
    topic = "bench-latency"
    create_topic(ctx.node, topic, PARTITIONS)
    bodies = json_produce_bodies(256, 1, LATENCY_VALUE_BYTES - 2, seed=4)
    duration = ctx.scale.latency_s
    cases = [("node acks=all", ctx.node, f"/topics/{topic}", {"acks": "all"}, JSON_V2),
             ("baseline", ctx.baseline, "/append", {"file": "latency"}, "application/octet-stream"),
             ("node acks=1", ctx.node, f"/topics/{topic}", {"acks": "1"}, JSON_V2)]
    results = {name: LatencyResult([], [], 0) for name, *_ in cases}
    used = {name: Usage(0.0, 0.0, 0) for name, *_ in cases}
    client = {name: 0.0 for name, *_ in cases}
    for k in range(LATENCY_SLICES):
        for name, server, path, params, ctype in cases[k % len(cases):] + cases[:k % len(cases)]:
            s0, c0 = server.usage(), time.process_time()
            r = open_loop(server, path, params, bodies, ctype, LATENCY_RATE, duration / LATENCY_SLICES)
            used[name] = used[name] + (server.usage() - s0)
            client[name] += time.process_time() - c0
            results[name] = LatencyResult(results[name].latencies + r.latencies, results[name].service + r.service,
                                          results[name].late + r.late)
    busy = {name: (u.user + u.system) / duration for name, u in used.items()}
    for name, r in results.items():
        add_cpu_rows(ctx, f"Small JSON produce at {LATENCY_RATE}/s", len(r.latencies),
                     {name: CpuLog([used[name]], [client[name]])}, warmup=0)
        ctx.log(f"latency {name}: p50/p99/max {r.summary()}, {r.late} late sends, server CPU busy {busy[name]:.0%}")
    base = results["baseline"]
    for name in ("node acks=all", "node acks=1"):
        r = results[name]
        ctx.rows.append(Row(f"Latency of a 1-record JSON produce (100 B value) at {LATENCY_RATE} req/s, "
                            f"{name.removeprefix('node ')}: p50 / p99 / max",
                            r.summary(), f"{base.summary()} (POST /append)",
                            f"p50 {r.pct(0.5) / base.pct(0.5):.1f}x", "information", "info"))
    ctx.setup.append(
        f"**Latency**: {int(LATENCY_RATE * duration):,} requests at a fixed {LATENCY_RATE} requests/s "
        f"({duration:.0f} s) per case, open loop: request i is due at start + i/{LATENCY_RATE} s and its latency "
        f"runs from that due time to the end of the response, from {LATENCY_WORKERS} keep-alive connections (a free "
        f"worker takes the next due request). Body: one JSON v2 record `{{\"key\": \"user-NNNNNN\", \"value\": "
        f"\"<98 letters>\"}}` (a 100 B stored value; 256 distinct bodies, random keys) to `POST /topics/T` of a "
        f"{PARTITIONS}-partition topic with `acks=all` then `acks=1` (one replica: both answer after the local "
        f"append); the baseline gets the same bodies on `POST /append`. The three cases take turns in "
        f"{LATENCY_SLICES} slices of {duration / LATENCY_SLICES:g} s each, the order rotating (node acks=all, "
        f"baseline, node acks=1; then baseline, node acks=1, node acks=all; ...), so load from other processes "
        f"falls on all three alike; each slice opens its connections with one untimed request each. Sends more "
        f"than 1 ms late (all workers busy): "
        + ", ".join(f"{n} {r.late}" for n, r in results.items()) + ". Server CPU over each case (one event-loop "
        "thread does the work, so this is roughly how busy it was; queueing behind it makes the p99): "
        + ", ".join(f"{n} {b:.0%}" for n, b in busy.items()) + ".")


# ---------------------------------------------------------------------------------------------
# Where the time goes: CPU accounting of node and baseline, cProfile of their event loops


@dataclass(frozen=True)
class ProfiledFn:
    function: str
    calls: int
    tottime: float
    cumtime: float


def _short(filename: str, line: int, name: str) -> str:
    if filename == "~":
        return name
    parts = Path(filename).parts
    for anchor in ("ingest_api", "logstore", "index", "infra", "bench", "starlette", "fastapi", "uvicorn", "h11",
                   "httptools", "uvloop", "anyio", "pydantic", "pydantic_core", "prometheus_client", "asyncio", "json",
                   "concurrent"):
        if anchor in parts:
            return f"{Path(*parts[parts.index(anchor):])}:{line}({name})"
    return f"{Path(filename).name}:{line}({name})"


def load_profile(path: Path) -> tuple[float, list[ProfiledFn]]:
    stats = pstats.Stats(str(path))
    rows = [ProfiledFn(_short(f, line, name), nc, tt, ct)
            for (f, line, name), (_cc, nc, tt, ct, _callers) in stats.stats.items()]  # type: ignore[attr-defined]
    return stats.total_tt, rows  # type: ignore[attr-defined]


def profiled_run(server: ServerProcess, out: Path, workload: Callable[[], object],
                 setup: Callable[[], None] | None = None) -> tuple[float, list[ProfiledFn]]:
    """`setup()` unprofiled, then `workload()` with the server's main thread profiled."""
    if setup is not None:
        setup()
    out.unlink(missing_ok=True)
    server.send(signal.SIGUSR1)
    time.sleep(0.2)  # the handler runs on the loop's next wake-up; let it start before the load
    workload()
    server.send(signal.SIGUSR2)
    deadline = time.monotonic() + 30
    while not out.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{server.name} wrote no profile:\n{server.read_log()}")
        time.sleep(0.05)
    return load_profile(out)


_SERVER_IO = "socket and file syscalls (send, recv, epoll, pwritev / write, pread)"
_HTTP = "uvicorn + its HTTP parser (httptools or h11; transport)"
_LOOP = "event loop (asyncio tasks and callbacks; uvloop or the asyncio selector loop)"
_LAYERS = (
    ("logstore/", "logstore + index (validation, append, read)"),
    ("index/", "logstore + index (validation, append, read)"),
    ("ingest_api/http/app.py", "ingest_api `ObserveMiddleware` (request counter and latency histogram; its "
                          "prometheus calls count under prometheus_client)"),
    ("ingest_api/", "ingest_api (routers, node, formats, partitioner)"),
    ("prometheus_client/", "prometheus_client (metrics)"),
    ("anyio/", "anyio (task groups, cancel scopes, memory streams)"),
    ("starlette/", "starlette + fastapi (routing, requests, responses, params)"),
    ("fastapi/", "starlette + fastapi (routing, requests, responses, params)"),
    ("pydantic", "starlette + fastapi (routing, requests, responses, params)"),
    ("uvicorn/", _HTTP),
    ("h11/", _HTTP),
    ("httptools/", _HTTP),
    ("asyncio/", _LOOP),
    ("selectors.py", _LOOP),
    ("uvloop/", _LOOP),
    ("json/", "json"),
    ("infra/", "infra (config)"),
)


def _layer(fn: str) -> str:
    for prefix, layer in _LAYERS:
        if fn.startswith(prefix):
            return layer
    if "crc32c" in fn:
        return "CRC-32C (crc32c C extension)"
    if "_recordscan" in fn:
        return "C record walk (_recordscan)"
    if any(k in fn for k in ("posix.pwrite", "posix.write", "posix.pread", "'send' of", "'recv' of", "epoll",
                             "socket")):
        return _SERVER_IO
    if "join' of 'bytes'" in fn or "builtins.bytes" in fn or "memoryview" in fn:
        return "bytes copies (join, bytes())"
    if "httptools" in fn:
        return _HTTP
    if "_asyncio" in fn or "_contextvars" in fn or "uvloop" in fn:
        return _LOOP
    return "other built-ins"


def layer_times(profiles: dict[str, tuple[float, list[ProfiledFn]]], requests: int) -> dict[str, dict[str, float]]:
    """Own seconds per request of each layer (outer key) in each profile (inner key)."""
    per: dict[str, dict[str, float]] = {}
    for name, (_total, rows) in profiles.items():
        for r in rows:
            layer = per.setdefault(_layer(r.function), {})
            layer[name] = layer.get(name, 0.0) + r.tottime / requests
    return per


def layer_table(profiles: dict[str, tuple[float, list[ProfiledFn]]], requests: int) -> list[str]:
    """Own time per layer and request: with two profiles, one column each and the difference
    (largest first); with one, its time and share (largest first)."""
    names = list(profiles)
    per = layer_times(profiles, requests)
    if len(names) == 1:
        (a,) = names
        total = profiles[a][0] / requests
        lines = [f"| layer (own CPU time) | {a}, µs per request | share |", "|---|---:|---:|"]
        for g in sorted(per, key=lambda g: -per[g][a]):
            lines.append(f"| {g} | {per[g][a] * 1e6:,.0f} | {per[g][a] / total:.0%} |")
        lines.append(f"| **total** | **{total * 1e6:,.0f}** | **100%** |")
        return lines
    a, b = names
    order = sorted(per, key=lambda g: -(per[g].get(a, 0.0) - per[g].get(b, 0.0)))
    lines = [f"| layer (own CPU time) | {a}, µs per request | {b}, µs per request | difference |",
             "|---|---:|---:|---:|"]
    for g in order:
        x, y = per[g].get(a, 0.0), per[g].get(b, 0.0)
        lines.append(f"| {g} | {x * 1e6:,.0f} | {y * 1e6:,.0f} | {(x - y) * 1e6:+,.0f} |")
    ta, tb = profiles[a][0] / requests, profiles[b][0] / requests
    lines.append(f"| **total** | **{ta * 1e6:,.0f}** | **{tb * 1e6:,.0f}** | **{(ta - tb) * 1e6:+,.0f}** |")
    return lines


def _matches(fn: str, path: str, name: str) -> bool:
    if not path:
        return name in fn
    return fn.startswith(path + ":") and fn.endswith(f"({name})")


@dataclass(frozen=True)
class Part:
    """A named part of a request path, measured in a profile: `depth` 0 for a top-level part, 1 for
    a part of the one above it, and so on."""

    label: str
    depth: int
    calls: float  # per request
    seconds: float  # per request
    share: float  # of the profiled total

    @property
    def name(self) -> str:
        """The label's first `code` span (the function), for sentences."""
        return self.label.split("`")[1] if self.label.count("`") >= 2 else self.label


def measure_parts(total: float, rows: list[ProfiledFn], parts: Sequence[tuple[str, str, str, str]],
                  requests: int) -> list[Part]:
    """Cumulative (or own) time of named functions per request; parts absent from the profile are left out."""
    out = []
    for label, path, name, mode in parts:
        hits = [r for r in rows if _matches(r.function, path, name)]
        if hits:
            t = sum(h.cumtime if mode == "cum" else h.tottime for h in hits)
            text = label.lstrip("… ")
            depth = label[:len(label) - len(text)].count("…")
            out.append(Part(text, depth, sum(h.calls for h in hits) / requests, t / requests, t / total))
    return out


def part_table(measured: list[Part], baseline: list[Part] | None = None) -> list[str]:
    """The parts of the node's request path; with `baseline`, its figures for the parts it has too
    (the FastAPI machinery both servers run)."""
    if baseline is None:
        lines = ["| part (CPU time, profiled; cumulative unless marked own) | calls per request | µs per request "
                 "| share |", "|---|---:|---:|---:|"]
        for p in measured:
            lines.append(f"| {'… ' * p.depth}{p.label} | {p.calls:,.1f} | {p.seconds * 1e6:,.0f} | {p.share:.0%} |")
        return lines
    base = {p.label: p for p in baseline}
    lines = ["| part (CPU time, profiled; cumulative unless marked own) | node: calls per request | node: µs per "
             "request | baseline: calls per request | baseline: µs per request |", "|---|---:|---:|---:|---:|"]
    for p in measured:
        b = base.get(p.label)
        theirs = f"{b.calls:,.1f} | {b.seconds * 1e6:,.0f}" if b else "— | —"
        lines.append(f"| {'… ' * p.depth}{p.label} | {p.calls:,.1f} | {p.seconds * 1e6:,.0f} | {theirs} |")
    return lines


def top_table(total: float, rows: list[ProfiledFn], requests: int, limit: int) -> list[str]:
    lines = ["| function | calls per request | own µs per request | own % | cumulative µs per request |",
             "|---|---:|---:|---:|---:|"]
    for r in sorted(rows, key=lambda r: r.tottime, reverse=True)[:limit]:
        lines.append(f"| `{r.function}` | {r.calls / requests:,.1f} | {r.tottime / requests * 1e6:,.0f} | "
                     f"{r.tottime / total:.0%} | {r.cumtime / requests * 1e6:,.0f} |")
    return lines


@dataclass
class Workload:
    """What one server is asked to do in a diagnosis or profile: `setup()` untimed, then `run()`."""

    setup: Callable[[], None] | None
    run: Callable[[], object]


#: (label, file or "" for a built-in, function name, "cum" or "own") of the parts shown per request.
#: A label's leading "… " marks a part of the part above it. Only synchronous functions are shown
#: cumulatively: cProfile counts a coroutine's suspensions and resumptions as recursion, so the
#: cumulative time of `async def` functions (the routes, `ObserveMiddleware`) is unreliable; their
#: own time is shown, and the layer table attributes everything else.
#: FastAPI's work for any route, in the node and the baseline alike: compare the two.
FASTAPI_PARTS = (
    ("FastAPI routing: `_match` (routes tried in order; calls per request = routers walked)", "fastapi/routing.py",
     "_match", "cum"),
    ("FastAPI parameters: `request_params_to_args` (path, query and header parameters)",
     "fastapi/dependencies/utils.py", "request_params_to_args", "cum"),
)
PRODUCE_PARTS = (
    ("`Partition.append_as_leader`: leader checks, validation, append to the partition log, high watermark",
     "ingest_api/replication/partition.py", "append_as_leader", "cum"),
    ("… `validate_batch` (CRC-32C, C record walk, header checks)", "logstore/record_batch.py", "validate_batch",
     "cum"),
    ("… `os.pwritev` into the segment file", "", "posix.pwritev", "cum"),
    ("`Node.produce_batches`, own time (then, for acks=all, `Partition.wait_for_commit`)", "ingest_api/node.py",
     "produce_batches", "own"),
    ("`Partition.wait_for_commit`, own time (acks=all: a future per request, woken by the high watermark)",
     "ingest_api/replication/partition.py", "wait_for_commit", "own"),
    ("`_produce_response` (the offsets, written as text)", "ingest_api/http/routers/records.py", "_produce_response",
     "cum"),
    ("`_count` (prometheus produce counters)", "ingest_api/http/routers/records.py", "_count", "cum"),
    ("`produce_to_partition` (the route), own time", "ingest_api/http/routers/records.py", "produce_to_partition", "own"),
    ("`read_body`, own time (the loop over the body's chunks)", "ingest_api/http/routers/deps.py", "read_body", "own"),
    ("`Node._min_isr` (the topic's `LogConfig`, for min.insync.replicas)", "ingest_api/node.py", "_min_isr", "cum"),
    *FASTAPI_PARTS,
)
JSON_PARTS = (
    ("`parse_produce_request`: `orjson.loads` of the body, then per record key and value re-serialised by "
     "orjson into columns (no object per record)", "ingest_api/records/formats.py", "parse_produce_request", "cum"),
    ("… `_json_bytes` (a key: orjson, or the standard library for what orjson cannot write)",
     "ingest_api/records/formats.py", "_json_bytes", "cum"),
    ("`StickyPartitioner.partition`: the partition of each record by its key", "ingest_api/records/partitioner.py",
     "partition", "cum"),
    ("… `partition_for_key` (murmur2 in C, `_batchbuild`)", "", "partition_for_key", "cum"),
    ("`build_batch_columns`: one RecordBatch per partition (records encoded in C, `_batchbuild.encode_columns`)",
     "logstore/batch_columns.py", "build_batch_columns", "cum"),
    ("`Partition.append_as_leader`: validation and append, one per partition", "ingest_api/replication/partition.py",
     "append_as_leader", "cum"),
    ("`Node.produce_records`, own time (grouping the records by partition)",
     "ingest_api/node.py", "produce_records", "own"),
    ("`_produce_response` (500 offsets written as text)", "ingest_api/http/routers/records.py", "_produce_response",
     "cum"),
    ("`_count` (prometheus produce counters)", "ingest_api/http/routers/records.py", "_count", "cum"),
    ("`produce_to_topic` (the route), own time", "ingest_api/http/routers/records.py", "produce_to_topic", "own"),
)
FETCH_PARTS = (
    ("`Partition.read` → `PartitionLog.read` (offset lookup, pread, CRC check)", "ingest_api/replication/partition.py", "read",
     "cum"),
    ("… `os.pread`", "", "posix.pread", "cum"),
    ("… CRC-32C", "", "crc32c", "cum"),
    ("`fetch_records` (the route), own time: includes `bytes(result.records)`, a copy of the batch",
     "ingest_api/http/routers/records.py", "fetch_records", "own"),
    ("`Node.partition` lookups (metadata, leader check)", "ingest_api/node.py", "partition", "cum"),
    *FASTAPI_PARTS,
)


@dataclass
class Diagnosis:
    title: str
    parts: Sequence[tuple[str, str, str, str]]
    requests: int
    nbytes: int
    workloads: dict[str, Workload]


def _produce_case(ctx: Context, servers: dict[str, ServerProcess], pools: list[Pool]) -> Diagnosis:
    conns = 4
    bodies = recordbatch_bodies(DISTINCT_BODIES, seed=5)
    requests = 128 if ctx.scale.quick else 256
    workloads = {}
    for name, server in servers.items():
        pool = Pool(server, conns)
        pools.append(pool)
        if name == "baseline":
            workloads[name] = Workload(lambda s=server: truncate_file(s, "diag"),
                                       post_append(pool, "diag", bodies, requests))
        else:
            workloads[name] = Workload(lambda s=server: create_topic(s, "diag", PARTITIONS, replace=True),
                                       produce_binary(pool, "diag", bodies, requests))
    return Diagnosis(f"Produce, binary fast path, 1 MiB requests, {conns} connections", PRODUCE_PARTS, requests,
                     requests * len(bodies[0]), workloads)


def _json_case(ctx: Context, servers: dict[str, ServerProcess], pools: list[Pool]) -> Diagnosis:
    bodies = json_produce_bodies(8, JSON_RECORDS_PER_REQUEST, RECORD_VALUE_BYTES, seed=7)
    requests = 8 if ctx.scale.quick else 24
    workloads = {}
    for name, server in servers.items():
        pool = Pool(server, 1)
        pools.append(pool)
        if name == "baseline":
            workloads[name] = Workload(lambda s=server: truncate_file(s, "djson"),
                                       post_append(pool, "djson", bodies, requests))
        else:
            workloads[name] = Workload(lambda s=server: create_topic(s, "djson", PARTITIONS, replace=True),
                                       produce_json(pool, "djson", bodies, requests))
    return Diagnosis(f"Produce, JSON v2, {JSON_RECORDS_PER_REQUEST} x 1 KiB records per request, 1 connection",
                     JSON_PARTS, requests, int(requests * sum(map(len, bodies)) / len(bodies)), workloads)


def _fetch_case(ctx: Context, servers: dict[str, ServerProcess], pools: list[Pool]) -> Diagnosis:
    bodies = recordbatch_bodies(DISTINCT_BODIES, seed=6)
    size = len(bodies[0])
    requests = 128 if ctx.scale.quick else 256
    workloads = {}
    for name, server in servers.items():
        pool = Pool(server, 1)
        pools.append(pool)
        client = pool.clients[0]
        if name == "baseline":
            for k in range(requests):
                _check(client.post("/append", params={"file": "dfetch"}, content=bodies[k % len(bodies)]), "fill")
            workloads[name] = Workload(None, lambda c=client: read_ranges(c, "dfetch", requests * size, size))
        else:
            create_topic(server, "dfetch", 1)
            for k in range(requests):
                _check(client.post("/topics/dfetch/partitions/0", content=bodies[k % len(bodies)],
                                   headers={"Content-Type": RECORDBATCH}), "fill")
            workloads[name] = Workload(None, lambda c=client: consume_raw(c, "dfetch", requests * RECORDS_PER_BATCH,
                                                                          FETCH_MAX_BYTES))
    return Diagnosis("Fetch, raw RecordBatch, max_bytes 1 MiB, 1 connection", FETCH_PARTS, requests,
                     requests * size, workloads)


#: Cases compared with the baseline when diagnosed (like for like: the same bytes on both sides).
DIAGNOSES = {"produce": _produce_case, "fetch": _fetch_case}


def diagnose(ctx: Context, cases: list[str], profile_json: bool) -> None:
    """On fresh processes: for each of `cases`, server CPU of the node and the baseline under the same
    requests (alternated, unprofiled), then a cProfile of each; with `profile_json`, a cProfile of the
    node alone under JSON produce (its baseline does none of the per-record work, so there is
    nothing to compare with)."""
    root = ctx.root / "diagnosis"
    root.mkdir()
    outs = {"node": root / "node.prof", "baseline": root / "baseline.prof"}
    servers: dict[str, ServerProcess] = {}
    pools: list[Pool] = []
    try:
        servers["node"] = start_node(root, "node", profile_out=outs["node"])
        if cases:
            servers["baseline"] = start_baseline(root, "baseline", profile_out=outs["baseline"])
        for case in cases:
            d = DIAGNOSES[case](ctx, servers, pools)
            ctx.log(f"diagnosis of {case}: CPU accounting of node and baseline")
            cpu = {name: CpuLog() for name in servers}
            timings = alternate({name: tracked(servers[name], w.run, cpu[name], w.setup)
                                 for name, w in d.workloads.items()}, rounds=3, warmup=1)
            ctx.log(f"diagnosis of {case}: profiles")
            profiles = {name: profiled_run(servers[name], outs[name], w.run, w.setup)
                        for name, w in d.workloads.items()}
            ctx.findings.append(Finding(f"{d.title}: where the server's time goes",
                                        diagnosis_lines(timings, cpu, profiles, d)))
            missed = [r.name for r in ctx.rows if r.result == "MISSED" and r.name.lower().startswith(case)]
            if missed:
                ctx.causes.append(missed_cause(missed, cpu, profiles, d))
        if profile_json:
            d = _json_case(ctx, {"node": servers["node"]}, pools)
            w = d.workloads["node"]
            ctx.log("profile of JSON produce on the node")
            if w.setup is not None:
                w.setup()
            w.run()  # warm-up
            profile = profiled_run(servers["node"], outs["node"], w.run, w.setup)
            ctx.findings.append(Finding(f"{d.title}: what the node's rate is made of",
                                        json_profile_lines(ctx, profile, d)))
    finally:
        for pool in pools:
            pool.close()
        for server in servers.values():
            server.stop()


_PROFILE_NOTE = ("thread CPU time, so idle waits in epoll do not count; profiling inflates Python-level costs "
                 "about 2-3x, so read shares, not absolute µs")


def diagnosis_lines(timings: dict[str, Timing], cpu: dict[str, CpuLog],
                    profiles: dict[str, tuple[float, list[ProfiledFn]]], d: Diagnosis) -> list[str]:
    requests, nbytes = d.requests, d.nbytes
    rows = []
    totals = {}
    for name, t in timings.items():
        u = cpu[name].server_split(1)
        totals[name] = cpu[name].measured(1)[0] / requests  # median of user + system, as in the CPU table
        rows.append((name, fmt_rate(t.rate(nbytes)), fmt_us(u.user / requests), fmt_us(u.system / requests),
                     fmt_us(totals[name]), f"{u.minor_faults / requests:,.1f}"))
    node, base = totals["node"], totals["baseline"]
    lines = [
        f"The same {requests} requests to the node and the baseline, fresh processes, alternated (3 rounds after "
        "a warm-up, medians); server CPU from /proc/PID/stat (all threads, unprofiled).",
        "",
        markdown_table(("server", "throughput", "user CPU per request", "system CPU per request",
                        "CPU per request", "minor faults per request"), rows),
        "",
    ]
    if base > 0:
        lines += [
            f"The node spends {fmt_us(node - base)} {'more' if node >= base else 'less'} CPU per request than the "
            f"baseline ({node / base:.2f}x). One uvicorn worker runs every request on one thread, so once the "
            "client is off that thread (several connections) throughput follows CPU per request.",
            "",
        ]
    (nt, nrows), (bt, brows) = profiles["node"], profiles["baseline"]
    lines += [
        f"cProfile of the main thread (uvicorn's event loop, which runs every handler) of each under the same "
        f"requests; {_PROFILE_NOTE}. Own time by layer, largest difference first:",
        "",
        *layer_table(profiles, requests),
        "",
        "Named parts of the node's request path, and of the baseline's where it runs the same code (synchronous "
        "functions, cumulative: cProfile's cumulative time of coroutines is unreliable; a coroutine's calls "
        "count each resumption):",
        "",
        *part_table(measure_parts(nt, nrows, d.parts, requests), measure_parts(bt, brows, d.parts, requests)),
        "",
        "Node, top functions by own time:",
        "",
        *top_table(nt, nrows, requests, 16),
        "",
        "Baseline, top functions by own time:",
        "",
        *top_table(bt, brows, requests, 8),
    ]
    loop_n, loop_b = _loop_iterations(nrows), _loop_iterations(brows)
    if loop_n and loop_b:
        lines += ["", f"Event-loop iterations per request: node {loop_n / requests:,.1f}, baseline "
                  f"{loop_b / requests:,.1f} (each iteration is an epoll wait plus the callbacks it wakes)."]
    return lines


def missed_cause(missed: list[str], cpu: dict[str, CpuLog], profiles: dict[str, tuple[float, list[ProfiledFn]]],
                 d: Diagnosis) -> str:
    """One sentence for the missed targets of a diagnosed case: the CPU the node spends beyond the
    baseline per request (unprofiled), then the layers and named parts that account for most of it
    (profiled)."""
    node, base = (cpu[name].measured(1)[0] / d.requests for name in ("node", "baseline"))
    per = layer_times(profiles, d.requests)
    layers = sorted(((g, t.get("node", 0.0) - t.get("baseline", 0.0)) for g, t in per.items()), key=lambda x: -x[1])
    theirs = {p.label: p.seconds for p in measure_parts(*profiles["baseline"], d.parts, d.requests)}
    parts = sorted(((p.name, p.seconds - theirs.get(p.label, 0.0))
                    for p in measure_parts(*profiles["node"], d.parts, d.requests) if p.depth == 0),
                   key=lambda x: -x[1])
    return (f"**{'; '.join(missed)}**: in the diagnosis ({d.title}) the node spent {fmt_us(node)} of server "
            f"CPU per request against the baseline's {fmt_us(base)}; one uvicorn worker runs every request on "
            f"one thread, so that CPU bounds its throughput. The largest differences in their profiles "
            f"(profiled µs per request), by layer: "
            + ", ".join(f"{g} {x * 1e6:+,.0f}" for g, x in layers[:3] if x > 0)
            + "; by named part of the request path (each with the sub-parts listed under it in the diagnosis below): "
            + ", ".join(f"`{n}` {x * 1e6:+,.0f}" for n, x in parts[:4] if x > 0) + ".")


def _loop_iterations(rows: list[ProfiledFn]) -> int:
    return sum(r.calls for r in rows if _matches(r.function, "asyncio/base_events.py", "_run_once"))


def json_profile_lines(ctx: Context, profile: tuple[float, list[ProfiledFn]], d: Diagnosis) -> list[str]:
    total, rows = profile
    requests = d.requests
    parts = measure_parts(total, rows, d.parts, requests)
    lines = []
    if ctx.json_run is not None:
        r = ctx.json_run
        share = f", {r.baseline_cpu / r.node_cpu:.0%} of the node's" if r.node_cpu and r.baseline_cpu else ""
        lines += [
            f"In the runs above the node took {fmt_count_rate(r.records_per_s)} on one connection: "
            f"{fmt_us(r.node_cpu)} of server CPU per request of {JSON_RECORDS_PER_REQUEST} records, "
            f"{fmt_us(r.node_cpu / JSON_RECORDS_PER_REQUEST)} per record. The baseline's `POST /append` of the "
            f"same bodies (HTTP, FastAPI, one `os.write`) took {fmt_us(r.baseline_cpu)} per request{share}: the "
            f"rest is work per record, in Python. There is no target for this case and the ratio to the "
            f"baseline is not a gap to close; this profile says what the rate is made of.",
            "",
        ]
    top = sorted((p for p in parts if p.depth == 0), key=lambda p: -p.seconds)[:2]
    if top:
        def described(p: Part) -> str:
            i = parts.index(p)
            children = []
            for c in parts[i + 1:]:
                if c.depth == 0:
                    break
                if c.depth == 1:
                    children.append(c)
            children = sorted(children, key=lambda c: -c.seconds)[:2]
            inner = f" (of which {' and '.join(f'`{c.name}` {c.share:.0%}' for c in children)})" if children else ""
            return f"`{p.name}` {p.share:.0%}{inner}"
        lines += [f"Most of the node's event-loop CPU goes to {' and '.join(described(p) for p in top)} "
                  "(shares of the profiled total).", ""]
    lines += [
        f"cProfile of the node's main thread (uvicorn's event loop, which runs every handler) over {requests} "
        f"requests on a fresh process after a warm-up run; {_PROFILE_NOTE}. Named parts of the request path "
        f"(synchronous functions, cumulative):",
        "",
        *part_table(parts),
        "",
        "Own time by layer:",
        "",
        *layer_table({"node": profile}, requests),
        "",
        "Top functions by own time:",
        "",
        *top_table(total, rows, requests, 12),
    ]
    return lines


# ---------------------------------------------------------------------------------------------
# Report


def uvicorn_stack() -> str:
    """The HTTP parser and event loop uvicorn's "auto" settings (both servers') pick on this machine."""
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    return f"{http} HTTP parser, {loop} event loop"


def cpu_table(ctx: Context) -> list[str]:
    malloc = (f"both servers ran with `GLIBC_TUNABLES={MALLOC_TUNABLES}`" if PIN_MALLOC
              else "both servers ran with glibc's default (dynamic) malloc thresholds")
    return ["CPU per request, medians over the measured runs: the server process (all threads, from "
            "/proc/PID/stat, 10 ms ticks) and this client process (all threads). Client and servers share the "
            f"machine's CPUs, so the client's share bounds what either server can reach; {malloc}.", "",
            markdown_table(CPU_HEADERS, ctx.cpu_rows)]


def render_markdown(ctx: Context, machine: dict[str, str], started: _dt.datetime, seconds: float,
                    load_end: str) -> str:
    lines = [
        "## Ingest node",
        "",
        f"Generated by `bench/node.py` on {started:%Y-%m-%d %H:%M} UTC in {seconds:.0f} s. "
        f"Command: `{command_line()}`. Commit: `{git_revision(ROOT)}`.",
        "",
        f"Machine: {machine['nproc']} CPUs ({machine['cpu']}), {machine['memory']} memory, {machine['python']}, "
        f"{machine['kernel']}, temp data on {machine['file system']}. Client, node and baseline run on the same "
        f"machine over loopback. 1-minute load average {machine['load']} at the start, {load_end} at the end. "
        f"{machine['conditions']} Other processes sharing the CPUs make absolute figures lower and noisier; the "
        f"alternated baselines share the same conditions, so the ratios hold better than the rates.",
        "",
        markdown_table(HEADERS, [(r.name, r.value, r.baseline, r.ratio, r.target, r.result) for r in ctx.rows]),
        "",
        *missed_targets(ctx.causes),
        "MB/s are 10^6 bytes per second of wall time at the median run, counted in request bodies (produce) or "
        "response bodies (fetch). A ratio is node / baseline throughput, the median over rounds of the ratio "
        "within a round (runs alternate, so each pair shares the machine's conditions); for latency, node p50 / "
        "baseline p50; for the JSON fetch, JSON records/s / raw records/s. Latencies are p50 / p99 / max in ms. "
        "\"Server CPU\" is the same median ratio in server CPU per request (baseline / node, from /proc, run by "
        "run): what the ratio would be if only the servers' CPU counted, which other processes on the machine "
        "disturb less than wall time. The client's own CPU time per request is the same on both sides, so on a "
        "quiet machine the wall ratio lies between it and 1. Verdicts use the wall-time ratio.",
        "",
        "### How each figure was measured",
        "",
        "- **Processes**: the node is `lakelog node --set log.dirs=<temp> --set listeners=http://127.0.0.1:<free "
        "port> --set log.cleaner.enable=false` (other keys default: 1 GiB segments, no fsync per append); the "
        "baseline is `baseline_app` in `bench/node.py` run by `python bench/node.py _serve baseline` in its own "
        "process. Both are single uvicorn workers (`log_config=None`, `access_log=False`, `timeout_keep_alive=30`; "
        f"{uvicorn_stack()}); the baseline also sets `limit_concurrency=1000`, while the node counts "
        "`max.connections` as connections are accepted. The client "
        "is `httpx.Client` (keep-alive), the same functions for both sides.",
    ]
    lines += [f"- {s}" for s in ctx.setup]
    lines += ["", "### Where the time goes", "", *cpu_table(ctx), ""]
    for f in ctx.findings:
        lines += [f"#### {f.title}", "", *f.lines, ""]
    return "\n".join(lines).rstrip() + "\n"


BENCHES: dict[str, Callable[[Context], None]] = {
    "produce": bench_produce,
    "json": bench_json,
    "fetch": bench_fetch,
    "latency": bench_latency,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_serve"]:
        return serve_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run, under a minute)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply the produce, JSON produce and fetch volumes (default 1)")
    parser.add_argument("--only", default="", help=f"comma-separated subset of {', '.join(BENCHES)} "
                        "(implies --no-write)")
    parser.add_argument("--profile", action="store_true",
                        help="diagnose produce and fetch even when their ratios are at or above 0.8x")
    parser.add_argument("--default-malloc", action="store_true",
                        help="leave glibc's malloc thresholds dynamic in the server processes (noisier)")
    parser.add_argument("--dir", default="/tmp", help="where the temporary data goes (default /tmp)")
    parser.add_argument("--no-write", action="store_true", help=f"do not update {DOC_PATH.relative_to(ROOT)}")
    parser.add_argument("--note", default="", help="what else ran on the machine, for the report (e.g. \"shared "
                        "with a concurrent test run\"); the CPU other processes used is measured either way")
    args = parser.parse_args(argv)
    if args.scale <= 0:
        parser.error("--scale must be positive")
    selected = [b.strip() for b in args.only.split(",") if b.strip()] or list(BENCHES)
    unknown = [b for b in selected if b not in BENCHES]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    write = not args.no_write and not args.only
    global PIN_MALLOC
    PIN_MALLOC = not args.default_malloc

    started = _dt.datetime.now(_dt.timezone.utc)
    machine = machine_info(args.dir)
    others = OtherCpu()
    root = Path(tempfile.mkdtemp(prefix="lakelog-node-bench-", dir=args.dir))
    print(f"Ingest node benchmarks in {root} ({'quick' if args.quick else 'default'} scale x{args.scale:g})",
          flush=True)
    clock = stopwatch()
    node = baseline = None
    try:
        node = start_node(root, "node")
        baseline = start_baseline(root, "baseline")
        print(f"node pid {node.proc.pid} on {node.url}, baseline pid {baseline.proc.pid} on {baseline.url}",
              flush=True)
        ctx = Context(Scale(args.quick, args.scale), root, node, baseline)
        for name in selected:
            print(f"[{name}]", flush=True)
            t0 = time.perf_counter()
            BENCHES[name](ctx)
            print(f"  .. {name} took {time.perf_counter() - t0:.1f} s", flush=True)
        node.stop()
        baseline.stop()
        if args.profile:
            ctx.to_diagnose = [c for c in DIAGNOSES if c in selected]
        profile_json = "json" in selected
        if ctx.to_diagnose or profile_json:
            print(f"[diagnosis: {', '.join(ctx.to_diagnose + ['json profile'] * profile_json)}]", flush=True)
            t0 = time.perf_counter()
            diagnose(ctx, ctx.to_diagnose, profile_json)
            print(f"  .. diagnosis took {time.perf_counter() - t0:.1f} s", flush=True)
    finally:
        for proc in (node, baseline):
            if proc is not None:
                proc.stop()
        shutil.rmtree(root, ignore_errors=True)
    seconds = clock()
    machine["conditions"] = conditions(machine["nproc"], others.cpus(), args.note)
    print()
    print(machine["conditions"])
    print()
    print(text_table(HEADERS, [(r.name, r.value, r.baseline, r.ratio, r.target, r.result) for r in ctx.rows]))
    for line in missed_targets(ctx.causes):
        print(line)
    print()
    print(text_table(CPU_HEADERS, ctx.cpu_rows))
    for f in ctx.findings:
        print(f"\n{f.title}")
        print("\n".join(f.lines))
    if write:
        rewrite_section(DOC_PATH, SECTION, render_markdown(ctx, machine, started, seconds, load_average()))
        print(f"\nwrote the '{SECTION}' section of {DOC_PATH.relative_to(ROOT)}")
    missed = [r.name for r in ctx.rows if r.result == "MISSED"]
    print(f"\n{len(missed)} target(s) missed" + (": " + "; ".join(missed) if missed else ""), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
