"""The nodes' part of a topic for Spark: what the remote tier does not hold yet, read over HTTP.

`lakelog.<topic>` in SQL is the whole topic as a consumer reading from offset 0 would see it.
Planning lists the topic's partitions (`partition_ids`) and the remote segments; each partition's
nodes' part is one input partition that, when its task starts, reads the partition's log start
offset and high watermark once (`partition_bounds`) and reads from one past the remote tier's
last planned offset (or the log start offset, if higher) up to that high watermark. The seam is by
offset, so no record is missed or read twice; a node serves any offset, below its local log start
from the remote tier too, so a segment tiered or trimmed locally after planning changes nothing.
Each partition's bound is read once per query, so a DataFrame (or a view over it) queried again
sees what was acknowledged since: Spark keeps a DataFrame's planned input partitions across
queries, which is why the bound is taken by the task and not at planning.

Reads use the binary fetch path (`Accept: application/vnd.kafka.recordbatch`): the batches come
byte for byte as stored, and each is CRC-checked here before any record of it is used. A
read_committed read (the default) asks with `isolation=read_committed` and stops at the last
stable offset instead of the high watermark: the node answers whole batches below the LSO with
the batches of aborted transactions left out (its read_committed view), and goes on at the
answer's `X-Lakelog-Next-Offset` even when every batch of a fetch was aborted. Control batches
never become records in either isolation. A partition's read stops at the snapshot's bound; a node that cannot serve the range yet
(a new leader whose high watermark has not caught up) is asked again within `read_timeout_s`.

Credentials: `$LAKELOG_API_KEY`, or `$LAKELOG_USER` / `$LAKELOG_PASSWORD`, as the CLI reads them,
unless the data source's options (`apiKey`, `user`, `password`) say otherwise.
No pyspark here: the data source (spark_log/datasource.py) wraps these in input partitions.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator
from urllib.parse import quote

if TYPE_CHECKING:  # imported where used: executors get it from the shipped packages first
    import httpx

from lakelog.infra.errors import ErrorKind, LakelogError
from lakelog.logstore.errors import CorruptRecordError
from lakelog.logstore.record_batch import TimestampType, iter_batches
from lakelog.tiering.remote_scan import RemoteRecord

RECORDBATCH = "application/vnd.kafka.recordbatch"
#: Bytes asked per fetch request (the node caps it at fetch.max.bytes and returns at least one batch).
DEFAULT_FETCH_BYTES = 8 * 1024 * 1024
#: How long a read waits in all for a node that cannot serve its range yet (leader change).
DEFAULT_READ_TIMEOUT_S = 30.0
REQUEST_TIMEOUT_S = 30.0


class HotTailError(LakelogError):
    """The nodes could not serve the part of a topic the remote tier does not hold."""

    kind = ErrorKind.TRANSIENT


#: How long `NodeAccess.client` waits for a node's /readyz before trying the next node.
READY_PROBE_TIMEOUT_S = 2.0


@dataclass(frozen=True)
class NodeAccess:
    """Where and how to reach the nodes: base URLs (comma-separated; any node serves any request,
    so the first that is ready is used) and credentials (picklable, for executors)."""

    url: str
    api_key: str | None = None
    user: str | None = None
    password: str | None = None

    @classmethod
    def from_options(cls, url: str, options: dict[str, str]) -> "NodeAccess":
        url = ",".join(u.strip().rstrip("/") for u in url.split(",") if u.strip())
        return cls(url, options.get("apikey") or os.environ.get("LAKELOG_API_KEY") or None,
                   options.get("user") or os.environ.get("LAKELOG_USER") or None,
                   options.get("password") or os.environ.get("LAKELOG_PASSWORD") or None)

    def client(self) -> httpx.Client:
        import httpx

        kw: dict = {}
        if self.api_key:
            kw["headers"] = {"Authorization": f"Bearer {self.api_key}"}
        elif self.user is not None:
            kw["auth"] = httpx.BasicAuth(self.user, self.password or "")
        urls = self.url.split(",")
        base = urls[0]
        if len(urls) > 1:  # the first node that says it is ready (one may be restarting)
            for candidate in urls:
                try:
                    if httpx.get(f"{candidate}/readyz", timeout=READY_PROBE_TIMEOUT_S).status_code == 200:
                        base = candidate
                        break
                except httpx.HTTPError:
                    continue
        return httpx.Client(base_url=base, timeout=httpx.Timeout(REQUEST_TIMEOUT_S, connect=5.0), **kw)


def _check(response: httpx.Response, what: str) -> httpx.Response:
    if response.status_code >= 400:
        try:
            message = response.json().get("message") or response.text
        except ValueError:
            message = response.text
        raise HotTailError(f"{what}: HTTP {response.status_code}: {message.strip()[:300]}")
    return response


def list_topics(access: NodeAccess) -> list[str]:
    """The topic names the nodes know, internal topics (`__*`) left out."""
    import httpx

    try:
        with access.client() as http:
            names = _check(http.get("/topics"), "listing topics").json()
    except httpx.TransportError as e:
        raise HotTailError(f"cannot reach {access.url}: {e}") from None
    return sorted(n for n in names if isinstance(n, str) and not n.startswith("__"))


def partition_ids(access: NodeAccess, topic: str) -> list[int]:
    """The topic's partition numbers."""
    import httpx

    t = quote(topic, safe="")
    try:
        with access.client() as http:
            return sorted(int(d["partition"]) for d in _check(http.get(f"/topics/{t}/partitions"),
                                                               f"partitions of {topic}").json())
    except httpx.TransportError as e:
        raise HotTailError(f"cannot reach {access.url}: {e}") from None


