"""Fault-injection helpers for replication tests on real clusters (`tests/faults/`).

* HTTP helpers over the public API: topics, partition state, the current leader and controller,
  a partition's offsets read from one node itself (never forwarded), per-replica LEO / HW from
  `/metrics`.
* `IdempotentLoad`: one thread per partition producing acks=all through whichever nodes the test
  says are up, with an idempotent producer (`POST /producers`): a request is retried with the same
  sequence until it is acknowledged, so a retried duplicate must come back with its original
  offsets. Every outcome goes to a `tests.support.history.History`; value ids are `p<P>-<seq>`.
  Seeded: record counts, pacing and the node each attempt goes to come from `random.Random(seed)`.
* `Tailer`: a consumer thread per partition that follows the log through any node, feeds what it
  reads to an `OffsetObserver` (a value read at an offset must never change) and checks that its
  offsets only grow; `HwWatcher`: polls the end offset (HW) on the current leader and records
  every observation, to check that it never goes backwards.
* `drain`: reads every partition from the current leader, from the log start to the HW, once the
  replicas converged (HW = LEO on the leader, and on every replica when asked).
* `FaultNet` / `ProxiedCluster`: an in-process, HTTP-aware TCP proxy in front of every node. Nodes
  reach each other only through it (`controller.quorum.voters` and `advertised.listeners` point at
  the proxies); the test's client talks to the nodes directly. Internal requests are signed with
  `X-Lakelog-Node`, so the proxy learns the source node of a connection from its first request and
  can blackhole (accept, never answer) or reset the traffic of any (source, destination) pair, or
  slow it: `slow(src, dst, delay_s)` holds back the answer to each replica fetch `src` sends `dst`
  (a follower slowed to a crawl, its other traffic — heartbeats, Raft — untouched).
* Disk faults: `tear_active_segment` cuts the last batch of a partition's active segment and
  appends garbage (a torn write); `segment_batches` lists a replica's batches from its files.

Every wait is bounded; threads are daemons and stop on `stop()`.
"""

from __future__ import annotations

import asyncio
import base64
import random
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import httpx

from lakelog.logstore.record_batch import iter_batches
from tests.support.history import History, OffsetObserver
from tests.support.nodes import Cluster, NodeProcess

BINARY = "application/vnd.kafka.binary.v2+json"
FORWARDED = "X-Lakelog-Forwarded-By"  # marks a request "do not forward": a non-leader answers 503

#: Error codes after which an idempotent producer must not retry the same sequence.
FATAL_PRODUCE_CODES = {40908, 40909}  # out-of-order sequence, fenced producer epoch


# ---------------------------------------------------------------------------------------------
# plain HTTP helpers


