"""Per-transaction and per-fetch work of the transactional path, counted (never timed)."""

from __future__ import annotations

import asyncio
import random
from types import SimpleNamespace

import pytest

from lakelog.index.transaction_index import AbortedTxn, TransactionIndex, TxnIndexSearch
from lakelog.infra.config import LogConfig
from lakelog.ingest_api.config.node import NodeConfig
from lakelog.ingest_api.replication.partition import now_ms
from lakelog.ingest_api.transactions import service as service_module
from lakelog.ingest_api.transactions.errors import ConcurrentTransactionsError
from lakelog.ingest_api.transactions.service import TXN_TOPIC, TransactionService
from lakelog.logstore.log import PartitionLog
from lakelog.logstore.record_batch import Record, build_batch


class CountingList(list):
    """A list that counts the items read by index or iteration."""

    reads = 0

    def __getitem__(self, i):
        CountingList.reads += 1
        return super().__getitem__(i)

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]


def _aborted(n: int, seed: int) -> list[AbortedTxn]:
    """`n` entries as a partition writes them: increasing last offsets, and LSOs that never go back
    (some transactions stay open across a few aborts, holding the LSO at their first offset)."""
    rnd = random.Random(seed)
    out, offset, held = [], 0, None
    for _ in range(n):
        first = offset + rnd.randrange(0, 3)
        last = first + rnd.randrange(1, 20)
        if held is None and rnd.random() < 0.05:
            held = first  # a long transaction opens here
        elif held is not None and rnd.random() < 0.2:
            held = None
        lso = held if held is not None and held <= last else last + 1
        lso = max(lso, out[-1].last_stable_offset if out else 0)
        out.append(AbortedTxn(rnd.randrange(100), first, last, min(lso, last + 1)))
        offset = last + 1
    return out


def _scan_all(entries: list[AbortedTxn], fetch: int, upper: int) -> TxnIndexSearch:
    """Every entry from the segment's first, as Kafka's TransactionIndex scans it."""
    found = []
    for e in entries:
        if e.last_offset >= fetch and e.first_offset < upper:
            found.append(e)
        if e.last_stable_offset >= upper:
            return TxnIndexSearch(tuple(found), True)
    return TxnIndexSearch(tuple(found), False)


def _index(tmp_path, entries: list[AbortedTxn]) -> TransactionIndex:
    idx = TransactionIndex(tmp_path / "00000000000000000000.txnindex", 0)
    idx.write_all(entries)
    idx._entries = CountingList(entries)
    return idx


def test_txnindex_collect_reads_only_the_entries_of_the_fetched_range(tmp_path):
    entries = _aborted(10_000, seed=1)
    idx = _index(tmp_path, entries)
    end = entries[-1].last_offset
    # a fetch near the end of a segment with 10,000 aborts: a binary search, then its few entries
    CountingList.reads = 0
    search = idx.collect(end - 30, end - 10)
    assert search == _scan_all(entries, end - 30, end - 10)
    assert 0 < CountingList.reads <= 40, CountingList.reads
    # scanning from the first entry would have read nearly all of them
    CountingList.reads = 0
    _scan_all(idx._entries, end - 30, end - 10)
    assert CountingList.reads > 9_000


def test_txnindex_collect_answers_as_a_scan_from_the_first_entry(tmp_path):
    rnd = random.Random(7)
    entries = _aborted(500, seed=7)
    idx = _index(tmp_path, entries)
    end = entries[-1].last_offset + 5
    for _ in range(2_000):
        fetch = rnd.randrange(0, end)
        upper = fetch + rnd.randrange(1, 200)
        assert idx.collect(fetch, upper) == _scan_all(entries, fetch, upper), (fetch, upper)
    assert idx.collect(10, 10) == TxnIndexSearch((), True)  # an empty range overlaps nothing


# ---------------------------------------------------------------- the coordinator's per-transaction writes


class _Part:
    """A partition this node leads: markers counted; `hold` keeps them from landing."""

    def __init__(self, hold: asyncio.Event | None = None) -> None:
        self.is_leader, self.leader_epoch, self.markers = True, 0, 0
        self.log = SimpleNamespace(config=SimpleNamespace(min_insync_replicas=1))
        self.hold = hold

    async def append_txn_marker(self, producer_id, producer_epoch, commit, coordinator_epoch, **_) -> int:
        if self.hold is not None:
            await self.hold.wait()
        self.markers += 1
        return self.markers


