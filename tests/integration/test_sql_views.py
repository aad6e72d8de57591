"""`lakelog.<topic>` is the whole topic: the remote tier and the nodes' hot tail, up to the high
watermark each query reads — against a real node tiering to a filesystem remote, with real Spark."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from lakelog.spark_log.jobs import run_job
from lakelog.spark_log.session import remote_session
from lakelog.spark_log.tables import register_topics
from lakelog.tiering.remote_scan import load_manifest, open_remote
from tests.support.faults import wait_for
from tests.support.nodes import start_node

pytestmark = pytest.mark.spark
BINARY = "application/vnd.kafka.binary.v2+json"
TIERED = {"remote.storage.enable": "true", "segment.bytes": "4096", "index.interval.bytes": "512",
          "local.retention.bytes": "1", "retention.ms": "-1"}
FAST_TIER = {"remote.log.manager.task.interval.ms": "100", "remote.segment.delete.delay.ms": "60000",
             "remote.log.metadata.max.age.ms": "0"}
LAKELOG = str(Path(sys.executable).with_name("lakelog"))


def create_topic(url: str, name: str, partitions: int, configs: dict[str, str]) -> None:
    cid = httpx.get(f"{url}/v3/clusters", timeout=10).json()["data"][0]["cluster_id"]
    r = httpx.post(f"{url}/v3/clusters/{cid}/topics", timeout=30, json={
        "topic_name": name, "partitions_count": partitions, "replication_factor": 1,
        "configs": [{"name": k, "value": v} for k, v in configs.items()]})
    assert r.status_code == 201, r.text


def produce(url: str, topic: str, partition: int, values: list[str]) -> None:
    r = httpx.post(f"{url}/topics/{topic}/partitions/{partition}?acks=all", timeout=30,
                   headers={"Content-Type": BINARY},
                   json={"records": [{"key": base64.b64encode(b"k").decode(),
                                      "value": base64.b64encode(v.encode()).decode()} for v in values]})
    assert r.status_code == 200, r.text


def tiered_count(remote: Path) -> int:
    return len(list(remote.rglob("*.log")))


def tiered_end(remote: str, topic: str, partition: int) -> int:
    """One past the last offset the partition's manifest lists as COPY_FINISHED (0: none yet): what a
    sync can read. A `.log` object appears before its manifest entry commits, so count this."""
    store = open_remote(remote)
    try:
        end = load_manifest(store, topic, partition).end_offset
    finally:
        store.close()
    return 0 if end is None else end + 1


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sqlviews")
    n = start_node(tmp, **FAST_TIER, **{"remote.storage.url": (tmp / "remote").as_uri()})
    n.remote = (tmp / "remote").as_uri()
    n.remote_dir = tmp / "remote"
    try:
        yield n
    finally:
        n.stop()


@pytest.fixture(scope="module")
def spark():
    session = remote_session(None, app_name="lakelog-sql-views-test", master="local[2]")
    yield session
    session.stop()


def sql(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([LAKELOG, "sql", *args], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYSPARK_PYTHON=sys.executable))


def test_the_cli_counts_every_acknowledged_record_at_once(node, tmp_path):
    url = node.url
    create_topic(url, "orders", 2, TIERED)
    create_topic(url, "clicks", 1, {})  # no remote tier: the nodes alone
    produced = {0: 0, 1: 0}
    for i in range(12):
        p = i % 2
        produce(url, "orders", p, [f"order-{i}-{j}-" + "x" * 40 for j in range(50)])
        produced[p] += 50
    produce(url, "clicks", 0, [f"click-{j}" for j in range(77)])
    wait_for(lambda: tiered_count(node.remote_dir) > 2, what="some segments tiered")
    # No sleep, no sync-tables: the last records are still only on the node.
    out = sql("SELECT partition, count(*) AS n, count(DISTINCT offset) AS d, max(offset) AS m FROM lakelog.orders "
              "GROUP BY partition ORDER BY partition", "--remote", node.remote, "--nodes", url, "--format", "json",
              cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert rows == [{"partition": p, "n": produced[p], "d": produced[p], "m": produced[p] - 1} for p in (0, 1)]
    assert out.stderr == ""  # no JVM warnings, no progress noise
    clicks = sql("SELECT count(*) AS n FROM lakelog.clicks", "--remote", node.remote, "--nodes", url,
                 "--format", "csv", cwd=tmp_path)
    assert clicks.returncode == 0 and clicks.stdout.splitlines() == ["n", "77"], clicks.stderr

    bad = sql("SELECT * FROM lakelog.no_such_topic", "--remote", node.remote, "--nodes", url, cwd=tmp_path)
    assert bad.returncode == 1 and "no_such_topic" in bad.stderr and "lakelog.orders" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr and "WARN" not in bad.stderr


def test_the_interactive_prompt_runs_statements_over_lines_describes_tables_and_survives_errors(node, tmp_path):
    create_topic(node.url, "prompted", 1, {})
    produce(node.url, "prompted", 0, [f"p-{j}" for j in range(23)])
    script = "\\d\n\\d prompted\nSELECT count(*) AS n,\n  max(offset) AS m\nFROM lakelog.prompted;\n" \
             "SELECT * FROM lakelog.nope;\n;\nSELECT 7 AS seven;\n\\q\nSELECT 8 AS after_quit;\n"
    out = subprocess.run([LAKELOG, "sql", "--local", "--remote", node.remote, "--nodes", node.url, "--format", "csv"],
                         cwd=tmp_path, input=script, capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, PYSPARK_PYTHON=sys.executable, HOME=str(tmp_path)))
    assert out.returncode == 0, out.stderr
    lines = [line.split("> ")[-1] for line in out.stdout.splitlines()]  # input()'s prompts share stdout's lines
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines if line.startswith("|")]
    assert ["lakelog.prompted"] in cells  # \d: the tables (drawn as a table, whatever --format)
    assert ["offset", "bigint"] in cells and ["value", "binary"] in cells  # \d prompted: its columns
    assert lines[lines.index("n,m") + 1] == "23,22"  # one statement over three lines
    assert "seven" in lines and lines[lines.index("seven") + 1] == "7"  # an error does not end the prompt
    assert "after_quit" not in out.stdout  # \q ends it
    errors = [line for line in out.stderr.splitlines() if line.startswith("lakelog sql: ") and "nope" in line]
    assert len(errors) == 1 and "Traceback" not in out.stderr
    assert (tmp_path / ".lakelog_sql_history").exists()


def test_counts_never_go_down_nor_double_while_producing_tiering_and_syncing(node, spark):
    url, topic = node.url, "stream"
    create_topic(url, topic, 1, {**TIERED, "segment.bytes": "16384"})
    names = register_topics(spark, node.remote, nodes=url)
    assert topic in names
    view = spark.table(f"lakelog.{topic}")
    acked = [0]
    stop = threading.Event()

    def producer():  # paced, so that the queries below run while it produces; bounded in count
        i = 0
        while not stop.wait(0.1) and i < 150:
            produce(url, topic, 0, [f"v-{i}-{j}-" + "y" * 60 for j in range(20)])
            acked[0] += 20
            i += 1

    t = threading.Thread(target=producer, daemon=True)
    t.start()
    seen = []
    try:
        for round_ in range(4):
            before = acked[0]
            row = view.selectExpr("count(*) AS n", "count(DISTINCT offset) AS d", "min(offset) AS lo",
                                  "max(offset) AS hi").collect()[0]
            after = acked[0]
            n, d = row["n"], row["d"]
            assert n == d, f"round {round_}: {n} rows but {d} distinct offsets"
            assert before <= n <= after, f"round {round_}: {n} rows, acknowledged {before}..{after}"
            if n:
                assert (row["lo"], row["hi"]) == (0, n - 1), "a gap"
            assert not seen or n >= seen[-1], f"the count went down: {seen} then {n}"
            seen.append(n)
            if round_ == 1:
                # A sync reads only what is tiered: with a warm JVM the two queries above can finish
                # before the first segment is sealed and uploaded (the table then rightly does not
                # exist yet), so wait for one.
                wait_for(lambda: tiered_end(node.remote, topic, 0) > 0, what="a segment of the topic tiered")
                summary = run_job(spark, "sync-tables", node.remote, topics=[topic])
                assert summary.totals["rows_added"] > 0, summary.rows
                register_topics(spark, node.remote, nodes=url)
    finally:
        stop.set()
        t.join(60)
    final = spark.sql(f"SELECT count(*) AS n FROM lakelog.{topic}").collect()[0]["n"]
    assert final == acked[0] and seen[-1] > seen[0]
    # The synced table is there beside the topic, and trails it.
    synced = spark.sql(f"SELECT count(*) AS n FROM lakelog.{topic}_table").collect()[0]["n"]
    assert 0 < synced <= final


def test_sync_tables_adds_exactly_the_tiered_records_and_nothing_before_the_first_tiered_segment(node, spark):
    """sync-tables (the JVM reader when its jar is built) over the filesystem store, in a process
    whose earlier modules started and stopped other sessions: nothing tiered yet adds no table; then
    exactly the records of the tiered segment, offsets 0..n-1 with none twice."""
    from lakelog.spark_log.jvm_source import jar_path, jvm_source_loaded
    from lakelog.tiering.remote_scan import tables_path

    assert jvm_source_loaded(spark) == (jar_path() is not None)  # the reader this test checks
    url, topic = node.url, "synced"
    create_topic(url, topic, 1, TIERED)
    produce(url, topic, 0, [f"early-{j}-" + "e" * 100 for j in range(50)])  # one batch > segment.bytes
    path = tables_path(node.remote, topic)
    assert tiered_end(node.remote, topic, 0) == 0  # the only segment is the active one: nothing sealed
    try:
        early = run_job(spark, "sync-tables", node.remote, topics=[topic]).totals["rows_added"]
    except ValueError as e:  # no manifest yet: "no remote data for topic(s) synced"
        assert topic in str(e)
        early = 0
    assert early == 0 and f"{topic}_table" not in register_topics(spark, node.remote)
    produce(url, topic, 0, [f"late-{j}" for j in range(7)])  # rolls: the first segment is sealed, then tiered
    wait_for(lambda: tiered_end(node.remote, topic, 0) == 50, what="the sealed segment tiered")
    summary = run_job(spark, "sync-tables", node.remote, topics=[topic])
    assert summary.totals["rows_added"] == 50, summary.rows
    rows = spark.read.format("delta").load(path).selectExpr(
        "count(*) AS n", "count(DISTINCT offset) AS d", "min(offset) AS lo", "max(offset) AS hi").collect()[0]
    assert (rows["n"], rows["d"], rows["lo"], rows["hi"]) == (50, 50, 0, 49)
    assert run_job(spark, "sync-tables", node.remote, topics=[topic]).totals["rows_added"] == 0  # idempotent


def test_a_dataframe_queried_again_sees_new_records(node, spark):
    """Spark keeps a DataFrame's planned input partitions across queries; the hot tail's bound is
    read by the task, so the second query still sees what was acknowledged in between."""
    url, topic = node.url, "again"
    create_topic(url, topic, 1, {})
    produce(url, topic, 0, [f"a-{j}" for j in range(10)])
    df = spark.read.format("lakelog").option("remote", node.remote).option("topic", topic).option("nodes", url).load()
    assert df.count() == 10
    produce(url, topic, 0, [f"b-{j}" for j in range(5)])
    assert df.count() == 15
    assert df.where("offset >= 12").count() == 3
    assert df.count() == 15  # a filtered query does not prune the next one


CONNECT_CLIENT = """
import base64, httpx
from pyspark.sql import SparkSession
spark = SparkSession.builder.remote("{address}").getOrCreate()
print(spark.sql("SELECT count(*) AS n FROM lakelog.{topic}").collect()[0]["n"])
r = httpx.post("{url}/topics/{topic}/partitions/0?acks=all", headers={{"Content-Type": "{binary}"}},
               json={{"records": [{{"value": base64.b64encode(b"t").decode()}}] * 7}}, timeout=30)
