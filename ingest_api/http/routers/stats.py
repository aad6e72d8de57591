"""`/stats/*`: the JSON figures the web console draws (cluster overview, paged topics, one topic).

Thin: the figures are gathered by `ingest_api.http.stats`. Every node answers for the whole cluster;
`/stats/node` is one node's own part, which the others ask for.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from lakelog.ingest_api.http import stats
from lakelog.ingest_api.http.routers.deps import get_node
from lakelog.ingest_api.security.acl import Operation, ResourceType
from lakelog.ingest_api.http.security_middleware import allowed

router = APIRouter(prefix="/stats", tags=["console"])


@router.get("/node", summary="This node's counters and the partitions it leads (with `topic`, each of them)")
async def node_stats(request: Request, topic: str | None = Query(None, max_length=249),
                     counters_only: bool = Query(False, description="leave out the partitions"),
                     partition_offset: int = Query(0, ge=0, le=10_000_000),
                     partition_limit: int | None = Query(None, ge=0, le=stats.MAX_PAGE_SIZE,
                                                         description="with `topic`: only this many of its partitions")):
    node = get_node(request)
    shown = None if partition_limit is None else range(partition_offset, partition_offset + partition_limit)
    return JSONResponse(await asyncio.to_thread(stats.node_stats, node, request.app.state.metrics, topic,
                                                counters_only=counters_only, partitions_shown=shown))


@router.get("/cluster", summary="Nodes (fenced, controller, reachable, counters) and partition health")
async def cluster(request: Request):
    node = get_node(request)
    return JSONResponse(await stats.cluster_overview(node, request.app.state.metrics))


@router.get("/topics", summary="One page of topics with partitions, replication, configs, local and remote size")
async def topics(request: Request, offset: int = Query(0, ge=0, le=10_000_000),
                 limit: int = Query(50, ge=1, le=stats.MAX_PAGE_SIZE),
                 search: str = Query("", max_length=stats.MAX_SEARCH_CHARS),
                 internal: bool = Query(False, description="include internal topics (__consumer_offsets)")):
    node = get_node(request)
    names = [n for n in sorted(node.image.topics) if (internal or not n.startswith("__"))
             and allowed(request, Operation.DESCRIBE, ResourceType.TOPIC, n)]
    return JSONResponse(await stats.topic_page(node, request.app.state.metrics, names, offset, limit, search))


@router.get("/topics/{topic}", summary="A page of a topic's partitions: leader, replicas, ISR, offsets, local and remote")
async def topic(topic: str, request: Request, offset: int = Query(0, ge=0, le=10_000_000),
                limit: int = Query(stats.MAX_PAGE_SIZE, ge=1, le=stats.MAX_PAGE_SIZE)):
    node = get_node(request)
    return JSONResponse(await stats.topic_detail(node, request.app.state.metrics, topic, offset, limit))


MAX_EVENTS_READ = 1000


@router.get("/events", summary="Recent cluster events (leader changes, ISR shrinks and expands, nodes, topics), "
                               "newest first, as this node applied the metadata log")
async def events(request: Request, limit: int = Query(50, ge=1, le=1000),
                 after_seq: int = Query(0, ge=0, description="only events with a greater seq")):
    node = get_node(request)
    # Node events are the overview's (anyone sees the nodes); a topic's only for who may describe it.
    shown = [e for e in node.events.recent(MAX_EVENTS_READ, after_seq)
             if "topic" not in e or allowed(request, Operation.DESCRIBE, ResourceType.TOPIC, e["topic"])]
    return JSONResponse({"served_by": node.node_id, "since_ms": node.events.since_ms, "events": shown[:limit]})
