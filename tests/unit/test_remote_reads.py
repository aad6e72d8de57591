"""Remote reads for the event loop (ingest_api/broker/remote_reads.py): a deadline, a bound on pending
reads, and the store's health state consulted before a read queues."""

from __future__ import annotations

import asyncio
import threading

import pytest

from lakelog.ingest_api.broker.remote_reads import RemoteReads
from lakelog.tiering.errors import RemoteFetchTimeoutError, RemoteStorageUnavailableError
from lakelog.tiering.store_health import StoreHealth, StoreState


def test_a_hung_read_answers_a_retriable_error_and_counts_as_a_failure():
    health = StoreHealth(failure_threshold=2, probe_interval_ms=60_000)
    reads = RemoteReads(threads=2, max_pending=10, max_wait_ms=50, health=health)
    release = threading.Event()

    async def main():
        for _ in range(2):
            with pytest.raises(RemoteFetchTimeoutError):
                await reads.run("a fetch", release.wait)
        assert health.state == StoreState.DEGRADED
        # Degraded: refused before it queues behind the two hung reads.
        with pytest.raises(RemoteStorageUnavailableError):
            await reads.run("a fetch", lambda: 1)

    try:
        asyncio.run(main())
        assert reads.timeouts == 2
    finally:
        release.set()
        reads.close()


def test_pending_reads_are_bounded():
    reads = RemoteReads(threads=1, max_pending=2, max_wait_ms=60_000, health=None)
    release = threading.Event()

    async def main():
        first = asyncio.ensure_future(reads.run("a", release.wait))
        second = asyncio.ensure_future(reads.run("b", release.wait))
        await asyncio.sleep(0)
        with pytest.raises(RemoteStorageUnavailableError):
            await reads.run("c", lambda: 1)
        release.set()
        await asyncio.gather(first, second)
        assert await reads.run("d", lambda: 7) == 7

    try:
        asyncio.run(main())
        assert reads.refused == 1 and reads.pending == 0
    finally:
        release.set()
        reads.close()
