"""CPU per record of Lakelog's two produce paths, this tree against another checkout, alternated.

    python bench/produce_cpu.py --base /tmp/base-checkout     # this tree vs that one, 3 rounds
    python bench/produce_cpu.py                               # this tree only
    python bench/produce_cpu.py --records 100000 --rounds 5 --no-write

The two cases of issue 17's peer benchmark whose cost is per record, measured in CPU time (user +
system), which a shared machine's load inflates far less than it divides records/s:
  - client produce: `lakelog.client.Producer` (binary path, idempotent, batch.size 1 MiB, linger.ms 5,
    5 in flight, the peer bench's settings), N x 1 KiB to one partition, acks=all: CPU of the
    caller's thread in `produce()` alone, of the whole client process, and of the node;
  - JSON v2 REST produce: `application/vnd.kafka.json.v2+json`, 500 records of a 1 KiB JSON string
    per request, 4 client threads: CPU of the node per record;
  - consume: `lakelog.client.Consumer` (a group member, binary fetch, native decoding) reading the
    client case's records back: CPU of the client process and of the node per record.
One `lakelog node` on loopback per tree and round (log cleaner off), a fresh topic per case. Each
tree runs in its own worker process (`--worker`), its `lakelog` package taken from that checkout
(a folder of symlinks put first on PYTHONPATH, C extensions built in the checkout), so the node and
the client are both the tree's. Rounds alternate the trees (A B, B A, ...); the best (lowest) CPU
of the rounds is reported, and the load with it. Figures go to docs/benchmarks.md, section
"produce-cpu". The node is always stopped; temp data is removed.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("infra", "index", "logstore", "tiering", "compaction", "ingest_api", "spark_log", "cli")
_TICK = os.sysconf("SC_CLK_TCK")


def _proc_cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _tree_path(tree: Path, work: Path) -> str:
    """A folder whose `lakelog/` maps each package to `tree`'s folder (what pip -e maps for this tree)."""
    if tree.resolve() == ROOT:
        return ""
    d = work / "pythonpath" / "lakelog"
    d.mkdir(parents=True)
    for pkg in PACKAGES:
        (d / pkg).symlink_to(tree.resolve() / pkg)
    return str(d.parent)


