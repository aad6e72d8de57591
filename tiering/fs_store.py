"""The local-filesystem object store (`file:///path`): the embedded default and the test double.

Same semantics as the S3 store (see store.py). Directory layout under the root:

    <key>                     one file per object; '/' in keys are subdirectories
    .lakelog-tmp/<uuid>.tmp   objects being written (removed on open once an hour old)
    .lakelog-locks/<n>.lock   64 lock files; a key's conditional writes hold lock crc32(key) % 64

Etag: the BLAKE2b-128 hex digest of the content. A manifest never repeats its bytes (its
generation grows with every commit), so a content etag gives compare-and-swap without ABA.

Writes are crash-safe and atomic: the content goes to a temp file, is fsynced, then moves into
place (`os.replace` for put / put_if_match, `os.link` for put_if_absent, which fails if the key
exists), then the directory is fsynced. After a crash an object is the old or the new content,
never a mix; a stale temp file is garbage, removed later. Conditional writes take the key's lock
(`fcntl.flock`, which excludes other processes and other threads alike) around check + install,
so two writers racing on a manifest see exactly one win.

Concurrency: thread-safe and process-safe on one host (flock). Not for NFS.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import time
import uuid
import zlib
from pathlib import Path
from typing import Iterable, Iterator

from lakelog.logstore.fileutil import fsync_dir
from lakelog.tiering.errors import (
    ObjectNotFoundError,
    PreconditionFailedError,
    StoreConfigurationError,
    StoreError,
    TransientStoreError,
)
from lakelog.tiering.store import RESERVED_PREFIX, ObjectInfo, ObjectStore, Payload, StoreStats, check_key, check_prefix

TMP_DIR = RESERVED_PREFIX + "tmp"
LOCK_DIR = RESERVED_PREFIX + "locks"
LOCK_SHARDS = 64
#: Temp files older than this are leftovers of a crash and are removed on open.
STALE_TEMP_SECONDS = 3600
_COPY_BYTES = 8 * 1024 * 1024


def content_etag(data: bytes | memoryview) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@contextlib.contextmanager
def _os_errors(key: str | None) -> Iterator[None]:
    """Map OS errors to store errors: permissions are configuration, the rest is transient."""
    try:
        yield
    except StoreError:
        raise
    except FileNotFoundError:
        raise ObjectNotFoundError("no such object", key=key) from None
    except PermissionError as e:
        raise StoreConfigurationError(f"permission denied: {e}", key=key) from None
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EIO, errno.EAGAIN, errno.EMFILE, errno.ENFILE, errno.EDQUOT):
            raise TransientStoreError(f"filesystem error: {e}", key=key) from None
        raise StoreError(f"filesystem error: {e}", key=key) from None


class FileSystemStore(ObjectStore):
    """Objects as files under one root directory."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root).absolute()
        self.stats = StoreStats()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            (self.root / TMP_DIR).mkdir(exist_ok=True)
            (self.root / LOCK_DIR).mkdir(exist_ok=True)
        except OSError as e:
            raise StoreConfigurationError(f"cannot use {self.root} as a remote store: {e}") from None
        self._remove_stale_temps()

    @property
    def url(self) -> str:
        return f"file://{self.root}"

    def __repr__(self) -> str:
        return f"FileSystemStore({self.root})"

    # ------------------------------------------------------------------ helpers

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def _remove_stale_temps(self) -> None:
        cutoff = time.time() - STALE_TEMP_SECONDS
        for p in (self.root / TMP_DIR).iterdir():
            with contextlib.suppress(OSError):
                if p.stat().st_mtime < cutoff:
                    p.unlink()

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        shard = zlib.crc32(key.encode("utf-8")) % LOCK_SHARDS
        fd = os.open(self.root / LOCK_DIR / f"{shard:02d}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the flock

    def _write_temp(self, data: bytes | bytearray | memoryview | Payload) -> tuple[Path, str, int]:
        """Write `data` to a new fsynced temp file: (path, etag, size)."""
        tmp = self.root / TMP_DIR / f"{uuid.uuid4().hex}.tmp"
        digest = hashlib.blake2b(digest_size=16)
        size = 0
        with open(tmp, "wb") as f:
            if isinstance(data, (bytes, bytearray, memoryview)):
                f.write(data)
                digest.update(data)
                size = len(data)
            else:
                data.seek(0)
                while True:
                    chunk = data.read(_COPY_BYTES)
                    if not chunk:
                        break
                    f.write(chunk)
                    digest.update(chunk)
                    size += len(chunk)
                if size != len(data):
                    f.close()
                    tmp.unlink(missing_ok=True)
                    raise StoreError(f"payload gave {size} bytes, declared {len(data)}")
            f.flush()
            os.fsync(f.fileno())
        return tmp, digest.hexdigest(), size

    def _install(self, tmp: Path, path: Path, *, exclusive: bool) -> None:
        """Move the temp file into place; retried if a concurrent delete pruned the parent directory."""
        for attempt in range(5):
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                if exclusive:
                    os.link(tmp, path)  # atomic: fails if the key exists
                    tmp.unlink()
                else:
                    os.replace(tmp, path)
                fsync_dir(path.parent)
                return
            except FileExistsError:
                raise PreconditionFailedError("object exists (If-None-Match: *)",
                                              key=str(path.relative_to(self.root))) from None
            except FileNotFoundError:
                if attempt == 4 or not tmp.exists():
                    raise

    @staticmethod
    def _file_etag(path: Path) -> str:
        digest = hashlib.blake2b(digest_size=16)
        with open(path, "rb") as f:
            while chunk := f.read(_COPY_BYTES):
                digest.update(chunk)
        return digest.hexdigest()

    def _write(self, key: str, data, *, mode: str, etag: str | None = None) -> str:
        path = self._path(key)
        tmp: Path | None = None
        ok = False
        try:
            with _os_errors(key):
                tmp, new_etag, size = self._write_temp(data)
                with self._locked(key):
                    if mode == "match":
                        try:
                            current = self._file_etag(path)
                        except FileNotFoundError:
                            raise PreconditionFailedError("object does not exist (If-Match)", key=key) from None
                        if current != etag:
                            raise PreconditionFailedError("object changed (If-Match)", key=key)
                    self._install(tmp, path, exclusive=(mode == "absent"))
                ok = True
                return new_etag
        finally:
            self.stats.record("PUT", written=len(data) if ok else 0, error=not ok)
            if tmp is not None:
                with contextlib.suppress(OSError):
                    tmp.unlink()

    # ------------------------------------------------------------------ the interface

    def put(self, key: str, data) -> str:
        return self._write(key, data, mode="put")

    def put_if_absent(self, key: str, data) -> str:
        return self._write(key, data, mode="absent")

    def put_if_match(self, key: str, data, etag: str) -> str:
        return self._write(key, data, mode="match", etag=etag)

    def get(self, key: str) -> tuple[bytes, str]:
        path = self._path(key)
        ok = False
        data = b""
        try:
            with _os_errors(key):
                data = path.read_bytes()
            ok = True
            return data, content_etag(data)
        finally:
            self.stats.record("GET", read=len(data), error=not ok)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        if start < 0 or end < start:
            raise StoreError(f"bad range [{start}, {end})", key=key)
        path = self._path(key)
        ok = False
        data = b""
        try:
            with _os_errors(key):
                fd = os.open(path, os.O_RDONLY)
                try:
                    data = os.pread(fd, end - start, start) if end > start else b""
                finally:
                    os.close(fd)
            ok = True
            return data
        finally:
            self.stats.record("GET", read=len(data), error=not ok)

    def head(self, key: str) -> ObjectInfo:
        path = self._path(key)
        ok = False
        try:
            with _os_errors(key):
                st = path.stat()
                info = ObjectInfo(key, st.st_size, self._file_etag(path), int(st.st_mtime * 1000))
            ok = True
            return info
        finally:
            self.stats.record("HEAD", error=not ok)

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        check_prefix(prefix)
        directory = prefix[: prefix.rfind("/") + 1]
        base = self.root / directory if directory else self.root
        out: list[ObjectInfo] = []
        ok = False
        try:
            with _os_errors(prefix):
                for dirpath, dirnames, filenames in os.walk(base):
                    if Path(dirpath) == self.root:
                        dirnames[:] = [d for d in dirnames if not d.startswith(RESERVED_PREFIX)]
                    rel_dir = os.path.relpath(dirpath, self.root)
                    for name in filenames:
                        key = name if rel_dir == "." else f"{rel_dir}/{name}"
                        if not key.startswith(prefix) or name.startswith(RESERVED_PREFIX):
                            continue
                        with contextlib.suppress(FileNotFoundError):  # deleted while listing
                            st = os.stat(os.path.join(dirpath, name))
                            out.append(ObjectInfo(key, st.st_size, None, int(st.st_mtime * 1000)))
            ok = True
        finally:
            self.stats.record("LIST", error=not ok)
        out.sort(key=lambda o: o.key)
        return out

    def list_after(self, prefix: str, start_after: str, limit: int) -> list[ObjectInfo]:
        """As `list`, from `start_after` on: directories are read whole (no listing starts
        mid-way), but a name is compared before anything else is done with it, and only the keys
        returned are stat'ed."""
        check_prefix(prefix)
        if limit < 1:
            raise ValueError(f"list_after limit must be >= 1, not {limit}")
        found: list[str] = []
        out: list[ObjectInfo] = []
        ok = False
        try:
            with _os_errors(prefix):
                pending = [prefix[: prefix.rfind("/") + 1]]
                while pending:
                    directory = pending.pop()
                    try:
                        entries = os.scandir(self.root / directory if directory else self.root)
                    except FileNotFoundError:
                        continue
                    with entries:
                        for e in entries:
                            key = directory + e.name
                            if e.is_dir(follow_symlinks=False):
                                sub = key + "/"
                                if (sub.startswith(prefix) or prefix.startswith(sub)) \
                                        and not (not directory and e.name.startswith(RESERVED_PREFIX)):
                                    pending.append(sub)
                            elif key > start_after and key.startswith(prefix) \
                                    and not e.name.startswith(RESERVED_PREFIX):
                                found.append(key)
                found.sort()
                for key in found:
                    if len(out) >= limit:
                        break
                    with contextlib.suppress(FileNotFoundError):  # deleted while listing
                        st = os.stat(self.root / key)
                        out.append(ObjectInfo(key, st.st_size, None, int(st.st_mtime * 1000)))
            ok = True
        finally:
            self.stats.record("LIST", error=not ok)
        return out

    def list_prefixes(self, prefix: str = "") -> list[str]:
        check_prefix(prefix)
        directory = prefix[: prefix.rfind("/") + 1]
        start = prefix[len(directory):]
        base = self.root / directory if directory else self.root
        out: list[str] = []
        ok = False
        try:
            with _os_errors(prefix):
                try:
                    entries = list(os.scandir(base))
                except FileNotFoundError:
                    entries = []
                for e in entries:
                    if e.is_dir(follow_symlinks=False) and e.name.startswith(start) \
                            and not e.name.startswith(RESERVED_PREFIX):
                        out.append(f"{directory}{e.name}/")
            ok = True
        finally:
            self.stats.record("LIST", error=not ok)
        return sorted(out)

    def delete(self, key: str) -> None:
        path = self._path(key)
        ok = False
        try:
            with _os_errors(key):
                with self._locked(key):
                    path.unlink(missing_ok=True)
                self._prune_dirs(path.parent)
            ok = True
        finally:
            self.stats.record("DELETE", error=not ok)

    def delete_many(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.delete(key)

    def _prune_dirs(self, directory: Path) -> None:
        """Remove empty directories up to the root (a concurrent writer re-creates what it needs)."""
        while directory != self.root and self.root in directory.parents:
            try:
                directory.rmdir()
            except OSError:
                return
            directory = directory.parent
