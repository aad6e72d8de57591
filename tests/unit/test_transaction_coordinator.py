"""The transaction coordinator state machine, driven without a node, with a fake clock:
InitProducerId, AddPartitionsToTxn, EndTxn, markers, fencing, timeouts, expiry, failover loads."""

from __future__ import annotations

import pytest

from lakelog.ingest_api.transactions.coordinator import (
    MAX_PRODUCER_EPOCH,
    Persist,
    TransactionCoordinator,
    TxnCoordinatorConfig,
    TxnState,
    WriteMarkers,
)
from lakelog.ingest_api.transactions.errors import (
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    ProducerFencedError,
)
from lakelog.logstore.errors import InvalidTxnStateError

TIMEOUT = 60_000
A, B = ("orders", 0), ("orders", 1)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self, advance: int = 0) -> int:
        self.now += advance
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def make(**kw) -> TransactionCoordinator:
    kw.setdefault("max_timeout_ms", 900_000)
    kw.setdefault("transactional_id_expiration_ms", 3_600_000)
    c = TransactionCoordinator(TxnCoordinatorConfig(**kw), lambda tid: 0)
    c.load(0, 7, [], 0)
    return c


def ack(c: TransactionCoordinator, p: Persist | None, now: int) -> list:
    """The pending record was acknowledged by the log."""
    assert p is not None
    effects = c.complete(p.transactional_id, p.token, now)
    c.check_invariants()
    return effects


def init(c, tid, clock, pid=100, **kw) -> tuple[int, int]:
    out = c.init_producer_id(tid, TIMEOUT, clock(), new_producer_id=pid, **kw)
    if isinstance(out, tuple):
        return out
    ack(c, out, clock())
    return out.answer


def commit_through(c, tid, pid, epoch, clock, commit=True) -> WriteMarkers:
    effects = ack(c, c.end_txn(tid, pid, epoch, commit, clock()), clock())
    (markers,) = effects
    assert isinstance(markers, WriteMarkers)
    return markers


def test_a_transaction_commits_through_its_states(clock):
    c = make()
    assert init(c, "tx", clock) == (100, 0)
    assert c.describe("tx").state == TxnState.EMPTY
    ack(c, c.add_partitions("tx", 100, 0, [A], clock(5)), clock())
    m = c.describe("tx")
    assert m.state == TxnState.ONGOING and m.partitions == {A} and m.start_ms == clock.now
    assert c.add_partitions("tx", 100, 0, [A], clock()) is None  # already in: nothing to write
    ack(c, c.add_partitions("tx", 100, 0, [B], clock()), clock())
    c.verify("tx", 100, 0, B)  # KIP-890: a produce to B may go on
    markers = commit_through(c, "tx", 100, 0, clock)
    assert (markers.commit, markers.producer_epoch, markers.coordinator_epoch, markers.partitions) == (True, 0, 7, (A, B))
    assert c.describe("tx").state == TxnState.PREPARE_COMMIT
    with pytest.raises(ConcurrentTransactionsError):  # the client waits for the markers
        c.add_partitions("tx", 100, 0, [A], clock())
    with pytest.raises(ConcurrentTransactionsError):
        c.end_txn("tx", 100, 0, True, clock())
    with pytest.raises(InvalidTxnStateError):
        c.end_txn("tx", 100, 0, False, clock())
    ack(c, c.markers_written("tx", 100, 0, clock()), clock())
    m = c.describe("tx")
    assert m.state == TxnState.COMPLETE_COMMIT and not m.partitions and m.start_ms == -1
    assert c.end_txn("tx", 100, 0, True, clock()) is None  # a retried commit: already done
    with pytest.raises(InvalidTxnStateError):
        c.end_txn("tx", 100, 0, False, clock())
    with pytest.raises(InvalidTxnStateError):  # the partition's transaction is over
        c.verify("tx", 100, 0, A)
    # The next transaction of the same producer and epoch.
    ack(c, c.add_partitions("tx", 100, 0, [B], clock()), clock())
    assert c.describe("tx").partitions == {B}


def test_abort_and_the_state_ids_kafka_stores(clock):
    c = make()
    init(c, "tx", clock)
    ack(c, c.add_partitions("tx", 100, 0, [A], clock()), clock())
    markers = commit_through(c, "tx", 100, 0, clock, commit=False)
    assert markers.commit is False
    p = c.markers_written("tx", 100, 0, clock())
    assert p.record.state == 5 == TxnState.COMPLETE_ABORT
    ack(c, p, clock())
    assert TxnState.PREPARE_EPOCH_FENCE.display == "PrepareEpochFence"
    assert [s.value for s in TxnState] == list(range(8))


def test_end_without_a_transaction_is_refused(clock):
    c = make()
    init(c, "tx", clock)
    with pytest.raises(InvalidTxnStateError):
        c.end_txn("tx", 100, 0, True, clock())


def test_zombies_are_fenced(clock):
    c = make()
    init(c, "tx", clock)
    assert init(c, "tx", clock) == (100, 1)  # a second instance: the epoch moves on
    with pytest.raises(ProducerFencedError):
        c.add_partitions("tx", 100, 0, [A], clock())
    with pytest.raises(ProducerFencedError):
        c.end_txn("tx", 100, 0, True, clock())
    with pytest.raises(InvalidProducerIdMappingError):
        c.add_partitions("tx", 999, 1, [A], clock())
    with pytest.raises(InvalidProducerIdMappingError):
        c.add_partitions("unknown", 100, 1, [A], clock())
    with pytest.raises(ProducerFencedError):
        c.verify("tx", 100, 0, A)


