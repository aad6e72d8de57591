"""Crash-safe file helpers: write a temp file, fsync, rename over, fsync the directory."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory so a rename or create inside it survives a crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, data: bytes, *, fsync: bool = True, mode: int | None = None) -> None:
    """Replace `path` with `data` so that after a crash it holds either the old or the new bytes.

    `mode` (e.g. 0o600 for a secret) is the new file's permission bits from its creation on, so the
    bytes are never readable by others, not even briefly; None leaves them to the umask."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    if mode is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # a leftover from a crash keeps its old mode through O_CREAT
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666 if mode is None else mode)
    with open(fd, "wb") as f:
        f.write(data)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if fsync:
        fsync_dir(path.parent)
