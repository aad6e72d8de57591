"""A test-only seam that holds sync-tables right after a step's Delta append has committed.

sync-tables is exactly once because a step's append and its range are one Delta commit, and its
follow-ups (dead letters, `<topic>_latest`) are redone by the next run when a run dies after the
append (spark_log/sync_state.py). To kill a real sync process at exactly that point, a process
started with the environment variable `LAKELOG_TEST_SYNC_PAUSE_FILE=<path>` writes `<path>` right
after each step's append commits (its pid, the topic and the step's sequence number, as one JSON
line: `{"pid": 123, "topic": "orders", "seq": 1}`), then sleeps while the file exists — so a test
waits for the file, SIGKILLs the process, or deletes the file to let it go on. Without the
variable (every real deployment) `after_append` returns at once and touches nothing.

Limits: the pause lasts at most `MAX_PAUSE_S`, then the sync goes on. Concurrency: any thread;
the sleep holds whatever the caller holds, as a slow follow-up would.
"""

from __future__ import annotations

import json
import os
import time

#: The environment variable naming the pause file.
ENV = "LAKELOG_TEST_SYNC_PAUSE_FILE"
#: Longest one pause lasts (then the sync goes on, as if the file had been deleted).
MAX_PAUSE_S = 600.0
#: How often a pause looks whether its file is still there.
POLL_S = 0.1


class SyncPause:
    """Holds a sync after each append while its file exists (module doc); `path` None: never."""

    def __init__(self, path: str | None, max_pause_s: float = MAX_PAUSE_S) -> None:
        self.path = path or None
        self.max_pause_s = max_pause_s

    def after_append(self, topic: str, seq: int) -> None:
        """Right after the append of step `seq` of `topic` committed: write the file, then sleep
        while it exists (at most `max_pause_s`). Nothing without a path."""
        if self.path is None:
            return
        tmp = f"{self.path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(json.dumps({"pid": os.getpid(), "topic": topic, "seq": seq}) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)  # a reader sees the whole line or no file
        deadline = time.monotonic() + self.max_pause_s
        while os.path.exists(self.path) and time.monotonic() < deadline:
            time.sleep(POLL_S)


#: The process's pause, from its environment at start.
SYNC_PAUSE = SyncPause(os.environ.get(ENV))
