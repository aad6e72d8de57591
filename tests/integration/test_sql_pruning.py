"""SQL `WHERE` on `partition`, `offset` and `timestamp` through the `lakelog.<topic>` views reaches
the reader: the planned scan holds only the wanted partitions and the remote segments that can
hold a wanted row (read off the planned input partitions of the JVM reader), and the nodes' part
only for the wanted partitions; a filter of one query never narrows the next query over the same
view or DataFrame (Spark keeps a DataFrame's planned reader across queries; the leak issue 15
describes). Real node tiering to a filesystem remote, real Spark in local mode, the JVM reader."""

from __future__ import annotations

import time

import pytest

from lakelog.spark_log.jvm_source import jvm_source_loaded
from lakelog.spark_log.session import remote_session
from lakelog.spark_log.tables import register_topics
from lakelog.tiering.fs_store import FileSystemStore
from lakelog.tiering.remote_scan import load_manifest
from tests.integration.test_sql_views import FAST_TIER, TIERED, create_topic, produce
from tests.support.faults import wait_for
from tests.support.nodes import start_node

pytestmark = pytest.mark.spark
TOPIC = "pruned"
PER_REQUEST = 20
REQUESTS = 12  # per phase and partition


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sqlpruning")
    n = start_node(tmp, **FAST_TIER, **{"remote.storage.url": (tmp / "remote").as_uri()})
    n.remote = (tmp / "remote").as_uri()
    n.remote_dir = tmp / "remote"
    try:
        yield n
    finally:
        n.stop()


@pytest.fixture(scope="module")
def spark():
    session = remote_session(None, app_name="lakelog-sql-pruning-test", master="local[2]")
    assert jvm_source_loaded(session), "make jvm builds spark_log/jvm/lakelog-spark.jar"
    yield session
    session.stop()


@pytest.fixture(scope="module")
def topic(node, spark):
    """Two partitions, each 2 x REQUESTS x PER_REQUEST records in many small segments: a first phase,
    then (after `between_ms`) a second. Returns `between_ms` once both phases' early segments are tiered."""
    create_topic(node.url, TOPIC, 2, TIERED)
    for p in (0, 1):
        for i in range(REQUESTS):
            produce(node.url, TOPIC, p, [f"first-{i}-{j}-" + "x" * 60 for j in range(PER_REQUEST)])
    time.sleep(0.05)
    between_ms = int(time.time() * 1000)
    time.sleep(0.05)  # the second phase's timestamps lie above between_ms on a millisecond clock
    for p in (0, 1):
        for i in range(REQUESTS):
            produce(node.url, TOPIC, p, [f"second-{i}-{j}-" + "x" * 60 for j in range(PER_REQUEST)])
    store = FileSystemStore(node.remote_dir)
    half = REQUESTS * PER_REQUEST
    # Both phases reach the remote tier in several segments per partition (the active one stays local).
    wait_for(lambda: all((load_manifest(store, TOPIC, p).copy_finished or [None])[-1] is not None
                         and load_manifest(store, TOPIC, p).copy_finished[-1].end_offset >= half + 60
                         for p in (0, 1)), what="both phases tiered")
    assert register_topics(spark, node.remote, nodes=node.url).count(TOPIC) == 1
    return between_ms


def _field(obj, name: str, spark):
    """A package-private field of the JVM reader's Split (py4j reaches public members only)."""
    f = obj.getClass().getDeclaredField(name)
    f.setAccessible(True)
    return f.get(obj)


def planned(spark, query: str) -> dict:
    """What the scan of `query` plans to read: the remote parts as (partition, segment base offset,
    segment end offset, max timestamp), the hot-tail partitions, and the scan's description."""
    df = spark.sql(query)
    scans = [leaf for leaf in _leaves(df._jdf.queryExecution().sparkPlan()) if leaf.getClass().getSimpleName() == "BatchScanExec"]
    assert len(scans) == 1, df._jdf.queryExecution().sparkPlan().toString()
    scan = scans[0]
    splits = scan.inputPartitions()
    parts, hot = [], []
    for i in range(splits.size()):
        split = splits.apply(i)
        plist = _field(split, "parts", spark)
        for j in range(plist.size()):
            part = plist.get(j)
            seg = _field(part, "segment", spark)
            parts.append((_field(part, "partition", spark), _field(seg, "baseOffset", spark),
                          _field(seg, "endOffset", spark), _field(seg, "maxTimestamp", spark)))
        h = _field(split, "hot", spark)
        if h is not None:
            hot.append(_field(h, "partition", spark))
    return {"parts": parts, "hot": sorted(hot), "description": scan.scan().description()}


