"""The object store hangs (moto's server SIGSTOPped) under a node serving a tiered topic.

Measured before the store's health state and the remote read deadline (issue 30): a fetch of
tiered data during a 40 s hang answered only after 36 s. Now every read of the remote tier waits
at most `remote.fetch.max.wait.ms` (then 503 / 50322, REMOTE_STORAGE_TIMEOUT), a few misses mark the
store degraded and later reads are refused at once (503 / 50321, REMOTE_STORAGE_UNAVAILABLE), both
with `Retry-After`; `/readyz` and `/metrics` show the degraded store.

Checked: during the hang every fetch of tiered data answers a retriable 503 before the store comes
back (the client's patience, `FETCH_PATIENCE_S`, is far below what the store's own timeouts would
take: `remote.storage.request.timeout.ms` x attempts = 40 s); produce goes on; after SIGCONT every
acknowledged record reads back once, in order, and the store is healthy again; a node asked to
stop while the store hangs stops, without waiting for its requests in flight.
"""

from __future__ import annotations

import random
import re
import time
import uuid

import httpx
import pytest

from tests.faults.test_replication_faults import _seed
from tests.integration.test_tiering_node import (
    BINARY,
    TIERED,
    consume_all,
    create_topic,
    local_log_start,
    produce,
    values,
)
from tests.support.faults import wait_for
from tests.support.nodes import start_node
from tests.support.s3server import S3Server

pytestmark = pytest.mark.timeout(240)

#: How long the test's client waits for one fetch: far below the store's own timeouts (2 x 20 s).
FETCH_PATIENCE_S = 15.0
HUNG_STORE = {"remote.log.manager.task.interval.ms": "100", "remote.segment.delete.delay.ms": "0",
              "remote.log.metadata.max.age.ms": "0", "remote.storage.max.attempts": "2",
              "remote.storage.connect.timeout.ms": "1000", "remote.storage.request.timeout.ms": "20000",
              "remote.storage.health.failure.threshold": "3", "remote.storage.health.probe.interval.ms": "1000"}
RETRIABLE_STORE_CODES = {50320, 50321, 50322}


def fetch_at(url: str, topic: str, offset: int) -> httpx.Response:
    return httpx.get(f"{url}/topics/{topic}/partitions/0/records", params={"offset": offset, "timeout": 0},
                     headers={"Accept": BINARY}, timeout=FETCH_PATIENCE_S)


def store_state(url: str) -> str:
    return httpx.get(f"{url}/readyz", timeout=10).json()["remote_tier"]["state"]


def test_hung_object_store_answers_tiered_fetches_fast_and_loses_nothing(tmp_path, monkeypatch):
    seed = _seed("SIGSTOP the object store under tiered fetches")
    rng = random.Random(seed)
    topic = f"hung-store-{rng.randrange(1000)}"
    s3 = S3Server().start()
    try:
        bucket = f"lakelog-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(bucket)
        for k, v in s3.env().items():  # the node process inherits the AWS settings
            monkeypatch.setenv(k, v)
        node = start_node(tmp_path, **HUNG_STORE, **{"remote.storage.url": f"s3://{bucket}/tier"})
        try:
            url = node.url
            create_topic(url, topic, **TIERED)
            sent = values("a", 300)
            for i in range(0, len(sent), 20):
                produce(url, topic, sent[i:i + 20])
            wait_for(lambda: local_log_start(url, topic) > 100, what="tiered segments deleted locally")
            assert fetch_at(url, topic, 0).status_code == 200
            assert store_state(url) == "healthy"

            s3.freeze()
            try:
                answers = []
                for _ in range(rng.randint(4, 7)):
                    r = fetch_at(url, topic, rng.randrange(0, 100))  # raises (the test fails) past our patience
                    answers.append(r.json().get("error_code") if r.status_code != 200 else 200)
                    assert r.status_code == 503, r.text
                    assert r.json()["error_code"] in RETRIABLE_STORE_CODES, r.text
                    assert int(r.headers["Retry-After"]) >= 1
                    more = values(f"b{len(answers)}", 20)
                    produce(url, topic, more)  # local appends go on while the store hangs
                    sent += more
                print(f"answers during the hang: {answers}")
                assert 50321 in answers, "the store was never marked degraded (no fast refusal)"
                assert store_state(url) in ("degraded", "probing")
                text = httpx.get(f"{url}/metrics", timeout=10).text
                state = re.search(r"^lakelog_remote_store_state ([0-9.]+)$", text, re.M)
                assert state is not None and float(state.group(1)) >= 1, text[:2000]
                assert s3.frozen  # every answer above came while the store was still hung
            finally:
                s3.thaw()

            def served():
                return fetch_at(url, topic, 0).status_code == 200

            wait_for(served, timeout_s=60, what="tiered fetches served again after SIGCONT")
            wait_for(lambda: store_state(url) == "healthy", timeout_s=30, what="the store healthy again")
            got = [(o, v) for o, v, _ in consume_all(url, topic)]
            assert got == list(enumerate(sent)), "an acknowledged record was lost, duplicated or reordered"
            # The node stops while the store hangs again: the requests in flight are left behind,
            # not waited for (NodeProcess.stop raises when the process has not exited in its bound).
            s3.freeze()
            try:
                produce(url, topic, values("c", 40))
                time.sleep(1)  # a few tiering rounds start and block on the hung store
                assert node.stop() == 0
            finally:
                s3.thaw()
        finally:
            node.stop()
    finally:
        s3.thaw()
        s3.stop()
