"""How long a SQL answer takes: `lakelog sql` through a running `lakelog sql-server` (warm: its HTTP
endpoint `POST /v1/sql`, the default way, and its Spark Connect endpoint, the next one) against a
one-shot run that starts its own JVM (cold), over the README's topic.

    python bench/sql.py            # a few minutes on 2 cores (`make bench-sql`)
    python bench/sql.py --quick    # fewer repetitions

A real node (filesystem remote tier, uploads every 30 s as `lakelog up` does), the topic `orders`
with 2 partitions and 20,000 records produced as the README does (`lakelog produce`), then, each
timed as a whole command from the shell's point of view (process start to exit):
* warm `lakelog sql "SELECT 1"` and the README's group-by, through the SQL server's HTTP endpoint
  (found through the address file beside the token, as after `lakelog up --sql`; goals: < 1 s and
  < 3 s), and the same through Spark Connect (no address file), alternated;
* `lakelog --help` (the CLI's own start);
* cold `lakelog sql --local` of the same group-by (a JVM start, the views registered, the query).
The figures go to docs/benchmarks.md (section "sql"); the goals are absolute, so the load of the
machine during the run is written beside them.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/sql.py` puts bench/ on the path, not the root
    sys.path.insert(0, str(ROOT))

from bench.harness import OtherCpu, conditions, git_revision, machine_info, markdown_table, rewrite_section  # noqa: E402
from bench.sql_setup import GROUP_BY, LAKELOG, RECORDS, orders_node, sql_server  # noqa: E402


def timed(args: list[str], env: dict[str, str], cwd: str) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run([LAKELOG, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"lakelog {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
    return elapsed, done.stdout


def _total(out: str) -> int:
    return sum(int(line.split(",")[1]) for line in out.splitlines()[1:])


def _row(name: str, t: list[float], goal: str = "", limit: float | None = None) -> list[str]:
    med = statistics.median(t)
    verdict = "" if limit is None else ("met" if med < limit else "MISSED")
    return [name, f"{med:.2f} s", f"{min(t):.2f}-{max(t):.2f} s", goal, verdict]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--note", default="", help="what else ran on the machine, for the report")
    args = ap.parse_args()
    repeat = 3 if args.quick else 7
    others = OtherCpu()
    uptime_before = Path("/proc/loadavg").read_text().split()[:3]
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="lakelog-bench-sql-") as tmp:
        node, env = orders_node(Path(tmp))
        server = None
        try:
            cold, out = timed(["sql", "--local", GROUP_BY, "--format", "csv"], env, tmp)
            assert _total(out) == RECORDS, out
            server = sql_server(Path(tmp), env)
            warm_env = dict(env, LAKELOG_SQL_URL=server.address)
            # Spark Connect: from a folder without the address file, the token from the environment.
            elsewhere = Path(tmp, "elsewhere")
            elsewhere.mkdir()
            connect_env = dict(warm_env, LAKELOG_SQL_TOKEN=server.token)
            for e, cwd in ((warm_env, tmp), (connect_env, str(elsewhere))):  # warm-up: the first queries compile
                assert _total(timed(["sql", GROUP_BY, "--format", "csv"], e, cwd)[1]) == RECORDS
            for _ in range(repeat):  # alternated: a change of load falls on every way alike
                for name, query, e, cwd in (("http SELECT 1", "SELECT 1", warm_env, tmp),
                                            ("http group-by", GROUP_BY, warm_env, tmp),
                                            ("connect SELECT 1", "SELECT 1", connect_env, str(elsewhere)),
                                            ("connect group-by", GROUP_BY, connect_env, str(elsewhere))):
                    times.setdefault(name, []).append(timed(["sql", query], e, cwd)[0])
                times.setdefault("help", []).append(timed(["--help"], env, tmp)[0])
        finally:
            if server is not None:
                server.stop()
            node.stop()
    busy = others.cpus()
    uptime_after = Path("/proc/loadavg").read_text().split()[:3]
    info = machine_info(tempfile.gettempdir())
    rows = [
        _row("warm `lakelog sql \"SELECT 1\"` (SQL server, HTTP `/v1/sql`)", times["http SELECT 1"], "< 1 s", 1.0),
        _row("warm README group-by (SQL server, HTTP `/v1/sql`)", times["http group-by"], "< 3 s", 3.0),
        _row("warm `lakelog sql \"SELECT 1\"` (SQL server, Spark Connect)", times["connect SELECT 1"], "(comparison)"),
        _row("warm README group-by (SQL server, Spark Connect)", times["connect group-by"], "(comparison)"),
        _row("`lakelog --help`", times["help"], "(the CLI's start)"),
        ["cold one-shot `lakelog sql --local` group-by", f"{cold:.2f} s", "1 run", "(comparison)", ""],
    ]
    table = markdown_table(["command", "median", "range", "goal", ""], rows)
    body = "\n".join([
        "## SQL (`bench/sql.py`)", "",
        f"Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} at {git_revision(ROOT)}, {repeat} runs each "
        f"(the four warm ways alternated), whole commands timed from process start to exit; {RECORDS:,} records in 2 "
        f"partitions, most of them still on the node (read over the hot-tail path). Load average (1, 5, 15 min) "
        f"{' '.join(uptime_before)} before, {' '.join(uptime_after)} after.", "",
        table, "",
        f"Machine: {info['nproc']} CPUs ({info['cpu']}), {info['memory']}, {info['python']}. "
        + conditions(info["nproc"], busy, args.note), ""])
    print(body)
    rewrite_section(ROOT / "docs" / "benchmarks.md", "sql", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
