"""The transaction coordinator as a pure state machine: events in, records to persist and markers out.

One `TransactionCoordinator` holds the transactional ids of the `__transaction_state` partitions a
node leads. It does no I/O and reads no clock: every event carries `now_ms`, and producer ids come
from the caller (the node allocates them from the controller's blocks). The node's
`TransactionService` feeds it requests and timer ticks, appends each `Persist` to the partition with
acks=all and reports back (`complete` / `fail`), and writes the markers a `WriteMarkers` asks for.

Lifecycle of one transactional id (Kafka's states and their stored ids):

    (new) --InitProducerId--> Empty --AddPartitionsToTxn / AddOffsetsToTxn--> Ongoing
    Ongoing --EndTxn(commit)--> PrepareCommit --markers written--> CompleteCommit
    Ongoing --EndTxn(abort)--> PrepareAbort --markers written--> CompleteAbort
    Ongoing --InitProducerId of a new instance, or transaction.timeout.ms passed-->
            PrepareEpochFence (in memory, while the fence is written) --> PrepareAbort (epoch + 1)
    Empty / CompleteCommit / CompleteAbort --InitProducerId--> Empty (epoch + 1)
    Empty / CompleteCommit / CompleteAbort --idle for transactional.id.expiration.ms--> Dead (a tombstone)

A change is first *pending* (the record is being appended): requests for that id answer
CONCURRENT_TRANSACTIONS meanwhile, and the change takes effect only when the append is acknowledged
(`complete`); an append that failed leaves the last acknowledged state (`fail`). So the state in
memory is always one that every in-sync replica of the partition holds, and a new coordinator that
loads the partition (`load`) continues from it: it writes the markers of a PrepareCommit /
PrepareAbort again (markers are idempotent at the partition) and aborts Ongoing transactions
whose timeout passes.

Fencing: every InitProducerId bumps the epoch (a new producer id when the epoch would reach
32767), and requests carrying another producer id answer INVALID_PRODUCER_ID_MAPPING, another
epoch PRODUCER_FENCED. KIP-360: an InitProducerId that names the producer's current id and epoch
bumps it; one naming the epoch before the last bump is a retry answered with the current epoch.
KIP-890 part 1 (`verify`): a transactional produce is appended only to a partition added to the
producer's ongoing transaction at the producer's current epoch.

Invariants (checked by `check_invariants`): a transactional id's epoch never goes back for the same
producer id; an Ongoing or Prepare* transaction has partitions and a start time, an Empty or
Complete* one has none; at most one change is pending per id; timeouts are within
[1, transaction.max.timeout.ms].
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from lakelog.infra.config import check_keyed, from_keys, keyed
from lakelog.infra.errors import invariant
from lakelog.ingest_api.config.transactions import TRANSACTION_CONFIG
from lakelog.ingest_api.errors import InvalidRequestError
from lakelog.ingest_api.transactions.errors import (
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    ProducerFencedError,
)
from lakelog.logstore.errors import InvalidTxnStateError
from lakelog.ingest_api.transactions.state_codec import MAX_TXN_PARTITIONS, TxnRecord

#: The highest epoch before a producer id is replaced (Kafka's Short.MaxValue - 1).
MAX_PRODUCER_EPOCH = 32766
NO_PRODUCER_ID = -1

TopicPartition = tuple[str, int]


class TxnState(enum.IntEnum):
    """Kafka's transaction states, by the id stored in `__transaction_state`."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display(self) -> str:
        """Kafka's name of the state (DescribeTransactions, ListTransactions)."""
        return _DISPLAY[self]


_S = TxnState
#: Each state's display name, made once: every transition's check names the states it joins.
_DISPLAY: dict[TxnState, str] = {s: "".join(w.capitalize() for w in s.name.split("_")) for s in TxnState}
#: state -> the states it may be entered from (a repeated transition is allowed, so retries are safe).
_VALID_PREVIOUS: dict[TxnState, set[TxnState]] = {
    _S.EMPTY: {_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT},
    _S.ONGOING: {_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT},
    _S.PREPARE_COMMIT: {_S.ONGOING, _S.PREPARE_COMMIT},
    _S.PREPARE_ABORT: {_S.ONGOING, _S.PREPARE_EPOCH_FENCE, _S.PREPARE_ABORT},
    _S.COMPLETE_COMMIT: {_S.PREPARE_COMMIT, _S.COMPLETE_COMMIT},
    _S.COMPLETE_ABORT: {_S.PREPARE_ABORT, _S.COMPLETE_ABORT},
    _S.DEAD: {_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT, _S.DEAD},
    _S.PREPARE_EPOCH_FENCE: {_S.ONGOING},
}
_IN_TXN = {_S.ONGOING, _S.PREPARE_COMMIT, _S.PREPARE_ABORT, _S.PREPARE_EPOCH_FENCE}
_IDLE = {_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}

