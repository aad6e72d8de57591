"""`lakelog jobs run` and `lakelog sql` as a user runs them (real processes, local Spark)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_remote_compaction import TOPIC, build_remote, remote_records
from lakelog.tiering.topics import TopicDescriptor, write_topic_descriptor

pytestmark = pytest.mark.spark
LAKELOG = [str(Path(sys.executable).parent / "lakelog")]


def run(*args, cwd):
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    return subprocess.run([*LAKELOG, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_jobs_run_and_sql_from_the_command_line(tmp_path):
    store, _, _, _ = build_remote(tmp_path)
    write_topic_descriptor(store, TopicDescriptor(TOPIC, None, 1, {"cleanup.policy": "compact",
                                                                  "segment.bytes": "12000"}))
    remote = (tmp_path / "remote").as_uri()
    unknown = run("jobs", "run", "compaction", "--remote", remote, "--topic", "nope", cwd=tmp_path)
    assert unknown.returncode == 1 and "no remote data for topic(s) nope" in unknown.stderr  # before Spark starts
    synced = run("jobs", "run", "sync-tables", "--remote", remote, cwd=tmp_path)
    assert synced.returncode == 0, synced.stderr
    records = remote_records(store)
    assert f"+{len(records)} rows" in synced.stdout

    out = run("sql", f"SELECT offset, CAST(key AS STRING) AS key FROM lakelog.{TOPIC} ORDER BY offset",
              "--remote", remote, "--format", "json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert rows == [{"offset": o, "key": k.decode()} for o, _, k, _ in records]

    bad = run("sql", "SELECT * FROM lakelog.no_such_topic", "--remote", remote, cwd=tmp_path)
    assert bad.returncode == 1 and "no_such_topic" in bad.stderr and f"lakelog.{TOPIC}" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_spark_submit_runs_a_job_from_the_package(tmp_path):
    import shlex

    store, _, _, _ = build_remote(tmp_path)
    remote = (tmp_path / "remote").as_uri()
    printed = run("jobs", "package", "--remote", remote, "--output", str(tmp_path / "dist"), "--master", "local[2]",
                  cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    cmd = shlex.split(printed.stdout.strip())
    assert cmd[0] == "spark-submit" and "JOB" in cmd and (tmp_path / "dist" / "lakelog_packages.zip").exists()
    import pyspark

    cmd[0] = str(Path(pyspark.__file__).parent / "bin" / "spark-submit")  # the venv's bin may not have it
    cmd[cmd.index("JOB")] = "sync-tables"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOCAL_IP="127.0.0.1")
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"'rows_added': {len(remote_records(store))}" in done.stdout
    assert (tmp_path / "remote" / "tables" / TOPIC / "_delta_log").is_dir()
