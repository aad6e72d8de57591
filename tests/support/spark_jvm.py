"""Test support for the JVM `lakelog` data source's integration tests: a Spark session that must
have the reader's jar loaded, a filesystem store copied into a fresh bucket of the test S3 server,
and the request counts that server answers grouped the way the tests assert on them.

Not used by production code.
"""

from __future__ import annotations

import uuid
from typing import Iterator

from lakelog.spark_log.jvm_source import jvm_source_loaded
from lakelog.spark_log.session import remote_session
from lakelog.tiering.s3_store import S3Store


def jvm_session(bucket_url: str, app_name: str) -> Iterator:
    """A session over `bucket_url` with the JVM reader loaded (a module fixture's body: yields
    the session, stops it after)."""
    session = remote_session(bucket_url, app_name=app_name)
    assert jvm_source_loaded(session), "make jvm builds spark_log/jvm/lakelog-spark.jar"
    try:
        yield session
    finally:
        session.stop()


def copy_to_s3(spark_s3, store) -> tuple[S3Store, str]:
    """Every object of `store` copied under prefix `tier` of a fresh bucket; returns (the S3 store,
    its URL for the data source's `remote` option)."""
    bucket = f"lakelog-{uuid.uuid4().hex[:10]}"
    spark_s3.create_bucket(bucket)
    target = S3Store(bucket, "tier")
    for info in store.list(""):
        target.put(info.key, store.get(info.key)[0])
    return target, f"s3://{bucket}/tier"


def lists(asked: dict[str, int]) -> int:
    """The LIST requests among `asked` (S3Server.requests()): GETs of no object key suffix."""
    keyed = sum(v for k, v in asked.items() if k.startswith("GET ."))
    return asked.get("GET", 0) - keyed


def plain(v):
    """A collected Row's value as plain Python (bytearray -> bytes, nested rows and lists too), so
    rows from two readers compare with ==."""
    if isinstance(v, (bytes, bytearray)):
        return bytes(v)
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v