def wait_for(cond: Callable[[], object], timeout_s: float = 30.0, what: str = "condition",
             interval_s: float = 0.1) -> object:
    """Poll `cond` until it returns something truthy; AssertionError with the last value after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = cond()
            if last:
                return last
        except (httpx.HTTPError, AssertionError, KeyError, ValueError) as e:
            last = e
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}; last: {last!r}")


def cluster_id(url: str) -> str:
    """The cluster id as one node answers it; a node that is briefly not ready (503) is asked again."""
    def answer() -> str | None:
        r = httpx.get(f"{url}/v3/clusters", timeout=5)
        assert r.status_code in (200, 503), r.text
        return r.json()["data"][0]["cluster_id"] if r.status_code == 200 else None
    return str(wait_for(answer, 15, f"the cluster id from {url}"))


def create_topic(url: str, name: str, partitions: int = 1, rf: int = 3, **configs: str) -> None:
    """Create a topic through any node (configs as keyword arguments, `_` for `.`)."""
    cid = cluster_id(url)
    r = httpx.post(f"{url}/v3/clusters/{cid}/topics", timeout=30, json={
        "topic_name": name, "partitions_count": partitions, "replication_factor": rf,
        "configs": [{"name": k.replace("_", "."), "value": v} for k, v in configs.items()]})
    assert r.status_code == 201, r.text


def partition_state(url: str, topic: str, p: int = 0, timeout_s: float = 3.0) -> dict:
    """`GET /topics/{t}/partitions/{p}` of one node: {"leader", "replicas": [{"broker", "in_sync"}]}."""
    r = httpx.get(f"{url}/topics/{topic}/partitions/{p}", timeout=timeout_s)
    assert r.status_code == 200, r.text
    return r.json()


def isr_of(state: dict) -> list[int]:
    return [r["broker"] for r in state["replicas"] if r["in_sync"]]


def replicas_of(state: dict) -> list[int]:
    return [r["broker"] for r in state["replicas"]]


def controller_id(url: str) -> int:
    """The active controller as one node knows it (-1: none known)."""
    cid = cluster_id(url)
    doc = httpx.get(f"{url}/v3/clusters/{cid}", timeout=5).json()
    return int(doc["controller"]["related"].rsplit("/", 1)[1])


def broker_fenced(url: str, broker: int) -> bool:
    cid = cluster_id(url)
    r = httpx.get(f"{url}/v3/clusters/{cid}/brokers/{broker}", timeout=5)
    assert r.status_code == 200, r.text
    return bool(r.json()["fenced"])


def agreed_leader(nodes: Iterable[NodeProcess], topic: str, p: int) -> int | None:
    """The partition's leader when every node asked answers and they all name the same one (else None)."""
    leaders = set()
    for n in nodes:
        try:
            leaders.add(partition_state(n.url, topic, p, timeout_s=2.0)["leader"])
        except (httpx.HTTPError, AssertionError, ValueError):
            return None
    return leaders.pop() if len(leaders) == 1 else None


def wait_live_leader(nodes: list[NodeProcess], topic: str, p: int, live: set[int], timeout_s: float = 20.0,
                     exclude: set[int] = frozenset()) -> int:
    """Wait until all `nodes` agree on a leader that is in `live` and not in `exclude`; return it."""
    def ok():
        leader = agreed_leader(nodes, topic, p)
        return leader if leader is not None and leader in live and leader not in exclude else None
    return int(wait_for(ok, timeout_s, f"a live leader of {topic}-{p} (live: {sorted(live)}, "
                                       f"excluded: {sorted(exclude)})"))


def wait_full_isr(nodes: list[NodeProcess], topic: str, partitions: Iterable[int], timeout_s: float = 20.0) -> None:
    """Wait until every node sees every replica of the partitions in the ISR (and a leader)."""
    parts = list(partitions)

    def ok():
        for n in nodes:
            for p in parts:
                st = partition_state(n.url, topic, p, timeout_s=2.0)
                if st["leader"] < 0 or sorted(isr_of(st)) != sorted(replicas_of(st)):
                    return False
        return True
    wait_for(ok, timeout_s, f"full ISR of {topic} {parts}")


def own_offsets(url: str, topic: str, p: int, timeout_s: float = 3.0) -> tuple[int, int] | None:
    """(log start, HW) as that node itself answers (marked so it is never forwarded); None if it does not lead."""
    r = httpx.get(f"{url}/topics/{topic}/partitions/{p}/offsets", timeout=timeout_s, headers={FORWARDED: "0"})
    if r.status_code != 200:
        return None
    doc = r.json()
    return int(doc["beginning_offset"]), int(doc["end_offset"])


_METRIC = re.compile(r'^(lakelog_partition_(?:log_end_offset|high_watermark))\{([^}]*)\}\s+(\S+)$', re.M)


def replica_offsets(url: str, topic: str, p: int, timeout_s: float = 3.0) -> tuple[int, int] | None:
    """(LEO, HW) of a node's local replica, from its `/metrics` (None if it hosts none)."""
    text = httpx.get(f"{url}/metrics", timeout=timeout_s).text
    found: dict[str, int] = {}
    for name, labels, value in _METRIC.findall(text):
        lab = dict(kv.split("=", 1) for kv in labels.split(","))
        if lab.get("topic") == f'"{topic}"' and lab.get("partition") == f'"{p}"':
            found[name] = int(float(value))
    if len(found) != 2:
        return None
    return found["lakelog_partition_log_end_offset"], found["lakelog_partition_high_watermark"]


