"""The session factory's configuration, checked without starting a JVM."""

from __future__ import annotations

import pytest

from pathlib import Path

from lakelog.spark_log.errors import SparkJarsMissing, SparkSetupError
from lakelog.spark_log.session import local_jars, s3a_conf, session_conf


def test_missing_jars_folder_names_folder_and_make_jars(tmp_path):
    missing = tmp_path / "no-such-dir"
    with pytest.raises(SparkJarsMissing) as info:
        local_jars(missing)
    assert str(missing) in str(info.value)
    assert "make jars" in str(info.value)
    assert info.value.jars_dir == missing


def test_empty_jars_folder_is_missing_delta(tmp_path):
    with pytest.raises(SparkJarsMissing) as info:
        session_conf(jars_dir=tmp_path)
    message = str(info.value)
    assert str(tmp_path) in message
    assert "delta-spark_" in message
    assert "make jars" in message
    assert isinstance(info.value, SparkSetupError)


def test_env_var_names_the_jars_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("LAKELOG_JARS_DIR", str(tmp_path))
    with pytest.raises(SparkJarsMissing, match="make jars"):
        local_jars()


@pytest.fixture
def fake_jars(tmp_path):
    names = ("delta-spark_4.2_2.13-4.4.0.jar", "delta-storage-4.4.0.jar", "hadoop-aws-3.5.0.jar")
    for name in names:
        (tmp_path / name).write_bytes(b"")
    return tmp_path


def test_conf_uses_local_jars_and_delta(fake_jars, monkeypatch):
    monkeypatch.delenv("LAKELOG_SPARK_MASTER", raising=False)
    monkeypatch.setenv("LAKELOG_SPARK_JAR", "")  # without the JVM data source's jar
    conf = session_conf(jars_dir=fake_jars)
    # A local master's executor is the driver's JVM: the jars go on its class path, never on
    # spark.jars (which copies every jar to the executor once per application).
    jars = conf["spark.driver.extraClassPath"].split(":")
    names = [j.rsplit("/", 1)[-1] for j in jars]
    assert names == sorted(p.name for p in fake_jars.glob("*.jar"))
    assert "spark.jars" not in conf and "spark.executor.extraClassPath" not in conf
    assert "spark.jars.packages" not in conf
    assert conf["spark.master"] == "local[*]"
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    catalog = conf["spark.sql.catalog.spark_catalog"]
    assert catalog == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.sql.shuffle.partitions"] == "4"


def test_local_sessions_are_sized_to_the_master(fake_jars):  # noqa: D103
    for master, partitions in (("local[3]", "6"), ("local", "2"), ("local[1,4]", "2")):
        conf = session_conf(master=master, jars_dir=fake_jars)
        assert conf["spark.sql.shuffle.partitions"] == partitions, master
        assert conf["spark.databricks.delta.snapshotPartitions"] == partitions, master
    cores = __import__("os").cpu_count()
    assert session_conf(master="local[*]", jars_dir=fake_jars)["spark.sql.shuffle.partitions"] == str(2 * cores)


def test_the_default_s3a_streams_memory_is_capped_below_a_default_heap_unless_configured(fake_jars):
    key = "spark.hadoop.fs.s3a.analytics.accelerator.physicalio.max.memory.limit"
    for master in ("local[2]", "spark://head:7077"):
        assert int(session_conf(master=master, jars_dir=fake_jars)[key]) == 256 * 1024 * 1024, master
    assert session_conf(master="local[2]", jars_dir=fake_jars, conf={key: "1073741824"})[key] == "1073741824"


def test_the_jvm_data_source_jar_follows_the_local_jars(fake_jars, monkeypatch, tmp_path):
    jar = tmp_path / "built" / "lakelog-spark.jar"
    jar.parent.mkdir()
    jar.write_bytes(b"")
    monkeypatch.setenv("LAKELOG_SPARK_JAR", str(jar))
    jars = session_conf(jars_dir=fake_jars)["spark.driver.extraClassPath"].split(":")
    assert jars[-1] == str(jar) and len(jars) == 4
    # a cluster's executors get it with spark.jars (built here, not in the workers' jars folder)
    monkeypatch.setenv("LAKELOG_EXECUTOR_JARS_DIR", "/opt/lakelog/jars")
    assert session_conf(master="spark://head:7077", jars_dir=fake_jars)["spark.jars"] == str(jar)


