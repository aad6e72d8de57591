"""Lakelog's consumer: a member of a consumer group, with Kafka's client config names.

    from lakelog.cli import Consumer
    c = Consumer({"bootstrap.servers": "http://127.0.0.1:8082", "group.id": "dashboards",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["clicks"])
    for m in c.poll(1.0): ...            # Message(topic, partition, offset, key, value, headers, timestamp)
    c.commit()                           # what poll returned so far
    c.seek("clicks", 0, 42); c.close()

It is a REST Proxy v2 consumer instance on a node (binary format, so any bytes come through): the
node runs the group membership (join, sync, heartbeats, rebalances) and the fetches; `poll` long-polls
`GET .../records`. `commit(offsets={(topic, partition): next_offset})` stores Kafka's "next offset
to read" (sent as Confluent's last-consumed = next - 1); `commit()` stores the positions. `close()`
deletes the instance (the group rebalances at once rather than after `session.timeout.ms`).
"""

from __future__ import annotations

import base64
import uuid
from typing import Any, NamedTuple
from urllib.parse import quote

import httpx

from lakelog.infra.errors import ErrorKind, LakelogError

V2 = "application/vnd.kafka.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"

DEFAULTS: dict[str, Any] = {
    "bootstrap.servers": "http://127.0.0.1:8082",
    "group.id": None,
    "client.id": "",
    "auto.offset.reset": "latest",
    "enable.auto.commit": True,
    "auto.commit.interval.ms": 5000,
    "session.timeout.ms": 45000,
    "heartbeat.interval.ms": 3000,
    "max.poll.records": 500,
    "fetch.max.bytes": 50 * 1024 * 1024,
    "partition.assignment.strategy": "range",
    "request.timeout.ms": 30000,
}
#: Kafka's config name -> the REST Proxy instance setting.
_INSTANCE_KEYS = {"auto.offset.reset": "auto.offset.reset", "enable.auto.commit": "auto.commit.enable",
                  "auto.commit.interval.ms": "auto.commit.interval.ms", "session.timeout.ms": "session.timeout.ms",
                  "heartbeat.interval.ms": "heartbeat.interval.ms", "max.poll.records": "max.poll.records",
                  "partition.assignment.strategy": "partition.assignment.strategy"}


class Message(NamedTuple):
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    timestamp: int


class ConsumeError(LakelogError):
    """A consumer request failed: the node's status, Confluent error code and message."""

    kind = ErrorKind.TRANSIENT

    def __init__(self, message: str, status: int = 0, error_code: int = 0) -> None:
        super().__init__(message)
        self.status, self.error_code = status, error_code


def _b64(v: str | None) -> bytes | None:
    return None if v is None else base64.b64decode(v)


