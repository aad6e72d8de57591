"""A node whose log directory fills up: a real node on a small tmpfs (`size=`), 1 KiB records, acks=1.

Measured before the log directory's health (issue 30): the node stayed alive and kept every
acknowledged record, but refused with `500 {"error_code":50001,"message":"internal error"}`. Now
the first write that finds the disk full answers 507 / 50701 (KAFKA_STORAGE_ERROR, the log
directory is full), the directory goes offline (every later write is refused with a storage error,
`/readyz` and `/metrics` say so) and the node stays up serving reads; after space is freed and the
node restarted, every acknowledged record is there, once, in order, and writes are taken again.

Needs root (it mounts a tmpfs); seeded (the record sizes), bounded (a full disk is reached within
`MAX_REQUESTS` produce requests).
"""

from __future__ import annotations

import base64
import os
import random
import re
import subprocess

import httpx
import pytest

from tests.faults.test_replication_faults import _seed, running
from tests.support.faults import BINARY, FORWARDED, agreed_leader, create_topic, read_range, wait_for, wait_full_isr
from tests.support.nodes import Cluster, start_node

pytestmark = pytest.mark.timeout(240)

FS_BYTES = 16 << 20
BALLAST_BYTES = 2 << 20
MAX_REQUESTS = 400
RECORDS_PER_REQUEST = 100
STORAGE_CODES = {50701, 50340}


def mount_tmpfs(mnt, size: int) -> None:
    mnt.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], check=True)


def unmount(mnt) -> None:
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def small_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    mnt = tmp_path / "disk"
    mount_tmpfs(mnt, FS_BYTES)
    try:
        yield mnt
    finally:
        unmount(mnt)


def fill(directory) -> None:
    """Write a ballast file into `directory` until its filesystem is full."""
    with open(directory / "ballast", "wb") as f:
        chunk = b"\0" * (1 << 20)
        try:
            while True:
                f.write(chunk)
                f.flush()
        except OSError:
            pass


def produce(client: httpx.Client, url: str, topic: str, values: list[str]) -> httpx.Response:
    return client.post(f"{url}/topics/{topic}/partitions/0?acks=1", headers={"Content-Type": BINARY},
                       json={"records": [{"value": base64.b64encode(v.encode()).decode()} for v in values]})


def test_a_full_log_directory_refuses_writes_clearly_and_loses_nothing(small_disk, tmp_path):
    seed = _seed("fill the log directory of a node")
    rng = random.Random(seed)
    topic = f"full-{rng.randrange(1000)}"
    ballast = small_disk / "ballast"
    ballast.write_bytes(b"\0" * BALLAST_BYTES)  # freed later, as an operator frees space
    node = start_node(tmp_path, **{"log.dirs": str(small_disk / "data")})  # its own log off the small disk
    client = httpx.Client(timeout=30)
    try:
        create_topic(node.url, topic, rf=1, **{"segment.bytes": str(1 << 20)})
        acked: list[str] = []
        refusal = None
        for i in range(MAX_REQUESTS):
            values = [f"{i:05d}-{j:03d}-" + "x" * rng.randrange(900, 1100) for j in range(RECORDS_PER_REQUEST)]
            r = produce(client, node.url, topic, values)
            if r.status_code != 200:
                refusal = r
                break
            acked += values
        assert refusal is not None, f"the disk did not fill within {MAX_REQUESTS} requests"
        assert refusal.status_code == 507 and refusal.json()["error_code"] == 50701, refusal.text
        assert refusal.json()["message"].startswith("KAFKA_STORAGE_ERROR"), refusal.text
        print(f"{len(acked)} records acknowledged before the disk filled: {refusal.json()['message']}")
        # Offline now: writes refused with a storage error, the node alive, reads served.
        again = produce(client, node.url, topic, ["small"])
        assert again.status_code in (503, 507) and again.json()["error_code"] in STORAGE_CODES, again.text
        ready = httpx.get(f"{node.url}/readyz", timeout=10)
        assert ready.status_code == 200 and ready.json()["log_dir"]["state"] == "offline", ready.text
        metrics = httpx.get(f"{node.url}/metrics", timeout=10).text
        assert re.search(r"^lakelog_log_dir_offline 1\.0$", metrics, re.M), metrics[:1000]
        got = [v for _, _, v in read_range(node.url, topic, 0, 0, len(acked))]
        assert got == acked
        assert node.stop() == 0, "the node did not stop cleanly on a full disk"
        ballast.unlink()
        node.start()
        got = [v for _, _, v in read_range(node.url, topic, 0, 0, len(acked))]
        assert got == acked, "an acknowledged record was lost or changed across the restart"
        assert produce(client, node.url, topic, ["after"]).status_code == 200
        assert httpx.get(f"{node.url}/readyz", timeout=10).json()["log_dir"]["state"] == "online"
    finally:
        client.close()
        if node.running:
            print(node.read_log()[-4000:])
        node.stop()


