"""Ingest node benchmarks: a real `lakelog node` process against a bare FastAPI app, same run, same client.

    python bench/node.py            # default scale, about three minutes on 2 cores
    python bench/node.py --quick    # small sizes, under a minute: a smoke run (use with --no-write)
    python bench/node.py --scale 2  # twice the bytes of produce and fetch

Two server processes run side by side on loopback, with the uvicorn settings of
`ingest_api/server.py` (one worker, `log_config=None`, `access_log=False`, the same limits):

* the node — `lakelog node` on a temp data dir (`log.cleaner.enable=false`);
* the baseline — the FastAPI app in this file, `POST /append` appends the raw request body to a
  file and `GET /range` serves bytes of a file by `position` and `length` (`os.pread`).

Both are driven by the same client code (httpx.Client, keep-alive connections), case by case
alternated round by round (`bench.harness.alternate`). What is measured (targets in brackets):

* produce  — the binary fast path, `POST /topics/{t}/partitions/{p}` with
             `application/vnd.kafka.recordbatch` bodies of one ~1 MiB RecordBatch v2 (1000 x 1 KiB
             records), against `POST /append` of the same bodies; 1 and 4 connections [>= 0.8x].
* json     — JSON v2 produce to `/topics/{t}` (keyed, 4 partitions), 500 x 1 KiB records per
             request: records/s; the baseline appends the same bodies (information).
* fetch    — a consumer loop over ~256 MiB with `Accept: application/vnd.kafka.recordbatch` and
             `max_bytes` 1 MiB, against `GET /range` of the same bytes in ranges of the same size;
             then the same loop with `Accept: application/vnd.kafka.binary.v2+json`: records/s
             (information).
* latency  — JSON produce of one 100 B record at a fixed rate (200 requests/s, open loop: latency
             is counted from each request's scheduled time), acks=all and acks=1; p50 / p99 / max
             (information), and the baseline's `POST /append` of the same bodies on the same schedule.

Each server process's CPU time (utime + stime from /proc) is sampled around every run, so the
report can say how much server CPU a request costs on each side. A missed target (or `--profile`)
adds a cProfile of the node process and of the baseline process under the same workload: each is
started again, profiling its main thread (uvicorn's event loop, where the handlers run) only while
the workload runs.

Every figure is printed and written to the "Ingest node" section of docs/benchmarks.md
(`--no-write` to skip). Temp data lives under `--dir` (default /tmp) and is removed afterwards; both
server processes are always stopped.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as _dt
import json
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
    Timing,
    alternate,
    command_line,
    git_revision,
    load_average,
    machine_info,
    markdown_table,
    paired_ratio,
    rewrite_section,
    stopwatch,
    text_table,
)
from ingest_api.formats import BINARY_V2, JSON_V2, RECORDBATCH  # noqa: E402
from logstore.record_batch import Record, build_batch, iter_batches  # noqa: E402

DOC_PATH = ROOT / "docs" / "benchmarks.md"
SECTION = "node"

#: The node's executable, as tests/support/nodes.py starts it.
LAKELOG = str(Path(sys.executable).with_name("lakelog"))

#: uvicorn settings of the node (ingest_api/server.py `run_node`), given to the baseline too.
UVICORN_SETTINGS = dict(log_config=None, access_log=False, timeout_graceful_shutdown=5,
                        limit_concurrency=1000, timeout_keep_alive=30)

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
PRODUCE_TARGET = 0.8

HEADERS = ("Benchmark", "Lakelog node", "Baseline (same run)", "Ratio", "Target", "Result")


# ---------------------------------------------------------------------------------------------
# The baseline server: a bare FastAPI app, run as its own uvicorn process


def baseline_app(data_dir: Path) -> FastAPI:
    """`POST /append?file=NAME` appends the raw body to DATA_DIR/NAME.bin; `GET /range?file=NAME&
    position=P&length=N` returns up to N bytes of it from P. Nothing else: no validation, no copy
    beyond what FastAPI and uvicorn do for any handler."""
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
    from ingest_api.config import NodeConfig
    from ingest_api.server import run_node

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
    """`python bench/node.py _serve {baseline DIR PORT | node KEY=VALUE...} [--profile-out F]`."""
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
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                         cwd=ROOT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.read_log()}")
            try:
                if httpx.get(self.url + ready_path, timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{self.name} on port {self.port} not ready after {timeout_s}s:\n{self.read_log()}")

    def read_log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the process (all its threads) so far."""
        assert self.proc is not None
        with open(f"/proc/{self.proc.pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS

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


def create_topic(node: ServerProcess, name: str, partitions: int) -> None:
    with httpx.Client(base_url=node.url, timeout=HTTP_TIMEOUT_S) as c:
        cluster_id = c.get("/v3/clusters").json()["data"][0]["cluster_id"]
        r = c.post(f"/v3/clusters/{cluster_id}/topics", json={"topic_name": name, "partitions_count": partitions})
        if r.status_code != 201:
            raise RuntimeError(f"creating topic {name}: {r.status_code} {r.text}")


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
    """Sizes of one run; `--scale` multiplies the produce and fetch byte volumes."""

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


@dataclass
class Context:
    scale: Scale
    root: Path
    node: ServerProcess
    baseline: ServerProcess
    force_profile: bool
    rows: list[Row] = field(default_factory=list)
    setup: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    cpu_rows: list[tuple[str, ...]] = field(default_factory=list)
    to_profile: list[str] = field(default_factory=list)

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
    """Server and client CPU seconds of each run of a case (warm-up runs included first)."""

    server: list[float] = field(default_factory=list)
    client: list[float] = field(default_factory=list)

    def measured(self, warmup: int) -> tuple[float, float]:
        """Median server and client CPU seconds over the measured runs."""
        return statistics.median(self.server[warmup:]), statistics.median(self.client[warmup:])


def tracked(server: ServerProcess, fn: Callable[[], None], cpu: CpuLog) -> Callable[[], None]:
    """`fn`, recording the server process's CPU seconds and this process's (all client threads)."""

    def run() -> None:
        s0, c0 = server.cpu_seconds(), time.process_time()
        fn()
        cpu.server.append(server.cpu_seconds() - s0)
        cpu.client.append(time.process_time() - c0)

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
    rounds = ctx.scale.rounds
    for conns in (1, 4):
        topic = f"bench-produce-{conns}"
        create_topic(ctx.node, topic, PARTITIONS)
        node_pool, base_pool = Pool(ctx.node, conns), Pool(ctx.baseline, conns)
        cpu = {"node": CpuLog(), "baseline": CpuLog()}
        try:
            timings = alternate({
                "node": tracked(ctx.node, produce_binary(node_pool, topic, bodies, requests), cpu["node"]),
                "baseline": tracked(ctx.baseline, post_append(base_pool, f"produce{conns}", bodies, requests),
                                    cpu["baseline"]),
            }, rounds=rounds, warmup=1)
        finally:
            node_pool.close()
            base_pool.close()
        node_t, base_t = timings["node"], timings["baseline"]
        ratio = paired_ratio(base_t, node_t)
        label = f"{conns} connection" + ("s" if conns > 1 else "")
        ctx.rows.append(Row(f"Produce, binary fast path, 1 MiB requests, {label}", fmt_rate(node_t.rate(nbytes)),
                            f"{fmt_rate(base_t.rate(nbytes))} (POST /append)", f"{ratio:.2f}x",
                            f">= {PRODUCE_TARGET:.2f}x", verdict_at_least(ratio, PRODUCE_TARGET)))
        add_cpu_rows(ctx, f"Produce 1 MiB, {label}", requests, cpu)
        ctx.log(f"produce {label}: node {fmt_rate(node_t.rate(nbytes))}, baseline {fmt_rate(base_t.rate(nbytes))}, "
                f"{ratio:.2f}x (spread {node_t.spread():.0%} / {base_t.spread():.0%})")
        if ratio < PRODUCE_TARGET and "produce" not in ctx.to_profile:
            ctx.to_profile.append("produce")
    ctx.setup.append(
        f"**Produce**: {DISTINCT_BODIES} distinct RecordBatch v2 bodies of {size:,} B ({RECORDS_PER_BATCH} records, "
        f"random {RECORD_VALUE_BYTES} B values, no key, uncompressed, built with `build_batch`), cycled; "
        f"{requests} requests ({nbytes / MiB:,.0f} MiB) per run. Node: `POST /topics/T/partitions/P` with "
        f"`Content-Type: {RECORDBATCH}` (acks=all, the default; the node validates each batch — CRC-32C, "
        f"record walk — then appends it to the partition log without fsync). Baseline: `POST /append`, "
        f"`await request.body()` then `os.write` to an O_APPEND file. With 4 connections, 4 client threads "
        f"each own a keep-alive `httpx.Client` (connection i writes to partition i of a 4-partition topic; the "
        f"baseline's requests all append to one file). {rounds} alternating rounds after a warm-up; medians; "
        f"the ratio is the median over rounds of the per-round ratio.")


def add_cpu_rows(ctx: Context, what: str, requests: int, cpu: dict[str, CpuLog], warmup: int = 1) -> None:
    for side, log in cpu.items():
        server, client = log.measured(warmup)
        ctx.cpu_rows.append((what, side, fmt_us(server / requests), fmt_us(client / requests)))


# ---------------------------------------------------------------------------------------------
# JSON produce


def bench_json(ctx: Context) -> None:
    bodies = json_produce_bodies(8, JSON_RECORDS_PER_REQUEST, RECORD_VALUE_BYTES)
    body_bytes = sum(map(len, bodies)) / len(bodies)
    requests = max(4, int((4 if ctx.scale.quick else 40) * ctx.scale.factor))
    records = requests * JSON_RECORDS_PER_REQUEST
    topic = "bench-json"
    create_topic(ctx.node, topic, PARTITIONS)
    node_pool, base_pool = Pool(ctx.node, 1), Pool(ctx.baseline, 1)
    cpu = {"node": CpuLog(), "baseline": CpuLog()}
    try:
        timings = alternate({
            "node": tracked(ctx.node, produce_json(node_pool, topic, bodies, requests), cpu["node"]),
            "baseline": tracked(ctx.baseline, post_append(base_pool, "json", bodies, requests), cpu["baseline"]),
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
                        f"{fmt_rate(base_t.rate(nbytes))} (POST /append of the same bodies; "
                        f"{fmt_count_rate(base_t.rate(records))})",
                        f"{ratio:.2f}x", "information", "info"))
    add_cpu_rows(ctx, f"Produce JSON, {JSON_RECORDS_PER_REQUEST} records", requests, cpu)
    ctx.log(f"json produce: node {node_t.rate(records):,.0f} records/s, baseline {base_t.rate(records):,.0f}, "
            f"{ratio:.2f}x")
    ctx.setup.append(
        f"**JSON produce**: 8 distinct bodies of {JSON_RECORDS_PER_REQUEST} records (`{{\"key\": \"user-NNNNNN\", "
        f"\"value\": \"<{RECORD_VALUE_BYTES} random letters>\"}}`, random keys, {body_bytes:,.0f} B per body), "
        f"{requests} requests ({records:,} records) per run, one connection, `POST /topics/T` with "
        f"`Content-Type: {JSON_V2}` to a {PARTITIONS}-partition topic (the node parses the JSON, partitions by "
        f"murmur2 of the key, builds one batch per partition). Baseline: `POST /append` of the same bodies. "
        f"{ctx.scale.rounds} alternating rounds after a warm-up.")


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
    ctx.rows.append(Row(f"Fetch, raw RecordBatch (`Accept: {RECORDBATCH}`), max_bytes 1 MiB, warm cache",
                        f"{fmt_rate(node_t.rate(nbytes))} ({fmt_count_rate(node_t.rate(records))})",
                        f"{fmt_rate(base_t.rate(nbytes))} (GET /range, same bytes and request count)",
                        f"{ratio:.2f}x", "information", "info"))
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
            f"{ratio:.2f}x; json {json_t.rate(json_records):,.0f} records/s")
    if ratio < PRODUCE_TARGET:
        ctx.to_profile.append("fetch")
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
    results: dict[str, LatencyResult] = {}
    cases = [("node acks=all", ctx.node, f"/topics/{topic}", {"acks": "all"}, JSON_V2),
             ("baseline", ctx.baseline, "/append", {"file": "latency"}, "application/octet-stream"),
             ("node acks=1", ctx.node, f"/topics/{topic}", {"acks": "1"}, JSON_V2)]
    for name, server, path, params, ctype in cases:
        results[name] = open_loop(server, path, params, bodies, ctype, LATENCY_RATE, duration)
        r = results[name]
        ctx.log(f"latency {name}: p50/p99/max {r.summary()}, {r.late} late sends")
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
        f"append); the baseline gets the same bodies on `POST /append`. Cases run one after the other: node "
        f"acks=all, baseline, node acks=1. Sends more than 1 ms late (all workers busy): "
        + ", ".join(f"{n} {r.late}" for n, r in results.items()) + ".")


