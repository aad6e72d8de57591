"""A real node whose wall clock jumps back and forward by minutes while it runs (libfaketime).

The node runs with `LD_PRELOAD=libfaketime.so.1`, `FAKETIME_TIMESTAMP_FILE` (the offset the test
writes: "+0", "-600", "+600" seconds) and `FAKETIME_DONT_FAKE_MONOTONIC=1`: only the wall clock
jumps, as when NTP or an operator steps it. Through both jumps the node keeps

* its consumer group member (the same member id, no rebalance: session timeouts are durations, on
  the monotonic clock),
* its leadership (the partition's leader, an active controller, produce acknowledged),
* its retention: nothing that `retention.ms` (1 hour) keeps is deleted, while a control topic with
  `retention.ms` of 2 minutes loses its old segments once the clock is 10 minutes ahead —
  retention compares record timestamps with the wall clock, as documented.

libfaketime comes from the Debian package `faketime` (`make faketime` installs it); without it the
test fails and says so. Seeded (record counts); bounded waits only.
"""

from __future__ import annotations

import glob
import random
import time

import httpx
import pytest

from tests.faults.test_replication_faults import _seed
from tests.integration.test_consumer_groups import FAST_GROUPS, JSON_V2, V2, new_consumer, poll, produce
from tests.support.faults import broker_fenced, controller_id, create_topic, own_offsets, partition_state, wait_for
from tests.support.nodes import NodeProcess, free_port

pytestmark = pytest.mark.timeout(240)

JUMP_S = 600
#: Seconds libfaketime keeps an offset before it reads the file again.
CACHE_S = 1


def libfaketime() -> str:
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketime.so.1") + glob.glob("/usr/lib/faketime/libfaketime.so.1"))
    if not found:
        pytest.fail("libfaketime.so.1 is missing: install the Debian package `faketime` (`make faketime` does, "
                    "as root: apt-get install faketime)")
    return found[0]


def group_members(url: str, group: str) -> list[str]:
    doc = httpx.get(f"{url}/groups/{group}", timeout=30).json()
    return [m["member_id"] for m in doc["members"]]


def test_a_wall_clock_jump_keeps_members_leadership_and_retention(tmp_path):
    seed = _seed("wall clock jumps on a real node")
    rng = random.Random(seed)
    offset_file = tmp_path / "faketime-offset"
    offset_file.write_text("+0\n")
    node = NodeProcess(tmp_path / "data", free_port(), overrides={
        **FAST_GROUPS, "log.cleaner.backoff.ms": "200"}, env={
        "LD_PRELOAD": libfaketime(), "FAKETIME_TIMESTAMP_FILE": str(offset_file),
        "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_CACHE_DURATION": str(CACHE_S), "NO_FAKE_STAT": "1"})
    try:
        node.start()
        url = node.url
        kept, control = "clock-kept", "clock-control"
        create_topic(url, kept, partitions=1, rf=1, retention_ms=str(3_600_000), segment_bytes="2048")
        create_topic(url, control, partitions=1, rf=1, retention_ms=str(120_000), segment_bytes="2048")
        count = rng.randrange(60, 120)
        for topic in (kept, control):
            for i in range(0, count, 10):
                produce(url, topic, 0, [f"{topic}-{j}-{'x' * 100}" for j in range(i, min(count, i + 10))])
        base = new_consumer(url, "clocks", "c1", **{"session.timeout.ms": 3000, "heartbeat.interval.ms": 300})
        r = httpx.post(f"{base}/subscription", json={"topics": [kept]}, headers=V2, timeout=10)
        assert r.status_code == 204, r.text
        assert len(poll(base, count)) >= count
        members = group_members(url, "clocks")
        assert len(members) == 1, members
        leader_before = partition_state(url, kept, 0)["leader"]

        for offset in (-JUMP_S, +JUMP_S):
            offset_file.write_text(f"{offset:+d}\n")
            stamp = wait_for(lambda: abs(node_wall_offset(url) - offset) < 60, 15,
                             f"the node's wall clock to jump by {offset} s")
            print(f"node wall clock jumped by {offset} s ({stamp})")
            # Let the coordinator tick (every 50 ms) and the member heartbeat (300 ms) for a while:
            # a session measured on the wall clock would expire at the first tick after +600 s.
            for _ in range(10):
                more = httpx.get(f"{base}/records", params={"timeout": 200}, headers={"Accept": JSON_V2}, timeout=30)
                assert more.status_code == 200, more.text
            assert group_members(url, "clocks") == members, "the wall-clock jump expired the group member"
            assert partition_state(url, kept, 0)["leader"] == leader_before
            assert controller_id(url) == 1 and not broker_fenced(url, 1)
            produce(url, kept, 0, [f"after-{offset}"])
            start, _ = own_offsets(url, kept, 0)  # type: ignore[misc]
            assert start == 0, f"retention.ms=1h deleted the start of {kept} after a jump of {offset} s"

        # 10 minutes ahead, the control topic's segments (2 minutes of retention) are old: deleted.
        wait_for(lambda: own_offsets(url, control, 0)[0] > 0, 30,  # type: ignore[index]
                 f"retention of {control} (retention.ms=2 min) with the clock 10 min ahead")
        assert own_offsets(url, kept, 0)[0] == 0  # type: ignore[index]
        assert group_members(url, "clocks") == members
        httpx.delete(base, timeout=30)
    finally:
        try:
            node.stop()
        finally:
            node.kill()


def node_wall_offset(url: str) -> float:
    """The node's wall clock minus this process's, in seconds (`time_ms` of `/stats/node`)."""
    before = time.time()
    doc = httpx.get(f"{url}/stats/node", params={"counters_only": "true"}, timeout=5).json()
    return doc["time_ms"] / 1000 - (before + time.time()) / 2