def decode_value(rec: dict) -> str:
    return base64.b64decode(rec["value"]).decode() if rec.get("value") is not None else ""


def read_range(url: str, topic: str, p: int, start: int, end: int, *, direct: bool = True,
               timeout_s: float = 10.0) -> list[tuple[int, int, str]]:
    """Records [start, end) of a partition as (partition, offset, value id), read from `url` (the leader)."""
    out: list[tuple[int, int, str]] = []
    offset = start
    headers = {"Accept": BINARY}
    if direct:
        headers[FORWARDED] = "0"
    with httpx.Client(timeout=timeout_s) as client:
        while offset < end:
            r = client.get(f"{url}/topics/{topic}/partitions/{p}/records",
                           params={"offset": offset, "timeout": 0, "max_bytes": 1 << 20}, headers=headers)
            assert r.status_code == 200, f"fetch {topic}-{p} at {offset} from {url}: {r.status_code} {r.text}"
            recs = [x for x in r.json() if x["offset"] >= offset]
            assert recs, f"fetch {topic}-{p} at {offset} from {url} returned nothing below end {end}"
            for rec in recs:
                if rec["offset"] < end:
                    out.append((p, rec["offset"], decode_value(rec)))
            offset = recs[-1]["offset"] + 1
    return out


def drain(nodes: list[NodeProcess], topic: str, partitions: Iterable[int], *, min_end: dict[int, int] | None = None,
          converge: bool = True, timeout_s: float = 25.0) -> list[tuple[int, int, str]]:
    """Read every partition from its current leader, from the log start to the HW.

    Waits (bounded) until `nodes` agree on a leader, the leader's HW equals its LEO, the HW is at
    least `min_end[p]`, and (with `converge`) every replica hosted by `nodes` has that LEO too.
    """
    out: list[tuple[int, int, str]] = []
    by_id = {n.node_id: n for n in nodes}
    for p in partitions:
        want = (min_end or {}).get(p, 0)

        def settled():
            leader = agreed_leader(nodes, topic, p)
            if leader is None or leader not in by_id:
                return None
            offs = own_offsets(by_id[leader].url, topic, p)
            leo_hw = replica_offsets(by_id[leader].url, topic, p)
            if offs is None or leo_hw is None:
                return None
            start, hw = offs
            if hw < want or leo_hw[0] != hw:
                return None
            if converge:
                for n in nodes:
                    other = replica_offsets(n.url, topic, p)
                    if other is not None and other[0] != hw:
                        return None
            return leader, start, hw
        # Preferred-leader rebalancing may move the leadership between `settled` and the read:
        # then settle again and re-read (bounded), rather than fail on a 503 NOT_LEADER.
        for attempt in range(5):
            found = wait_for(settled, timeout_s, f"{topic}-{p} to settle (HW = LEO >= {want})")
            leader, start, hw = found  # type: ignore[misc]
            try:
                out += read_range(by_id[leader].url, topic, p, start, hw)
                break
            except AssertionError as e:
                if "not the leader" not in str(e) or attempt == 4:
                    raise
    return out


# ---------------------------------------------------------------------------------------------
# load


@dataclass
class _PartitionStats:
    acked: int = 0
    attempts: int = 0
    failures: int = 0
    last_acked_offset: int = -1