def test_a_leader_whose_disk_fills_hands_its_leadership_over(tmp_path):
    """Three nodes, each on a tmpfs of its own; the partition leader's fills. It refuses the write
    (507), asks the controller to fence it (its log directory is offline), and the partition gets a
    new leader among the other in-sync replicas: writes go on there, nothing acknowledged is lost."""
    if os.geteuid() != 0:
        pytest.skip("mounting a size-limited tmpfs needs root")
    seed = _seed("fill the disk of a partition leader")
    rng = random.Random(seed)
    topic = f"full-leader-{rng.randrange(1000)}"
    cluster = Cluster(tmp_path / "cluster", 3)
    for n in cluster.nodes:
        mount_tmpfs(n.data_dir, 64 << 20)
    client = httpx.Client(timeout=30)
    try:
        with running(cluster):
            url = cluster.node(1).url
            create_topic(url, topic, partitions=1, rf=3, min_insync_replicas="2")
            wait_full_isr(cluster.nodes, topic, [0])
            leader = agreed_leader(cluster.nodes, topic, 0)
            assert leader is not None
            acked: list[str] = []
            for i in range(5):
                values = [f"a{i}-{j}" for j in range(rng.randint(5, 20))]
                r = client.post(f"{cluster.node(leader).url}/topics/{topic}/partitions/0?acks=all",
                                headers={"Content-Type": BINARY},
                                json={"records": [{"value": base64.b64encode(v.encode()).decode()} for v in values]})
                assert r.status_code == 200, r.text
                acked += values
            fill(cluster.node(leader).data_dir)
            for i in range(20):  # the last pages of the segment files may still take a little
                values = [f"c{i}-{j}-" + "x" * 1000 for j in range(16)]
                r = client.post(f"{cluster.node(leader).url}/topics/{topic}/partitions/0?acks=all",
                                headers={"Content-Type": BINARY, FORWARDED: "0"},
                                json={"records": [{"value": base64.b64encode(v.encode()).decode()} for v in values]})
                if r.status_code != 200:
                    break
                acked += values
            assert r.status_code == 507 and r.json()["error_code"] == 50701, r.text
            others = [n for n in cluster.nodes if n.node_id != leader]
            wait_for(lambda: agreed_leader(others, topic, 0) not in (None, leader), timeout_s=30,
                     what="a new leader among the other in-sync replicas")
            new_leader = cluster.node(agreed_leader(others, topic, 0))
            more = [f"b-{j}" for j in range(10)]
            r = client.post(f"{others[0].url}/topics/{topic}/partitions/0?acks=all", headers={"Content-Type": BINARY},
                            json={"records": [{"value": base64.b64encode(v.encode()).decode()} for v in more]})
            assert r.status_code == 200, r.text
            acked += more
            ready = client.get(f"{cluster.node(leader).url}/readyz")
            assert ready.status_code == 503 and ready.json()["log_dir"]["state"] == "offline", ready.text
            got = [v for _, _, v in read_range(new_leader.url, topic, 0, 0, len(acked))]
            assert got == acked, "an acknowledged record was lost or duplicated"
    finally:
        client.close()
        for n in cluster.nodes:
            unmount(n.data_dir)