# ---------------------------------------------------------------------------------------------
# Profiling the server processes


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
                   "anyio", "pydantic", "prometheus_client", "asyncio", "json", "concurrent"):
        if anchor in parts:
            return f"{Path(*parts[parts.index(anchor):])}:{line}({name})"
    return f"{Path(filename).name}:{line}({name})"


def load_profile(path: Path) -> tuple[float, list[ProfiledFn]]:
    stats = pstats.Stats(str(path))
    rows = [ProfiledFn(_short(f, line, name), nc, tt, ct)
            for (f, line, name), (_cc, nc, tt, ct, _callers) in stats.stats.items()]  # type: ignore[attr-defined]
    return stats.total_tt, rows  # type: ignore[attr-defined]


def profiled_run(server: ServerProcess, out: Path, workload: Callable[[], None]) -> tuple[float, list[ProfiledFn]]:
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


def _group(fn: str) -> str:
    """Which layer a function belongs to, for the per-layer split of a profile."""
    for prefix, group in (("logstore/", "logstore (validate, append, read)"), ("index/", "logstore (validate, append, read)"),
                          ("ingest_api/", "ingest_api (routers, node, formats, app middleware)"),
                          ("prometheus_client/", "prometheus_client (metrics)"),
                          ("starlette/", "starlette + fastapi + anyio"), ("fastapi/", "starlette + fastapi + anyio"),
                          ("anyio/", "starlette + fastapi + anyio"), ("pydantic", "starlette + fastapi + anyio"),
                          ("uvicorn/", "uvicorn + h11 (HTTP parsing, transport)"),
                          ("h11/", "uvicorn + h11 (HTTP parsing, transport)"),
                          ("asyncio/", "asyncio event loop"), ("json/", "json"), ("infra/", "infra (config)")):
        if fn.startswith(prefix):
            return group
    if "crc32c" in fn:
        return "CRC-32C (crc32c C extension)"
    if "_recordscan" in fn:
        return "C record walk (_recordscan)"
    if "posix.pwrite" in fn or "posix.write" in fn or "posix.pread" in fn or "posix.read" in fn:
        return "file I/O syscalls (pwritev / write / pread)"
    if "socket" in fn or "recv" in fn or "send" in fn or "select" in fn or "epoll" in fn:
        return "socket / epoll syscalls"
    if "method 'join' of 'bytes'" in fn or "bytes" in fn or "memoryview" in fn:
        return "bytes copies (join, slicing)"
    return "other built-ins"