class IdempotentLoad:
    """acks=all load from one idempotent producer, one thread (and sequence) per partition.

    `targets()` returns the nodes requests may go to now (the test leaves out nodes it killed or
    paused); any of them forwards to the leader. A request is retried — same records, same
    sequence — until acknowledged; after `stop()` the one in flight gets `finish_s` more.
    """

    def __init__(self, topic: str, partitions: Iterable[int], targets: Callable[[], list[NodeProcess]],
                 history: History, seed: int, *, max_records: int = 4, pause_s: float = 0.01,
                 request_timeout_s: float = 8.0, finish_s: float = 15.0, acks: str = "all") -> None:
        self.topic = topic
        self.partitions = list(partitions)
        self.targets = targets
        self.history = history
        self.seed = seed
        self.max_records = max_records
        self.pause_s = pause_s
        self.request_timeout_s = request_timeout_s
        self.finish_s = finish_s
        self.acks = acks
        self.stats = {p: _PartitionStats() for p in self.partitions}
        self.errors: list[str] = []
        self.producer_id = -1
        self.producer_epoch = -1
        self._stop = threading.Event()
        self._stop_at = 0.0
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    # -- lifecycle

    def start(self) -> "IdempotentLoad":
        rng = random.Random(self.seed)

        def init_pid():
            n = rng.choice(self.targets())
            r = httpx.post(f"{n.url}/producers", timeout=10)
            assert r.status_code == 200, r.text
            return r.json()
        doc = wait_for(init_pid, 20, "a producer id")
        assert isinstance(doc, dict)
        self.producer_id, self.producer_epoch = int(doc["producer_id"]), int(doc["producer_epoch"])
        for p in self.partitions:
            t = threading.Thread(target=self._run, args=(p, random.Random(rng.random())),
                                 name=f"load-{self.topic}-{p}", daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop_at = time.monotonic()
        self._stop.set()
        for t in self._threads:
            t.join(self.finish_s + self.request_timeout_s + 5)
        alive = [t.name for t in self._threads if t.is_alive()]
        assert not alive, f"load threads did not stop: {alive}"

    # -- progress

    def acked(self, p: int | None = None) -> int:
        with self._lock:
            return sum(s.acked for q, s in self.stats.items() if p is None or q == p)

    def wait_progress(self, new_acks: int, timeout_s: float = 20.0, partitions: Iterable[int] | None = None,
                      what: str = "produce progress") -> None:
        """Wait until every partition (of `partitions`) got `new_acks` more acknowledged records."""
        parts = list(self.partitions if partitions is None else partitions)
        base = {p: self.acked(p) for p in parts}
        wait_for(lambda: all(self.acked(p) - base[p] >= new_acks for p in parts) or self.errors,
                 timeout_s, f"{what}: {new_acks} new acks on {parts} (from {base})", interval_s=0.05)
        assert not self.errors, self.errors

    def min_end(self) -> dict[int, int]:
        """Per partition, one past the highest acknowledged offset (what a drain must reach)."""
        with self._lock:
            return {p: s.last_acked_offset + 1 for p, s in self.stats.items()}

    def summary(self) -> str:
        with self._lock:
            return ", ".join(f"p{p}: {s.acked} acked / {s.attempts} attempts ({s.failures} failed)"
                             for p, s in sorted(self.stats.items()))

    # -- one partition

    def _run(self, p: int, rng: random.Random) -> None:
        seq = 0
        client = httpx.Client(timeout=httpx.Timeout(self.request_timeout_s, connect=2.0))
        try:
            while not self._stop.is_set():
                n = rng.randint(1, self.max_records)
                ids = [f"p{p}-{seq + i}" for i in range(n)]
                body = {"records": [{"value": base64.b64encode(v.encode()).decode()} for v in ids],
                        "producer_id": self.producer_id, "producer_epoch": self.producer_epoch, "sequence": seq}
                if not self._send_until_acked(client, p, ids, body, rng):
                    return
                seq += n
                if self.pause_s:
                    time.sleep(rng.uniform(0, self.pause_s))
        finally:
            client.close()

    def _send_until_acked(self, client: httpx.Client, p: int, ids: list[str], body: dict,
                          rng: random.Random) -> bool:
        backoff = 0.05
        while True:
            if self._stop.is_set() and time.monotonic() - self._stop_at > self.finish_s:
                return False  # give up: the outcome stays unknown
            targets = self.targets()
            if not targets:
                time.sleep(0.05)
                continue
            node = rng.choice(targets)
            with self._lock:
                self.stats[p].attempts += 1
            code = None
            try:
                r = client.post(f"{node.url}/topics/{self.topic}/partitions/{p}?acks={self.acks}", json=body,
                                headers={"Content-Type": BINARY})
                if r.status_code == 200:
                    offsets = [o["offset"] for o in r.json()["offsets"]]
                    with self._lock:
                        for vid, off in zip(ids, offsets):
                            self.history.produced(p, vid, True, off)
                        s = self.stats[p]
                        s.acked += len(ids)
                        s.last_acked_offset = max(s.last_acked_offset, max(offsets))
                    return True
                try:
                    code = r.json().get("error_code")
                except ValueError:
                    code = None
                detail = f"{r.status_code} {code}"
            except httpx.HTTPError as e:
                detail = type(e).__name__
            for vid in ids:
                self.history.produced(p, vid, None)
            with self._lock:
                self.stats[p].failures += 1
            if code in FATAL_PRODUCE_CODES:
                self.errors.append(f"partition {p}: sequence {body['sequence']} via node {node.node_id}: {detail}: "
                                   f"{r.text[:300]}")
                return False
            time.sleep(backoff * rng.uniform(0.5, 1.5))
            backoff = min(backoff * 2, 0.4)


# ---------------------------------------------------------------------------------------------
# consumers


class Tailer:
    """A consumer of one partition following the log through any of `targets()` (forwarded to the leader).

    Every record read goes to `observer` (a later read of the same offset with another value is a
    visible truncation); offsets must grow strictly. Problems are collected in `errors`.
    """

    def __init__(self, topic: str, p: int, targets: Callable[[], list[NodeProcess]], observer: OffsetObserver,
                 seed: int, label: str = "tail") -> None:
        self.topic, self.p, self.targets, self.observer = topic, p, targets, observer
        self.rng = random.Random(seed)
        self.label = label
        self.position = 0
        self.read_count = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{label}-{topic}-{p}", daemon=True)

    def start(self) -> "Tailer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)
        assert not self._thread.is_alive(), f"{self.label} did not stop"

    def _run(self) -> None:
        with httpx.Client(timeout=httpx.Timeout(5.0, connect=2.0)) as client:
            while not self._stop.is_set():
                targets = self.targets()
                if not targets:
                    time.sleep(0.05)
                    continue
                node = self.rng.choice(targets)
                try:
                    r = client.get(f"{node.url}/topics/{self.topic}/partitions/{self.p}/records",
                                   params={"offset": self.position, "timeout": 200}, headers={"Accept": BINARY})
                except httpx.HTTPError:
                    time.sleep(0.05)
                    continue
                if r.status_code != 200:
                    time.sleep(0.05)
                    continue
                for rec in r.json():
                    off = rec["offset"]
                    if off < self.position:
                        continue  # the batch started below the position: already read
                    self.observer.observe(self.p, off, decode_value(rec),
                                          when=f"by {self.label} via node {node.node_id}")
                    self.read_count += 1
                    self.position = off + 1


class HwWatcher:
    """Polls a partition's end offset (HW) on whichever of `candidates()` leads it by its own
    metadata: each is asked directly, marked not to forward, so only a leader answers. Every
    observation is kept, in order, to check that the HW consumers are told never goes backwards."""

    def __init__(self, topic: str, p: int, candidates: Callable[[], list[NodeProcess]],
                 interval_s: float = 0.02) -> None:
        self.topic, self.p, self.candidates, self.interval_s = topic, p, candidates, interval_s
        self.observations: list[tuple[float, int, int]] = []  # (monotonic time, leader, HW)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"hw-{topic}-{p}", daemon=True)

    def start(self) -> "HwWatcher":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)

    def _run(self) -> None:
        with httpx.Client(timeout=httpx.Timeout(1.0)) as client:
            while not self._stop.wait(self.interval_s):
                for n in self.candidates():
                    try:
                        r = client.get(f"{n.url}/topics/{self.topic}/partitions/{self.p}/offsets",
                                       headers={FORWARDED: "0"})
                    except httpx.HTTPError:
                        continue
                    if r.status_code == 200:
                        self.observations.append((time.monotonic(), n.node_id, int(r.json()["end_offset"])))

    def regressions(self) -> list[str]:
        out = []
        best: tuple[float, int, int] | None = None
        for obs in self.observations:
            if best is not None and obs[2] < best[2]:
                out.append(f"HW {obs[2]} on node {obs[1]} after HW {best[2]} on node {best[1]} "
                           f"({obs[0] - best[0]:.2f}s later)")
            if best is None or obs[2] >= best[2]:
                best = obs
        return out