assert r.status_code == 200, r.text
print(spark.sql("SELECT count(*) AS n FROM lakelog.{topic}").collect()[0]["n"])  # no refresh needed
spark.stop()
""".replace("{binary}", BINARY)


def test_sql_server_answers_the_cli_and_a_spark_connect_client(node, tmp_path):
    url, topic = node.url, "served"
    create_topic(url, topic, 1, TIERED)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    server = subprocess.Popen([LAKELOG, "sql-server", "--remote", node.remote, "--nodes", url, "--listen",
                               "sc://127.0.0.1:0", "--refresh-ms", "200", "--master", "local[2]"], cwd=tmp_path,
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              start_new_session=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(server.stderr.readline, "")), daemon=True).start()
    try:
        listening = wait_for(lambda: next((ln for ln in lines if "Spark SQL on sc://" in ln), None), timeout_s=240,
                             what="the SQL server")
        address = "sc://" + listening.split("sc://", 1)[1].split()[0]
        wait_for(lambda: any(f"lakelog.{topic}" in ln for ln in lines), timeout_s=60, what="the topic's view")
        produce(url, topic, 0, [f"s-{j}" for j in range(123)])
        out = sql(f"SELECT count(*) AS n FROM lakelog.{topic}", "--server", address, "--format", "csv", cwd=tmp_path)
        assert out.returncode == 0 and out.stdout.splitlines() == ["n", "123"], out.stderr

        # An analyst's own process, as the docs show it: a Spark Connect client, no JVM of its own.
        client = CONNECT_CLIENT.format(address=address, topic=topic, url=url)
        done = subprocess.run([sys.executable, "-c", client], capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split() == ["123", "130"]
    finally:
        server.terminate()
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
    assert server.returncode == 0, "".join(lines[-20:])


@pytest.mark.timeout(1500)  # two sync-tables runs and a view query in local Spark, on a shared machine
def test_time_travel_on_the_table_and_by_kafka_timestamp_on_the_topic(node, spark):
    """docs/spark.md's time travel, as written: Delta VERSION AS OF / TIMESTAMP AS OF on the
    table's path, and a Kafka timestamp bound on the topic view."""
    import time

    from delta.tables import DeltaTable

    from lakelog.tiering.remote_scan import tables_path

    url, topic = node.url, "travel"
    create_topic(url, topic, 1, TIERED)
    for i in range(10):  # ten requests: segments roll between batches, and sealed ones are tiered
        produce(url, topic, 0, [f"first-{i}-{j}-" + "z" * 60 for j in range(20)])
    between_ms = int(time.time() * 1000)
    time.sleep(0.05)  # the second batch's timestamps are above between_ms on a millisecond clock
    segments = lambda: len(list(node.remote_dir.rglob(f"{topic}-0/*.log")))
    wait_for(lambda: segments() >= 2, what="the first records tiered")
    tiered_first = segments()
    path = tables_path(node.remote, topic)
    run_job(spark, "sync-tables", node.remote, topics=[topic])
    first_count = spark.read.format("delta").load(path).count()
    for i in range(10):
        produce(url, topic, 0, [f"second-{i}-{j}-" + "z" * 60 for j in range(20)])
    wait_for(lambda: segments() > tiered_first, what="the second records tiered")
    run_job(spark, "sync-tables", node.remote, topics=[topic])
    second_count = spark.read.format("delta").load(path).count()
    assert 0 < first_count < second_count

    history = {r["version"]: r["timestamp"] for r in DeltaTable.forPath(spark, path).history().collect()}
    first_version, last_version = min(history), max(history)
    location = path.replace("`", "``")
    as_of = lambda clause: spark.sql(f"SELECT count(*) AS n FROM delta.`{location}` {clause}").collect()[0]["n"]
    assert as_of(f"VERSION AS OF {first_version}") == first_count
    assert as_of(f"VERSION AS OF {last_version}") == second_count
    assert as_of(f"TIMESTAMP AS OF '{history[first_version].isoformat(sep=' ')}'") == first_count
    register_topics(spark, node.remote, nodes=url)
    assert spark.sql(f"SELECT count(*) AS n FROM lakelog.{topic}_table").collect()[0]["n"] == second_count

    # The topic by Kafka timestamp: what was produced before the instant between the two batches.
    before = spark.sql(f"SELECT count(*) AS n, max(offset) AS m FROM lakelog.{topic} "
                       f"WHERE timestamp <= timestamp_millis({between_ms})").collect()[0]
    assert (before["n"], before["m"]) == (200, 199)


