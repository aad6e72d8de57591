"""Suite-wide settings.

Hypothesis's per-example deadline is a timed assertion: on a busy 2-core machine (CI, or engineers
sharing one) a slow example fails a correct codec. Speed belongs to bench/, so no deadline here.
"""

import os

import pytest
from hypothesis import settings

from tests.support.s3server import S3Server

settings.register_profile("lakelog", deadline=None)
settings.load_profile("lakelog")


@pytest.fixture(scope="session")
def spark_s3() -> S3Server:
    """One S3 API server for every test that runs Spark in this process: the JVM, and the Python workers
    it starts, take the AWS environment once, when the first session starts, so every module must share
    one endpoint (each uses its own buckets). Stopped at the end of the session."""
    server = S3Server().start()
    saved = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env())  # the driver, the Python workers and S3A all read these
    try:
        yield server
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


def pytest_collection_modifyitems(config, items) -> None:
    """Every `spark`-marked test takes `spark_s3` first, whatever order the files run in: the first Spark
    JVM of the process must start with that server's AWS environment (see `spark_s3`)."""
    for item in items:
        if item.get_closest_marker("spark") is not None and "spark_s3" not in item.fixturenames:
            item.fixturenames.insert(0, "spark_s3")
