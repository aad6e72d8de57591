"""Cluster-wide figures for the web console, gathered from every node (JSON, no Prometheus parsing).

Each node knows three things the others do not: its own request counters, the offsets of the
partitions it leads, and what those partitions hold locally and in the remote tier. `node_stats`
is that view of one node; `gather` asks every registered node for it (the asking node answers for
itself without a network hop), so any node can describe the whole cluster, as the HTTP API does.

Counters are totals since the node started: the console turns two samples into rates, and
latency sums over counts into a mean latency per interval. A node that does not answer within
`GATHER_TIMEOUT_S` is reported as unreachable, never waited for.

Limits: the per-partition list is only built for one topic at a time (`topic=`), the topic list
is paged (`MAX_PAGE_SIZE`), and the list of unhealthy partitions in the overview is capped
(`MAX_LISTED_PARTITIONS`), so a cluster with thousands of topics stays cheap to look at.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from lakelog.tiering.manifest_model import SegmentState

log = logging.getLogger("lakelog.stats")

GATHER_TIMEOUT_S = 2.0
MAX_PAGE_SIZE = 500
MAX_LISTED_PARTITIONS = 100
MAX_SEARCH_CHARS = 249

#: Routes whose latency the console charts (the FastAPI route templates the metrics are labelled with).
PRODUCE_ROUTES = {("POST", "/topics/{topic}"), ("POST", "/topics/{topic}/partitions/{partition}")}
FETCH_ROUTES = {("GET", "/topics/{topic}/partitions/{partition}/records")}


def _sum_samples(metric, suffix: str) -> float:
    return sum(s.value for fam in metric.collect() for s in fam.samples if s.name.endswith(suffix))


def _latency(metrics, routes: set[tuple[str, str]]) -> dict[str, float]:
    total, count = 0.0, 0.0
    for fam in metrics.latency.collect():
        for s in fam.samples:
            if (s.labels.get("method"), s.labels.get("route")) not in routes:
                continue
            if s.name.endswith("_sum"):
                total += s.value
            elif s.name.endswith("_count"):
                count += s.value
    return {"seconds_sum": total, "count": count}


def _remote_figures(node, p) -> dict[str, Any] | None:
    """What the remote tier holds of a partition this node leads (None for a topic that is not tiered)."""
    if not node.remote_logs.tiered(p):
        return None
    try:
        m = node.remote_logs.remote(p).manifest()
    except Exception as e:  # the store is unreachable: say so rather than fail the whole answer
        return {"error": str(e)[:200]}
    finished = [s for s in m.segments if s.state == SegmentState.COPY_FINISHED]
    tiered_end = max((s.end_offset for s in finished), default=None)
    local_only = 0
    for s in p.log.segments:
        if tiered_end is None or s.base_offset > tiered_end:
            local_only += s.size
    return {"segments": len(finished), "size_bytes": sum(s.size_in_bytes for s in finished),
            "log_start_offset": m.log_start_offset if finished else None,
            "tiered_end_offset": tiered_end, "local_only_bytes": local_only}


def node_stats(node, metrics, topic: str | None = None, *, counters_only: bool = False) -> dict[str, Any]:
    """This node's counters, its led partitions per topic (unless `counters_only`), and (with `topic`)
    each of that topic's partitions it leads. Blocking (remote manifests may be read): run it in a thread."""
    topics: dict[str, dict[str, int]] = {}
    partitions = []
    for p in ([] if counters_only else node.partitions()):
        if not p.is_leader or p.key.topic.startswith("__"):
            continue
        try:
            segments = p.log.segments
            size = sum(s.size for s in segments)
        except Exception:  # a partition being deleted under us
            continue
        remote = _remote_figures(node, p) if topic is None or p.key.topic == topic else None
        t = topics.setdefault(p.key.topic, {"local_bytes": 0, "remote_bytes": 0, "partitions_led": 0})
        t["local_bytes"] += size
        t["partitions_led"] += 1
        if remote and "size_bytes" in remote:
            t["remote_bytes"] += remote["size_bytes"]
        if p.key.topic == topic:
            partitions.append({"partition": p.key.partition, "log_start_offset": p.log_start_offset,
                               "high_watermark": p.high_watermark, "log_end_offset": p.log_end_offset,
                               "last_stable_offset": p.last_stable_offset,
                               "ongoing_transactions": len(p.log.ongoing_transactions()),
                               "leader_epoch": p.leader_epoch, "local_segments": len(segments),
                               "local_bytes": size, "remote": remote})
    return {"node_id": node.node_id, "time_ms": int(time.time() * 1000), "ready": bool(node.ready),
            "produce_records": _sum_samples(metrics.produce_records, "_total"),
            "produce_bytes": _sum_samples(metrics.produce_bytes, "_total"),
            "fetch_bytes": _sum_samples(metrics.fetch_bytes, "_total"),
            "produce_latency": _latency(metrics, PRODUCE_ROUTES),
            "fetch_latency": _latency(metrics, FETCH_ROUTES),
            "topics": topics, "partitions": partitions,
            "log_dir": node.replicas.log_dir.status()["state"], "remote_tier": _remote_tier_state(node)}


def _remote_tier_state(node) -> str | None:
    """healthy / degraded / probing (tiering/store_health.py), None without a remote tier."""
    status = node.remote_logs.status()
    return status["state"] if status is not None else None