class Consumer:
    def __init__(self, config: dict[str, Any] | None = None, *, http_options: dict[str, Any] | None = None,
                 **kwargs: Any) -> None:
        """`config`: Kafka's consumer config names; `http_options`: passed to httpx.Client."""
        cfg = dict(DEFAULTS)
        for k, v in {**(config or {}), **{k.replace("_", "."): v for k, v in kwargs.items()}}.items():
            if k not in DEFAULTS:
                raise ValueError(f"unknown consumer config {k!r}")
            cfg[k] = v
        if not cfg["group.id"]:
            raise ValueError("group.id is required")
        self.group = str(cfg["group.id"])
        self.server = str(cfg["bootstrap.servers"]).split(",")[0].strip().rstrip("/")
        self.fetch_max_bytes = int(cfg["fetch.max.bytes"])
        timeout_s = int(cfg["request.timeout.ms"]) / 1000
        self._http = httpx.Client(timeout=httpx.Timeout(timeout_s + 35, connect=5), **(http_options or {}))
        name = (str(cfg["client.id"]) or "lakelog-consumer") + "-" + uuid.uuid4().hex[:12]
        body = {"name": name, "format": "binary"}
        for k, inst_key in _INSTANCE_KEYS.items():
            v = cfg[k]
            body[inst_key] = (str(v).lower() if isinstance(v, bool) else v)
        doc = self._call("POST", f"/consumers/{quote(self.group, safe='')}", json=body)
        self.instance = doc["instance_id"]
        self.base = doc["base_uri"]
        self._closed = False

    # ------------------------------------------------------------------ membership

    def subscribe(self, topics: list[str]) -> None:
        self._call("POST", "/subscription", json={"topics": list(topics)}, instance=True)

    def unsubscribe(self) -> None:
        self._call("DELETE", "/subscription", instance=True)

    def assign(self, partitions: list[tuple[str, int]]) -> None:
        self._call("POST", "/assignments", instance=True,
                   json={"partitions": [{"topic": t, "partition": p} for t, p in partitions]})

    def assignment(self) -> list[tuple[str, int]]:
        doc = self._call("GET", "/assignments", instance=True)
        return sorted((p["topic"], p["partition"]) for p in doc["partitions"])

    # ------------------------------------------------------------------ records

    def poll(self, timeout: float = 1.0, max_bytes: int | None = None) -> list[Message]:
        """Records from the positions, waiting up to `timeout` seconds when none is there yet."""
        rows = self._call("GET", "/records", instance=True, accept=BINARY_V2,
                          params={"timeout": int(timeout * 1000), "max_bytes": max_bytes or self.fetch_max_bytes})
        return [Message(r["topic"], int(r["partition"]), int(r["offset"]), _b64(r.get("key")), _b64(r.get("value")),
                        [(h["key"], _b64(h.get("value"))) for h in r.get("headers") or []], int(r["timestamp"]))
                for r in rows]

    def commit(self, messages: list[Message] | None = None,
               offsets: dict[tuple[str, int], int] | None = None) -> list[dict[str, Any]]:
        """Commit: the given messages (each partition's last one), Kafka-style next offsets, or (neither)
        the positions, i.e. everything poll returned. Returns what the group stored."""
        last: dict[tuple[str, int], int] = {}
        for m in messages or ():
            last[(m.topic, m.partition)] = max(last.get((m.topic, m.partition), -1), m.offset)
        for tp, nxt in (offsets or {}).items():
            if nxt > 0:
                last[tp] = nxt - 1  # Confluent's entries name the last record consumed
        if messages is None and offsets is None:
            return self._call("POST", "/offsets", instance=True)["offsets"]
        if not last:
            return []
        body = {"offsets": [{"topic": t, "partition": p, "offset": o} for (t, p), o in sorted(last.items())]}
        return self._call("POST", "/offsets", instance=True, json=body)["offsets"]

    def committed(self, partitions: list[tuple[str, int]] | None = None) -> dict[tuple[str, int], int]:
        """Committed next offsets (-1: none) of the given or the assigned partitions."""
        body = None if partitions is None else {"partitions": [{"topic": t, "partition": p} for t, p in partitions]}
        doc = self._call("GET", "/offsets", instance=True, json=body)
        return {(o["topic"], o["partition"]): o["offset"] for o in doc["offsets"]}

    def seek(self, topic: str, partition: int, offset: int) -> None:
        self._call("POST", "/positions", instance=True,
                   json={"offsets": [{"topic": topic, "partition": partition, "offset": offset}]})

    def seek_to_beginning(self, partitions: list[tuple[str, int]]) -> None:
        self._call("POST", "/positions/beginning", instance=True,
                   json={"partitions": [{"topic": t, "partition": p} for t, p in partitions]})

    def seek_to_end(self, partitions: list[tuple[str, int]]) -> None:
        self._call("POST", "/positions/end", instance=True,
                   json={"partitions": [{"topic": t, "partition": p} for t, p in partitions]})

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._http.delete(self.base)
        except httpx.HTTPError:
            pass  # the instance expires on the node (consumer.instance.timeout.ms)
        self._http.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ HTTP

    def _call(self, method: str, path: str, *, instance: bool = False, json: Any = None,
              params: dict[str, Any] | None = None, accept: str = V2) -> Any:
        url = (self.base + path) if instance else (self.server + path)
        try:
            r = self._http.request(method, url, json=json, params=params,
                                   headers={"Content-Type": V2, "Accept": accept})
        except httpx.HTTPError as e:
            raise ConsumeError(f"cannot reach {url}: {e}") from None
        if r.status_code == 204:
            return {}
        try:
            doc = r.json()
        except ValueError:
            doc = {"message": r.text[:200]}
        if r.status_code != 200:
            raise ConsumeError(str(doc.get("message", r.text[:200])), r.status_code, int(doc.get("error_code", 0)))
        return doc