# ---------------------------------------------------------------------------------------------
# files


def segment_batches(data_dir: Path, topic: str, p: int) -> list[tuple[int, int, int, int]]:
    """(base offset, last offset, partition leader epoch, CRC) of every batch in a replica's `.log` files."""
    out = []
    for f in sorted((data_dir / f"{topic}-{p}").glob("*.log")):
        out += [(b.base_offset, b.last_offset, b.partition_leader_epoch, b.crc)
                for _, b in iter_batches(f.read_bytes())]
    return out


def segment_values(data_dir: Path, topic: str, p: int) -> list[tuple[int, str]]:
    """(offset, value) of every record in a replica's `.log` files."""
    out = []
    for f in sorted((data_dir / f"{topic}-{p}").glob("*.log")):
        for _, b in iter_batches(f.read_bytes()):
            out += [(r.offset, (r.value or b"").decode(errors="replace")) for r in b.records()]
    return out


@dataclass
class TornTail:
    """What `tear_active_segment` did to a segment file."""

    path: Path
    size_before: int
    cut_batch_base: int  # base offset of the batch cut in two
    cut_batch_pos: int  # its position in the file
    cut_at: int  # file length after the cut (mid-batch)
    garbage: int  # garbage bytes appended after the cut
    whole_end_offset: int  # one past the last offset of the last whole batch left

    @property
    def torn_bytes(self) -> int:
        """What recovery must cut: the remains of the torn batch and the garbage after it."""
        return self.cut_at + self.garbage - self.cut_batch_pos