def worker(records: int) -> dict[str, float]:
    """One round in this process's tree: a node, then both cases; prints nothing, returns figures."""
    import httpx

    from bench.peer_kafka import LakelogCluster
    from lakelog.client import Consumer, Producer

    work = Path(tempfile.mkdtemp(prefix="produce-cpu-"))
    node = LakelogCluster(work, 1)
    out: dict[str, float] = {}
    try:
        pid = node.procs[0].pid
        node.create_topic("client")
        payloads = [os.urandom(1024) for _ in range(64)]
        p = Producer({"bootstrap.servers": node.url, "acks": "all", "batch.size": 1 << 20, "linger.ms": 5,
                      "buffer.memory": 64 << 20, "max.in.flight.requests.per.connection": 5})
        try:
            p.partitions_for("client")
            s0, c0, t0, w0 = _proc_cpu_s(pid), _self_cpu_s(), time.thread_time(), time.perf_counter()
            for i in range(records):
                p.produce("client", value=payloads[i & 63], partition=0)
            t1 = time.thread_time()
            left = p.flush(300)
            w1, c1, s1 = time.perf_counter(), _self_cpu_s(), _proc_cpu_s(pid)
        finally:
            p.close(30)
        if left:
            raise RuntimeError(f"{left} records were not delivered")
        out.update({"client_produce_call_us": 1e6 * (t1 - t0) / records, "client_total_us": 1e6 * (c1 - c0) / records,
                    "client_node_us": 1e6 * (s1 - s0) / records, "client_rate": records / (w1 - w0)})

        node.create_topic("json")
        per_request, threads = 500, 4
        body = json.dumps({"records": [{"value": "x" * 1022} for _ in range(per_request)]}).encode()
        requests = -(-records // per_request)
        shares = [requests // threads + (1 if i < requests % threads else 0) for i in range(threads)]
        errors: list[str] = []

        def run(n: int) -> None:
            with httpx.Client(timeout=120) as h:
                for _ in range(n):
                    r = h.post(f"{node.url}/topics/json/partitions/0", params={"acks": "all"}, content=body,
                               headers={"Content-Type": "application/vnd.kafka.json.v2+json"})
                    if r.status_code != 200:
                        errors.append(r.text[:200])
                        return

        workers = [threading.Thread(target=run, args=(n,)) for n in shares]
        s0, w0 = _proc_cpu_s(pid), time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        w1, s1 = time.perf_counter(), _proc_cpu_s(pid)
        if errors:
            raise RuntimeError(f"JSON produce failed: {errors[0]}")
        out.update({"json_node_us": 1e6 * (s1 - s0) / (requests * per_request),
                    "json_rate": requests * per_request / (w1 - w0)})

        # Consume what the client case wrote, as a group member (the peer bench's consume case).
        c = Consumer({"bootstrap.servers": node.url, "group.id": "produce-cpu", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False})
        try:
            c.assign([("client", 0)])
            got = 0
            s0, c0, w0 = _proc_cpu_s(pid), _self_cpu_s(), time.perf_counter()
            while got < records:
                batch = c.poll(10)
                if not batch:
                    raise RuntimeError(f"the consumer stopped at {got} of {records} records")
                got += len(batch)
            w1, c1, s1 = time.perf_counter(), _self_cpu_s(), _proc_cpu_s(pid)
        finally:
            c.close()
        out.update({"consume_client_us": 1e6 * (c1 - c0) / got, "consume_node_us": 1e6 * (s1 - s0) / got,
                    "consume_rate": got / (w1 - w0)})
    finally:
        node.stop()
        shutil.rmtree(work, ignore_errors=True)
    out["load"] = os.getloadavg()[0]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--base", default=None, help="another checkout (C extensions built in it) to compare with")
    ap.add_argument("--base-label", default=None)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.records)))
        return 0
    trees = {"this tree": ROOT}
    if args.base:
        trees[args.base_label or f"base ({args.base})"] = Path(args.base)
    work = Path(tempfile.mkdtemp(prefix="produce-cpu-main-"))
    results: dict[str, list[dict[str, float]]] = {k: [] for k in trees}
    load_start = os.getloadavg()
    try:
        paths = {k: _tree_path(t, work / k.replace(" ", "_").replace("/", "_")) for k, t in trees.items()}
        for rnd in range(args.rounds):
            order = list(trees)
            if rnd % 2:
                order.reverse()
            for name in order:
                env = dict(os.environ)
                env["PYTHONPATH"] = os.pathsep.join(p for p in (paths[name], str(ROOT)) if p)
                proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--worker", "--records",
                                       str(args.records)], env=env, cwd=str(ROOT), capture_output=True, text=True,
                                      timeout=1800)
                if proc.returncode != 0:
                    raise RuntimeError(f"{name} round {rnd} failed:\n{proc.stderr[-3000:]}")
                got = json.loads(proc.stdout.strip().splitlines()[-1])
                results[name].append(got)
                print(f"round {rnd} {name}: " + ", ".join(f"{k} {v:,.2f}" for k, v in got.items()), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_end = os.getloadavg()
    rows = [("client produce: `produce()` call, caller's thread", "client_produce_call_us"),
            ("client produce: whole client process", "client_total_us"),
            ("client produce: node", "client_node_us"),
            ("JSON v2 produce (500/request, 4 clients): node", "json_node_us"),
            ("consume (`Consumer`, binary fetch): whole client process", "consume_client_us"),
            ("consume (`Consumer`, binary fetch): node", "consume_node_us")]
    names = list(trees)
    best = {n: {k: min(r[k] for r in results[n]) for k in results[n][0]} for n in names}
    head = "| µs of CPU per record (lowest of the rounds) | " + " | ".join(names) + \
        (f" | {names[1]} / {names[0]} |" if len(names) > 1 else "")
    lines = ["### Produce CPU per record (`bench/produce_cpu.py`)", "",
             f"{args.records:,} records x 1 KiB, acks=all, one partition, one node, {args.rounds} round(s) alternated; "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Load (`uptime`, 1/5/15 min): "
             f"{load_start[0]:.1f} / {load_start[1]:.1f} / {load_start[2]:.1f} at the start, "
             f"{load_end[0]:.1f} / {load_end[1]:.1f} / {load_end[2]:.1f} at the end (2 cores, shared).", "",
             head, "|---|" + "---|" * (len(names) + (1 if len(names) > 1 else 0))]
    for label, key in rows:
        cells = [f"{best[n][key]:.2f}" for n in names]
        ratio = f" {best[names[1]][key] / best[names[0]][key]:.2f}x |" if len(names) > 1 else ""
        lines.append(f"| {label} | " + " | ".join(cells) + " |" + ratio)
    lines += ["", "records/s (best round; they move with the machine's load): " + "; ".join(
        f"{n}: client {max(r['client_rate'] for r in results[n]):,.0f}, JSON {max(r['json_rate'] for r in results[n]):,.0f}, "
        f"consume {max(r['consume_rate'] for r in results[n]):,.0f}"
        for n in names),
        "", "All rounds: " + "; ".join(f"{n}: " + ", ".join(
            f"[client {r['client_total_us']:.2f} + node {r['client_node_us']:.2f}, JSON node {r['json_node_us']:.2f}, "
            f"consume {r['consume_client_us']:.2f} + node {r['consume_node_us']:.2f}, "
            f"load {r['load']:.1f}]" for r in results[n]) for n in names)]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        sys.path.insert(0, str(ROOT))
        from bench.harness import rewrite_section
        rewrite_section(ROOT / "docs" / "benchmarks.md", "produce-cpu", text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
