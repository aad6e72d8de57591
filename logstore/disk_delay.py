"""A test-only seam that slows the log directory: a delay before each segment write and fsync.

Real disks slow down without failing (a dying drive retrying sectors, a saturated volume, a noisy
neighbour). To test what that does to replication, a node started with the environment variable
`LAKELOG_TEST_DISK_DELAY_FILE=<path>` sleeps, before every `.log` append (`pwritev`) and every
segment fsync, for the number of milliseconds written in that file — read at each call, so a test
slows a running node's disk by writing the file and restores it by deleting it. Without the
variable (every real deployment) `pause()` returns at once and reads nothing.

Limits: a delay above `MAX_DELAY_MS` is cut to it; a file that does not parse as a number is no
delay. Concurrency: any thread; the sleep holds whatever lock the caller holds, as a slow disk does.
"""

from __future__ import annotations

import os
import time

#: The environment variable naming the delay file.
ENV = "LAKELOG_TEST_DISK_DELAY_FILE"
#: Most milliseconds one write or fsync is held back.
MAX_DELAY_MS = 10_000


class DiskDelay:
    """Reads the delay file at each call (module doc); `path` None: never delays."""

    def __init__(self, path: str | None) -> None:
        self.path = path or None

    def delay_ms(self) -> float:
        if self.path is None:
            return 0.0
        try:
            with open(self.path, encoding="ascii") as f:
                text = f.read(32)
        except OSError:  # no file: the disk is fast again
            return 0.0
        try:
            return min(max(0.0, float(text.strip() or 0)), float(MAX_DELAY_MS))
        except ValueError:
            return 0.0

    def pause(self) -> None:
        """Before a segment write or fsync: sleep for the configured delay (usually nothing)."""
        if self.path is None:
            return
        ms = self.delay_ms()
        if ms:
            time.sleep(ms / 1000)


#: The process's delay, from its environment at start.
DISK_DELAY = DiskDelay(os.environ.get(ENV))
