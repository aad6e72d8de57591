"""Lakelog on a real Spark standalone cluster: a master and a worker started with pyspark's
`bin/spark-class` on loopback (every port chosen by the process binding port 0; the master's REST
submission server, on a fixed port by default, is off), executors on a separate virtualenv that has
only pyspark and pyarrow. The data source, sync-tables, compaction and rebuild-index run over moto's
S3 server and over the filesystem store from a driver with Lakelog installed, and the jobs again
through `lakelog jobs package` + `spark-submit` with that bare Python as the driver's too. Every
application logs its events; each one's tasks must have run on the worker's executor (never on the
driver), and the master's and the worker's JSON must list the application and its executor."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import pyspark
import pytest

from lakelog.spark_log.session import default_jars_dir
from lakelog.logstore.segment import INDEX_SUFFIX
from lakelog.tiering.layout import segment_key
from lakelog.tiering.remote_scan import load_manifest
from lakelog.tiering.s3_store import S3Store
from lakelog.tiering.topics import TopicDescriptor, write_topic_descriptor
from tests.integration.test_remote_compaction import TOPIC, build_remote, reference, remote_records
from tests.support.s3server import S3Server

# Bounds for a machine under load (about a minute per application when quiet); pytest-timeout counts
# the module's venv and cluster start into the first test.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(3600)]
SPARK_HOME = Path(pyspark.__file__).resolve().parent
COMPACT = {"cleanup.policy": "compact", "segment.bytes": "12000", "index.interval.bytes": "512"}
START_TIMEOUT_S = 120.0
RUN_TIMEOUT_S = 1800.0  # a bound for a machine under load (a load average of 30 on 2 CPUs: ~15 min); about a minute when quiet
#: Only these may be importable in the executors' Python (pip adds py4j for pyspark).
LAKELOG_IMPORTS = ("lakelog", "boto3", "botocore", "httpx", "cramjam", "lz4", "zstandard", "crc32c", "delta", "pandas",
                   "google")


@pytest.fixture(scope="module")
def scratch():
    """This module's own folder: pytest's basetemp of a long run can be rotated away by other
    pytest sessions on the machine, under a running cluster."""
    folder = Path(tempfile.mkdtemp(prefix="lakelog-standalone-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def bare_python(scratch) -> str:
    """A virtualenv with only pyspark and pyarrow (the driver's versions, from pip's cache)."""
    venv = scratch / "executor-venv"
    base = getattr(sys, "_base_executable", None) or sys.executable
    subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    pins = [f"{d}=={importlib.metadata.version(d)}" for d in ("pyspark", "pyarrow")]
    subprocess.run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *pins],
                   check=True, timeout=600, env=_clean_env())
    probe = subprocess.run([python, "-c", "import importlib.util, json, sys\n"
                            f"print(json.dumps([m for m in {LAKELOG_IMPORTS!r} if importlib.util.find_spec(m)]))"],
                           capture_output=True, text=True, check=True, env=_clean_env(), cwd=str(venv))
    assert json.loads(probe.stdout) == [], probe.stdout  # nothing of Lakelog's own stack is there
    return python


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                                                            "VIRTUAL_ENV", "SPARK_HOME", "LAKELOG_SPARK_MASTER")}
    env.update(extra)
    return env


class Standalone:
    """A standalone master and one worker (2 cores) on 127.0.0.1, as separate JVMs."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.conf_dir = root / "conf"
        self.events = root / "events"
        self.env = env
        self.procs: list[subprocess.Popen] = []
        self.master_url = ""
        self.master_ui = 0
        self.worker_ui = 0

    def start(self) -> "Standalone":
        self.conf_dir.mkdir(parents=True)  # root included
        self.events.mkdir()
        # Read by the master and worker (properties file) and by every driver (spark-defaults.conf).
        (self.conf_dir / "spark-defaults.conf").write_text(
            "spark.master.rest.enabled false\n"
            f"spark.eventLog.enabled true\nspark.eventLog.dir {self.events.as_uri()}\n"
            "spark.eventLog.compress false\nspark.eventLog.rolling.enabled false\n"
            "spark.ui.showConsoleProgress false\n")
        env = dict(self.env, SPARK_HOME=str(SPARK_HOME), SPARK_CONF_DIR=str(self.conf_dir),
                   SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(self.root))
        master_log = self._spawn("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                            "--port", "0", "--webui-port", "0"], env)
        port = self._wait_for(master_log, r"Starting Spark master at (spark://\S+)")
        self.master_url = port
        self.master_ui = int(self._wait_for(master_log, r"service 'MasterUI' on port (\d+)"))
        self._wait_for(master_log, r"I have been elected leader")
        worker_log = self._spawn("worker", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                                            "--port", "0", "--webui-port", "0", "--cores", "2", "--memory", "1200m",
                                            "--work-dir", str(self.root / "work"), self.master_url], env)
        self.worker_ui = int(self._wait_for(worker_log, r"service 'WorkerUI' on port (\d+)"))
        self._wait_for(worker_log, r"Successfully registered with master")
        return self

    def _spawn(self, name: str, args: list[str], env: dict[str, str]) -> Path:
        log = self.root / f"{name}.log"
        with open(log, "wb") as out:
            self.procs.append(subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args], env=env,
                                               stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                               cwd=str(self.root), start_new_session=True))
        return log

    def _wait_for(self, log: Path, pattern: str) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            found = re.search(pattern, log.read_text(errors="replace"))
            if found:
                return found.group(1) if found.groups() else found.group(0)
            if any(p.poll() is not None for p in self.procs):
                break
            time.sleep(0.2)
        raise AssertionError(f"{log.name}: no {pattern!r} in time:\n{log.read_text(errors='replace')[-3000:]}")

    def json(self, port: int) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/", timeout=10) as r:
            return json.loads(r.read())

    def stop(self) -> None:
        for p in reversed(self.procs):  # the worker first (it stops its executors), then the master
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait(10)

    def app_tasks(self) -> dict[str, dict]:
        """Per application (event log): its id, name and the executors its tasks ran on."""
        apps = {}
        for log in self.events.iterdir():
            app: dict = {"executors": {}, "name": None}
            for line in log.read_text().splitlines():
                event = json.loads(line)
                if event["Event"] == "SparkListenerApplicationStart":
                    app["name"], app["id"] = event["App Name"], event["App ID"]
                elif event["Event"] == "SparkListenerTaskEnd":
                    executor = event["Task Info"]["Executor ID"]
                    app["executors"][executor] = app["executors"].get(executor, 0) + 1
            apps[app["id"]] = app
        return apps