def profile_lines(total: float, rows: list[ProfiledFn], requests: int, limit: int = 14) -> list[str]:
    top = sorted(rows, key=lambda r: r.tottime, reverse=True)[:limit]
    lines = [f"cProfile of the server's main thread, {total * 1000:,.0f} ms profiled over {requests} requests "
             f"({total / requests * 1e6:,.0f} µs per request; profiling inflates Python-level costs). Top functions "
             f"by own time:", "",
             "| function | calls | own ms | own % | µs per request | cumulative ms |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in top:
        lines.append(f"| `{r.function}` | {r.calls:,} | {r.tottime * 1000:,.1f} | "
                     f"{r.tottime / total:.0%} | {r.tottime / requests * 1e6:,.0f} | {r.cumtime * 1000:,.1f} |")
    return lines


def group_table(profiles: dict[str, tuple[float, list[ProfiledFn], int]]) -> list[str]:
    """Own time per layer and request, one column per profiled server."""
    names = list(profiles)
    groups: dict[str, dict[str, float]] = {}
    for name, (_total, rows, requests) in profiles.items():
        for r in rows:
            groups.setdefault(_group(r.function), {}).setdefault(name, 0.0)
            groups[_group(r.function)][name] += r.tottime / requests
    order = sorted(groups, key=lambda g: -max(groups[g].values()))
    lines = ["| layer (own time) | " + " | ".join(f"{n}, µs per request" for n in names) + " |",
             "|---|" + "---:|" * len(names)]
    for g in order:
        lines.append(f"| {g} | " + " | ".join(f"{groups[g].get(n, 0.0) * 1e6:,.0f}" for n in names) + " |")
    lines.append("| **total** | " + " | ".join(f"**{profiles[n][0] / profiles[n][2] * 1e6:,.0f}**" for n in names)
                 + " |")
    return lines


def run_profiles(ctx: Context) -> None:
    """Start a profiled node and a profiled baseline, drive each case's workload, report."""
    root = ctx.root / "profile"
    root.mkdir()
    node_out, base_out = root / "node.prof", root / "baseline.prof"
    node = base = None
    try:
        node = start_node(root, "node-profiled", profile_out=node_out)
        base = start_baseline(root, "baseline-profiled", profile_out=base_out)
        for case in ctx.to_profile:
            for out in (node_out, base_out):
                out.unlink(missing_ok=True)
            if case == "produce":
                bodies = recordbatch_bodies(4, seed=5)
                requests = 64 if ctx.scale.quick else 128
                create_topic(node, "profile-produce", PARTITIONS)
                np, bp = Pool(node, 1), Pool(base, 1)
                try:
                    produce_binary(np, "profile-produce", bodies, 4)()  # warm the code paths
                    post_append(bp, "profile", bodies, 4)()
                    node_prof = profiled_run(node, node_out, produce_binary(np, "profile-produce", bodies, requests))
                    base_prof = profiled_run(base, base_out, post_append(bp, "profile", bodies, requests))
                finally:
                    np.close()
                    bp.close()
                title = f"Produce, binary fast path, 1 MiB requests ({requests} requests, one connection)"
            else:  # fetch
                bodies = recordbatch_bodies(4, seed=6)
                requests = 64 if ctx.scale.quick else 128
                size = len(bodies[0])
                create_topic(node, "profile-fetch", 1)
                with new_client(node) as nc, new_client(base) as bc:
                    for k in range(requests):
                        _check(nc.post("/topics/profile-fetch/partitions/0", content=bodies[k % 4],
                                       headers={"Content-Type": RECORDBATCH}), "fill")
                        _check(bc.post("/append", params={"file": "pfetch"}, content=bodies[k % 4]), "fill")
                    consume_raw(nc, "profile-fetch", requests * RECORDS_PER_BATCH, FETCH_MAX_BYTES)  # warm
                    node_prof = profiled_run(node, node_out, lambda: consume_raw(
                        nc, "profile-fetch", requests * RECORDS_PER_BATCH, FETCH_MAX_BYTES))
                    base_prof = profiled_run(base, base_out, lambda: read_ranges(bc, "pfetch", requests * size, size))
                title = f"Fetch, raw RecordBatch, max_bytes 1 MiB ({requests} requests, one connection)"
            lines = ["Own time per request by layer, node vs baseline under the same requests:", "",
                     *group_table({"node": (*node_prof, requests), "baseline": (*base_prof, requests)}), "",
                     "Node:", "", *profile_lines(*node_prof, requests), "",
                     "Baseline:", "", *profile_lines(*base_prof, requests, limit=8)]
            ctx.findings.append(Finding(f"{title}: where the server's time goes", lines))
    finally:
        for proc in (node, base):
            if proc is not None:
                proc.stop()


# ---------------------------------------------------------------------------------------------
# Report


def cpu_table(ctx: Context) -> list[str]:
    return ["CPU per request, medians over the measured runs: the server process (all threads, from "
            "/proc/PID/stat, 10 ms ticks) and this client process (all threads). Client and servers share the "
            "machine's CPUs, so the client's share bounds what either server can reach.", "",
            markdown_table(("workload", "server", "server CPU per request", "client CPU per request"), ctx.cpu_rows)]


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
        f"machine over loopback. 1-minute load average {machine['load']} at the start, {load_end} at the end "
        f"(other processes sharing the CPUs make absolute figures lower; the alternated baselines share the same "
        f"conditions).",
        "",
        markdown_table(HEADERS, [(r.name, r.value, r.baseline, r.ratio, r.target, r.result) for r in ctx.rows]),
        "",
        "MB/s are 10^6 bytes per second of wall time at the median run, counted in request bodies (produce) or "
        "response bodies (fetch). A ratio is node / baseline throughput, the median over rounds of the ratio "
        "within a round (runs alternate, so each pair shares the machine's conditions); for latency, node p50 / "
        "baseline p50; for the JSON fetch, JSON records/s / raw records/s. Latencies are p50 / p99 / max in ms.",
        "",
        "### How each figure was measured",
        "",
        "- **Processes**: the node is `lakelog node --set log.dirs=<temp> --set listeners=http://127.0.0.1:<free "
        "port> --set log.cleaner.enable=false` (other keys default: 1 GiB segments, no fsync per append); the "
        "baseline is `baseline_app` in `bench/node.py` run by `python bench/node.py _serve baseline` in its own "
        "process. Both are single uvicorn workers with the node's settings (`log_config=None`, "
        "`access_log=False`, `limit_concurrency=1000`, `timeout_keep_alive=30`; h11, asyncio loop). The client "
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
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the produce and fetch volumes (default 1)")
    parser.add_argument("--only", default="", help=f"comma-separated subset of {', '.join(BENCHES)} "
                        "(implies --no-write)")
    parser.add_argument("--profile", action="store_true",
                        help="profile the node and the baseline under produce and fetch even when targets are met")
    parser.add_argument("--dir", default="/tmp", help="where the temporary data goes (default /tmp)")
    parser.add_argument("--no-write", action="store_true", help=f"do not update {DOC_PATH.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    if args.scale <= 0:
        parser.error("--scale must be positive")
    selected = [b.strip() for b in args.only.split(",") if b.strip()] or list(BENCHES)
    unknown = [b for b in selected if b not in BENCHES]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    write = not args.no_write and not args.only

    started = _dt.datetime.now(_dt.timezone.utc)
    machine = machine_info(args.dir)
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
        ctx = Context(Scale(args.quick, args.scale), root, node, baseline, args.profile)
        for name in selected:
            print(f"[{name}]", flush=True)
            t0 = time.perf_counter()
            BENCHES[name](ctx)
            print(f"  .. {name} took {time.perf_counter() - t0:.1f} s", flush=True)
        node.stop()
        baseline.stop()
        if args.profile:
            ctx.to_profile = [c for c in ("produce", "fetch") if c in selected]
        if ctx.to_profile:
            print(f"[profile: {', '.join(ctx.to_profile)}]", flush=True)
            t0 = time.perf_counter()
            run_profiles(ctx)
            print(f"  .. profiling took {time.perf_counter() - t0:.1f} s", flush=True)
    finally:
        for proc in (node, baseline):
            if proc is not None:
                proc.stop()
        shutil.rmtree(root, ignore_errors=True)
    seconds = clock()
    print()
    print(text_table(HEADERS, [(r.name, r.value, r.baseline, r.ratio, r.target, r.result) for r in ctx.rows]))
    print()
    print(text_table(("workload", "server", "server CPU per request", "client CPU per request"), ctx.cpu_rows))
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
