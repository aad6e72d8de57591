"""How a consumer instance reads a partition: through its leader, here or one signed hop away.

`fetch_partition` returns RecordBatch bytes below the high watermark (the local replica when this
node leads the partition, else a request to the leader acting for the instance's owner, whose READ
the leader checks too) and the offset to fetch next; with isolation read_committed, the batches
below the last stable offset without those of aborted transactions (control batches stay: the
reader skips them); `partition_bounds` answers (beginning offset, end offset = HW), asked as
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
from lakelog.logstore.read_committed import committed_batches, next_offset_after
from lakelog.logstore.record_batch import iter_batches


async def fetch_partition(node: Any, tp: TopicPartition, offset: int, max_bytes: int, wait_ms: int,
                          principal: str | None = None, isolation: str = "read_uncommitted") -> tuple[bytes, int]:
    """(RecordBatch bytes from `offset`, the offset to fetch next), through the leader: local, or
    one signed hop acting for `principal` (the instance's owner: the leader checks its READ too).
    The next offset passes batches a read_committed fetch dropped."""
    leader = node.leader_of(tp.topic, tp.partition)
    if leader == node.node_id:
        res = await node.fetch_wait(tp.topic, tp.partition, offset, max_bytes, wait_ms)
        records = bytes(res.records)
        if isolation != "read_committed":
            return records, next_offset_after(records, offset)
        cut, aborted = await node.read_committed_view(node.partition(tp.topic, tp.partition), offset, records)
        kept = committed_batches([b for _, b in iter_batches(cut)], aborted, keep_control=True)
        return b"".join(bytes(b.buffer) for b in kept), next_offset_after(cut, offset)
    if leader < 0:
        raise LeaderNotAvailableError(f"partition {tp} has no leader")
    path = (f"/topics/{tp.topic}/partitions/{tp.partition}/records?offset={offset}&max_bytes={max_bytes}"
            f"&timeout={wait_ms}&isolation={isolation}")
    resp = await node.peers.request(leader, "GET", path, headers={"Accept": RECORDBATCH,
                                                                  FORWARDED_HEADER: str(node.node_id)},
                                    timeout_s=(wait_ms + node.config.request_timeout_ms) / 1000 + 5,
                                    principal=principal)
    if resp.status_code == 416:
        raise OffsetOutOfRangeError(f"offset {offset} of {tp} is out of range")
    if resp.status_code != 200:
        raise RemoteError(resp.status_code, resp.status_code * 100, resp.text[:200])
    nxt = resp.headers.get("X-Lakelog-Next-Offset")
    return resp.content, int(nxt) if nxt is not None else next_offset_after(resp.content, offset)


async def partition_bounds(node: Any, tp: TopicPartition, isolation: str = "read_uncommitted") -> tuple[int, int]:
    """(beginning offset, end offset = HW) of a partition, from its leader (asked as the node itself:
    offsets for positions and lag, no records); with isolation read_committed the end offset is the
    last stable offset, where a read_committed reader starts at "latest" (as Kafka's ListOffsets)."""
    committed = isolation == "read_committed"
    leader = node.leader_of(tp.topic, tp.partition)
    if leader == node.node_id:
        start, end = await node.offsets(tp.topic, tp.partition)
        return start, min(end, node.partition(tp.topic, tp.partition).last_stable_offset) if committed else end
    if leader < 0:
        raise LeaderNotAvailableError(f"partition {tp} has no leader")
    resp = await node.peers.request(leader, "GET", f"/topics/{tp.topic}/partitions/{tp.partition}/offsets",
                                    headers={FORWARDED_HEADER: str(node.node_id)}, timeout_s=10,
                                    principal=CLUSTER_PRINCIPAL)
    if resp.status_code != 200:
        raise RemoteError(resp.status_code, resp.status_code * 100, resp.text[:200])
    doc = resp.json()
    end = int(doc["end_offset"])
    return int(doc["beginning_offset"]), min(end, int(doc.get("last_stable_offset", end))) if committed else end
