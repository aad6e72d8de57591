"""The SparkSession factory: Delta Lake and S3A from local jars, local or cluster master.

Why local jars: Spark can fetch jars itself at start-up (`spark.jars.packages`), but then every
session start depends on Maven Central (or an Ivy cache) being reachable and unchanged, the first
start of a fresh machine or container stalls on a download, and what ends up on the classpath is
decided at run time. Instead `make jars` resolves `infra/pom.xml` once with Maven into a
git-ignored folder (`<repo>/.jars`, or `LAKELOG_JARS_DIR`), and every session puts exactly those
files on the driver's class path (`spark.driver.extraClassPath`). Starting Spark never downloads
anything; a missing folder is a typed error (`SparkJarsMissing`) that says what to run.

Why the class path and not `spark.jars`: Spark serves every `spark.jars` file to each executor of
each application, which copies them (~700 MB with the AWS SDK bundle) once per application, even on
a local master whose executor is the driver's JVM. A local master needs the jars on the driver's
class path only. A cluster's executors read them from `LAKELOG_EXECUTOR_JARS_DIR`, a folder on
every worker with the same jars (`spark.executor.extraClassPath=<dir>/*`, nothing copied); without
it they are shipped with `spark.jars` (the copy per application, documented in docs/spark.md).

The pom lists only what the pyspark wheel lacks (Delta, hadoop-aws and the AWS SDK v2 bundle); the
wheel's own `pyspark/jars` supplies Spark, Scala and the Hadoop client.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from lakelog.spark_log.errors import SparkJarsMissing, SparkSetupError

JARS_DIR_ENV = "LAKELOG_JARS_DIR"
#: A folder on every worker of a cluster holding the jars `make jars` resolves (same names).
EXECUTOR_JARS_DIR_ENV = "LAKELOG_EXECUTOR_JARS_DIR"
MASTER_ENV = "LAKELOG_SPARK_MASTER"
DEFAULT_MASTER = "local[*]"
# The jar without which no Lakelog session is useful (delta-spark_<spark>_<scala>-<version>.jar).
DELTA_JAR_GLOB = "delta-spark_*.jar"

DELTA_CONF: dict[str, str] = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
#: Hadoop 3.5's default S3A input stream (the analytics accelerator's) keeps what it read in the
#: JVM's heap for a few seconds, up to 2 GiB by default: more than a default 1 GiB driver heap.
#: Reading 117 MB and then 522 MB of Parquet from S3 back to back in one local session failed with
#: `OutOfMemoryError: Java heap space` inside that stream (bench/spark.py --source-only,
#: 2026-11-26). Lakelog's sessions cap it at 256 MiB; a `conf` entry of the same key overrides.
S3A_STREAM_MEMORY_CONF: dict[str, str] = {
    "spark.hadoop.fs.s3a.analytics.accelerator.physicalio.max.memory.limit": str(256 * 1024 * 1024),
}
#: Lakelog's own packages (folders of the repository, `lakelog.<name>` once imported), shipped to
#: executors of a cluster master (see `ship_packages`).
SHIPPED_PACKAGES = ("infra", "index", "logstore", "tiering", "compaction", "spark_log")
PACKAGES_ZIP = "lakelog_packages.zip"

#: For SQL sessions: `lakelog.<name>` resolves to Spark's global temporary views (static: set when
#: the session starts), which every session of the application sees, Spark Connect's included.
SQL_CONF: dict[str, str] = {"spark.sql.globalTempDatabase": "lakelog"}

# Defaults for a local master on one small machine; a cluster keeps Spark's own defaults, since
# a loopback-only driver could not be reached by remote executors. Shuffle partitions and Delta's
# log-replay tasks (default 50: seconds per table read on a few cores for no gain) are sized from
# the master's cores in `session_conf`; the jobs size a cluster's from its cores when they start
# (`jobs.size_shuffle_partitions`).
LOCAL_DEFAULTS: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.driver.host": "localhost",
}


def default_jars_dir() -> Path:
    """`LAKELOG_JARS_DIR` if set, else `<repo root>/.jars` next to this package."""
    configured = os.environ.get(JARS_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path(__file__).resolve().parents[1] / ".jars"


def local_jars(jars_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """The jars to put on the class path, sorted; `SparkJarsMissing` if there is no Delta jar."""
    folder = Path(jars_dir) if jars_dir is not None else default_jars_dir()
    if not folder.is_dir():
        raise SparkJarsMissing(folder, "the folder does not exist")
    jars = sorted(p.resolve() for p in folder.glob("*.jar") if p.is_file())
    if not any(p.match(DELTA_JAR_GLOB) for p in jars):
        raise SparkJarsMissing(folder, f"no Delta jar ({DELTA_JAR_GLOB}) in it")
    return jars


def session_conf(
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    jars_dir: str | os.PathLike[str] | None = None,
) -> dict[str, str]:
    """The Spark configuration `build_session` applies, computed without starting Spark.

    Precedence: Lakelog's defaults, then `conf`. Class paths and `spark.jars` in `conf` are added
    to the local jars rather than replacing them (`jar_settings`); `spark.jars.packages` is refused.
    """
    extra = dict(conf or {})
    if "spark.jars.packages" in extra:
        raise SparkSetupError(
            "spark.jars.packages would download jars at Spark start; add the artifact to "
            "infra/pom.xml and run `make jars` instead"
        )
    master = master or os.environ.get(MASTER_ENV) or DEFAULT_MASTER
    settings: dict[str, str] = {"spark.master": master}
    settings.update(jar_settings(master, jars_dir, extra))
    settings.update(DELTA_CONF)
    settings.update(S3A_STREAM_MEMORY_CONF)
    if master.startswith("local"):
        settings.update(LOCAL_DEFAULTS)
        # Sized to the master: 2 shuffle partitions (and Delta log-replay tasks) per core.
        sized = str(2 * local_cores(master))
        settings["spark.sql.shuffle.partitions"] = sized
        settings["spark.databricks.delta.snapshotPartitions"] = sized
    settings.update({k: str(v) for k, v in extra.items()})
    return settings


def local_cores(master: str) -> int:
    """The cores a `local`, `local[N]`, `local[*]` or `local[N,F]` master runs tasks on."""
    inside = master[len("local["):-1].split(",")[0].strip() if master.startswith("local[") else "1"
    if inside == "*":
        return max(1, os.cpu_count() or 1)
    try:
        return max(1, int(inside))
    except ValueError:
        return max(1, os.cpu_count() or 1)


def jar_settings(master: str, jars_dir: str | os.PathLike[str] | None = None,
                 extra: dict[str, str] | None = None) -> dict[str, str]:
    """Where the JVM finds Lakelog's jars: the driver's class path always; a cluster's executors
    from `spark.executor.extraClassPath` (given in `extra`, or `LAKELOG_EXECUTOR_JARS_DIR`/*),
    else shipped with `spark.jars`. Entries of `extra` for these keys are merged and removed."""
    from lakelog.spark_log.jvm_source import jar_path

    extra = extra if extra is not None else {}
    jars = [str(p) for p in local_jars(jars_dir)]
    # The JVM `lakelog` data source (make jvm); without it, the Python one. Built here, so a
    # cluster's executors always get it with spark.jars (it is small).
    own = [str(jar_path())] if jar_path() is not None else []
    driver_cp = os.pathsep.join(jars + own)
    if extra.get("spark.driver.extraClassPath"):
        driver_cp += os.pathsep + extra.pop("spark.driver.extraClassPath")
    out = {"spark.driver.extraClassPath": driver_cp}
    shipped = [extra.pop("spark.jars")] if extra.get("spark.jars") else []
    if not master.startswith("local"):
        executor_dir = os.environ.get(EXECUTOR_JARS_DIR_ENV)
        if extra.get("spark.executor.extraClassPath"):
            out["spark.executor.extraClassPath"] = extra.pop("spark.executor.extraClassPath")
            shipped = own + shipped
        elif executor_dir:
            out["spark.executor.extraClassPath"] = str(Path(executor_dir) / "*")
            shipped = own + shipped
        else:
            shipped = jars + own + shipped
    if shipped:
        out["spark.jars"] = ",".join(shipped)
    return out


def build_session(
    app_name: str = "lakelog",
    master: str | None = None,
    conf: Mapping[str, str] | None = None,
    jars_dir: str | os.PathLike[str] | None = None,
) -> SparkSession:
    """Start (or join) a SparkSession with Delta Lake and S3A from the local jars folder.

    `master` defaults to `LAKELOG_SPARK_MASTER`, then `local[*]`. Raises `SparkJarsMissing`
    before any JVM starts if the jars are not there, and `SparkSetupError` if this process
    already runs a SparkContext started without them (its classpath cannot change any more).
    """
    settings = session_conf(master=master, conf=conf, jars_dir=jars_dir)
    # Executors (Python workers) must run the same interpreter as the driver: the venv's.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if settings["spark.master"].startswith("local"):
        # The block manager and RPC servers bind to SPARK_LOCAL_IP, not to the driver settings;
        # without it Spark picks a non-loopback interface. Read when the JVM starts.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    builder = SparkSession.builder.appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()

    running = spark.sparkContext.getConf()
    running_jars = running.get("spark.driver.extraClassPath", "").split(os.pathsep)
    running_jars += running.get("spark.jars", "").split(",")
    if not any(Path(j).match(DELTA_JAR_GLOB) for j in running_jars if j):
        raise SparkSetupError(
            "a SparkContext was already running in this process without Lakelog's jars; "
            "stop it before calling build_session"
        )
    return spark


def s3a_conf(
    endpoint_url: str | None = None,
    access_key: str | None = None,
    secret_key: str | None = None,
    region: str | None = None,
    path_style: bool = True,
) -> dict[str, str]:
    """Spark conf entries (`spark.hadoop.fs.s3a.*`) for S3 or an S3-compatible store.

    Each value not given comes from the usual AWS environment variable (`AWS_ENDPOINT_URL`,
    `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION` / `AWS_DEFAULT_REGION`); what is
    still unknown is left to S3A's own defaults and credential chain. Path-style access suits
    MinIO, moto and most S3-compatible stores. Spark redacts the key values in its UI and logs.
    Pass the result as `conf` to `build_session`.
    """
    endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL")
    access_key = access_key or os.environ.get("AWS_ACCESS_KEY_ID")
    secret_key = secret_key or os.environ.get("AWS_SECRET_ACCESS_KEY")
    region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")

    prefix = "spark.hadoop.fs.s3a."
    out = {prefix + "path.style.access": "true" if path_style else "false"}
    if endpoint_url:
        out[prefix + "endpoint"] = endpoint_url
        out[prefix + "connection.ssl.enabled"] = (
            "false" if endpoint_url.lower().startswith("http://") else "true"
        )
    if region:
        out[prefix + "endpoint.region"] = region
    if access_key and secret_key:
        out[prefix + "access.key"] = access_key
        out[prefix + "secret.key"] = secret_key
        out[prefix + "aws.credentials.provider"] = (
            "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        )
    return out


def ship_packages(spark: SparkSession, packages: tuple[str, ...] = SHIPPED_PACKAGES) -> Path | None:
    """Ship what executors of a cluster where Lakelog is not installed import: Lakelog's packages
    as a zip (`addPyFile`), the third-party packages they use as `lakelog_deps.zip` and the built
    native decoder (`addFile`; see spark_log/executor_deps.py and native.py). Each is skipped when
    spark-submit already ships a file of that name (`--py-files` / `--files`, the `lakelog jobs
    package` route: adding it again from another path fails the application). A local master
    shares the driver's interpreter and needs nothing: returns None there, else the packages zip
    it added (None if spark-submit shipped it)."""
    import tempfile

    from lakelog.spark_log.executor_deps import DEPS_ZIP, write_deps_zip
    from lakelog.spark_log.native import native_extension_path

    sc = spark.sparkContext
    if sc.master.startswith("local"):
        return None
    conf = sc.getConf()
    given = {Path(p).name for key in ("spark.submit.pyFiles", "spark.files")
             for p in conf.get(key, "").split(",") if p}
    folder = Path(tempfile.mkdtemp(prefix="lakelog-pyfiles-"))
    out = None
    if PACKAGES_ZIP not in given:
        out = write_packages_zip(folder / PACKAGES_ZIP, packages)
        sc.addPyFile(str(out))
    if DEPS_ZIP not in given:
        sc.addFile(str(write_deps_zip(folder / DEPS_ZIP)))
    native = native_extension_path()
    if native is not None and native.name not in given:  # loaded where the executors' ABI matches
        sc.addFile(str(native))
    return out


def write_packages_zip(path: Path, packages: tuple[str, ...] = SHIPPED_PACKAGES) -> Path:
    """Lakelog's packages (their .py files) and delta-spark's Python package as a zip for
    `addPyFile` / `spark-submit --py-files`."""
    import importlib.util
    import zipfile

    root = Path(__file__).resolve().parents[1]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        # zipimport finds a namespace package (no __init__.py) only by its directory entry.
        z.writestr(zipfile.ZipInfo("lakelog/"), b"")
        for pkg in packages:
            for f in sorted((root / pkg).rglob("*.py")):
                # `lakelog` is a namespace package: the zip holds lakelog/<package>/... and no
                # lakelog/__init__.py, so it merges with an installed Lakelog instead of hiding it.
                z.write(f, "lakelog/" + f.relative_to(root).as_posix())
        # delta-spark's Python half (pure Python): the job's driver under spark-submit imports
        # `delta.tables` for sync-tables, and a cluster's Python rarely has it.
        spec = importlib.util.find_spec("delta")
        if spec is not None and spec.submodule_search_locations:
            delta_root = Path(list(spec.submodule_search_locations)[0])
            for f in sorted(delta_root.rglob("*.py")):
                z.write(f, "delta/" + f.relative_to(delta_root).as_posix())
    return path


def remote_session(remote_url: str | None = None, app_name: str = "lakelog", master: str | None = None,
                   conf: Mapping[str, str] | None = None, register_source: bool = True) -> SparkSession:
    """A session for jobs and analysts over a remote tier: S3A from the AWS environment when the
    remote is S3, the `lakelog` data source registered, Lakelog's packages shipped to a cluster."""
    settings: dict[str, str] = dict(SQL_CONF)
    if remote_url and remote_url.startswith(("s3://", "s3a://")):
        settings.update(s3a_conf())
    settings.update(conf or {})
    spark = build_session(app_name=app_name, master=master, conf=settings)
    ship_packages(spark)
    if register_source:
        # Note: with the source registered, a missing table `lakelog.x` is reported by Spark as an
        # unsupported "direct query on files" of format lakelog (the name doubles as a format).
        from lakelog.spark_log.datasource import register

        register(spark)
    return spark
