"""The produce/consume history checker: a clean history passes; each violation is caught and named."""

from __future__ import annotations

import threading

import pytest

from tests.support.history import (
    History,
    HistoryViolation,
    Kind,
    OffsetObserver,
    ProduceAttempt,
    check_consumer_views,
    check_history,
)


def acked(partition, value_id, offset):
    return ProduceAttempt(partition, value_id, True, offset)


#: Two partitions, one producer each; a refused write that never appeared, a timed-out write that
#: did, and one that did not.
CLEAN_ATTEMPTS = [
    acked(0, "a0", 0), acked(1, "b0", 0), acked(0, "a1", 1),
    ProduceAttempt(0, "a2", False),  # refused (e.g. NOT_ENOUGH_REPLICAS): never written
    ProduceAttempt(1, "b1", None),  # timed out ... and was written
    acked(1, "b2", 2),
    ProduceAttempt(0, "a3", None),  # timed out ... and was not written
    acked(0, "a4", 2),
]
CLEAN_DRAIN = [(0, 0, "a0"), (0, 1, "a1"), (0, 2, "a4"), (1, 0, "b0"), (1, 1, "b1"), (1, 2, "b2")]


def test_clean_history_passes():
    result = check_history(CLEAN_ATTEMPTS, CLEAN_DRAIN)
    result.assert_ok()
    assert result.ok and str(result).startswith("ok: ")
    assert result.stats["acked_values"] == 5
    assert result.stats["acked_seen"] == 5
    assert result.stats["unknown_seen"] == 1 and result.stats["unknown_unseen"] == 1
    assert result.stats["failed_unseen"] == 1


def test_interleaved_partitions_in_the_drain_are_fine():
    drain = [(0, 0, "a0"), (1, 0, "b0"), (0, 1, "a1"), (1, 1, "b1"), (1, 2, "b2"), (0, 2, "a4")]
    check_history(CLEAN_ATTEMPTS, drain).assert_ok()


def test_failed_write_that_appears_anyway_is_not_a_violation():
    # Kafka may have appended a write whose acknowledgement failed (NOT_ENOUGH_REPLICAS_AFTER_APPEND).
    attempts = [acked(0, "x", 0), ProduceAttempt(0, "y", False), acked(0, "z", 2)]
    result = check_history(attempts, [(0, 0, "x"), (0, 1, "y"), (0, 2, "z")])
    result.assert_ok()
    assert result.stats["failed_seen"] == 1


def test_lost_acknowledged_write():
    drain = [r for r in CLEAN_DRAIN if r[2] != "a1"]
    result = check_history(CLEAN_ATTEMPTS, drain)
    assert result.kinds == {Kind.LOST_ACKED_WRITE}
    (issue,) = result.of_kind(Kind.LOST_ACKED_WRITE)
    assert (issue.partition, issue.offset, issue.value_id) == (0, 1, "a1")
    with pytest.raises(HistoryViolation, match=r"lost_acked_write \(partition 0, offset 1, value 'a1'\)"):
        result.assert_ok()


def test_duplicate_is_a_violation_unless_allowed():
    # A retried, non-idempotent produce: the first attempt timed out but was written, the retry acked.
    attempts = [acked(0, "a", 0), ProduceAttempt(0, "b", None), acked(0, "b", 2), acked(0, "c", 3)]
    drain = [(0, 0, "a"), (0, 1, "b"), (0, 2, "b"), (0, 3, "c")]
    result = check_history(attempts, drain)
    assert result.kinds == {Kind.DUPLICATE}
    assert "consumed 2 times" in result.of_kind(Kind.DUPLICATE)[0].detail
    check_history(attempts, drain, allow_duplicates=True).assert_ok()


def test_reordering_within_a_partition():
    # b was acknowledged after a but is consumed before it (offsets unknown: only the order tells).
    attempts = [acked(0, "a", None), acked(0, "b", None), acked(0, "c", None)]
    drain = [(0, 0, "b"), (0, 1, "a"), (0, 2, "c")]
    result = check_history(attempts, drain)
    assert result.kinds == {Kind.REORDERED}
    (issue,) = result.violations
    assert (issue.value_id, issue.offset) == ("b", 0)
    assert "acknowledged right after 'a' (consumed at offset 1)" in issue.detail
    # Several producers on one partition: acknowledgement order promises nothing.
    check_history(attempts, drain, single_producer_per_partition=False).assert_ok()


def test_a_moved_value_is_reported_once():
    attempts = [acked(0, v, None) for v in "abcde"]
    result = check_history(attempts, [(0, 0, "b"), (0, 1, "c"), (0, 2, "d"), (0, 3, "e"), (0, 4, "a")])
    assert [(v.value_id, v.offset) for v in result.violations] == [("b", 0)]


