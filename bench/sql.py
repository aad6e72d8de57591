"""How long a SQL answer takes: `lakelog sql` through a running `lakelog sql-server` (warm) against
a one-shot run that starts its own JVM (cold), over the README's topic.

    python bench/sql.py            # a few minutes on 2 cores (`make bench-sql`)
    python bench/sql.py --quick    # fewer repetitions

A real node (filesystem remote tier, uploads every 30 s as `lakelog up` does), the topic `orders`
with 2 partitions and 20,000 records produced as the README does (`lakelog produce`), then, each
timed as a whole command from the shell's point of view (process start to exit):
* warm `lakelog sql "SELECT 1"` and the README's group-by, through the SQL server (goals: < 1 s and
  < 3 s);
* cold `lakelog sql --local` of the same group-by (a JVM start, the views registered, the query).
The figures go to docs/benchmarks.md (section "sql"); the goals are absolute, so the load of the
machine during the run is written beside them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python bench/sql.py` puts bench/ on the path, not the root
    sys.path.insert(0, str(ROOT))

from bench.harness import OtherCpu, conditions, git_revision, machine_info, markdown_table, rewrite_section  # noqa: E402
from tests.support.nodes import start_node  # noqa: E402

LAKELOG = str(Path(sys.executable).with_name("lakelog"))
GROUP_BY = "SELECT partition, count(*) AS n, max(offset) FROM lakelog.orders GROUP BY partition"


def timed(args: list[str], env: dict[str, str], cwd: str) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run([LAKELOG, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"lakelog {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
    return elapsed, done.stdout


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--note", default="", help="what else ran on the machine, for the report")
    args = ap.parse_args()
    repeat = 3 if args.quick else 7
    others = OtherCpu()
    with tempfile.TemporaryDirectory(prefix="lakelog-bench-sql-") as tmp:
        remote = Path(tmp, "remote").as_uri()
        node = start_node(Path(tmp), **{"remote.storage.url": remote})
        server = None
        try:
            env = dict(os.environ, LAKELOG_URL=node.url, LAKELOG_REMOTE=remote, PYSPARK_PYTHON=sys.executable)
            subprocess.run([LAKELOG, "topics", "create", "orders", "--partitions", "2", "--config",
                            "remote.storage.enable=true", "--config", "segment.bytes=65536"], env=env, check=True,
                           capture_output=True, timeout=60)
            lines = "".join(f"order-{i}\n" for i in range(1, 20_001))
            subprocess.run([LAKELOG, "produce", "orders", "--batch-size", "200"], input=lines, text=True, env=env,
                           check=True, capture_output=True, timeout=300)
            cold, out = timed(["sql", "--local", GROUP_BY, "--format", "csv"], env, tmp)
            total = sum(int(line.split(",")[1]) for line in out.splitlines()[1:])
            assert total == 20_000, out

            server = subprocess.Popen([LAKELOG, "sql-server", "--listen", "sc://127.0.0.1:0", "--refresh-ms", "1000"],
                                      env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True)
            said: list[str] = []
            threading.Thread(target=lambda: said.extend(iter(server.stderr.readline, "")), daemon=True).start()
            deadline = time.monotonic() + 300
            while not any("lakelog.orders" in s for s in said):
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the SQL server did not start: " + "".join(said[-20:]))
                time.sleep(0.2)
            address = "sc://" + next(s for s in said if "Spark SQL on sc://" in s).split("sc://", 1)[1].split()[0]
            env["LAKELOG_SQL_URL"] = address
            timed(["sql", GROUP_BY], env, tmp)  # warm-up: the server's first query compiles its code paths
            select_one = [timed(["sql", "SELECT 1"], env, tmp)[0] for _ in range(repeat)]
            group_by = [timed(["sql", GROUP_BY], env, tmp)[0] for _ in range(repeat)]
        finally:
            if server is not None:
                server.terminate()
                server.wait(60)
            node.stop()
    busy = others.cpus()
    info = machine_info(tempfile.gettempdir())
    rows = [
        ["warm `lakelog sql \"SELECT 1\"` (SQL server)", f"{statistics.median(select_one):.2f} s",
         f"{min(select_one):.2f}-{max(select_one):.2f} s", "< 1 s", "met" if statistics.median(select_one) < 1 else "MISSED"],
        ["warm README group-by (SQL server)", f"{statistics.median(group_by):.2f} s",
         f"{min(group_by):.2f}-{max(group_by):.2f} s", "< 3 s", "met" if statistics.median(group_by) < 3 else "MISSED"],
        ["cold one-shot `lakelog sql --local` group-by", f"{cold:.2f} s", "1 run", "(comparison)", ""],
    ]
    table = markdown_table(["command", "median", "range", "goal", ""], rows)
    body = "\n".join([
        "## SQL (`bench/sql.py`)", "",
        f"Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} at {git_revision(ROOT)}, {repeat} runs each, "
        f"whole commands timed from process start to exit; 20,000 records in 2 partitions, most of them still "
        f"on the node (read over the hot-tail path).", "",
        table, "",
        f"Machine: {info['nproc']} CPUs ({info['cpu']}), {info['memory']}, {info['python']}. "
        + conditions(info["nproc"], busy, args.note), ""])
    print(body)
    rewrite_section(ROOT / "docs" / "benchmarks.md", "sql", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