async def gather(node, metrics, topic: str | None = None, *,
                 counters_only: bool = False) -> dict[int, dict[str, Any] | None]:
    """`node_stats` of every registered node (None for one that did not answer in time)."""
    from urllib.parse import quote

    path = "/stats/node" + (f"?topic={quote(topic, safe='')}" if topic is not None
                            else "?counters_only=true" if counters_only else "")

    async def one(node_id: int) -> dict[str, Any] | None:
        try:
            if node_id == node.node_id:
                return await asyncio.to_thread(node_stats, node, metrics, topic, counters_only=counters_only)
            resp = await node.peers.request(node_id, "GET", path, timeout_s=GATHER_TIMEOUT_S)
            if resp.status_code != 200:
                return None
            return json.loads(resp.content)
        except Exception as e:
            log.debug("stats of node %d: %s", node_id, e)
            return None

    ids = sorted(node.image.brokers)
    answers = await asyncio.gather(*(one(i) for i in ids))
    return dict(zip(ids, answers))


def _min_isr_reader(node):
    """topic image -> its effective min.insync.replicas, without building each topic's whole config."""
    default = int(node.config.log_config().to_dict().get("min.insync.replicas", 1))

    def read(t) -> int:
        try:
            return int(t.configs.get("min.insync.replicas", default))
        except (TypeError, ValueError):
            return default
    return read


def partition_health(node) -> dict[str, Any]:
    """Counts of offline, under-replicated and at-min-ISR partitions, and the first few of them."""
    brokers = node.image.brokers
    total = offline = under = at_min = 0
    listed: list[dict[str, Any]] = []
    min_isr_of = _min_isr_reader(node)
    for name in sorted(node.image.topics):
        t = node.image.topics[name]
        min_isr = min_isr_of(t)
        for i, st in enumerate(t.partitions):
            total += 1
            b = brokers.get(st.leader)
            problems = []
            if st.leader < 0 or b is None or b.fenced:
                offline += 1
                problems.append("offline")
            if len(st.isr) < len(st.replicas):
                under += 1
                problems.append("under-replicated")
            if min_isr > 1 and len(st.isr) == min_isr:
                at_min += 1
                problems.append("at-min-isr")
            if problems and len(listed) < MAX_LISTED_PARTITIONS:
                listed.append({"topic": name, "partition": i, "leader": st.leader, "replicas": list(st.replicas),
                               "isr": list(st.isr), "problems": problems})
    return {"total": total, "offline": offline, "under_replicated": under, "at_min_isr": at_min,
            "listed": listed}


async def cluster_overview(node, metrics) -> dict[str, Any]:
    stats = await gather(node, metrics, counters_only=True)
    controller = node.controller_id
    nodes = []
    for i in sorted(node.image.brokers):
        b = node.image.brokers[i]
        s = stats.get(i)
        nodes.append({"node_id": i, "host": b.host, "port": b.port, "rack": b.rack, "fenced": b.fenced,
                      "in_controlled_shutdown": b.in_controlled_shutdown, "controller": i == controller,
                      "reachable": s is not None, "stats": None if s is None else
                      {k: v for k, v in s.items() if k not in ("topics", "partitions")}})
    return {"cluster_id": node.cluster_id, "controller_id": controller, "served_by": node.node_id,
            "topics": sum(1 for n in node.image.topics if not n.startswith("__")), "nodes": nodes,
            "partitions": partition_health(node)}


def _config_summary(node, name: str) -> dict[str, Any]:
    try:
        c = node.admin.topic_config(name)
    except Exception:
        return {}
    keys = ("cleanup.policy", "retention.ms", "retention.bytes", "remote.storage.enable", "min.insync.replicas")
    return {k: (str(c[k]).lower() if isinstance(c[k], bool) else c[k]) for k in keys if k in c}


async def topic_page(node, metrics, names: list[str], offset: int, limit: int, search: str) -> dict[str, Any]:
    """One page of the topic list (names already filtered by what the caller may see)."""
    if search:
        names = [n for n in names if search.lower() in n.lower()]
    page = names[offset:offset + limit]
    stats = await gather(node, metrics) if page else {}
    rows = []
    for name in page:
        t = node.image.topics.get(name)
        if t is None:
            continue
        local = remote = 0
        for s in stats.values():
            if s is not None and name in s["topics"]:
                local += s["topics"][name]["local_bytes"]
                remote += s["topics"][name]["remote_bytes"]
        rows.append({"topic": name, "partitions": len(t.partitions),
                     "replication_factor": len(t.partitions[0].replicas) if t.partitions else 0,
                     "under_replicated": sum(1 for st in t.partitions if len(st.isr) < len(st.replicas)),
                     "local_bytes": local, "remote_bytes": remote, "configs": _config_summary(node, name)})
    return {"total": len(names), "offset": offset, "limit": limit, "topics": rows,
            "unreachable_nodes": [i for i, s in stats.items() if s is None]}


async def topic_detail(node, metrics, name: str) -> dict[str, Any]:
    """Every partition of a topic: leader, replicas, ISR from the metadata; offsets and sizes from its leader."""
    t = node.topic(name)  # raises TopicNotFoundError
    image = node.image.topics[name]
    stats = await gather(node, metrics, topic=name)
    offsets: dict[int, dict[str, Any]] = {}
    for s in stats.values():
        for row in (s or {}).get("partitions", ()):
            offsets[row["partition"]] = row
    parts = []
    for i, st in enumerate(image.partitions):
        parts.append({"partition": i, "leader": st.leader, "leader_epoch": st.leader_epoch,
                      "replicas": list(st.replicas), "isr": list(st.isr), **{k: v for k, v in offsets.get(i, {}).items()
                                                                            if k != "partition"}})
    return {"topic": name, "topic_id": t.topic_id, "replication_factor": t.replication_factor,
            "configs": _config_summary(node, name), "partitions": parts}
