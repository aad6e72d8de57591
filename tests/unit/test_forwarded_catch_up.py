"""A forwarded request waits until the receiving node has applied the sender's metadata index."""

import asyncio

from lakelog.ingest_api.broker.admin import MetadataWaiters
from lakelog.ingest_api.http.forwarded import ForwardedCatchUpMiddleware
from lakelog.ingest_api.replication.peers import FORWARDED_HEADER, METADATA_INDEX_HEADER


class Image:
    last_applied_index = 10


def scope(headers):
    return {"type": "http", "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}


def run(headers, *, apply_at=None, timeout_ms=2000):
    image = Image()
    waiters = MetadataWaiters(image)
    seen = []

    async def app(scope, receive, send):
        seen.append(image.last_applied_index)

    async def main():
        mw = ForwardedCatchUpMiddleware(app, waiters, timeout_ms)
        if apply_at is not None:
            async def later():
                await asyncio.sleep(0.05)
                image.last_applied_index = apply_at
                waiters.applied(apply_at)
            asyncio.get_running_loop().create_task(later())
        await mw(scope(headers), None, None)
        await asyncio.sleep(0.1)

    asyncio.run(main())
    return seen


def test_a_forwarded_request_runs_after_the_senders_index_is_applied():
    assert run({FORWARDED_HEADER: "2", METADATA_INDEX_HEADER: "15"}, apply_at=15) == [15]


def test_a_request_not_forwarded_or_already_current_runs_at_once():
    assert run({METADATA_INDEX_HEADER: "15"}, apply_at=15) == [10]
    assert run({FORWARDED_HEADER: "2", METADATA_INDEX_HEADER: "7"}, apply_at=15) == [10]
    assert run({FORWARDED_HEADER: "2", METADATA_INDEX_HEADER: "x"}, apply_at=15) == [10]


def test_the_wait_is_bounded_and_the_request_then_runs_anyway():
    assert run({FORWARDED_HEADER: "2", METADATA_INDEX_HEADER: "99"}, timeout_ms=50) == [10]
