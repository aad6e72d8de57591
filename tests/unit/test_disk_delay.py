"""The test-only slow-disk seam (logstore/disk_delay.py): the delay comes from a file read at each
call, is capped, and is nothing without the file or the environment variable."""

from __future__ import annotations

from lakelog.logstore.disk_delay import MAX_DELAY_MS, DiskDelay


def test_the_delay_follows_the_file(tmp_path):
    path = tmp_path / "delay"
    d = DiskDelay(str(path))
    assert d.delay_ms() == 0.0  # no file: a fast disk
    path.write_text("250\n")
    assert d.delay_ms() == 250.0
    path.write_text(str(MAX_DELAY_MS * 10))
    assert d.delay_ms() == MAX_DELAY_MS
    path.write_text("slow")
    assert d.delay_ms() == 0.0
    path.unlink()
    assert d.delay_ms() == 0.0


def test_without_the_variable_nothing_is_read():
    d = DiskDelay(None)
    assert d.path is None and d.delay_ms() == 0.0
    d.pause()