def test_cluster_master_keeps_spark_defaults(fake_jars, monkeypatch):
    monkeypatch.setenv("LAKELOG_SPARK_JAR", "")
    monkeypatch.setenv("LAKELOG_SPARK_MASTER", "spark://head:7077")
    monkeypatch.delenv("LAKELOG_EXECUTOR_JARS_DIR", raising=False)
    conf = session_conf(jars_dir=fake_jars, conf={"spark.jars": "/opt/extra.jar"})
    assert conf["spark.master"] == "spark://head:7077"
    assert "spark.driver.bindAddress" not in conf and "spark.sql.shuffle.partitions" not in conf
    # no jars folder on the workers: the executors get them with spark.jars (and the extra one)
    assert conf["spark.jars"].split(",")[-1] == "/opt/extra.jar" and len(conf["spark.jars"].split(",")) == 4
    assert len(conf["spark.driver.extraClassPath"].split(":")) == 3


def test_cluster_executors_read_the_jars_from_the_workers_folder(fake_jars, monkeypatch):
    monkeypatch.setenv("LAKELOG_SPARK_JAR", "")
    monkeypatch.setenv("LAKELOG_EXECUTOR_JARS_DIR", "/opt/lakelog/jars")
    conf = session_conf(master="spark://head:7077", jars_dir=fake_jars)
    assert conf["spark.executor.extraClassPath"] == "/opt/lakelog/jars/*"
    assert "spark.jars" not in conf  # nothing copied per application
    given = session_conf(master="spark://head:7077", jars_dir=fake_jars,
                         conf={"spark.executor.extraClassPath": "/srv/jars/*", "spark.driver.extraClassPath": "/x.jar"})
    assert given["spark.executor.extraClassPath"] == "/srv/jars/*"
    assert given["spark.driver.extraClassPath"].endswith(":/x.jar")


def test_jars_packages_refused(fake_jars):
    with pytest.raises(SparkSetupError, match="make jars"):
        packages = {"spark.jars.packages": "io.delta:delta-spark_2.13:4.0.0"}
        session_conf(jars_dir=fake_jars, conf=packages)


def test_s3a_conf_from_env(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    conf = s3a_conf()
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:9000"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.endpoint.region"] == "eu-west-1"
    assert conf["spark.hadoop.fs.s3a.access.key"] == "id"
    assert conf["spark.hadoop.fs.s3a.secret.key"] == "secret"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    virtual_host = s3a_conf(region="us-east-1", path_style=False)
    assert virtual_host["spark.hadoop.fs.s3a.path.style.access"] == "false"


def test_ship_packages_leaves_a_zip_given_to_spark_submit_alone():
    """`spark-submit --py-files .../lakelog_packages.zip` (the `lakelog jobs package` route): adding
    the zip again from another path would fail the application; a cluster session without it gets it."""
    from types import SimpleNamespace

    from lakelog.spark_log.session import ship_packages

    added, files = [], []

    def fake(py_files: str):
        conf = SimpleNamespace(get=lambda key, default="": py_files if key == "spark.submit.pyFiles" else default)
        sc = SimpleNamespace(master="spark://host:7077", getConf=lambda: conf, addPyFile=added.append,
                             addFile=files.append)
        return SimpleNamespace(sparkContext=sc)

    assert ship_packages(fake("file:///jobs/dist/lakelog_packages.zip")) is None
    assert added == []
    assert [Path(f).name for f in files][0] == "lakelog_deps.zip"  # the zip alone was given
    files.clear()
    shipped = ship_packages(fake(""))
    assert shipped is not None and added == [str(shipped)] and shipped.name == "lakelog_packages.zip"
    # the third-party packages and the native decoder, for executors
    assert len(files) == 2 and files[0].endswith("lakelog_deps.zip") and "_arrowscan" in files[1]


