"""Recent cluster events for the console's overview, derived from the metadata log as this node applies it.

`ClusterEvents` is the metadata image's observer (`ClusterImage.observer`): around each applied
record it compares what the record changes and keeps one event per change worth showing a person:

    controller         the active controller changed (a new controller epoch = Raft term)
    node_joined        a node registered for the first time; node_restarted: a new incarnation
    node_fenced / node_unfenced / node_shutting_down / node_left
    topic_created / topic_deleted / partitions_added / configs_altered
    leader_changed     a partition's leader moved (or went offline: leader -1)
    isr_shrunk / isr_expanded    a partition's ISR lost or gained replicas
    replicas_changed   a partition's replica list changed

Every node applies the same log, so every node sees the same events; the time of an event is when
this node applied it. Events are recorded only while the node is caught up (`armed`): replaying
the log at start-up would stamp old changes with the wrong time. At most `max_events` are kept (the
oldest go first). With `path`, they are also kept in a bounded file (`ingest_api/cluster/event_file.py`)
and loaded from it at start: a restarted node shows what it saw before (not what happened while it
was down, which it replays without events; the other nodes saw that), and `seq` goes on from the
file's last. Events are plain dicts `{seq, time_ms, kind, severity (info|warn), message,
topic?, partition?, node?}`; `seq` grows by one per event, so a reader can ask for what is new.

Concurrency: `before`/`after` run on the thread that applies the metadata (the event loop);
`recent` may be called from any thread (a lock guards the deque).
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from typing import Any, Callable

from lakelog.ingest_api.cluster.event_file import EventFile

log = logging.getLogger("lakelog.events")

MAX_EVENTS = 1000
_BROKER_RECORDS = {"register_broker", "unfence_broker", "fence_broker", "broker_controlled_shutdown",
                   "unregister_broker"}
_TOPIC_RECORDS = {"create_topic": "name", "create_partitions": "name", "delete_topic": "name", "alter_configs": "name",
                  "partition_change": "topic"}


def _nodes(ids) -> str:
    return ", ".join(str(i) for i in ids) or "none"


class ClusterEvents:
    def __init__(self, *, max_events: int = MAX_EVENTS, armed: Callable[[], bool] = lambda: True,
                 controller_id: Callable[[], int | None] = lambda: None,
                 clock: Callable[[], float] = time.time, path: str | os.PathLike | None = None) -> None:
        if max_events < 1:
            raise ValueError("max_events must be at least 1")
        self._events: collections.deque[dict] = collections.deque(maxlen=max_events)
        self._lock = threading.Lock()
        self._seq = 0
        self._armed = armed
        self._controller_id = controller_id
        self._clock = clock
        self._epoch: int | None = None
        self.armed_at_ms: int | None = None
        self._file: EventFile | None = None
        if path is not None:
            self._file = EventFile(path, max_events)
            try:
                self._events.extend(self._file.load())
            except OSError as e:  # the events are a convenience: keep them in memory only
                log.warning("cluster events will not survive a restart: %s", e)
                self._file = None
            self._seq = max((e["seq"] for e in self._events), default=0)

    @property
    def since_ms(self) -> int | None:
        """Since when events are known: the oldest kept (from before a restart too), else when this node caught up."""
        with self._lock:
            first = self._events[0]["time_ms"] if self._events else None
        return first if first is not None else self.armed_at_ms

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()

    # --- the image's observer ------------------------------------------------------------------

    def before(self, image, record: dict) -> Any:
        t = record.get("type")
        if t in _BROKER_RECORDS:
            return image.brokers.get(record.get("node_id"))
        key = _TOPIC_RECORDS.get(t)
        return image.topics.get(record.get(key)) if key else None

    def after(self, image, record: dict, old: Any) -> None:
        if self.armed_at_ms is None:  # once caught up, always: a later pause is no replay
            if not self._armed():
                self._epoch = image.controller_epoch
                return
            self.armed_at_ms = self._now()
        if self._epoch is not None and image.controller_epoch > self._epoch:
            who = self._controller_id()
            self._add("controller", "warn", f"new active controller{'' if who is None else f': node {who}'} "
                      f"(controller epoch {image.controller_epoch})", node=who)
        self._epoch = image.controller_epoch
        t = record.get("type")
        if t in _BROKER_RECORDS:
            self._broker(image, t, record, old)
        elif t in _TOPIC_RECORDS:
            self._topic(image, t, record, old)

    # --- reads ---------------------------------------------------------------------------------

    def recent(self, limit: int = 100, after_seq: int = 0) -> list[dict]:
        """The newest `limit` events with `seq` > `after_seq`, newest first."""
        with self._lock:
            out = [e for e in reversed(self._events) if e["seq"] > after_seq]
        return [dict(e) for e in out[:limit]]

    # --- events --------------------------------------------------------------------------------

    def _now(self) -> int:
        return int(self._clock() * 1000)

    def _add(self, kind: str, severity: str, message: str, **where: Any) -> None:
        with self._lock:
            self._seq += 1
            event = {"seq": self._seq, "time_ms": self._now(), "kind": kind, "severity": severity,
                     "message": message, **{k: v for k, v in where.items() if v is not None}}
            self._events.append(event)
            if self._file is not None:
                try:
                    self._file.append(event)
                    self._file.compact(list(self._events))
                except OSError as e:
                    log.warning("cluster events will not survive a restart: %s", e)
                    self._file = None

    def _broker(self, image, t: str, rec: dict, old) -> None:
        n = rec.get("node_id")
        if t == "register_broker":
            reg = image.brokers.get(n)
            where = f"{reg.host}:{reg.port}" if reg else ""
            if old is None:
                self._add("node_joined", "info", f"node {n} joined ({where})", node=n)
            else:
                self._add("node_restarted", "warn", f"node {n} registered again: restarted ({where})", node=n)
        elif t == "fence_broker":
            self._add("node_fenced", "warn", f"node {n} fenced: its session expired or it stopped", node=n)
        elif t == "unfence_broker":
            self._add("node_unfenced", "info", f"node {n} is serving (unfenced)", node=n)
        elif t == "broker_controlled_shutdown":
            self._add("node_shutting_down", "warn", f"node {n} is shutting down (controlled)", node=n)
        else:
            self._add("node_left", "warn", f"node {n} left the cluster (unregistered)", node=n)

    def _topic(self, image, t: str, rec: dict, old) -> None:
        if t == "create_topic":
            new = image.topics.get(rec.get("name"))
            if new is not None:
                rf = len(new.partitions[0].replicas) if new.partitions else 0
                self._add("topic_created", "info", f"topic {new.name} created: {len(new.partitions)} partition(s), "
                          f"replication factor {rf}", topic=new.name)
        elif t == "delete_topic" and old is not None:
            self._add("topic_deleted", "warn", f"topic {old.name} deleted", topic=old.name)
        elif t == "create_partitions" and old is not None:
            new = image.topics.get(old.name)
            if new is not None:
                self._add("partitions_added", "info", f"topic {old.name}: partitions {len(old.partitions)} -> "
                          f"{len(new.partitions)}", topic=old.name)
        elif t == "alter_configs" and old is not None:
            new = image.topics.get(old.name)
            changed = sorted(k for k in set(old.configs) | set(new.configs if new else {})
                             if new is not None and old.configs.get(k) != new.configs.get(k))
            self._add("configs_altered", "info", f"topic {old.name}: configs changed ({', '.join(changed) or 'none'})",
                      topic=old.name)
        elif t == "partition_change" and old is not None:
            new = image.topics.get(old.name)
            p = rec.get("partition")
            if new is None or not isinstance(p, int) or p >= len(old.partitions) or p >= len(new.partitions):
                return
            self._partition(old.name, p, old.partitions[p], new.partitions[p])

    def _partition(self, topic: str, p: int, old, new) -> None:
        where = f"{topic}-{p}"
        if new.leader != old.leader:
            if new.leader < 0:
                self._add("leader_changed", "warn", f"{where} is offline: no leader (was node {old.leader})",
                          topic=topic, partition=p)
            else:
                was = "none" if old.leader < 0 else f"node {old.leader}"
                self._add("leader_changed", "info", f"{where}: leader {was} -> node {new.leader} "
                          f"(leader epoch {new.leader_epoch})", topic=topic, partition=p, node=new.leader)
        gone = [r for r in old.isr if r not in new.isr]
        came = [r for r in new.isr if r not in old.isr]
        if gone:
            self._add("isr_shrunk", "warn", f"{where}: ISR shrank {_nodes(old.isr)} -> {_nodes(new.isr)} "
                      f"(out: {_nodes(gone)})", topic=topic, partition=p)
        if came:
            self._add("isr_expanded", "info", f"{where}: ISR expanded {_nodes(old.isr)} -> {_nodes(new.isr)} "
                      f"(in: {_nodes(came)})", topic=topic, partition=p)
        if new.replicas != old.replicas:
            self._add("replicas_changed", "info", f"{where}: replicas {_nodes(old.replicas)} -> {_nodes(new.replicas)}",
                      topic=topic, partition=p)
