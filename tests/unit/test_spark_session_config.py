"""The session factory's configuration, checked without starting a JVM."""

from __future__ import annotations

import pytest

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
    jars = conf["spark.jars"].split(",")
    names = [j.rsplit("/", 1)[-1] for j in jars]
    assert names == sorted(p.name for p in fake_jars.glob("*.jar"))
    assert "spark.jars.packages" not in conf
    assert conf["spark.master"] == "local[*]"
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    catalog = conf["spark.sql.catalog.spark_catalog"]
    assert catalog == "org.apache.spark.sql.delta.catalog.DeltaCatalog"
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.sql.shuffle.partitions"] == "4"


def test_the_jvm_data_source_jar_follows_the_local_jars(fake_jars, monkeypatch, tmp_path):
    jar = tmp_path / "built" / "lakelog-spark.jar"
    jar.parent.mkdir()
    jar.write_bytes(b"")
    monkeypatch.setenv("LAKELOG_SPARK_JAR", str(jar))
    jars = session_conf(jars_dir=fake_jars)["spark.jars"].split(",")
    assert jars[-1] == str(jar) and len(jars) == 4


def test_cluster_master_keeps_spark_defaults(fake_jars, monkeypatch):
    monkeypatch.setenv("LAKELOG_SPARK_MASTER", "spark://head:7077")
    conf = session_conf(jars_dir=fake_jars, conf={"spark.jars": "/opt/extra.jar"})
    assert conf["spark.master"] == "spark://head:7077"
    assert "spark.driver.bindAddress" not in conf
    assert conf["spark.jars"].endswith(",/opt/extra.jar")


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
    shipped = ship_packages(fake(""))
    assert shipped is not None and added == [str(shipped)] and shipped.name == "lakelog_packages.zip"
    assert len(files) == 1 and "_arrowscan" in files[0]  # the native decoder, for executors


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