def tear_active_segment(data_dir: Path, topic: str, p: int, rng: random.Random) -> TornTail:
    """Cut the last batch of the active segment in the middle and append garbage: a torn write."""
    seg = sorted((data_dir / f"{topic}-{p}").glob("*.log"))[-1]
    data = seg.read_bytes()
    batches = list(iter_batches(data))
    assert batches, f"{seg} holds no batch to tear"
    pos, last = batches[-1]
    size = len(bytes(last.buffer))
    cut_at = pos + rng.randint(1, size - 1)
    garbage = rng.randint(1, 200)
    with open(seg, "r+b") as f:
        f.truncate(cut_at)
        f.seek(cut_at)
        f.write(rng.randbytes(garbage))
    return TornTail(seg, len(data), last.base_offset, pos, cut_at, garbage, last.base_offset)


# ---------------------------------------------------------------------------------------------
# network faults


@dataclass(eq=False)
class _Conn:
    src: int | None
    dst: int
    client_w: asyncio.StreamWriter
    upstream_w: asyncio.StreamWriter | None = None
    blackholed: bool = False
    #: Seconds to hold back the next answer (set when a slowed request goes upstream).
    hold_s: float = 0.0


class FaultNet:
    """HTTP-aware TCP proxies, one per destination node, run on an asyncio loop in a thread.

    A connection's source node is the `X-Lakelog-Node` header of its first request (internal
    requests are signed; unsigned client connections are never blocked). `block(src, dst)` makes
    the pair's traffic vanish: with `mode="blackhole"` connections are accepted and requests read
    and dropped, never answered (a silent partition; the sender waits for its timeout); with
    `mode="reset"` connections are closed at once. Connections open when a pair is blocked are cut
    the same way. `slow(src, dst, delay_s)` delays the answer to every request of the pair whose
    path starts with `path_prefix` (the replica fetch by default) by `delay_s`: the proxy reads a
    signed connection's requests one at a time (node-to-node HTTP/1.1 sends one request at a time
    per connection, with `Content-Length` bodies) to see their paths. `heal()` unblocks and
    unslows everything and closes the blackholed connections (their HTTP streams are lost), so
    senders reconnect at once.
    """

    def __init__(self, mode: str = "blackhole") -> None:
        assert mode in ("blackhole", "reset")
        self.mode = mode
        self._blocked: set[tuple[int, int]] = set()
        #: (src, dst) -> (path prefix, seconds each matching answer is held back).
        self._slowed: dict[tuple[int, int], tuple[bytes, float]] = {}
        self.delayed = 0
        self._conns: set[_Conn] = set()
        self._servers: dict[int, asyncio.base_events.Server] = {}
        self.ports: dict[int, int] = {}
        self.dropped = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-net", daemon=True)
        self._thread.start()

    def _call(self, coro_or_fn, *args):
        if asyncio.iscoroutinefunction(coro_or_fn):
            return asyncio.run_coroutine_threadsafe(coro_or_fn(*args), self._loop).result(10)
        done = threading.Event()
        box: list = []

        def run():
            try:
                box.append(coro_or_fn(*args))
            finally:
                done.set()
        self._loop.call_soon_threadsafe(run)
        assert done.wait(10), "fault-net loop did not answer"
        return box[0] if box else None

    # -- control (any thread)

    def add_node(self, node_id: int, target_port: int) -> int:
        # Bound to port 0 and kept: the port is never released between choosing and listening.
        self._call(self._listen, node_id, 0, target_port)
        port = self._servers[node_id].sockets[0].getsockname()[1]
        self.ports[node_id] = port
        return port

    def block(self, src: int, dst: int) -> None:
        self._call(self._block, {(src, dst)})

    def isolate(self, node_id: int, others: Iterable[int]) -> None:
        """Partition `node_id` from every node of `others`, both ways."""
        pairs = set()
        for o in others:
            if o != node_id:
                pairs |= {(node_id, o), (o, node_id)}
        self._call(self._block, pairs)

    def slow(self, src: int, dst: int, delay_s: float, path_prefix: str = "/internal/replication/fetch") -> None:
        """Hold back each answer `dst` gives `src` to a request under `path_prefix` by `delay_s`."""
        self._call(self._slowed.__setitem__, (src, dst), (path_prefix.encode(), delay_s))

    def heal(self) -> None:
        self._call(self._heal)

    def close(self) -> None:
        try:
            self._call(self._close)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    # -- on the loop

    async def _listen(self, node_id: int, port: int, target_port: int) -> None:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._handle(node_id, target_port, reader, writer)
        self._servers[node_id] = await asyncio.start_server(handle, "127.0.0.1", port, limit=1 << 20)

    def _block(self, pairs: set[tuple[int, int]]) -> None:
        self._blocked |= pairs
        for c in list(self._conns):
            if (c.src, c.dst) in pairs:
                self._cut(c)

    def _heal(self) -> None:
        self._blocked.clear()
        self._slowed.clear()
        for c in list(self._conns):
            if c.blackholed:
                self._close_conn(c)

    async def _close(self) -> None:
        for s in self._servers.values():
            s.close()
        for c in list(self._conns):
            self._close_conn(c)

    def _cut(self, c: _Conn) -> None:
        self.dropped += 1
        if self.mode == "reset":
            self._close_conn(c)
        else:
            c.blackholed = True

    def _close_conn(self, c: _Conn) -> None:
        self._conns.discard(c)
        for w in (c.client_w, c.upstream_w):
            if w is not None:
                try:
                    w.transport.abort()
                except Exception:
                    pass

    async def _handle(self, dst: int, target_port: int, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            writer.transport.abort()
            return
        src = None
        m = re.search(rb"(?im)^x-lakelog-node:\s*(\d+)\s*$", head)
        if m:
            src = int(m.group(1))
        c = _Conn(src, dst, writer)
        self._conns.add(c)
        if src is not None and (src, dst) in self._blocked:
            self._cut(c)
        if c not in self._conns:
            return  # reset
        if c.blackholed:
            await self._swallow(c, reader)
            return
        try:
            up_r, up_w = await asyncio.open_connection("127.0.0.1", target_port, limit=1 << 20)
        except OSError:
            self._close_conn(c)
            return
        c.upstream_w = up_w
        if c.blackholed or c not in self._conns:  # cut while connecting
            up_w.transport.abort()
            if c in self._conns:
                await self._swallow(c, reader)
            return
        if src is None:
            up_w.write(head)
            requests = self._pipe(c, reader, up_w)
        else:
            requests = self._pipe_requests(c, reader, up_w, head)
        await asyncio.gather(requests, self._pipe(c, up_r, writer), return_exceptions=True)
        self._close_conn(c)

    def _delay_for(self, c: _Conn, head: bytes) -> float:
        slowed = self._slowed.get((c.src, c.dst)) if c.src is not None else None
        if slowed is None:
            return 0.0
        parts = head.split(b" ", 2)
        return slowed[1] if len(parts) > 1 and parts[1].startswith(slowed[0]) else 0.0

    async def _pipe_requests(self, c: _Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                             head: bytes) -> None:
        """Client to node, one request at a time, so a slowed pair's answers can be held back."""
        try:
            while True:
                length = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
                if length is None and re.search(rb"(?im)^transfer-encoding:", head):
                    writer.write(head)  # a body of unknown length: pass the rest through as it comes
                    await self._pipe(c, reader, writer)
                    return
                c.hold_s = self._delay_for(c, head)
                if not c.blackholed:
                    writer.write(head)
                remaining = int(length.group(1)) if length else 0
                while remaining:
                    data = await reader.read(min(65536, remaining))
                    if not data:
                        return
                    remaining -= len(data)
                    if not c.blackholed:
                        writer.write(data)
                        await writer.drain()
                head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, OSError):
            pass
        finally:
            if not c.blackholed:
                try:
                    writer.write_eof() if writer.can_write_eof() else writer.close()
                except Exception:
                    pass

    async def _swallow(self, c: _Conn, reader: asyncio.StreamReader) -> None:
        try:
            while c in self._conns and await reader.read(65536):
                pass
        except (ConnectionError, OSError):
            pass
        self._close_conn(c)

    async def _pipe(self, c: _Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if c.blackholed:
                    continue  # dropped on the floor
                if c.hold_s:
                    hold, c.hold_s = c.hold_s, 0.0
                    self.delayed += 1
                    await asyncio.sleep(hold)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if not c.blackholed:
                try:
                    writer.write_eof() if writer.can_write_eof() else writer.close()
                except Exception:
                    pass


@dataclass
class ProxiedCluster(Cluster):
    """A `Cluster` whose nodes reach each other only through a `FaultNet`: every node advertises its
    proxy (`advertised.listeners`) and the voters are the proxies; clients still use `node.url`."""

    net: FaultNet = field(default_factory=FaultNet)

    def __post_init__(self) -> None:
        super().__post_init__()
        proxy_ports = {n.node_id: self.net.add_node(n.node_id, n.port) for n in self.nodes}
        voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in sorted(proxy_ports.items()))
        for n in self.nodes:
            n.overrides["controller.quorum.voters"] = voters
            n.overrides["advertised.listeners"] = f"http://127.0.0.1:{proxy_ports[n.node_id]}"

    def stop(self) -> None:
        try:
            self.net.heal()
            super().stop()
        finally:
            self.net.close()
