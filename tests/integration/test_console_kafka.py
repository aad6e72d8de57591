"""The console's overview shows each node's Kafka listener (its `bootstrap.servers` address) and its
open Kafka connections, in a real browser (Debian's Chromium driven by Playwright) on two real node
processes with Kafka listeners; `/stats/cluster` and `/metrics` carry the same figures."""

from __future__ import annotations

import httpx
import pytest
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from playwright.sync_api import expect, sync_playwright

from tests.support.browser import launch, screenshot, watch
from tests.support.faults import wait_for
from tests.support.kafka_wire import WireClient
from tests.support.nodes import Cluster

WAIT_MS = 45_000  # generous: the machine may be busy; a pass never waits this long


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("console-kafka"), size=2, kafka=True, overrides={
        "offsets.topic.num.partitions": "2", "group.initial.rebalance.delay.ms": "0",
        "controller.quorum.election.timeout.ms": "2000", "broker.session.timeout.ms": "5000"})
    try:
        c.start()
        yield c
    finally:
        c.stop()


def _metric(url: str, name: str) -> float:
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def test_the_overview_shows_each_nodes_kafka_listener_and_connections(cluster, tmp_path):
    node1, node2 = cluster.node(1), cluster.node(2)
    doc = httpx.get(f"{node1.url}/stats/cluster", timeout=30).json()
    listeners = {n["node_id"]: n["kafka_listeners"] for n in doc["nodes"]}
    assert listeners == {n.node_id: [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": n.kafka_port}]
                         for n in cluster.nodes}
    assert _metric(node2.url, "lakelog_kafka_connections") == 0

    with sync_playwright() as pw:
        browser = launch(pw)
        try:
            w = watch(browser, node1.url)
            p = w.page
            p.goto("/")
            for n in cluster.nodes:
                row = p.locator(f"#nodes tr[data-node='{n.node_id}']")
                expect(row.locator(".kafka-listener")).to_have_text(n.bootstrap, timeout=WAIT_MS)
                expect(row.locator(".kafka-connections")).to_have_text("0", timeout=WAIT_MS)

            # A Kafka connection to node 2 (it asks ApiVersions, as every client does first and then
            # stays open): it shows, then goes when closed. A librdkafka client is not used here: it
            # may drop its bootstrap connection within milliseconds of learning the brokers.
            with WireClient("127.0.0.1", node2.kafka_port) as conn:
                _, versions = conn.request(ApiVersionsRequest(client_software_name="console-test",
                                                              client_software_version="1"))
                assert versions.error_code == 0 and versions.api_keys
                wait_for(lambda: _metric(node2.url, "lakelog_kafka_connections") >= 1, 30, "a connection counted")
                cell = p.locator("#nodes tr[data-node='2'] .kafka-connections")
                expect(cell).not_to_have_text("0", timeout=WAIT_MS)
                assert int(cell.inner_text()) >= 1
                screenshot(p, tmp_path, "overview-kafka")
            expect(p.locator("#nodes tr[data-node='2'] .kafka-connections")).to_have_text("0", timeout=WAIT_MS)
            assert _metric(node2.url, "lakelog_kafka_connections") == 0
            assert w.problems == []
        finally:
            browser.close()
