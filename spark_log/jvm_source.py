"""The JVM `lakelog` data source (spark_log/jvm/, built into spark_log/jvm/lakelog-spark.jar by
`make jvm`): where its jar is, and which source answers to `spark.read.format("lakelog")`.

Spark refuses a format name that both a JVM source and a registered Python source answer to, so
exactly one of them is "lakelog": the JVM source when its jar is on the session's class path (the
session factory adds it), else the Python source (spark_log/datasource.py). The Python source is
always registered as well under `lakelog_python`: the reference the tests compare with, and the
way to the Python path in a session that has the jar.
"""

from __future__ import annotations

import os
from pathlib import Path

from lakelog.logstore.read_committed import READ_COMMITTED, READ_UNCOMMITTED
from lakelog.spark_log.cli_common import REMOTE_ENV

JAR_ENV = "LAKELOG_SPARK_JAR"
JAR_NAME = "lakelog-spark.jar"
JVM_CLASS = "lakelog.spark.LakelogSource"
PYTHON_SOURCE_NAME = "lakelog_python"
#: The data source option that chooses what a read sees of transactional data.
ISOLATION_OPTION = "isolation"


def jar_path() -> Path | None:
    """`$LAKELOG_SPARK_JAR` (empty: none), else the built jar next to this package, if it exists."""
    configured = os.environ.get(JAR_ENV)
    if configured is not None:
        return Path(configured).expanduser() if configured else None
    built = Path(__file__).resolve().parent / "jvm" / JAR_NAME
    return built if built.is_file() else None


def jvm_source_loaded(spark) -> bool:
    """True when the session's JVM can load the JVM source (its jar is on the class path). A Spark
    Connect client session cannot tell (no JVM here): False."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return False
    try:
        loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
        jvm.java.lang.Class.forName(JVM_CLASS, False, loader)
        return True
    except Exception:  # noqa: BLE001 - py4j raises Py4JJavaError for ClassNotFoundException
        return False


def committed_source(spark, remote: str, topic: str, from_offset: int | None = None, *,
                     hot_tail: bool = False) -> str:
    """The format name a read_committed read of `topic` from `from_offset` uses: "lakelog", unless
    that is the JVM source and the read may meet transactional data it cannot hide. The JVM source
    skips control batches but does not leave aborted transactions out, and its hot tail reads up
    to the high watermark, not the last stable offset; so a read with the nodes' hot tail
    (`hot_tail`), or of a topic whose remote manifest lists a `.txnindex` at or after
    `from_offset`, takes the Python source (`lakelog_python`)."""
    if not jvm_source_loaded(spark):
        return "lakelog"
    if hot_tail:
        return PYTHON_SOURCE_NAME
    from lakelog.tiering.remote_scan import has_txn_index, load_manifest, open_remote, remote_partitions

    store = open_remote(remote)
    try:
        for p in remote_partitions(store, topic).get(topic, []):
            if has_txn_index(load_manifest(store, topic, p), from_offset):
                return PYTHON_SOURCE_NAME
        return "lakelog"
    finally:
        store.close()


def committed_format(spark, source: str, options: dict) -> str:
    """The format a `spark.read.format(source)` with `options` (keys lowercased) loads: `source`,
    except a read_committed read of "lakelog" that `committed_source` sends to the Python source.
    (A read_uncommitted read is what the JVM source returns: data records up to the high watermark.)"""
    isolation = str(options.get(ISOLATION_OPTION, READ_COMMITTED)).lower()
    if source.lower() != "lakelog" or isolation == READ_UNCOMMITTED or not jvm_source_loaded(spark):
        return source
    remote, topic = options.get("remote") or os.environ.get(REMOTE_ENV), options.get("topic")
    if isolation != READ_COMMITTED:
        return PYTHON_SOURCE_NAME  # which refuses the unknown isolation by name
    if not remote or not topic:
        return source  # the source itself reports the missing option
    start = options.get("startingoffset")
    try:
        return committed_source(spark, str(remote), str(topic), None if start is None else int(start),
                                hot_tail=bool(options.get("nodes")))
    except Exception:  # noqa: BLE001 - unchecked (a store or option error): the reader that is always
        return PYTHON_SOURCE_NAME  # right reads, and reports that error when the query plans
