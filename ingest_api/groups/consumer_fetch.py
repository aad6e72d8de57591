"""How a consumer instance reads a partition: through its leader, here or one signed hop away.

`fetch_partition` returns RecordBatch bytes below the high watermark (the local replica when this
node leads the partition, else a request to the leader acting for the instance's owner, whose READ
the leader checks too); `partition_bounds` answers (beginning offset, end offset = HW), asked as
the node itself. Used by the instances (consumer.py, consumer_records.py), the group lag (lag.py,
instances.py) and the v3 replicas router.

Concurrency: coroutines on the server's event loop.
"""

from __future__ import annotations

from typing import Any

from lakelog.ingest_api.errors import LeaderNotAvailableError, RemoteError
from lakelog.ingest_api.records.formats import RECORDBATCH
from lakelog.ingest_api.groups.assignors import TopicPartition
from lakelog.ingest_api.replication.peers import FORWARDED_HEADER
from lakelog.ingest_api.security.context import CLUSTER_PRINCIPAL
from lakelog.logstore.errors import OffsetOutOfRangeError


async def fetch_partition(node: Any, tp: TopicPartition, offset: int, max_bytes: int, wait_ms: int,
                          principal: str | None = None) -> bytes:
    """RecordBatch bytes from `offset` (below the HW), through the leader: local, or one signed hop
    acting for `principal` (the instance's owner: the leader checks its READ too)."""
    leader = node.leader_of(tp.topic, tp.partition)
    if leader == node.node_id:
        res = await node.fetch_wait(tp.topic, tp.partition, offset, max_bytes, wait_ms)
        return bytes(res.records)
    if leader < 0:
        raise LeaderNotAvailableError(f"partition {tp} has no leader")
    path = f"/topics/{tp.topic}/partitions/{tp.partition}/records?offset={offset}&max_bytes={max_bytes}&timeout={wait_ms}"
    resp = await node.peers.request(leader, "GET", path, headers={"Accept": RECORDBATCH,
                                                                  FORWARDED_HEADER: str(node.node_id)},
                                    timeout_s=(wait_ms + node.config.request_timeout_ms) / 1000 + 5,
                                    principal=principal)
    if resp.status_code == 416:
        raise OffsetOutOfRangeError(f"offset {offset} of {tp} is out of range")
    if resp.status_code != 200:
        raise RemoteError(resp.status_code, resp.status_code * 100, resp.text[:200])
    return resp.content


async def partition_bounds(node: Any, tp: TopicPartition) -> tuple[int, int]:
    """(beginning offset, end offset = HW) of a partition, from its leader (asked as the node itself:
    offsets for positions and lag, no records)."""
    leader = node.leader_of(tp.topic, tp.partition)
    if leader == node.node_id:
        return await node.offsets(tp.topic, tp.partition)
    if leader < 0:
        raise LeaderNotAvailableError(f"partition {tp} has no leader")
    resp = await node.peers.request(leader, "GET", f"/topics/{tp.topic}/partitions/{tp.partition}/offsets",
                                    headers={FORWARDED_HEADER: str(node.node_id)}, timeout_s=10,
                                    principal=CLUSTER_PRINCIPAL)
    if resp.status_code != 200:
        raise RemoteError(resp.status_code, resp.status_code * 100, resp.text[:200])
    doc = resp.json()
    return int(doc["beginning_offset"]), int(doc["end_offset"])
