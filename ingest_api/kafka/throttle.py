"""Quotas on the Kafka door: the node's per-principal quotas (`node.security.quotas`, the ones the HTTP
door applies), answered Kafka's way — with `throttle_time_ms`, not an error.

Produce draws on `producer.byte.rate` (the record bytes of the request), Fetch on
`consumer.byte.rate` (the record bytes of the answer), every request on `request.rate`. A request
that arrives while its principal is over a quota is still served (as Kafka serves it), its answer
carries the delay in `throttle_time_ms`, and the answer is held back that long (at most
MAX_THROTTLE_MS): answers of a connection are written in order, so the connection is muted for
that time, as Kafka mutes the channel of a throttled client. Requests before authentication and
the cluster's own principal are never throttled.

Concurrency: the event loop thread only (the quota manager's contract).
"""

from __future__ import annotations

import time
from typing import Any

from lakelog.ingest_api.kafka.codec import Request
from lakelog.ingest_api.security.context import CLUSTER_PRINCIPAL, SecurityContext
from lakelog.ingest_api.security.quotas import FETCH, PRODUCE, REQUEST

PRODUCE_KEY, FETCH_KEY = 0, 1
#: The longest an answer is held back for a quota (the bucket refills within its window long before).
MAX_THROTTLE_MS = 30_000


def admit(security: SecurityContext, principal: str | None, req: Request) -> int:
    """The throttle time in ms of this request (0: within every quota), counting it against request.rate."""
    if principal is None or principal == CLUSTER_PRINCIPAL:
        return 0
    security.refresh()
    quotas = security.quotas
    if not quotas.enabled:
        return 0
    keys = (REQUEST, PRODUCE) if req.api_key == PRODUCE_KEY else (REQUEST, FETCH) if req.api_key == FETCH_KEY \
        else (REQUEST,)
    delay_s = quotas.admit(principal, keys, time.monotonic())
    return min(MAX_THROTTLE_MS, int(delay_s * 1000 + 0.999))


def charge(security: SecurityContext, principal: str | None, req: Request, doc: dict[str, Any] | None) -> None:
    """Count the record bytes of a Produce request or of a Fetch answer against the principal's byte rate."""
    if principal is None or principal == CLUSTER_PRINCIPAL or not security.quotas.enabled:
        return
    if req.api_key == PRODUCE_KEY:
        size = sum(len(p.records or b"") for t in req.body.topic_data for p in t.partition_data)
        security.quotas.record(principal, PRODUCE, size, time.monotonic())
    elif req.api_key == FETCH_KEY and doc is not None:
        size = sum(len(p.get("records") or b"") for t in doc.get("responses", ()) for p in t["partitions"])
        security.quotas.record(principal, FETCH, size, time.monotonic())