def test_offsets_not_strictly_increasing():
    attempts = [acked(0, "a", 0), acked(0, "b", 1), acked(0, "c", 2)]
    result = check_history(attempts, [(0, 0, "a"), (0, 2, "c"), (0, 1, "b")])
    assert Kind.OFFSETS_NOT_INCREASING in result.kinds
    (issue,) = result.of_kind(Kind.OFFSETS_NOT_INCREASING)
    assert (issue.offset, issue.value_id) == (1, "b")
    # The same offset twice is not increasing either.
    result = check_history(attempts, [(0, 0, "a"), (0, 1, "b"), (0, 1, "b"), (0, 2, "c")])
    assert Kind.OFFSETS_NOT_INCREASING in result.kinds


def test_acked_offset_mismatch():
    # Every value is there, in order, but b was acknowledged at offset 1 and sits at 2 (a record was
    # inserted before it: the log the producer was answered from is not the log that survived).
    attempts = [acked(0, "a", 0), acked(0, "b", 1)]
    result = check_history(attempts + [ProduceAttempt(0, "x", None)], [(0, 0, "a"), (0, 1, "x"), (0, 2, "b")])
    assert result.kinds == {Kind.ACKED_OFFSET_MISMATCH}
    (issue,) = result.violations
    assert (issue.offset, issue.value_id) == (1, "b")
    assert "holds 'x'" in issue.detail and "[(0, 2)]" in issue.detail
    # The acknowledged offset was skipped entirely.
    result = check_history(attempts, [(0, 0, "a"), (0, 5, "b")])
    assert result.kinds == {Kind.ACKED_OFFSET_MISMATCH}
    assert "was not consumed" in result.violations[0].detail


def test_acked_without_offset_is_only_checked_for_presence():
    attempts = [acked(0, "a", None), acked(0, "b", None)]
    check_history(attempts, [(0, 7, "a"), (0, 9, "b")]).assert_ok()


def test_wrong_partition_and_unknown_value():
    attempts = [acked(0, "a", 0), acked(1, "b", 0)]
    result = check_history(attempts, [(0, 0, "a"), (0, 1, "b"), (1, 0, "b"), (1, 1, "ghost")])
    assert result.kinds == {Kind.WRONG_PARTITION, Kind.DUPLICATE, Kind.UNKNOWN_VALUE}
    assert result.of_kind(Kind.WRONG_PARTITION)[0].partition == 0
    assert result.of_kind(Kind.UNKNOWN_VALUE)[0].value_id == "ghost"


def test_report_lists_every_violation_with_details():
    attempts = [acked(0, i, i) for i in range(3)]
    result = check_history(attempts, [(0, 2, 2), (0, 1, 1)])
    report = result.report()
    # By offset 1 and 2 are in acknowledgement order; the drain just went backwards.
    assert report.splitlines()[0] == "2 violation(s): lost_acked_write x1, offsets_not_increasing x1"
    assert "  lost_acked_write (partition 0, offset 0, value 0): acknowledged, never consumed" in report
    assert "  offsets_not_increasing (partition 0, offset 1, value 1): consumed after offset 2" in report
    assert "history: " in report


def test_consumers_see_truncation():
    before = [(0, 0, "a"), (0, 1, "b"), (0, 2, "c"), (1, 0, "p")]
    after = [(0, 0, "a"), (0, 1, "b"), (0, 2, "z"), (0, 3, "y"), (1, 0, "p")]
    result = check_consumer_views([before, after, after])
    assert result.kinds == {Kind.TRUNCATION_VISIBLE}
    (issue,) = result.violations  # reported once, not once per later snapshot
    assert (issue.partition, issue.offset, issue.value_id) == (0, 2, "z")
    assert "read as 'c' in snapshot 0, later as 'z' in snapshot 1" in issue.detail
    check_consumer_views([before, before + [(0, 3, "d")]]).assert_ok()


def test_observer_takes_single_observations_from_many_threads():
    observer = OffsetObserver()

    def consume(tag):
        for offset in range(200):
            observer.observe(0, offset, f"v{offset}", when=tag)

    threads = [threading.Thread(target=consume, args=(f"consumer {i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    observer.result.assert_ok()
    assert observer.result.stats == {"observations": 800, "offsets": 200}
    observer.observe(0, 5, "rewritten", when="after the election")
    with pytest.raises(HistoryViolation, match="later as 'rewritten' after the election"):
        observer.result.assert_ok()


def test_recorder_is_safe_across_threads():
    history = History()

    def produce(partition):
        for i in range(100):
            history.produced(partition, f"{partition}-{i}", True, i)

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p in range(4):
        for i in range(100):
            history.consumed(p, i, f"{p}-{i}")
    result = history.check()
    result.assert_ok()
    assert result.stats["acked_values"] == 400 and result.stats["partitions"] == 4