@pytest.fixture(scope="module")
def s3():
    server = S3Server().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def cluster(scratch, s3):
    # The worker's environment is the executors': the S3 endpoint and credentials, nothing of ours.
    spark = Standalone(scratch / "standalone", _clean_env(**s3.env()))
    try:
        yield spark.start()
    finally:
        spark.stop()
    assert all(p.poll() is not None for p in spark.procs)


DRIVER = r'''
import json, sys
from lakelog.spark_log.jobs import run_job
from lakelog.spark_log.session import remote_session
from lakelog.tiering.layout import INDEX_SUFFIX, segment_key
from lakelog.tiering.remote_scan import load_manifest, open_remote, tables_path

master, remote, topic, out = sys.argv[1:5]
spark = remote_session(remote, app_name="lakelog-standalone-driver", master=master)

def rows():
    df = spark.read.format("lakelog").option("remote", remote).option("topic", topic).load()
    return [[r["offset"], r["key"].hex() if r["key"] is not None else None,
             r["value"].hex() if r["value"] is not None else None]
            for r in df.select("offset", "key", "value").orderBy("offset").collect()]

result = {"app_id": spark.sparkContext.applicationId, "before": rows()}
result["sync"] = run_job(spark, "sync-tables", remote).totals
result["table_rows"] = spark.read.format("delta").load(tables_path(remote, topic)).count()
result["compaction"] = run_job(spark, "compaction", remote, delete_delay_ms=0).totals
result["after"] = rows()
store = open_remote(remote)
seg = load_manifest(store, topic, 0).copy_finished[0]
key = segment_key(topic, 0, seg.base_offset, seg.segment_id, INDEX_SUFFIX)
original = store.get(key)[0]
store.delete(key)
result["rebuild"] = run_job(spark, "rebuild-index", remote).totals
result["index_restored"] = store.get(key)[0] == original
store.close()
json.dump(result, open(out, "w"))
spark.stop()
'''


def _as_rows(records) -> list[list]:
    return [[o, k.hex() if k is not None else None, v.hex() if v is not None else None] for o, _, k, v in records]