def test_a_new_instance_aborts_the_zombies_ongoing_transaction(clock):
    c = make()
    init(c, "tx", clock)
    ack(c, c.add_partitions("tx", 100, 0, [A, B], clock()), clock())
    fence = c.init_producer_id("tx", TIMEOUT, clock(), new_producer_id=-1)
    assert isinstance(fence, Persist) and fence.answer_error is ConcurrentTransactionsError
    assert fence.record.state == TxnState.PREPARE_ABORT and fence.record.producer_epoch == 1
    assert c.describe("tx").state == TxnState.PREPARE_EPOCH_FENCE  # in memory while the fence is written
    with pytest.raises(ConcurrentTransactionsError):
        c.init_producer_id("tx", TIMEOUT, clock())
    (markers,) = ack(c, fence, clock())
    assert (markers.commit, markers.producer_epoch, markers.partitions) == (False, 1, (A, B))
    with pytest.raises(ProducerFencedError):  # the zombie's commit
        c.end_txn("tx", 100, 0, True, clock())
    with pytest.raises(ConcurrentTransactionsError):  # the new instance retries until the abort completes
        c.init_producer_id("tx", TIMEOUT, clock())
    ack(c, c.markers_written("tx", 100, 1, clock()), clock())
    assert init(c, "tx", clock) == (100, 2)


def test_a_failed_append_leaves_the_acknowledged_state(clock):
    c = make()
    init(c, "tx", clock)
    ack(c, c.add_partitions("tx", 100, 0, [A], clock()), clock())
    fence = c.init_producer_id("tx", TIMEOUT, clock())
    c.fail(fence.transactional_id, fence.token)
    m = c.describe("tx")
    assert (m.state, m.producer_epoch, m.pending) == (TxnState.ONGOING, 0, None)
    p = c.end_txn("tx", 100, 0, True, clock())
    c.fail(p.transactional_id, p.token)
    assert c.describe("tx").state == TxnState.ONGOING
    assert c.complete(p.transactional_id, p.token, clock()) == []  # a stale report changes nothing
    # A brand-new id whose first record failed never existed.
    first = c.init_producer_id("new", TIMEOUT, clock(), new_producer_id=5)
    c.fail(first.transactional_id, first.token)
    assert c.describe("new") is None


def test_transaction_timeout_is_bounded_and_expired_transactions_abort(clock):
    c = make(max_timeout_ms=120_000)
    with pytest.raises(InvalidTransactionTimeoutError):
        c.init_producer_id("tx", 120_001, clock(), new_producer_id=1)
    with pytest.raises(InvalidTransactionTimeoutError):
        c.init_producer_id("tx", 0, clock(), new_producer_id=1)
    init(c, "tx", clock)
    ack(c, c.add_partitions("tx", 100, 0, [A], clock()), clock())
    assert c.tick(clock(TIMEOUT - 1)) == []
    assert c.tick(clock(1), abort_timed_out=False) == []
    (abort,) = c.tick(clock())
    assert abort.record.state == TxnState.PREPARE_ABORT and abort.record.producer_epoch == 1
    (markers,) = ack(c, abort, clock())
    assert markers.commit is False and markers.producer_epoch == 1
    with pytest.raises(ProducerFencedError):  # the producer that let it time out is fenced
        c.end_txn("tx", 100, 0, True, clock())


def test_idle_transactional_ids_expire(clock):
    c = make(transactional_id_expiration_ms=10_000)
    init(c, "tx", clock)
    assert c.tick(clock(9_999)) == []
    assert c.tick(clock(1), expire_ids=False) == []
    (tomb,) = c.tick(clock())
    assert tomb.record is None
    ack(c, tomb, clock())
    assert c.describe("tx") is None


def test_kip360_retries_and_epoch_exhaustion(clock):
    c = make()
    init(c, "tx", clock)
    assert init(c, "tx", clock, expected=(100, 0)) == (100, 1)
    assert init(c, "tx", clock, expected=(100, 0)) == (100, 1)  # the same bump, retried
    with pytest.raises(ProducerFencedError):
        c.init_producer_id("tx", TIMEOUT, clock(), expected=(100, 7))
    c.describe("tx").producer_epoch = MAX_PRODUCER_EPOCH
    assert c.wants_producer_id("tx")
    assert init(c, "tx", clock, pid=200) == (200, 0)


def test_a_new_coordinator_loads_the_log_and_finishes_prepared_transactions(clock):
    c = make()
    log = []
    for tid in ("a", "b", "c"):
        p = c.init_producer_id(tid, TIMEOUT, clock(), new_producer_id=ord(tid))
        log.append((tid, p.record))
        ack(c, p, clock())
        p = c.add_partitions(tid, ord(tid), 0, [A], clock())
        log.append((tid, p.record))
        ack(c, p, clock())
    p = c.end_txn("a", ord("a"), 0, True, clock())
    log.append(("a", p.record))
    ack(c, p, clock())
    log.append(("c", None))  # c expired meanwhile
    other = TransactionCoordinator(TxnCoordinatorConfig(max_timeout_ms=900_000,
                                                        transactional_id_expiration_ms=3_600_000), lambda t: 0)
    effects = other.load(0, 8, log, clock())
    assert effects == [WriteMarkers("a", ord("a"), 0, True, 8, (A,))]  # the new coordinator epoch
    assert other.describe("b").state == TxnState.ONGOING and other.describe("c") is None
    other.check_invariants()
    assert other.markers_due() == effects
    # b's timeout runs on from its stored start time.
    (abort,) = other.tick(clock(TIMEOUT))
    assert abort.transactional_id == "b"
    other.unload(0)
    assert not other.txns and not other.owns("a")
