"""The README's quick start, run literally against a real `lakelog up`, so that it cannot rot.

The quick start's second shell block (the one that creates `clicks`) is split into its two parts (the hot path, and,
after a blank line, the history queried with Spark); each line runs as written with bash,
in a directory holding `.venv/bin/lakelog` (this interpreter's) and the cluster's `./data`, as a
user's checkout would. The one change: the cluster listens on a free block of ports instead of
8082..8084 (and 9092..9094), so `LAKELOG_URL` names node 1, `localhost:8082` in the curl line becomes
its port and `127.0.0.1:9092` its Kafka listener's. The history part runs against `lakelog up --sql`,
as `make up` starts it, its SQL server on a free pair of ports instead of 15002 (`LAKELOG_SQL_URL` names it).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.faults import wait_for
from tests.support.nodes import LAKELOG, free_port_block

README = Path(__file__).resolve().parents[2] / "README.md"
LINE_TIMEOUT_S = 120
SPARK_LINE_TIMEOUT_S = 900  # a local Spark session on a busy machine
READY_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30


def quick_start_blocks() -> tuple[list[str], list[str]]:
    block = next(b for b in re.findall(r"```sh\n(.*?)```", README.read_text(), re.S) if "topics create clicks" in b)
    hot, _, history = block.partition("\n\n")  # the hot path, a blank line, then the Spark part
    lines = lambda part: [ln for ln in part.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    return lines(hot), lines(history)


class QuickStartCluster:
    """`lakelog up --nodes 3 --data-dir ./data` in a directory laid out like a checkout; with `sql`,
    `--sql` as `make up` runs it (the SQL server on a free pair of ports, which `LAKELOG_SQL_URL`
    names to `lakelog sql`)."""

    def __init__(self, tmp_path: Path, *, sql: bool = False) -> None:
        self.cwd = tmp_path
        (tmp_path / ".venv" / "bin").mkdir(parents=True)
        (tmp_path / ".venv" / "bin" / "lakelog").symlink_to(LAKELOG)
        python = tmp_path / ".venv" / "bin" / "python"  # the README's Kafka client line: this interpreter
        python.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
        python.chmod(0o755)
        self.port = free_port_block(3)
        self.kafka_port = free_port_block(3)
        self.sql_port = free_port_block(2) if sql else None
        self.out = tmp_path / "up.out"
        extra = ["--sql", "--sql-port", str(self.sql_port)] if sql else []
        with open(self.out, "wb") as out:
            self.proc = subprocess.Popen([LAKELOG, "up", "--data-dir", "./data", "--http-port", str(self.port),
                                          "--kafka-port", str(self.kafka_port), *extra],
                                         cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

        def ready() -> bool:
            if self.proc.poll() is not None:  # it exited: not retried by wait_for
                raise RuntimeError(f"lakelog up exited: {self.out.read_text()}")
            return "lakelog up: ready." in self.out.read_text()

        try:
            wait_for(ready, READY_TIMEOUT_S, "lakelog up to say it is ready", interval_s=0.1)
            if sql:  # the SQL server writes its HTTP address once it answers
                wait_for(lambda: (tmp_path / "data" / "sql.http").exists(), SPARK_LINE_TIMEOUT_S,
                         "the SQL server to answer", interval_s=0.5)
        except BaseException:
            self.close()
            raise

    def run(self, line: str, timeout_s: float = LINE_TIMEOUT_S) -> subprocess.CompletedProcess:
        line = line.replace("localhost:8082", f"localhost:{self.port}").replace("127.0.0.1:9092",
                                                                               f"127.0.0.1:{self.kafka_port}")
        env = dict(os.environ, LAKELOG_URL=f"http://127.0.0.1:{self.port}")
        if self.sql_port is not None:
            env["LAKELOG_SQL_URL"] = f"sc://127.0.0.1:{self.sql_port}"
        r = subprocess.run(["bash", "-o", "pipefail", "-c", line], cwd=self.cwd, env=env, capture_output=True,
                           timeout=timeout_s)
        assert r.returncode == 0, (line, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace"))
        return r

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def test_readme_quick_start_runs_as_written(tmp_path):
    hot, _ = quick_start_blocks()
    assert any("topics create clicks" in ln for ln in hot) and any(ln.startswith("curl") for ln in hot)
    up = QuickStartCluster(tmp_path)
    try:
        out = {ln: up.run(ln).stdout.decode() for ln in hot}
    finally:
        up.close()
    assert up.proc.returncode == 0, up.out.read_text()
    # What the README says each line shows.
    described = next(o for ln, o in out.items() if "topics describe clicks" in ln)
    assert described.count("Partition:") == 3 and "Isr:" in described
    consumed = next(o for ln, o in out.items() if "--partition 0 --from-beginning" in ln)
    assert len(consumed.splitlines()) == 5 and all(re.match(r"user-\d+\s+clicked$", x) for x in consumed.splitlines())
    group = next(o for ln, o in out.items() if "groups describe dashboards" in ln)
    rows = [r.split() for r in group.splitlines() if r.startswith("dashboards")]
    assert len(rows) == 3 and sum(int(r[3]) for r in rows) == 100 and all(r[5] == "0" for r in rows), group
    # The Kafka consumer line reads the 100 records of the produce line and the Kafka producer's one.
    kafka_read = next(o for ln, o in out.items() if "from confluent_kafka import Consumer" in ln)
    assert kafka_read.strip() == "101 records", kafka_read
    # The curl line: the records of partition 0 from offset 0 (binary embedded format, as curl sends
    # Accept: */*), the five the consume line printed first among them.
    answer = json.loads(next(o for ln, o in out.items() if ln.startswith("curl")))
    assert isinstance(answer, list) and [r["offset"] for r in answer[:5]] == [0, 1, 2, 3, 4], answer


@pytest.mark.spark
def test_readme_history_with_spark_runs_as_written(tmp_path):
    _, history = quick_start_blocks()
    assert any("lakelog sql" in ln for ln in history)
    # As `make up` runs it: the SQL server answers `lakelog sql`, and its first query of `orders`,
    # created a moment before, finds the topic (the server registers it on the spot).
    up = QuickStartCluster(tmp_path, sql=True)
    try:
        out = {ln: up.run(ln, SPARK_LINE_TIMEOUT_S).stdout.decode() for ln in history}
    finally:
        up.close()
    table = next(o for ln, o in out.items() if "lakelog sql" in ln)
    counts = [int(m) for m in re.findall(r"^\s*\|?\s*\d+\s*\|?\s*(\d+)", table, re.M)]
    assert sum(counts) == 20000, table  # "lakelog.orders counts all 20,000 records at once"