_KEY = TRANSACTION_CONFIG.keys


@dataclass(frozen=True)
class TxnCoordinatorConfig:
    """The coordinator's settings, each from its declared key (ingest_api/config/transactions.py)."""

    max_timeout_ms: int = keyed(_KEY["transaction.max.timeout.ms"])
    transactional_id_expiration_ms: int = keyed(_KEY["transactional.id.expiration.ms"])

    def __post_init__(self) -> None:
        check_keyed(self)

    @classmethod
    def from_keys(cls, config: Any, **overrides: Any) -> "TxnCoordinatorConfig":
        """From a node's parsed configuration (`NodeConfig`)."""
        return from_keys(cls, config, **overrides)


@dataclass(frozen=True)
class Persist:
    """Append this record (None: a tombstone) for `transactional_id` to its partition, then report
    `complete(transactional_id, token)` or `fail(transactional_id, token)`."""

    transactional_id: str
    partition: int
    record: TxnRecord | None
    token: int
    #: What the client is answered once the record is acknowledged: (producer id, epoch), or an
    #: error class raised instead (InitProducerId that fenced an ongoing transaction: retry).
    answer: tuple[int, int] | None = None
    answer_error: type[Exception] | None = None


@dataclass(frozen=True)
class WriteMarkers:
    """Write a COMMIT / ABORT marker for (producer id, epoch) to each partition, then report
    `markers_written`. Idempotent: a new coordinator may write them again."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartition, ...]


Effect = Persist | WriteMarkers


@dataclass
class TxnMetadata:
    """One transactional id: its acknowledged state, and the change being appended (if any)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: set[TopicPartition] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = 0
    #: The epoch before the last bump (KIP-360 retries); -1 when unknown (e.g. after a load).
    last_producer_epoch: int = -1
    pending: Persist | None = None
    pending_state: TxnState | None = None

    def record(self) -> TxnRecord:
        return TxnRecord(self.producer_id, self.producer_epoch, self.timeout_ms, int(self.state),
                         tuple(sorted(self.partitions)), self.last_update_ms, self.start_ms)