def partition_bounds(http: httpx.Client, topic: str, partition: int, *,
                     read_committed: bool = False) -> tuple[int, int]:
    """(log start offset, end) of one partition, as a consumer sees them now: the end is the high
    watermark, or with `read_committed` the last stable offset."""
    path = f"/topics/{quote(topic, safe='')}/partitions/{partition}/offsets"
    o = _check(http.get(path), f"offsets of {topic}-{partition}").json()
    end = int(o["end_offset"])
    if read_committed:
        end = min(end, int(o.get("last_stable_offset", end)))
    return int(o["beginning_offset"]), end


def iter_hot_records(access: NodeAccess, topic: str, partition: int, from_offset: int, *,
                     to_offset: int | None = None, min_timestamp: int | None = None,
                     max_timestamp: int | None = None, fetch_bytes: int = DEFAULT_FETCH_BYTES,
                     read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
                     read_committed: bool = True) -> Iterator[RemoteRecord]:
    """Records of `topic`-`partition` from `from_offset` (or the log start offset, if higher) below
    the high watermark (`read_committed`: the last stable offset, aborted transactions left out)
    read once at the start, up to `to_offset` inclusive and within the timestamp bounds (inclusive)
    when given; control batches are skipped."""
    import httpx

    path = f"/topics/{quote(topic, safe='')}/partitions/{partition}/records"
    where = f"{topic}-{partition}"
    reason = ""
    with access.client() as http:
        try:
            log_start, high_watermark = partition_bounds(http, topic, partition, read_committed=read_committed)
        except httpx.TransportError as e:
            raise HotTailError(f"cannot reach {access.url}: {e}") from None
        offset = max(from_offset, log_start)
        end_offset = high_watermark if to_offset is None else min(high_watermark, to_offset + 1)
        deadline = time.monotonic() + read_timeout_s
        params: dict = {"max_bytes": fetch_bytes, "timeout": 0}
        if read_committed:
            params["isolation"] = "read_committed"
        while offset < end_offset:
            try:
                r = http.get(path, params={**params, "offset": offset}, headers={"Accept": RECORDBATCH})
            except httpx.TransportError as e:
                r, reason = None, str(e)
            if r is not None and r.status_code == 200 and r.content:
                deadline = time.monotonic() + read_timeout_s
                nxt = yield from _records_of(r.content, where, offset, end_offset, min_timestamp, max_timestamp)
                offset = max(nxt, _next_offset_header(r))
                continue
            if r is not None and r.status_code == 200 and _next_offset_header(r) > offset:
                offset = _next_offset_header(r)  # every batch of the fetch was an aborted transaction's
                deadline = time.monotonic() + read_timeout_s
                continue
            if r is not None and r.status_code != 200 and r.status_code < 500:
                _check(r, f"fetch of {where} at offset {offset}")
            if time.monotonic() >= deadline:
                reason = f"HTTP {r.status_code}" if r is not None else reason
                raise HotTailError(f"fetch of {where} at offset {offset}: no data below the high watermark "
                                   f"{end_offset} within {read_timeout_s:g}s ({reason})")
            time.sleep(0.2)


def _next_offset_header(r: httpx.Response) -> int:
    """The answer's `X-Lakelog-Next-Offset` (-1 when absent): past every batch the node read."""
    try:
        return int(r.headers.get("X-Lakelog-Next-Offset", -1))
    except ValueError:
        return -1


def _records_of(data: bytes, where: str, offset: int, end_offset: int, min_ts: int | None,
                max_ts: int | None):
    """Yield the wanted records of the fetched batches; return the next offset to ask for."""
    next_offset = offset
    try:
        for pos, batch in iter_batches(data, file=f"fetch of {where}"):
            batch.ensure_valid(file=f"fetch of {where}", position=pos)
            next_offset = max(next_offset, batch.next_offset)
            if batch.is_control or batch.last_offset < offset:
                continue
            if min_ts is not None and batch.max_timestamp < min_ts:
                continue
            log_append = batch.timestamp_type == TimestampType.LOG_APPEND_TIME
            ts_type = int(batch.timestamp_type)
            for rec in batch.records():
                if rec.offset < offset or rec.offset >= end_offset:
                    continue
                ts = batch.max_timestamp if log_append else rec.timestamp
                if (min_ts is not None and ts < min_ts) or (max_ts is not None and ts > max_ts):
                    continue
                yield RemoteRecord(rec.offset, ts, ts_type, rec.key, rec.value, rec.headers,
                                   batch.partition_leader_epoch, batch.producer_id)
    except CorruptRecordError as e:
        raise HotTailError(f"{where}: a fetched batch fails its checks: {e}") from None
    return next_offset