def _remote(kind: str, tmp_path, s3) -> tuple[str, object]:
    """A compacted topic's remote tier on the filesystem store or moto's S3: (url, store)."""
    store, _, log, _ = build_remote(tmp_path)
    if kind == "s3":
        bucket = f"lakelog-{uuid.uuid4().hex[:10]}"
        s3.create_bucket(bucket)
        from lakelog.tiering.manager import RemoteTier
        from lakelog.tiering.config import TieringConfig

        saved = {k: os.environ.get(k) for k in s3.env()}
        os.environ.update(s3.env())
        try:
            store = S3Store(bucket, "tier")
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        RemoteTier(store, TieringConfig({"remote.log.copy.max.segments.per.round": 100_000})) \
            .partition(TOPIC, 0).copy_segments(log, 1, log.log_end_offset)
        url = f"s3://{bucket}/tier"
    else:
        url = (tmp_path / "remote").as_uri()
    write_topic_descriptor(store, TopicDescriptor(TOPIC, None, 1, COMPACT))
    return url, store


def _driver_env(cluster: Standalone, bare_python: str, s3, **extra: str) -> dict[str, str]:
    return _clean_env(**s3.env(), SPARK_CONF_DIR=str(cluster.conf_dir), SPARK_LOCAL_IP="127.0.0.1",
                      PYSPARK_PYTHON=bare_python,  # the executors' Python, and the planning worker's
                      LAKELOG_EXECUTOR_JARS_DIR=str(default_jars_dir().resolve()), **extra)


def _ran_on_the_executor(cluster: Standalone, app_id: str) -> None:
    app = cluster.app_tasks()[app_id]
    assert app["executors"] and "driver" not in app["executors"], app
    master = cluster.json(cluster.master_ui)
    apps = {a["id"]: a for a in master["completedapps"] + master["activeapps"]}
    assert app_id in apps, master
    assert [w["state"] for w in master["workers"]] == ["ALIVE"]
    worker = cluster.json(cluster.worker_ui)
    ran = {(e["appid"], str(e["id"])) for e in worker["executors"] + worker["finishedexecutors"]}
    assert {(app_id, e) for e in app["executors"]} <= ran, (app, ran)


@pytest.mark.parametrize("kind", ["fs", "s3"])
def test_data_source_and_jobs_run_on_the_cluster_executors(kind, tmp_path, cluster, bare_python, s3):
    remote, store = _remote(kind, tmp_path, s3)
    before = remote_records(store)
    end = load_manifest(store, TOPIC, 0).end_offset
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    out = tmp_path / "result.json"
    _run_logged([sys.executable, str(script), cluster.master_url, remote, TOPIC, str(out)],
                _driver_env(cluster, bare_python, s3), tmp_path)
    result = json.loads(out.read_text())
    assert result["before"] == _as_rows(before)
    assert result["sync"]["rows_added"] == len(before) and result["table_rows"] == len(before)
    assert result["compaction"]["compacted"] == 1, result["compaction"]
    compacted = reference(before, end + 1, drop_tombstones=False)
    assert remote_records(store) == compacted and result["after"] == _as_rows(compacted)
    assert result["rebuild"]["rebuilt"] == 1 and result["index_restored"], result["rebuild"]
    _ran_on_the_executor(cluster, result["app_id"])