class _Node:
    """What TransactionService asks of its node, on one node leading every partition."""

    node_id = 1

    def __init__(self, hold: asyncio.Event | None = None) -> None:
        self.config = NodeConfig({"transaction.state.log.num.partitions": "3"})
        leader = SimpleNamespace(leader=1)
        self.image = SimpleNamespace(brokers={1: SimpleNamespace(fenced=False)}, topics={
            TXN_TOPIC: SimpleNamespace(partitions=[leader] * 3), "t": SimpleNamespace(partitions=[leader])})
        self.data = _Part(hold)
        self.state_appends = 0

    def local_partition(self, key):
        return self.data

    def partition(self, topic, partition):
        return self.data

    async def produce_batches(self, topic, partition, data, acks="all"):
        assert topic == TXN_TOPIC
        self.state_appends += 1

    async def init_producer_id(self):
        return 1000, 0


def _service(node: _Node) -> tuple[TransactionService, list[str]]:
    svc = TransactionService(node, groups=None)
    for p in range(3):
        svc.coordinator.load(p, 0, [], now_ms())
        svc.hosting._loaded[p] = 0  # loaded as if this node led the partitions
    refused: list[str] = []
    add = svc.coordinator.add_partitions

    def counting_add(*args, **kwargs):
        try:
            return add(*args, **kwargs)
        except ConcurrentTransactionsError as e:
            refused.append(str(e))
            raise
    svc.coordinator.add_partitions = counting_add
    return svc, refused


def test_each_transaction_costs_three_state_records_and_one_marker_per_partition_never_a_retry():
    async def run() -> None:
        node = _Node()
        svc, refused = _service(node)
        ids = await svc.run("init", {"transactional_id": "tx", "timeout_ms": 60_000})
        who = {"transactional_id": "tx", "producer_id": ids["producer_id"], "producer_epoch": ids["producer_epoch"]}
        for _ in range(20):
            # the next transaction begins as soon as EndTxn is answered, its markers not yet written
            await svc.run("add_partitions", {**who, "partitions": [["t", 0]]})
            await svc.run("end", {**who, "commit": True})
        await svc.markers.settled("tx", 5.0)
        await svc.stop()
        assert refused == []  # no CONCURRENT_TRANSACTIONS: AddPartitionsToTxn waited for the markers
        assert node.data.markers == 20  # one marker write per partition per transaction
        assert node.state_appends == 1 + 20 * 3  # InitProducerId; Ongoing, PrepareCommit, CompleteCommit

    asyncio.run(run())


def test_add_partitions_waits_for_markers_a_bounded_time(monkeypatch):
    monkeypatch.setattr(service_module, "MARKER_WAIT_S", 0.01)

    async def run() -> None:
        hold = asyncio.Event()
        node = _Node(hold)
        svc, refused = _service(node)
        ids = await svc.run("init", {"transactional_id": "tx", "timeout_ms": 60_000})
        who = {"transactional_id": "tx", "producer_id": ids["producer_id"], "producer_epoch": ids["producer_epoch"]}
        await svc.run("add_partitions", {**who, "partitions": [["t", 0]]})
        await svc.run("end", {**who, "commit": True})
        with pytest.raises(ConcurrentTransactionsError):  # the markers cannot land: answered, not hung
            await svc.run("add_partitions", {**who, "partitions": [["t", 0]]})
        hold.set()
        await svc.markers.settled("tx", 5.0)
        await svc.run("add_partitions", {**who, "partitions": [["t", 0]]})
        await svc.stop()
        assert len(refused) == 1 and node.data.markers == 1

    asyncio.run(run())


# ---------------------------------------------------------------- the LSO and the aborted list of a fetch


class _NoSegments:
    """Stands in for a log's segments: any use fails the test."""

    def __getattr__(self, name):
        raise AssertionError(f"the LSO looked at the segments ({name})")


def _txn_batch(pid: int, seq: int) -> bytes:
    return build_batch([Record(0, 0, b"k", b"v")], producer_id=pid, producer_epoch=0, base_sequence=seq,
                       is_transactional=True)


def test_lso_is_computed_from_the_open_transactions_not_the_segments(tmp_path):
    log = PartitionLog(tmp_path / "t-0", LogConfig({"segment.bytes": 300}))
    for t in range(200):  # 200 committed transactions of producer 1 over many segments
        log.append_as_leader(_txn_batch(1, t), 0)
        log.append_control(1, 0, t % 3 != 0, 0, 0)
    log.append_as_leader(_txn_batch(2, 0), 0)  # one open transaction
    log.update_high_watermark(log.log_end_offset)
    assert len(log._local.segments) > 20
    segments, log._txns._segments = log._txns._segments, _NoSegments()  # the LSO's holder of the segments
    try:
        assert log.last_stable_offset == 400 and log.first_unstable_offset == 400
    finally:
        log._txns._segments = segments
    # the fetch's aborted list: the segments from the fetch offset's, and only the range's entries
    assert [a.first_offset for a in log.aborted_transactions(390, 400)] == [390, 396]  # t = 195, 198
    log.close()
