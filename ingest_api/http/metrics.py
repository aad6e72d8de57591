"""Prometheus metrics of one node (a registry per node, exposed at /metrics)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from lakelog.tiering.store_health import StoreState

LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class NodeMetrics:
    def __init__(self, node) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("lakelog_http_requests", "HTTP requests by route and status",
                                ["method", "route", "status"], registry=r)
        self.latency = Histogram("lakelog_http_request_seconds", "HTTP request latency by route",
                                 ["method", "route"], buckets=LATENCY_BUCKETS, registry=r)
        self.produce_records = Counter("lakelog_produce_records", "Records appended by produce requests",
                                       ["topic"], registry=r)
        self.produce_bytes = Counter("lakelog_produce_bytes", "Batch bytes appended by produce requests",
                                     ["topic"], registry=r)
        self.fetch_bytes = Counter("lakelog_fetch_bytes", "Batch bytes returned by fetch requests",
                                   ["topic"], registry=r)
        self.ready = Gauge("lakelog_node_ready", "1 when the node serves client requests", registry=r)
        self.ready.set_function(lambda: 1 if node.ready else 0)
        self.log_dir_offline = Gauge("lakelog_log_dir_offline", "1 when an I/O error took the log directory "
                                     "offline (writes refused until a restart)", registry=r)
        self.log_dir_offline.set_function(lambda: _log_dir_offline(node))
        #: Set to read the Kafka door's count once the door runs (ingest_api/server.py); 0 without one.
        self.kafka_connections = Gauge("lakelog_kafka_connections", "Open connections of the node's Kafka "
                                       "listeners", registry=r)
        r.register(_PartitionCollector(node))
        r.register(_IsrCollector(node))
        r.register(_TieringCollector(node))


def _log_dir_offline(node) -> int:
    replicas = getattr(node, "replicas", None)
    log_dir = getattr(replicas, "log_dir", None)
    return log_dir.state.value if log_dir is not None else 0


class _PartitionCollector:
    """Per-partition gauges read at scrape time: LEO, HW, last stable offset, open transactions,
    log start offset, segments, size."""

    def __init__(self, node) -> None:
        self.node = node

    def collect(self):
        labels = ["topic", "partition"]
        leo = GaugeMetricFamily("lakelog_partition_log_end_offset", "Log end offset", labels=labels)
        hw = GaugeMetricFamily("lakelog_partition_high_watermark", "High watermark", labels=labels)
        lso = GaugeMetricFamily("lakelog_partition_log_start_offset", "Log start offset", labels=labels)
        stable = GaugeMetricFamily("lakelog_partition_last_stable_offset",
                                   "Last stable offset (read_committed readers read below it)", labels=labels)
        open_txns = GaugeMetricFamily("lakelog_partition_ongoing_transactions", "Transactions open in the partition",
                                      labels=labels)
        segs = GaugeMetricFamily("lakelog_partition_segments", "Local segments", labels=labels)
        size = GaugeMetricFamily("lakelog_partition_size_bytes", "Local log size", labels=labels)
        waiting = GaugeMetricFamily("lakelog_partition_fetch_waiters", "Fetches long-polling on the partition",
                                    labels=labels)
        for p in self.node.partitions():
            lv = [p.key.topic, str(p.key.partition)]
            try:
                segments = p.log.segments
                leo.add_metric(lv, p.log_end_offset)
                hw.add_metric(lv, p.high_watermark)
                lso.add_metric(lv, p.log_start_offset)
                stable.add_metric(lv, p.last_stable_offset)
                open_txns.add_metric(lv, len(p.log.ongoing_transactions()))
                segs.add_metric(lv, len(segments))
                size.add_metric(lv, sum(s.size for s in segments))
                waiting.add_metric(lv, p.fetch_waiters)
            except Exception:  # a partition being deleted while scraped
                continue
        yield from (leo, hw, stable, open_txns, lso, segs, size, waiting)


class _IsrCollector:
    """The ISR of the partitions this node leads: its size, under-replicated partitions (ISR smaller
    than the replica set), and the ISR shrinks and expansions this node sent."""

    def __init__(self, node) -> None:
        self.node = node

    def collect(self):
        labels = ["topic", "partition"]
        size = GaugeMetricFamily("lakelog_partition_in_sync_replicas", "ISR size (on the leader)", labels=labels)
        under = GaugeMetricFamily("lakelog_partition_under_replicated", "1 when the ISR is smaller than the "
                                  "replica set (on the leader)", labels=labels)
        for p in self.node.partitions():
            if not p.is_leader:
                continue
            lv = [p.key.topic, str(p.key.partition)]
            isr, replicas = p.isr, p.replicas
            size.add_metric(lv, len(isr))
            under.add_metric(lv, 1 if len(isr) < len(replicas) else 0)
        yield from (size, under)
        replicas = getattr(self.node, "replicas", None)
        if replicas is not None:
            yield CounterMetricFamily("lakelog_isr_shrinks", "ISR shrinks this node sent as a leader (a follower "
                                      "lagged past replica.lag.time.max.ms)", value=replicas.isr.shrinks)
            yield CounterMetricFamily("lakelog_isr_expands", "ISR expansions this node sent as a leader (a "
                                      "follower caught up)", value=replicas.isr.expands)


#: `lakelog_remote_store_state` values (tiering/store_health.py StoreState).
_STORE_STATES = {state.name.lower(): state.value for state in StoreState}


class _TieringCollector:
    """The remote tier's counters and gauges (`RemoteTier.metrics_snapshot()`), read at scrape time."""

    COUNTERS = ("bytes_uploaded", "segments_uploaded", "upload_failures", "segments_abandoned", "segments_deleted",
                "bytes_deleted", "orphans_deleted", "fenced_commits", "remote_fetches", "remote_fetch_bytes",
                "remote_fetch_errors", "corrupt_reads", "timestamp_lookups", "prefetches")

    def __init__(self, node) -> None:
        self.node = node

    def collect(self):
        tier = getattr(self.node, "tier", None)
        if tier is None:
            return
        try:
            snap = tier.metrics_snapshot()
        except Exception:
            return
        for name in self.COUNTERS:
            if name in snap:
                yield CounterMetricFamily(f"lakelog_remote_{name.removeprefix('remote_')}",
                                          f"Remote tier: {name.replace('_', ' ')}",
                                          value=snap[name])
        lag_s = GaugeMetricFamily("lakelog_remote_upload_lag_segments", "Sealed local segments not yet tiered",
                                  labels=["topic", "partition"])
        lag_b = GaugeMetricFamily("lakelog_remote_upload_lag_bytes", "Bytes of sealed local segments not yet tiered",
                                  labels=["topic", "partition"])
        for tp, lag in snap.get("upload_lag", {}).items():
            topic, _, part = tp.rpartition("-")
            lag_s.add_metric([topic, part], lag["segments"])
            lag_b.add_metric([topic, part], lag["bytes"])
        yield lag_s
        yield lag_b
        h = snap.get("remote_fetch_latency")
        if h:
            buckets = [(("+Inf" if b == "+Inf" else str(float(b) / 1000)), n) for b, n in h["buckets"].items()]
            yield HistogramMetricFamily("lakelog_remote_fetch_seconds", "Remote fetch latency",
                                        buckets=buckets, sum_value=h["sum_ms"] / 1000)
        for cache in ("index_cache", "chunk_cache"):
            c = snap.get(cache)
            if c:
                yield GaugeMetricFamily(f"lakelog_remote_{cache}_hit_rate", f"Remote {cache.replace('_', ' ')} hit rate",
                                        value=c.get("hit_rate", 0.0))
        for key in ("requests_per_mib_written", "requests_per_mib_read"):
            if key in snap:
                yield GaugeMetricFamily(f"lakelog_remote_store_{key}", f"Object-store requests per MiB "
                                        f"{key.rsplit('_', 1)[1]}", value=snap[key])
        remote_logs = getattr(self.node, "remote_logs", None)
        health = remote_logs.status() if remote_logs is not None else None
        if health is not None:
            yield GaugeMetricFamily("lakelog_remote_store_state", "Object-store health: 0 healthy, 1 degraded "
                                    "(calls fail at once), 2 probing", value=_STORE_STATES[health["state"]])
            yield GaugeMetricFamily("lakelog_remote_store_consecutive_failures",
                                    "Object-store calls failed in a row (errors and missed deadlines)",
                                    value=health["consecutive_failures"])
            yield CounterMetricFamily("lakelog_remote_store_fast_failures", "Object-store calls refused at once "
                                      "while the store was degraded", value=health["fast_failures"])
            yield CounterMetricFamily("lakelog_remote_store_degradations", "Times the object store was marked "
                                      "degraded", value=health["degradations"])
            yield CounterMetricFamily("lakelog_remote_read_timeouts", "Remote reads that missed "
                                      "remote.fetch.max.wait.ms", value=health["read_timeouts"])
        store = snap.get("store")
        if store:
            req = CounterMetricFamily("lakelog_remote_store_requests", "Object-store requests by kind",
                                      labels=["kind"])
            for kind, n in store.get("requests", {}).items():
                req.add_metric([kind], n)
            yield req