@pytest.mark.parametrize("kind", ["fs", "s3"])
def test_every_job_through_jobs_package_and_spark_submit(kind, tmp_path, cluster, bare_python, s3):
    """The bare Python is the driver's too: Lakelog, delta-spark's Python half and boto3 come only
    from the files `lakelog jobs package` wrote. The four jobs run in one application (one JVM
    and executor start): retention first takes the oldest segment, compaction the rest."""
    remote, store = _remote(kind, tmp_path, s3)
    before = remote_records(store)
    segs = load_manifest(store, TOPIC, 0).copy_finished
    assert len(segs) >= 3, segs
    keep = sum(s.size_in_bytes for s in segs[1:])
    env = _driver_env(cluster, bare_python, s3, PYSPARK_DRIVER_PYTHON=bare_python)
    printed = subprocess.run([str(Path(sys.executable).parent / "lakelog"), "jobs", "package", "--remote", remote,
                              "--master", cluster.master_url, "--output", str(tmp_path / "dist")],
                             env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert printed.returncode == 0, printed.stderr
    command = shlex.split(printed.stdout.strip())
    # the workers' jars folder: nothing big copied per application (only the JVM source's own jar, if built)
    shipped = [c.split("=", 1)[1] for c in command if c.startswith("spark.jars=")]
    assert all(Path(j).name == "lakelog-spark.jar" for s in shipped for j in s.split(",")), shipped
    command[0] = str(SPARK_HOME / "bin" / "spark-submit")
    command[command.index("JOB")] = "sync-tables,retention,compaction,rebuild-index"
    seen = set(cluster.app_tasks())
    done = _run_logged([*command, "--config", "cleanup.policy=compact,delete", "--config", "retention.ms=-1",
                        "--config", f"retention.bytes={keep}"], env, tmp_path)

    assert f"'rows_added': {len(before)}" in done  # sync-tables, before retention
    assert "'segments_expired': 1" in done and "'compacted': 1" in done
    m = load_manifest(store, TOPIC, 0)
    assert m.log_start_offset == segs[1].base_offset
    left = [r for r in before if r[0] >= segs[1].base_offset]
    assert remote_records(store) == reference(left, segs[-1].end_offset + 1, drop_tombstones=False)
    rebuilt = re.search(r"lakelog rebuild-index: (\{.*?\})", done).group(1)
    assert f"'segments': {len(m.copy_finished)}" in rebuilt and "'ok'" in rebuilt, rebuilt
    for seg in m.copy_finished:  # every index the manifest names is there and intact
        data = store.get(segment_key(TOPIC, 0, seg.base_offset, seg.segment_id, INDEX_SUFFIX))[0]
        assert len(data) == seg.index_bytes

    apps = {k: v for k, v in cluster.app_tasks().items() if k not in seen}
    assert [a["name"] for a in apps.values()] == ["lakelog-sync-tables+retention+compaction+rebuild-index"]
    for app_id in apps:
        _ran_on_the_executor(cluster, app_id)


def _run_logged(cmd: list[str], env: dict[str, str], cwd: Path) -> str:
    """Run a driver; its output goes to a file (shown when it fails or times out); returns stdout."""
    log = cwd / "driver.log"
    with open(log, "w") as err:
        try:
            done = subprocess.run(cmd, env=env, cwd=str(cwd), stdout=subprocess.PIPE, stderr=err, text=True,
                                  timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"driver timed out:\n{log.read_text()[-4000:]}") from None
    assert done.returncode == 0, log.read_text()[-4000:]
    return done.stdout


PROTOBUF_DRIVER = r'''
import json, sys
from lakelog.spark_log.jobs import run_job
from lakelog.spark_log.session import remote_session
from lakelog.tiering.remote_scan import tables_path

master, remote, topic, out = sys.argv[1:5]
spark = remote_session(remote, app_name="lakelog-standalone-protobuf", master=master)
df = spark.read.format("lakelog").option("remote", remote).option("topic", topic) \
    .option("valueFormat", "schema-registry").load()
result = {"app_id": spark.sparkContext.applicationId,
          "option": [[r["offset"], r["user"], r["count"], r["decode_error"]] for r in df.orderBy("offset").collect()]}
result["sync"] = run_job(spark, "sync-tables", remote, topics=[topic]).totals
result["table"] = [[r["user"], r["count"]] for r in
                   spark.read.format("delta").load(tables_path(remote, topic)).orderBy("offset").collect()]
json.dump(result, open(out, "w"))
spark.stop()
'''


def test_protobuf_values_decode_on_executors_without_protobuf(tmp_path, cluster, bare_python, s3):
    """The executors' Python has no protobuf (see bare_python): the option and sync-tables decode
    Protobuf values there from the protobuf that lakelog_deps.zip ships."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from tests.integration.test_spark_schema_tables import Remote, _proto_class
    from tests.support.nodes import start_node

    node = start_node(tmp_path / "registry")
    try:
        remote = Remote(tmp_path, node.url)
        click = _proto_class(1)
        ser = ProtobufSerializer(click, SchemaRegistryClient({"url": node.url}), {"use.deprecated.format": False})
        ctx = SerializationContext("clicks_pb", MessageField.VALUE)
        remote.append("clicks_pb", [(None, ser(click(user=f"u{i}", count=i, tags=["t"]), ctx)) for i in range(3)]
                      + [(None, b"\x00\x00\x00\x00\x01\x00\x0a\x09ab")])  # truncated: a dead letter
        script = tmp_path / "driver.py"
        script.write_text(PROTOBUF_DRIVER)
        out = tmp_path / "result.json"
        _run_logged([sys.executable, str(script), cluster.master_url, remote.url, "clicks_pb", str(out)],
                    _driver_env(cluster, bare_python, s3), tmp_path)
    finally:
        node.stop()
    result = json.loads(out.read_text())
    assert [r[:3] for r in result["option"]] == [[0, "u0", 0], [1, "u1", 1], [2, "u2", 2], [3, None, None]]
    assert [r[3] is None for r in result["option"]] == [True, True, True, False]
    assert result["sync"]["rows_added"] == 3 and result["table"] == [["u0", 0], ["u1", 1], ["u2", 2]]
    _ran_on_the_executor(cluster, result["app_id"])
