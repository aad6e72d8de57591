"""logstore/open_files.py: the segments a node will open, the soft limit lifted, a too-low hard limit refused."""

from __future__ import annotations

import resource

import pytest

from lakelog.infra.config import ConfigError
from lakelog.logstore.open_files import (
    FILES_PER_SEGMENT,
    RESERVED_FILES,
    OpenFileLimit,
    check_hard_limit,
    files_needed,
    lift_soft_limit,
    segments_on_disk,
)


def test_segments_on_disk_counts_segment_logs_of_partition_directories(tmp_path):
    for p in range(3):
        d = tmp_path / f"t-{p}"
        d.mkdir()
        for base in range(p + 1):
            (d / f"{base * 100:020d}.log").write_bytes(b"")
            (d / f"{base * 100:020d}.index").write_bytes(b"")
    (tmp_path / "raft").mkdir()  # no segments: not a partition
    (tmp_path / "raft" / "raft.log").write_bytes(b"")
    (tmp_path / "node.log").write_bytes(b"")
    assert segments_on_disk(tmp_path) == (3, 6)
    assert segments_on_disk(tmp_path / "absent") == (0, 0)
    assert files_needed(6) == 6 * FILES_PER_SEGMENT + RESERVED_FILES


def test_a_hard_limit_below_the_segments_on_disk_is_refused_with_what_to_do(tmp_path):
    needed = files_needed(3000)
    check_hard_limit(OpenFileLimit(1024, needed, needed), tmp_path, 3000, 3000)
    check_hard_limit(OpenFileLimit(1024, None, None), tmp_path, 3000, 3000)  # unlimited
    with pytest.raises(ConfigError, match=rf"hard {needed - 1}\) is below the {needed} files .* 3000 segments"):
        check_hard_limit(OpenFileLimit(1024, needed - 1, needed - 1), tmp_path, 3000, 3000)


def test_the_soft_limit_is_lifted_to_the_hard_one():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = min(soft, 512)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
    try:
        limit = lift_soft_limit()
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard
        expected_hard = None if hard == resource.RLIM_INFINITY else hard
        assert limit == OpenFileLimit(lowered, expected_hard, expected_hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