def test_avro_bytes_from_confluent_kafka_come_out_of_lakelog_sql_as_typed_columns(node, tmp_path):
    """Values made by confluent-kafka's AvroSerializer against the node's own registry, produced on the
    binary path (bytes unchanged), are typed columns of lakelog.<topic> at once (the nodes' hot tail:
    nothing tiered or synced yet); a value that is not in the wire format says why in decode_error."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    url, topic = node.url, "payments"
    create_topic(url, topic, 1, {})
    schema = {"type": "record", "name": "Payment", "namespace": "lakelog.sql",
              "fields": [{"name": "payment_id", "type": "string"}, {"name": "amount", "type": "double"},
                         {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
    ser = AvroSerializer(SchemaRegistryClient({"url": url}), json.dumps(schema))
    ctx = SerializationContext(topic, MessageField.VALUE)
    values = [ser({"payment_id": f"p{i}", "amount": i * 1.5, "at": 1_700_000_000_000 + i}, ctx) for i in range(3)]
    r = httpx.post(f"{url}/topics/{topic}/partitions/0?acks=all", timeout=30, headers={"Content-Type": BINARY},
                   json={"records": [{"value": base64.b64encode(v).decode()} for v in values + [b"not avro"]]})
    assert r.status_code == 200, r.text
    query = (f"SELECT offset, payment_id, amount, CAST(at AS STRING) AS at, decode_error FROM lakelog.{topic} "
             "ORDER BY offset")
    out = subprocess.run([LAKELOG, "sql", query, "--remote", node.remote, "--nodes", url, "--format", "json"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=1200,  # a cold JVM on a loaded machine
                         env=dict(os.environ, PYSPARK_PYTHON=sys.executable))
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["offset"], r["payment_id"], r["amount"]) for r in rows] == [
        (0, "p0", 0.0), (1, "p1", 1.5), (2, "p2", 3.0), (3, None, None)]
    assert rows[0]["at"].startswith("2023-11-14") and rows[0]["decode_error"] is None
    assert "not in Confluent's wire format" in rows[3]["decode_error"]
