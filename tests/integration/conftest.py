import os

import pytest

from tests.support.nodes import NodeProcess, start_node
from tests.support.s3server import S3Server


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


@pytest.fixture
def node(tmp_path) -> NodeProcess:
    """A real node process on loopback, stopped (SIGTERM, then SIGKILL) at the end of the test."""
    n = start_node(tmp_path, **{"log.cleaner.backoff.ms": "200"})
    try:
        yield n
    finally:
        try:
            n.stop()
        finally:
            n.kill()