class TransactionCoordinator:
    """Transactional ids and their transactions. Concurrency: not thread-safe; one event at a time."""

    def __init__(self, config: TxnCoordinatorConfig, partition_for: Callable[[str], int]) -> None:
        self.config = config
        self.partition_for = partition_for
        self.txns: dict[str, TxnMetadata] = {}
        #: __transaction_state partition -> its leader epoch when loaded (the markers' coordinator epoch).
        self.coordinator_epochs: dict[int, int] = {}
        self._tokens = 0

    # ------------------------------------------------------------------ loading

    def load(self, partition: int, coordinator_epoch: int,
             records: Iterable[tuple[str, TxnRecord | None]], now_ms: int) -> list[Effect]:
        """Take over `partition` from its records in log order; returns the markers to write again."""
        self.unload(partition)
        self.coordinator_epochs[partition] = coordinator_epoch
        latest: dict[str, TxnRecord | None] = {}
        for tid, rec in records:
            latest[tid] = rec
        out: list[Effect] = []
        for tid, rec in latest.items():
            if rec is None or self.partition_for(tid) != partition:
                continue
            try:
                state = TxnState(rec.state)
            except ValueError:
                continue  # a state this release does not know: the id is left to its next InitProducerId
            m = TxnMetadata(tid, rec.producer_id, rec.producer_epoch, rec.timeout_ms, state, set(rec.partitions),
                            rec.start_ms, rec.last_update_ms)
            self.txns[tid] = m
            out += self._markers_due(m)
        return out

    def unload(self, partition: int) -> None:
        """Forget the ids of `partition` (this node no longer leads it)."""
        self.coordinator_epochs.pop(partition, None)
        for tid in [t for t in self.txns if self.partition_for(t) == partition]:
            del self.txns[tid]

    def owns(self, transactional_id: str) -> bool:
        return self.partition_for(transactional_id) in self.coordinator_epochs

    # ------------------------------------------------------------------ client requests

    def wants_producer_id(self, transactional_id: str) -> bool:
        """Whether InitProducerId for this id needs a new producer id (an unknown id, or an epoch used up)."""
        m = self.txns.get(transactional_id)
        return m is None or m.producer_epoch >= MAX_PRODUCER_EPOCH

    def init_producer_id(self, transactional_id: str, timeout_ms: int, now_ms: int, *,
                         new_producer_id: int = NO_PRODUCER_ID,
                         expected: tuple[int, int] | None = None) -> Persist | tuple[int, int]:
        """InitProducerId with a transactional id: the record that bumps the epoch (the answer once
        it is acknowledged), or (producer id, epoch) at once for a KIP-360 retry."""
        if not 1 <= timeout_ms <= self.config.max_timeout_ms:
            raise InvalidTransactionTimeoutError(
                f"transaction.timeout.ms={timeout_ms} is outside [1, transaction.max.timeout.ms="
                f"{self.config.max_timeout_ms}]")
        m = self.txns.get(transactional_id)
        if m is None:
            invariant(new_producer_id >= 0, "a new transactional id needs a producer id")
            m = self.txns[transactional_id] = TxnMetadata(transactional_id, new_producer_id, -1, timeout_ms,
                                                          TxnState.EMPTY, last_update_ms=now_ms)
            return self._persist(m, TxnState.EMPTY, now_ms, producer_epoch=0, timeout_ms=timeout_ms,
                                 partitions=set(), start_ms=-1, new=True)
        if m.pending is not None or m.state in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT, _S.PREPARE_EPOCH_FENCE, _S.DEAD):
            raise ConcurrentTransactionsError(f"transaction {transactional_id} is completing; retry")
        if expected is not None and expected[0] != NO_PRODUCER_ID:
            pid, epoch = expected
            if pid == m.producer_id and epoch == m.last_producer_epoch and m.state in _IDLE:
                return m.producer_id, m.producer_epoch  # a retry of the bump already made
            if pid != m.producer_id or epoch != m.producer_epoch:
                raise ProducerFencedError(f"producer {pid} epoch {epoch} is not transactional id "
                                          f"{transactional_id}'s current producer")
        if m.state == _S.ONGOING:
            # A new instance of the producer: abort the zombie's transaction with a bumped epoch;
            # the new instance retries (CONCURRENT_TRANSACTIONS) until the abort completes.
            return self._fence(m, now_ms, ConcurrentTransactionsError)
        if m.producer_epoch >= MAX_PRODUCER_EPOCH:
            invariant(new_producer_id >= 0, "an exhausted epoch needs a new producer id")
            return self._persist(m, TxnState.EMPTY, now_ms, producer_id=new_producer_id, producer_epoch=0,
                                 timeout_ms=timeout_ms, partitions=set(), start_ms=-1)
        return self._persist(m, TxnState.EMPTY, now_ms, producer_epoch=m.producer_epoch + 1, timeout_ms=timeout_ms,
                             partitions=set(), start_ms=-1)

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[TopicPartition], now_ms: int) -> Persist | None:
        """AddPartitionsToTxn (and AddOffsetsToTxn, whose partition is the group's offsets partition):
        the record that adds them, or None when they are in the ongoing transaction already."""
        m = self._current(transactional_id, producer_id, producer_epoch)
        if m.state not in (_S.EMPTY, _S.ONGOING, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT):
            raise ConcurrentTransactionsError(f"transaction {transactional_id} is {m.state.display}; retry")
        wanted = set(partitions)
        if not wanted:
            raise InvalidRequestError(f"no partition to add to transaction {transactional_id}")
        if m.state == _S.ONGOING and wanted <= m.partitions:
            return None
        union = (m.partitions if m.state == _S.ONGOING else set()) | wanted
        if len(union) > MAX_TXN_PARTITIONS:
            raise InvalidRequestError(f"a transaction holds at most {MAX_TXN_PARTITIONS} partitions")
        start = m.start_ms if m.state == _S.ONGOING else now_ms
        return self._persist(m, TxnState.ONGOING, now_ms, partitions=union, start_ms=start)

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                now_ms: int) -> Persist | None:
        """EndTxn: the PrepareCommit / PrepareAbort record (answered once acknowledged; the markers
        follow), or None for a retry of an end already complete."""
        m = self._current(transactional_id, producer_id, producer_epoch)
        want = "commit" if commit else "abort"
        if m.state == _S.ONGOING:
            return self._persist(m, _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT, now_ms)
        done, preparing = ((_S.COMPLETE_COMMIT, _S.PREPARE_COMMIT) if commit else (_S.COMPLETE_ABORT, _S.PREPARE_ABORT))
        if m.state == done:
            return None
        if m.state == preparing:
            raise ConcurrentTransactionsError(f"transaction {transactional_id} is {m.state.display}; retry")
        raise InvalidTxnStateError(f"transaction {transactional_id} is {m.state.display}: it cannot {want}")

    def verify(self, transactional_id: str, producer_id: int, producer_epoch: int, tp: TopicPartition) -> None:
        """KIP-890's check of a transactional produce: the partition is in the producer's ongoing transaction."""
        m = self.txns.get(transactional_id)
        if m is None or m.producer_id != producer_id:
            raise InvalidProducerIdMappingError(f"transactional id {transactional_id} is not producer {producer_id}")
        if producer_epoch < m.producer_epoch:
            raise ProducerFencedError(f"producer {producer_id} epoch {producer_epoch} is fenced by epoch "
                                      f"{m.producer_epoch}")
        if producer_epoch != m.producer_epoch or m.state != _S.ONGOING or tp not in m.partitions:
            raise InvalidTxnStateError(f"{tp[0]}-{tp[1]} is not in an ongoing transaction of {transactional_id} "
                                       f"at epoch {producer_epoch}: add it first (AddPartitionsToTxn)")

    # ------------------------------------------------------------------ appends and markers reported

    def complete(self, transactional_id: str, token: int, now_ms: int) -> list[Effect]:
        """The pending record was acknowledged: it takes effect; returns the markers now due."""
        m = self.txns.get(transactional_id)
        if m is None or m.pending is None or m.pending.token != token:
            return []  # unloaded or superseded meanwhile: the log decides for the next coordinator
        p, state = m.pending, m.pending_state
        m.pending = m.pending_state = None
        if p.record is None:
            del self.txns[transactional_id]
            return []
        assert state is not None
        rec = p.record
        if rec.producer_id == m.producer_id and rec.producer_epoch > m.producer_epoch:
            m.last_producer_epoch = m.producer_epoch
        elif rec.producer_id != m.producer_id:
            m.last_producer_epoch = -1
        self._transition(m, state)
        m.producer_id, m.producer_epoch, m.timeout_ms = rec.producer_id, rec.producer_epoch, rec.timeout_ms
        m.partitions, m.start_ms, m.last_update_ms = set(rec.partitions), rec.start_ms, rec.last_update_ms
        return self._markers_due(m)

    def fail(self, transactional_id: str, token: int) -> None:
        """The pending record was not acknowledged: the last acknowledged state stays."""
        m = self.txns.get(transactional_id)
        if m is None or m.pending is None or m.pending.token != token:
            return
        m.pending = m.pending_state = None
        if m.producer_epoch < 0:  # a new id whose first record failed: it never existed
            del self.txns[transactional_id]
        elif m.state == _S.PREPARE_EPOCH_FENCE:
            m.state = _S.ONGOING

    def markers_written(self, transactional_id: str, producer_id: int, producer_epoch: int,
                        now_ms: int) -> Persist | None:
        """Every marker of a PrepareCommit / PrepareAbort is in its partition: the Complete* record."""
        m = self.txns.get(transactional_id)
        if (m is None or m.pending is not None or m.producer_id != producer_id
                or m.producer_epoch != producer_epoch or m.state not in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT)):
            return None
        done = _S.COMPLETE_COMMIT if m.state == _S.PREPARE_COMMIT else _S.COMPLETE_ABORT
        return self._persist(m, done, now_ms, partitions=set(), start_ms=-1)

    def markers_due(self) -> list[WriteMarkers]:
        """The markers of every PrepareCommit / PrepareAbort without a pending change (to retry)."""
        return [e for m in self.txns.values() if m.pending is None for e in self._markers_due(m)]

    # ------------------------------------------------------------------ timers

    def tick(self, now_ms: int, *, abort_timed_out: bool = True, expire_ids: bool = True) -> list[Persist]:
        """Abort transactions open past their timeout (fencing the producer, as Kafka does), and
        forget ids idle past transactional.id.expiration.ms."""
        out: list[Persist] = []
        for m in list(self.txns.values()):
            if m.pending is not None:
                continue
            if abort_timed_out and m.state == _S.ONGOING and m.start_ms + m.timeout_ms <= now_ms:
                out.append(self._fence(m, now_ms, None))
            elif expire_ids and m.state in _IDLE and m.last_update_ms + self.config.transactional_id_expiration_ms <= now_ms:
                self._tokens += 1
                m.pending = Persist(m.transactional_id, self.partition_for(m.transactional_id), None, self._tokens)
                m.pending_state = _S.DEAD
                out.append(m.pending)
        return out

    # ------------------------------------------------------------------ inspection

    def describe(self, transactional_id: str) -> TxnMetadata | None:
        return self.txns.get(transactional_id)

    def check_invariants(self) -> None:
        for m in self.txns.values():
            invariant(1 <= m.timeout_ms <= max(self.config.max_timeout_ms, m.timeout_ms),
                      f"{m.transactional_id}: timeout {m.timeout_ms}")
            if m.producer_epoch < 0:
                invariant(m.pending is not None, f"{m.transactional_id}: no epoch and nothing pending")
                continue
            if m.state in (_S.ONGOING, _S.PREPARE_COMMIT, _S.PREPARE_ABORT):
                invariant(bool(m.partitions) and m.start_ms >= 0,
                          f"{m.transactional_id}: {m.state.display} without partitions or start time")
            if m.state in _IDLE:
                invariant(not m.partitions, f"{m.transactional_id}: {m.state.display} holds partitions")
            if m.pending is not None:
                invariant(m.pending_state is not None, f"{m.transactional_id}: pending without a target state")

    # ------------------------------------------------------------------ helpers

    def _current(self, transactional_id: str, producer_id: int, producer_epoch: int) -> TxnMetadata:
        m = self.txns.get(transactional_id)
        if m is None or m.producer_epoch < 0:
            raise InvalidProducerIdMappingError(f"transactional id {transactional_id} is unknown: InitProducerId first")
        if m.producer_id != producer_id:
            raise InvalidProducerIdMappingError(f"transactional id {transactional_id} is producer {m.producer_id}, "
                                                f"not {producer_id}")
        if m.producer_epoch != producer_epoch:
            raise ProducerFencedError(f"producer {producer_id} epoch {producer_epoch} is fenced: transactional id "
                                      f"{transactional_id} is at epoch {m.producer_epoch}")
        if m.pending is not None:
            raise ConcurrentTransactionsError(f"transaction {transactional_id} has a change in progress; retry")
        return m

    def _fence(self, m: TxnMetadata, now_ms: int, answer_error: type[Exception] | None) -> Persist:
        """Abort m's ongoing transaction with the epoch bumped: its producer is fenced."""
        epoch = m.producer_epoch + 1 if m.producer_epoch < MAX_PRODUCER_EPOCH else m.producer_epoch
        self._transition(m, _S.PREPARE_EPOCH_FENCE)
        return self._persist(m, _S.PREPARE_ABORT, now_ms, producer_epoch=epoch, answer_error=answer_error)

    def _persist(self, m: TxnMetadata, state: TxnState, now_ms: int, *, new: bool = False,
                 answer_error: type[Exception] | None = None, **changes: Any) -> Persist:
        invariant(m.pending is None, f"{m.transactional_id}: a second pending change")
        invariant(new or m.state in _VALID_PREVIOUS[state],
                  f"{m.transactional_id}: {m.state.display} -> {state.display}")
        values = {"producer_id": m.producer_id, "producer_epoch": m.producer_epoch, "timeout_ms": m.timeout_ms,
                  "partitions": m.partitions, "start_ms": m.start_ms, **changes}
        rec = TxnRecord(values["producer_id"], values["producer_epoch"], values["timeout_ms"], int(state),
                        tuple(sorted(values["partitions"])), now_ms, values["start_ms"])
        self._tokens += 1
        m.pending = Persist(m.transactional_id, self.partition_for(m.transactional_id), rec, self._tokens,
                            answer=(rec.producer_id, rec.producer_epoch), answer_error=answer_error)
        m.pending_state = state
        return m.pending

    @staticmethod
    def _transition(m: TxnMetadata, to: TxnState) -> None:
        invariant(m.state in _VALID_PREVIOUS[to] or m.producer_epoch < 0,
                  f"transaction {m.transactional_id}: {m.state.display} -> {to.display}")
        m.state = to

    def _markers_due(self, m: TxnMetadata) -> list[Effect]:
        if m.state not in (_S.PREPARE_COMMIT, _S.PREPARE_ABORT):
            return []
        epoch = self.coordinator_epochs.get(self.partition_for(m.transactional_id), -1)
        return [WriteMarkers(m.transactional_id, m.producer_id, m.producer_epoch, m.state == _S.PREPARE_COMMIT,
                             epoch, tuple(sorted(m.partitions)))]
