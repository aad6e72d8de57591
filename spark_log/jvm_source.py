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
