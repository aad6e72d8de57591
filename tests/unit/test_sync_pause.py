"""The test-only seam that holds sync-tables right after its Delta append (spark_log/sync_pause.py):
it writes its file, waits while the file exists (bounded), and does nothing without a path."""

from __future__ import annotations

import json
import os
import threading
import time

from lakelog.spark_log.sync_pause import SyncPause


def test_the_pause_writes_its_file_and_holds_until_the_file_is_gone(tmp_path):
    path = tmp_path / "paused"
    pause = SyncPause(str(path))
    done = threading.Event()
    t = threading.Thread(target=lambda: (pause.after_append("orders", 3), done.set()), daemon=True)
    t.start()
    for _ in range(200):  # bounded: 20 s
        if path.exists():
            break
        time.sleep(0.1)
    assert json.loads(path.read_text()) == {"pid": os.getpid(), "topic": "orders", "seq": 3}
    assert not done.wait(0.5)  # held while the file is there
    path.unlink()
    t.join(30)
    assert done.is_set()
    assert list(tmp_path.iterdir()) == []  # no temporary file left


def test_a_pause_ends_by_its_bound(tmp_path):
    path = tmp_path / "paused"
    SyncPause(str(path), max_pause_s=0.2).after_append("orders", 0)  # returns although the file stays
    assert path.exists()


def test_without_a_path_nothing_is_written(tmp_path):
    pause = SyncPause(None)
    assert pause.path is None
    pause.after_append("orders", 1)
    assert list(tmp_path.iterdir()) == []