def test_shuffle_partitions_follow_the_cluster_cores_unless_set():
    from types import SimpleNamespace

    from lakelog.spark_log.jobs import size_shuffle_partitions

    def fake(current: str, cores: int):
        conf: dict[str, str] = {"spark.sql.shuffle.partitions": current}
        spark = SimpleNamespace(conf=SimpleNamespace(get=conf.get, set=conf.__setitem__),
                                sparkContext=SimpleNamespace(defaultParallelism=cores))
        return spark, conf

    spark, conf = fake("200", 3)  # Spark's default: nobody chose it
    assert size_shuffle_partitions(spark) == 6 and conf["spark.sql.shuffle.partitions"] == "6"
    spark, conf = fake("4", 16)  # the local default, or a user's value: kept
    assert size_shuffle_partitions(spark) == 4 and conf["spark.sql.shuffle.partitions"] == "4"


def test_packages_zip_holds_lakelog_and_the_delta_python_package(tmp_path):
    import zipfile

    from lakelog.spark_log.session import write_packages_zip

    names = set(zipfile.ZipFile(write_packages_zip(tmp_path / "p.zip")).namelist())
    assert "lakelog/logstore/record_arrow.py" in names and "lakelog/spark_log/jobs.py" in names
    assert "delta/tables.py" in names and "delta/__init__.py" in names
    assert not any(n == "lakelog/__init__.py" for n in names)


def test_an_executor_loads_the_shipped_native_decoder(tmp_path, monkeypatch):
    """The zip cannot carry an extension: ship_packages adds the built decoder with addFile and an
    executor loads it from its SparkFiles directory; without it the executor keeps the reference."""
    import shutil

    from pyspark import SparkFiles

    from lakelog.logstore import record_arrow
    from lakelog.spark_log.native import load_shipped_extension, native_extension_path

    built = native_extension_path()
    assert built is not None and built.name.startswith("_arrowscan")
    monkeypatch.setattr(SparkFiles, "_is_running_on_worker", True)
    monkeypatch.setattr(SparkFiles, "_root_directory", str(tmp_path))
    monkeypatch.setattr(record_arrow, "_arrowscan", None)
    monkeypatch.setitem(__import__("sys").modules, "lakelog.logstore._arrowscan", None)
    assert load_shipped_extension() is False and not record_arrow.native_available()
    shutil.copy(built, tmp_path / built.name)
    assert load_shipped_extension() is True and record_arrow.native_available()
    decoder = record_arrow.NativeDecoder(["offset"], max_rows=10, max_bytes=1 << 20)
    assert decoder.rows == 0


def test_deps_zip_carries_what_executors_import_and_extracts_once(tmp_path, monkeypatch):
    """lakelog_deps.zip: boto3 with only S3's botocore model, httpx, the codecs; an executor
    extracts it into its SparkFiles folder once and appends it to sys.path."""
    import sys
    import zipfile

    from lakelog.spark_log import executor_deps

    path = executor_deps.write_deps_zip(tmp_path / executor_deps.DEPS_ZIP)
    names = set(zipfile.ZipFile(path).namelist())
    for needed in ("boto3/__init__.py", "botocore/data/endpoints.json", "s3transfer/__init__.py", "six.py",
                   "dateutil/__init__.py", "httpx/__init__.py", "certifi/cacert.pem", "lz4/__init__.py"):
        assert needed in names, needed
    assert any(n.startswith("botocore/data/s3/") for n in names)
    assert not any(n.startswith("botocore/data/ec2/") or "__pycache__" in n for n in names)
    assert path.stat().st_size < 16 * 1024 * 1024

    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setattr(executor_deps, "_ready", None)
    assert executor_deps.load_shipped_deps(str(tmp_path / "empty")) is None  # nothing shipped: nothing done
    folder = executor_deps.load_shipped_deps(str(tmp_path))
    assert folder == str(tmp_path / "lakelog_deps") and sys.path[-1] == folder
    assert (tmp_path / "lakelog_deps" / "botocore" / "data" / "s3").is_dir()
    monkeypatch.setattr(executor_deps, "_ready", None)
    assert executor_deps.load_shipped_deps(str(tmp_path)) == folder and sys.path.count(folder) == 1