def _leaves(plan):
    leaves = plan.collectLeaves()
    return [leaves.apply(i) for i in range(leaves.size())]


def test_where_on_partition_offset_and_timestamp_reaches_the_reader(spark, topic):
    between_ms = topic
    full = planned(spark, f"SELECT count(*) FROM lakelog.{TOPIC}")
    assert {p for p, *_ in full["parts"]} == {0, 1} and full["hot"] == [0, 1]
    assert "partitions all, offsets *..*, timestamps *..*" in full["description"], full["description"]
    per_partition = {p: [s for s in full["parts"] if s[0] == p] for p in (0, 1)}
    assert all(len(v) >= 4 for v in per_partition.values()), full["parts"]

    one = planned(spark, f"SELECT count(*) FROM lakelog.{TOPIC} WHERE partition = 1")
    assert {p for p, *_ in one["parts"]} == {1} and one["hot"] == [1], one
    assert "partitions [1]" in one["description"]

    ranged = planned(spark, f"SELECT * FROM lakelog.{TOPIC} WHERE partition = 0 AND offset BETWEEN 100 AND 130")
    assert "partitions [0], offsets 100..130" in ranged["description"], ranged["description"]
    assert ranged["parts"] and all(p == 0 and base <= 130 and end >= 100 for p, base, end, _ in ranged["parts"])
    assert len(ranged["parts"]) < len(per_partition[0])  # segments outside the range are not read

    later = planned(spark, f"SELECT count(*) FROM lakelog.{TOPIC} WHERE timestamp >= timestamp_millis({between_ms})")
    assert f"timestamps {between_ms}..*" in later["description"], later["description"]
    assert later["parts"] and all(max_ts >= between_ms for *_, max_ts in later["parts"])
    assert len(later["parts"]) < len(full["parts"])  # the first phase's segments are skipped by the manifest

    # And the rows are the right ones (Spark still applies every filter after the scan).
    rows = spark.sql(f"SELECT partition, min(offset) AS lo, max(offset) AS hi, count(*) AS n FROM lakelog.{TOPIC} "
                     f"WHERE partition = 0 AND offset BETWEEN 100 AND 130 GROUP BY partition").collect()
    assert [(r["partition"], r["lo"], r["hi"], r["n"]) for r in rows] == [(0, 100, 130, 31)]
    second = spark.sql(f"SELECT count(*) AS n, min(value) AS v FROM lakelog.{TOPIC} "
                       f"WHERE timestamp >= timestamp_millis({between_ms})").collect()[0]
    assert second["n"] == 2 * REQUESTS * PER_REQUEST and bytes(second["v"]).startswith(b"second-")


def test_a_filter_never_narrows_the_next_query_over_the_same_view_or_dataframe(spark, topic):
    total = 4 * REQUESTS * PER_REQUEST
    view = spark.table(f"lakelog.{TOPIC}")
    assert view.count() == total
    assert view.where("partition = 1 AND offset < 10").count() == 10
    assert view.count() == total  # the DataFrame's reader was not narrowed by the filtered query
    assert spark.sql(f"SELECT count(*) AS n FROM lakelog.{TOPIC} WHERE offset >= {2 * REQUESTS * PER_REQUEST - 5}"
                     ).collect()[0]["n"] == 10
    assert spark.sql(f"SELECT count(*) AS n FROM lakelog.{TOPIC}").collect()[0]["n"] == total
    again = planned(spark, f"SELECT count(*) FROM lakelog.{TOPIC}")
    assert "partitions all, offsets *..*, timestamps *..*" in again["description"], again["description"]
    assert {p for p, *_ in again["parts"]} == {0, 1} and again["hot"] == [0, 1]
