"""Lakelog's consumer: a member of a consumer group, with Kafka's client config names, reading on the
binary fetch path.

    from lakelog.client import Consumer
    c = Consumer({"bootstrap.servers": "http://127.0.0.1:8082", "group.id": "dashboards",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe(["clicks"])
    for m in c.poll(1.0): ...            # Message(topic, partition, offset, key, value, headers, timestamp)
    c.commit()                           # what poll returned so far
    c.seek("clicks", 0, 42); c.close()

Split of the work, as Kafka's consumer splits it between the coordinator and the fetcher:
  * Membership and offsets: a REST Proxy v2 consumer instance on the first node of
    `bootstrap.servers` (created with `auto.commit.enable=false`; this client commits). The node runs
    the group protocol for it (JoinGroup, SyncGroup with the agreed assignor, heartbeats every
    `heartbeat.interval.ms`, rejoins). The client reads the instance's assignment at most every
    `heartbeat.interval.ms` (capped at ASSIGNMENT_REFRESH_MAX_S; that request also keeps the
    instance alive), commits with `POST .../offsets` (the group checks the instance's member id and
    generation) and reads committed offsets with `GET .../offsets`.
  * Records: the client fetches each assigned partition itself with
    `GET /topics/{t}/partitions/{p}/records?offset=` and `Accept: application/vnd.kafka.recordbatch`
    (the node forwards to the leader), checks each batch's CRC and decodes the records natively
    (client/fetching.py). Partitions are fetched concurrently (one request each, at most
    `fetch.max.parallel` at once); what a poll does not return (over `max.poll.records`) stays
    buffered for the next poll. A partition's position — the next offset poll returns — lives here.

A newly assigned partition starts at the group's committed offset, else per `auto.offset.reset`
(`earliest` = the log start offset, `latest` = the high watermark, `none` raises); an offset out of
range (416) is reset the same way. A partition that the group moved away is dropped with its
buffered records at the next assignment read; `commit()` reads the assignment first and commits
only partitions still assigned, so a member never commits over the partition's new owner.
`enable.auto.commit` commits the positions every `auto.commit.interval.ms` when poll is called
(records returned by earlier polls), and on close. `close()` deletes the instance: the group
rebalances at once rather than after `session.timeout.ms`.

Threads: one thread uses a consumer at a time (as Kafka's); fetches run on a small pool.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

import httpx

from lakelog.client.fetching import Message, decode_fetch
from lakelog.client.http_sender import HttpSender, TransportError
from lakelog.infra.error_codes import code
from lakelog.infra.errors import ErrorKind, LakelogError

V2 = "application/vnd.kafka.v2+json"
RECORDBATCH = "application/vnd.kafka.recordbatch"

__all__ = ["ConsumeError", "Consumer", "Message"]

DEFAULTS: dict[str, Any] = {
    "bootstrap.servers": "http://127.0.0.1:8082",
    "group.id": None,
    "client.id": "",
    "auto.offset.reset": "latest",
    "enable.auto.commit": True,
    "auto.commit.interval.ms": 5000,
    "session.timeout.ms": 45_000,
    "heartbeat.interval.ms": 3000,
    "max.poll.records": 500,
    "fetch.max.bytes": 50 * 1024 * 1024,
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
    "fetch.max.parallel": 8,
    "partition.assignment.strategy": "range",
    "request.timeout.ms": 30000,
}
#: Kafka's config name -> the REST Proxy instance setting.
_INSTANCE_KEYS = {"auto.offset.reset": "auto.offset.reset", "session.timeout.ms": "session.timeout.ms",
                  "heartbeat.interval.ms": "heartbeat.interval.ms", "max.poll.records": "max.poll.records",
                  "partition.assignment.strategy": "partition.assignment.strategy"}
#: Longest gap between two reads of the assignment while polling (a moved partition is noticed by then).
ASSIGNMENT_REFRESH_MAX_S = 1.0
#: Wait between assignment reads while the group has given this member nothing yet.
ASSIGNMENT_WAIT_STEP_S = 0.05
#: Attempts of a commit that meets a rebalance in progress (the instance is rejoining).
COMMIT_ATTEMPTS = 20
#: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS: the instance is rejoining; retry.
_REJOINING = tuple(code(name).error_code for name in (
    "UnknownMemberIdError", "IllegalGenerationError", "RebalanceInProgressError"))
#: auto.offset.reset=none with no committed offset; a partition not assigned: answered as the node would.
_NO_OFFSET = code("ConsumerInstanceNotFoundError")
_NOT_ASSIGNED = code("IllegalStateError")

TP = tuple[str, int]


class ConsumeError(LakelogError):
    """A consumer request failed: the node's status, Confluent error code and message."""

    kind = ErrorKind.TRANSIENT

    def __init__(self, message: str, status: int = 0, error_code: int = 0) -> None:
        super().__init__(message)
        self.status, self.error_code = status, error_code


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
        self.reset = str(cfg["auto.offset.reset"]).lower()
        if self.reset not in ("earliest", "latest", "none"):
            raise ValueError("auto.offset.reset must be earliest, latest or none")
        self.group = str(cfg["group.id"])
        self.server = str(cfg["bootstrap.servers"]).split(",")[0].strip().rstrip("/")
        self.fetch_max_bytes = max(1, int(cfg["fetch.max.bytes"]))
        self.partition_fetch_bytes = max(1, int(cfg["max.partition.fetch.bytes"]))
        self.max_poll_records = max(1, int(cfg["max.poll.records"]))
        self.auto_commit = str(cfg["enable.auto.commit"]).lower() in ("true", "1")
        self.auto_commit_s = max(0, int(cfg["auto.commit.interval.ms"])) / 1000
        self.refresh_s = min(ASSIGNMENT_REFRESH_MAX_S, max(0.01, int(cfg["heartbeat.interval.ms"]) / 1000))
        timeout_s = int(cfg["request.timeout.ms"]) / 1000
        parallel = max(1, int(cfg["fetch.max.parallel"]))
        opts = dict(http_options or {})
        self._http = httpx.Client(timeout=httpx.Timeout(timeout_s + 35, connect=5),
                                  limits=httpx.Limits(max_connections=parallel + 2,
                                                      max_keepalive_connections=parallel + 2), **opts)
        # Binary fetches go through the plain-socket sender (client/http_sender.py) unless the options
        # ask for something only httpx does (a transport, event hooks); group calls stay on httpx.
        self._fast: HttpSender | None = None
        if HttpSender.supports(opts):
            self._fast = HttpSender(timeout_s=timeout_s + 35, connect_timeout_s=5, max_connections=parallel + 2,
                                    headers=opts.get("headers"), auth=opts.get("auth"),
                                    verify=opts.get("verify", True), user_agent="lakelog-consumer")
        self._pool = ThreadPoolExecutor(parallel, thread_name_prefix="lakelog-consumer-fetch")
        name = (str(cfg["client.id"]) or "lakelog-consumer") + "-" + uuid.uuid4().hex[:12]
        body: dict[str, Any] = {"name": name, "format": "binary", "auto.commit.enable": "false"}
        for k, inst_key in _INSTANCE_KEYS.items():
            v = cfg[k]
            body[inst_key] = (str(v).lower() if isinstance(v, bool) else v)
        doc = self._call("POST", f"/consumers/{quote(self.group, safe='')}", json=body)
        self.instance = doc["instance_id"]
        self.base = doc["base_uri"]
        self._closed = False
        self._subscribed = False
        self._assignment: list[TP] = []
        self._assignment_read = 0.0
        self._positions: dict[TP, int] = {}  # next offset poll returns
        self._fetch_at: dict[TP, int] = {}  # next offset to fetch (past what is buffered)
        self._buffered: dict[TP, _Buffered] = {}
        self._next_auto_commit = time.monotonic() + self.auto_commit_s
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ membership

    def subscribe(self, topics: list[str]) -> None:
        self._call("POST", "/subscription", json={"topics": list(topics)}, instance=True)
        self._subscribed = True
        self._set_assignment([])
        self._assignment_read = 0.0

    def unsubscribe(self) -> None:
        self._call("DELETE", "/subscription", instance=True)
        self._subscribed = False
        self._set_assignment([])

    def assign(self, partitions: list[tuple[str, int]]) -> None:
        self._call("POST", "/assignments", instance=True,
                   json={"partitions": [{"topic": t, "partition": p} for t, p in partitions]})
        self._subscribed = False
        self._set_assignment(sorted(set((str(t), int(p)) for t, p in partitions)))

    def assignment(self) -> list[tuple[str, int]]:
        if self._subscribed:
            self._read_assignment()
        return list(self._assignment)

    def _read_assignment(self) -> None:
        doc = self._call("GET", "/assignments", instance=True)
        self._assignment_read = time.monotonic()
        self._set_assignment(sorted((str(p["topic"]), int(p["partition"])) for p in doc["partitions"]))

    def _set_assignment(self, new: list[TP]) -> None:
        if new == self._assignment:
            return
        keep = set(new)
        for d in (self._positions, self._fetch_at, self._buffered):
            for tp in [tp for tp in d if tp not in keep]:
                del d[tp]
        self._assignment = new

    # ------------------------------------------------------------------ records

    def poll(self, timeout: float = 1.0, max_bytes: int | None = None) -> list[Message]:
        """Up to `max.poll.records` records from the positions, waiting up to `timeout` seconds when
        none is there yet. `max_bytes` bounds this poll's fetches (default `fetch.max.bytes`)."""
        deadline = time.monotonic() + max(0.0, timeout)
        if self.auto_commit and time.monotonic() >= self._next_auto_commit:
            self._auto_commit()
        while True:
            if self._subscribed and (not self._assignment or time.monotonic() - self._assignment_read >= self.refresh_s):
                self._read_assignment()
            out = self._drain()
            if out:
                return out
            left = deadline - time.monotonic()
            if not self._assignment:
                if left <= 0:
                    return []
                time.sleep(min(left, ASSIGNMENT_WAIT_STEP_S))
                continue
            self._init_positions()
            self._fetch(max(0, int(left * 1000)), max_bytes or self.fetch_max_bytes)
            out = self._drain()
            if out or time.monotonic() >= deadline:
                return out

    def _drain(self) -> list[Message]:
        out: list[Message] = []
        for tp in self._assignment:
            q = self._buffered.get(tp)
            if q:
                taken = q.take(self.max_poll_records - len(out))  # a slice, not a loop per record
                out += taken
                self._positions[tp] = taken[-1].offset + 1
            if len(out) >= self.max_poll_records:
                break
        return out

    def _fetch(self, wait_ms: int, max_bytes: int) -> None:
        todo = [tp for tp in self._assignment if not self._buffered.get(tp) and tp in self._fetch_at]
        if not todo:
            return
        per = max(1, min(self.partition_fetch_bytes, max_bytes // len(todo)))
        if len(todo) == 1:
            results = [self._fetch_one(todo[0], wait_ms, per)]
        else:
            # The first round asks without waiting, so one idle partition does not hold up the
            # others; only when none had anything do all wait (each answers on its first append).
            results = list(self._pool.map(lambda tp: self._fetch_one(tp, 0, per), todo))
            if not any(results) and wait_ms > 0:
                results = list(self._pool.map(lambda tp: self._fetch_one(tp, wait_ms, per), todo))
        for tp, got in zip(todo, results):
            if got is not None and tp in self._fetch_at:  # still assigned
                q = self._buffered.get(tp)
                if q:
                    q.extend(got)
                elif got:
                    self._buffered[tp] = _Buffered(got)

    def _fetch_one(self, tp: TP, wait_ms: int, max_bytes: int) -> list[Message] | None:
        topic, partition = tp
        offset = self._fetch_at[tp]
        url = f"{self.server}/topics/{quote(topic, safe='')}/partitions/{partition}/records"
        try:
            if self._fast is not None:
                r = self._fast.get(f"{url}?offset={offset}&max_bytes={max_bytes}&timeout={wait_ms}",
                                   {"Accept": RECORDBATCH})
            else:
                r = self._http.get(url, params={"offset": offset, "max_bytes": max_bytes, "timeout": wait_ms},
                                   headers={"Accept": RECORDBATCH})
        except (httpx.HTTPError, TransportError) as e:
            raise ConsumeError(f"cannot reach {url}: {e}") from None
        if r.status_code == 416:  # out of range: reset as auto.offset.reset says
            self._fetch_at[tp] = self._positions[tp] = self._reset_offset(tp)
            return None
        if r.status_code != 200:
            raise _error(r)
        fetched = decode_fetch(r.content, topic, partition, offset)
        self._fetch_at[tp] = fetched.next_offset
        return fetched.messages

    def _init_positions(self) -> None:
        missing = [tp for tp in self._assignment if tp not in self._fetch_at]
        if not missing:
            return
        committed = self.committed(missing)
        for tp in missing:
            nxt = committed.get(tp, -1)
            if nxt is None or nxt < 0:
                nxt = self._reset_offset(tp)
            self._positions[tp] = self._fetch_at[tp] = nxt

    def _reset_offset(self, tp: TP) -> int:
        if self.reset == "none":
            raise ConsumeError(f"no committed offset for {tp[0]}-{tp[1]} and auto.offset.reset=none",
                               _NO_OFFSET.status, _NO_OFFSET.error_code)
        beginning, end = self._bounds(tp)
        return beginning if self.reset == "earliest" else end

    def _bounds(self, tp: TP) -> tuple[int, int]:
        doc = self._call("GET", f"/topics/{quote(tp[0], safe='')}/partitions/{tp[1]}/offsets")
        return int(doc["beginning_offset"]), int(doc["end_offset"])

    # ------------------------------------------------------------------ offsets

    def position(self, topic: str, partition: int) -> int:
        """The next offset poll returns for an assigned partition."""
        tp = (topic, partition)
        self._check_assigned(tp)
        self._init_positions()
        return self._positions[tp]

    def commit(self, messages: list[Message] | None = None,
               offsets: dict[tuple[str, int], int] | None = None) -> list[dict[str, Any]]:
        """Commit: the given messages (each partition's last one), Kafka-style next offsets, or (neither)
        the positions, i.e. everything poll returned. Partitions the group no longer assigns to this
        member are left out. Returns what the group stored."""
        nxt: dict[TP, int] = {}
        for m in messages or ():
            tp = (m.topic, m.partition)
            nxt[tp] = max(nxt.get(tp, 0), m.offset + 1)
        for tp, o in (offsets or {}).items():
            nxt[tp] = int(o)
        if messages is None and offsets is None:
            nxt = dict(self._positions)
        for attempt in range(COMMIT_ATTEMPTS):
            if self._subscribed:
                self._read_assignment()
                nxt = {tp: o for tp, o in nxt.items() if tp in set(self._assignment)}
            entries = [{"topic": t, "partition": p, "offset": o - 1}  # Confluent's entries name the last record consumed
                       for (t, p), o in sorted(nxt.items()) if o > 0]
            if not entries:
                return []
            try:
                return self._call("POST", "/offsets", instance=True, json={"offsets": entries})["offsets"]
            except ConsumeError as e:
                # The instance is (re)joining its group: unknown member, old generation, rebalancing.
                if e.error_code not in _REJOINING or attempt == COMMIT_ATTEMPTS - 1:
                    raise
                time.sleep(min(1.0, 0.05 * 2 ** attempt))
        return []

    def _auto_commit(self) -> None:
        self._next_auto_commit = time.monotonic() + self.auto_commit_s
        try:
            self.commit()
        except ConsumeError:
            pass  # the next interval tries again; records are at least once

    def committed(self, partitions: list[tuple[str, int]] | None = None) -> dict[tuple[str, int], int]:
        """Committed next offsets (-1: none) of the given or the assigned partitions."""
        body = None if partitions is None else {"partitions": [{"topic": t, "partition": p} for t, p in partitions]}
        doc = self._call("GET", "/offsets", instance=True, json=body)
        return {(o["topic"], o["partition"]): o["offset"] for o in doc["offsets"]}

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Make `offset` the next one poll returns for an assigned partition."""
        tp = (topic, partition)
        self._check_assigned(tp)
        if offset < 0:
            raise ValueError("offset must be >= 0")
        self._positions[tp] = self._fetch_at[tp] = int(offset)
        self._buffered.pop(tp, None)

    def seek_to_beginning(self, partitions: list[tuple[str, int]]) -> None:
        for t, p in partitions:
            self.seek(t, p, self._bounds((t, p))[0])

    def seek_to_end(self, partitions: list[tuple[str, int]]) -> None:
        for t, p in partitions:
            self.seek(t, p, self._bounds((t, p))[1])

    def _check_assigned(self, tp: TP) -> None:
        if tp not in self._assignment and self._subscribed:
            self._read_assignment()
        if tp not in self._assignment:
            raise ConsumeError(f"No current assignment for partition {tp[0]}-{tp[1]}", _NOT_ASSIGNED.status,
                               _NOT_ASSIGNED.error_code)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self.auto_commit and self._positions:
                self._auto_commit()
        finally:
            try:
                self._http.delete(self.base)
            except httpx.HTTPError:
                pass  # the instance expires on the node (consumer.instance.timeout.ms)
            self._pool.shutdown(wait=False)
            self._http.close()
            if self._fast is not None:
                self._fast.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ HTTP

    def _call(self, method: str, path: str, *, instance: bool = False, json: Any = None,
              params: dict[str, Any] | None = None) -> Any:
        url = (self.base + path) if instance else (self.server + path)
        try:
            r = self._http.request(method, url, json=json, params=params,
                                   headers={"Content-Type": V2, "Accept": V2})
        except httpx.HTTPError as e:
            raise ConsumeError(f"cannot reach {url}: {e}") from None
        if r.status_code == 204:
            return {}
        if r.status_code != 200:
            raise _error(r)
        try:
            return r.json()
        except ValueError:
            raise ConsumeError(f"{url} answered something that is not JSON: {r.text[:200]!r}", r.status_code) from None


def _error(r: httpx.Response) -> ConsumeError:
    try:
        doc = r.json()
        return ConsumeError(str(doc.get("message", r.text[:200])), r.status_code, int(doc.get("error_code", 0)))
    except (ValueError, AttributeError):
        return ConsumeError(r.text[:200], r.status_code)


class _Buffered:
    """A partition's fetched messages not yet returned by poll: a list and the index of the next one
    (poll takes a slice; no object per record is moved twice)."""

    __slots__ = ("messages", "start")

    def __init__(self, messages: list[Message]) -> None:
        self.messages, self.start = messages, 0

    def __len__(self) -> int:
        return len(self.messages) - self.start

    def take(self, n: int) -> list[Message]:
        start, msgs = self.start, self.messages
        if start == 0 and n >= len(msgs):
            self.messages = []
            return msgs
        taken = msgs[start:start + n]
        self.start = start + len(taken)
        if self.start >= len(msgs):
            self.messages, self.start = [], 0
        return taken

    def extend(self, more: list[Message]) -> None:
        if self.start:
            self.messages, self.start = self.messages[self.start:], 0
        self.messages.extend(more)
