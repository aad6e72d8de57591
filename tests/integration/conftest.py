import pytest

from tests.support.nodes import NodeProcess, start_node


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
