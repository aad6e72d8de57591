"""Many clients on one node: idle keep-alive connections and long-polling consumers, the node's CPU
and memory while they wait.

    python bench/connections.py                                   # 2,000 idle + 500 long-polls, 12 s windows
    python bench/connections.py --idle 20 --polls 5 --seconds 2 --no-write   # a smoke run

One real `lakelog node` on loopback (bench/node.py's `start_node`: `log.cleaner.enable=false`,
other keys default, so `max.connections` is its default) with one topic of `--partitions` (50)
partitions. The clients are one asyncio process (this one), raw HTTP/1.1 on sockets:

* idle     — `--idle` connections, each served one `GET /readyz` (keep-alive), then silent;
* polls    — `--polls` connections, each looping `GET /topics/polls/partitions/{i mod partitions}/records
             ?offset=0&timeout=<--poll-timeout-ms>`: nothing is produced, so each request is one
             long-poll that returns empty when its timeout passes (fetch.max.wait.ms bounds it) and
             is sent again at once.

Three windows of `--seconds` each, in one run: **baseline** (the node with no client connection),
**idle** (the idle connections open), **idle + polls** (both). For each: the node's CPU (user +
system seconds over the window, /proc/<pid>/stat, as % of one core), its RSS at the window's end
(/proc/<pid>/status VmRSS), and the memory per connection above the baseline. At the end every
idle connection is asked once more (`GET /readyz`): the node must still hold them all. uvicorn
closes keep-alive connections idle for 30 s (`timeout_keep_alive`), so a window stays below that.

Figures are printed and written to the "Many clients" section of docs/benchmarks.md (`--no-write`
to skip), with the machine's load average (the machine may be shared: read the baseline).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.harness import command_line, git_revision, load_average, machine_info, markdown_table, rewrite_section  # noqa: E402
from bench.node import ServerProcess, create_topic, start_node  # noqa: E402

#: The issue's goal: the node at < 5% of a core holding 2,000 idle connections and 500 long-polls.
CPU_GOAL_PERCENT = 5.0
#: Keep-alive connections idle longer than this are closed by the node (uvicorn `timeout_keep_alive`).
KEEP_ALIVE_S = 30.0
SETTLE_S = 3.0


def rss_bytes(server: ServerProcess) -> int:
    assert server.proc is not None
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc status")


async def request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> int:
    """One keep-alive GET; its status (the body is read and dropped)."""
    writer.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\nAccept: application/vnd.kafka.binary.v2+json\r\n\r\n"
                 .encode())
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    length = 0
    for line in lines[1:]:
        if line.lower().startswith("content-length:"):
            length = int(line.split(":", 1)[1])
    if length:
        await reader.readexactly(length)
    return int(lines[0].split()[1])


async def open_idle(port: int, count: int) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    conns = []
    for i in range(0, count, 100):  # in steps: the node's listen backlog is finite
        step = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", port) for _ in range(min(100, count - i))))
        statuses = await asyncio.gather(*(request(r, w, "/readyz") for r, w in step))
        if any(s != 200 for s in statuses):
            raise RuntimeError(f"an idle connection was refused: {statuses}")
        conns += step
    return conns


async def long_poll(port: int, partition: int, timeout_ms: int, stop: asyncio.Event, counts: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    path = f"/topics/polls/partitions/{partition}/records?offset=0&timeout={timeout_ms}"
    try:
        while not stop.is_set():
            status = await request(reader, writer, path)
            if status != 200:
                raise RuntimeError(f"a long-poll was answered {status}")
            counts[0] += 1
    finally:
        writer.close()


def cpu_seconds(server: ServerProcess) -> float:
    u = server.usage()
    return u.user + u.system


async def window(server: ServerProcess, seconds: float) -> tuple[float, int]:
    """(% of one core the node used over `seconds`, its RSS at the end)."""
    before, t0 = cpu_seconds(server), time.monotonic()
    await asyncio.sleep(seconds)
    return 100 * (cpu_seconds(server) - before) / (time.monotonic() - t0), rss_bytes(server)


async def run(args: argparse.Namespace, server: ServerProcess) -> dict[str, tuple[float, int]]:
    await asyncio.sleep(SETTLE_S)  # the topic's creation and the node's start-up work are over
    out = {"baseline": await window(server, args.seconds)}
    idle = await open_idle(server.port, args.idle)
    out["idle"] = await window(server, args.seconds)
    stop, counts = asyncio.Event(), [0]
    polls = [asyncio.create_task(long_poll(server.port, i % args.partitions, args.poll_timeout_ms, stop, counts))
             for i in range(args.polls)]
    await asyncio.sleep(1.0)  # every poll connected and waiting
    out["idle + polls"] = await window(server, args.seconds)
    args.poll_answers = counts[0]
    statuses = await asyncio.gather(*(request(r, w, "/readyz") for r, w in idle), return_exceptions=True)
    args.idle_kept = sum(1 for s in statuses if s == 200)
    stop.set()
    for task in polls:  # a poll waits up to its timeout: cut it (the node sees the connection close)
        task.cancel()
    await asyncio.gather(*polls, return_exceptions=True)
    for _, w in idle:
        w.close()
    return out


def report(args: argparse.Namespace, figures: dict[str, tuple[float, int]]) -> str:
    base_rss = figures["baseline"][1]
    clients = {"baseline": 0, "idle": args.idle, "idle + polls": args.idle + args.polls}
    rows = []
    for name, (cpu, rss) in figures.items():
        per = f"{(rss - base_rss) / clients[name] / 1024:.1f}" if clients[name] else "–"
        rows.append([name, f"{clients[name]:,}", f"{cpu:.1f}", f"{rss / (1 << 20):.0f}", per])
    cpu = figures["idle + polls"][0]
    verdict = "met" if cpu < CPU_GOAL_PERCENT else "MISSED"
    info = machine_info(ROOT / "bench")
    return "\n\n".join([
        "## Many clients",
        f"`{command_line()}` at {git_revision(ROOT)}; windows of {args.seconds:g} s; load average {args.load_before} "
        f"before, {load_average()} after (the machine may be shared: read the baseline row). Machine: "
        + ", ".join(f"{k} {v}" for k, v in info.items()) + ".",
        f"One node, topic `polls` of {args.partitions} partitions, nothing produced; {args.idle:,} idle keep-alive "
        f"connections, then {args.polls:,} long-polling fetches (`timeout={args.poll_timeout_ms}` ms, "
        f"{args.poll_answers:,} answers in the window); bench/connections.py's docstring.",
        markdown_table(["window", "client connections", "node CPU (% of a core)", "node RSS (MiB)",
                        "KiB per connection above baseline"], rows),
        f"Goal: < {CPU_GOAL_PERCENT:g}% of a core with {args.idle:,} idle connections and {args.polls:,} long-polls: "
        f"{cpu:.1f}% ({verdict}). Idle connections still served at the end: {args.idle_kept:,} of {args.idle:,}."])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle", type=int, default=2000)
    parser.add_argument("--polls", type=int, default=500)
    parser.add_argument("--partitions", type=int, default=50)
    parser.add_argument("--poll-timeout-ms", type=int, default=30_000)
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if 2 * args.seconds + 2 >= KEEP_ALIVE_S:
        parser.error(f"--seconds must stay below {(KEEP_ALIVE_S - 2) / 2:g}: idle connections would be closed")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # this process holds every client socket
    if hard < args.idle + args.polls + 100:
        parser.error(f"the open-file limit {hard} is too low for {args.idle + args.polls} connections")
    args.load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="lakelog-bench-connections-") as tmp:
        server = start_node(Path(tmp), "node")
        try:
            create_topic(server, "polls", args.partitions)
            figures = asyncio.run(run(args, server))
        finally:
            server.stop()
    text = report(args, figures)
    print(text)
    if not args.no_write:
        rewrite_section(ROOT / "docs" / "benchmarks.md", "connections", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
