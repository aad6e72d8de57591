"""Crash-safe file helpers: write a temp file, fsync, rename over, fsync the directory.

Batched durability (`SyncBatch`): creating a partition writes several new files in a new directory
(the segment files, `partition.metadata`, the first `leader-epoch-checkpoint`), and one fsync of
each file and directory costs a disk flush each (~13 ms on a virtual disk): a topic of 1,000
partitions paid thousands of them. Inside `SyncBatch.deferring()` an `atomic_write` that creates a
file which did not exist is written and renamed without fsync and recorded; `SyncBatch.sync()`
then makes every recorded file and directory durable at once: one `syncfs(2)` of the file system
holding them (Linux), or, elsewhere or for a handful of paths, one fsync per recorded file and
directory. A write that replaces an existing file is not deferred either (it stays crash-safe on
its own), unless the caller asks for it (`atomic_write(..., batchable=True)`: a new leader stamping
its epoch in a thousand `leader-epoch-checkpoint`s after a failover paid two fsyncs each on the
event loop). A batched replacement keeps the old-or-new guarantee in two phases: `sync()` writes
the new bytes of every recorded replacement to a temp file, makes them durable together with the
new files, renames each over its file, and then makes the renames durable (one more `syncfs`, or
one fsync per directory). A later unbatched write of the same path takes it out of the batch, so
the batch never renames older bytes over newer ones.

Crash behaviour of a deferred write: until `sync()` returns, a crash may leave the new file
absent, empty, or whole (its few bytes are one write), and the new directory absent; a batched
replacement leaves the old file or the new one (its temp file is durable before the rename). The caller
syncs before it reports or serves what it created (the replica manager: before a new partition
is served), and a reader of such a file treats an empty one as never written (module docs of
leader_epoch.py and replica_manager.py).

Concurrency: a `SyncBatch` may be filled from several threads (each runs its writes inside
`deferring()`, which is per thread); `sync()` is called once all of them are done. `deferring()`
covers the synchronous code inside the block only: it is a thread-local, not a context variable,
so an asyncio task created inside the block (a replica fetcher started by a reconcile pass) does
not inherit it and write unsynced long after the block's sync.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import threading
from pathlib import Path
from typing import Iterator

#: Fewer recorded paths than this are fsynced one by one: `syncfs` writes out every dirty page of
#: the file system (on a node under heavy produce, seconds of writeback), which a few new partitions
#: are not worth; 32 paths of ~13 ms fsyncs are about the cost of one such writeback.
SYNCFS_MIN_PATHS = 32

#: `.batch`: the `SyncBatch` whose `deferring()` block this thread is in (None outside one).
_DEFERRING = threading.local()
#: Suffix of a batched replacement's temp file (apart from `atomic_write`'s own `.tmp`, which an
#: unbatched write of the same path may be writing meanwhile).
BATCH_TEMP_SUFFIX = ".batch.tmp"
#: path -> the batch holding its replacement; guards the hand-over between a batch's rename and an
#: unbatched write of the same path (module doc).
_PENDING: dict[Path, "SyncBatch"] = {}
_PENDING_LOCK = threading.Lock()
_libc: ctypes.CDLL | None = None


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory so a rename or create inside it survives a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def syncfs(path: str | os.PathLike) -> bool:
    """`syncfs(2)` the file system holding `path`: every dirty file and directory on it reaches the
    disk. False where the call does not exist (not Linux); raises OSError when it fails."""
    global _libc
    if _libc is None:
        name = ctypes.util.find_library("c")
        if name is None:
            return False
        _libc = ctypes.CDLL(name, use_errno=True)
    fn = getattr(_libc, "syncfs", None)
    if fn is None:
        return False
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if fn(fd) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs({path}): {os.strerror(err)}")
    finally:
        os.close(fd)
    return True


class SyncBatch:
    """New files and directories made durable together by one `sync()` (module doc)."""

    def __init__(self, root: str | os.PathLike) -> None:
        #: A directory on the file system the batch's paths live on (the node's data directory).
        self.root = Path(root)
        self._files: set[Path] = set()
        self._dirs: set[Path] = set()
        #: path -> new bytes of a batched replacement (the latest write wins).
        self._replacements: dict[Path, bytes] = {}
        self._lock = threading.Lock()
        #: Durability calls made by `sync` (syncfs or fsync; an operation count: tests, metrics).
        self.calls = 0

    @contextlib.contextmanager
    def deferring(self) -> Iterator["SyncBatch"]:
        """Within the block (this thread), `atomic_write` of a new file records it here unsynced."""
        outer = getattr(_DEFERRING, "batch", None)
        _DEFERRING.batch = self
        try:
            yield self
        finally:
            _DEFERRING.batch = outer

    def add_file(self, path: Path) -> None:
        """A new file whose bytes and directory entry `sync` must make durable."""
        with self._lock:
            self._files.add(path)
            self._dirs.add(path.parent)

    def add_dir(self, path: Path) -> None:
        """A new directory: its entries and its own entry in its parent."""
        with self._lock:
            self._dirs.add(path)
            self._dirs.add(path.parent)

    def add_replacement(self, path: Path, data: bytes) -> None:
        """`data` replaces the existing file `path` at the next `sync` (module doc: two phases)."""
        with _PENDING_LOCK:
            other = _PENDING.get(path)
            if other is not None and other is not self:
                other._forget(path)
            _PENDING[path] = self
            with self._lock:
                self._replacements[path] = data

    def _forget(self, path: Path) -> None:
        """An unbatched write of `path` came after this batch's replacement. Under `_PENDING_LOCK`."""
        with self._lock:
            self._replacements.pop(path, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._files) + len(self._dirs) + len(self._replacements)

    def sync(self) -> None:
        """Make everything recorded durable; returns once it is. Empties the batch."""
        with self._lock:
            files, dirs, replacements = self._files, self._dirs, self._replacements
            self._files, self._dirs, self._replacements = set(), set(), {}
        temps = {}
        for path, data in replacements.items():
            temp = path.with_name(path.name + BATCH_TEMP_SUFFIX)
            try:
                with open(temp, "wb") as f:
                    f.write(data)
                temps[path] = temp
            except FileNotFoundError:  # its directory was deleted meanwhile: nothing to keep
                with _PENDING_LOCK:
                    if _PENDING.get(path) is self:
                        del _PENDING[path]
        self._make_durable(files | set(temps.values()), dirs)
        if not temps:
            return
        for path, temp in temps.items():
            with _PENDING_LOCK:
                current = _PENDING.get(path) is self
                if current:
                    del _PENDING[path]
                    with contextlib.suppress(FileNotFoundError):
                        os.replace(temp, path)
            if not current:  # an unbatched write came after: its bytes are the newer ones
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)
        self._make_durable(set(), {p.parent for p in temps})

    def _make_durable(self, files: set[Path], dirs: set[Path]) -> None:
        """One `syncfs` from `SYNCFS_MIN_PATHS` paths on, else one fsync per file and directory."""
        if not files and not dirs:
            return
        if len(files) + len(dirs) >= SYNCFS_MIN_PATHS and syncfs(self.root):
            self.calls += 1
            return
        for f in sorted(files):
            with contextlib.suppress(FileNotFoundError):  # deleted meanwhile: nothing to keep
                fd = os.open(f, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                self.calls += 1
        # Deepest first: a directory's entries before its own entry in its parent.
        for d in sorted(dirs, key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(FileNotFoundError):
                fsync_dir(d)
                self.calls += 1


def atomic_write(path: str | os.PathLike, data: bytes, *, fsync: bool = True, mode: int | None = None,
                 batchable: bool = False) -> None:
    """Replace `path` with `data` so that after a crash it holds either the old or the new bytes.

    `mode` (e.g. 0o600 for a secret) is the new file's permission bits from its creation on, so the
    bytes are never readable by others, not even briefly; None leaves them to the umask. Inside
    `SyncBatch.deferring()` a file that does not exist yet is written without fsync and recorded
    in the batch, and with `batchable` so is the replacement of an existing one (module doc)."""
    path = Path(path)
    batch = getattr(_DEFERRING, "batch", None) if fsync else None
    if batch is not None and path.exists():
        if batchable and mode is None:
            batch.add_replacement(path, data)
            return
        batch = None  # a replacement keeps the old bytes safe on its own
    if _PENDING:
        with _PENDING_LOCK:
            pending = _PENDING.pop(path, None)
            if pending is not None:
                pending._forget(path)  # these bytes are newer than the batch's
    tmp = path.with_name(path.name + ".tmp")
    if mode is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # a leftover from a crash keeps its old mode through O_CREAT
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666 if mode is None else mode)
    with open(fd, "wb") as f:
        f.write(data)
        if fsync and batch is None:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if batch is not None:
        batch.add_file(path)
    elif fsync:
        fsync_dir(path.parent)
