"""The object-store seam: one small interface, an S3 implementation and a local-filesystem one.

    put(key, data) -> etag                      unconditional write
    put_if_absent(key, data) -> etag            If-None-Match: *   (PreconditionFailedError if it exists)
    put_if_match(key, data, etag) -> etag       If-Match: etag     (PreconditionFailedError otherwise,
                                                                    also when the object is missing)
    get(key) -> (bytes, etag)                   ObjectNotFoundError if missing
    get_range(key, start, end) -> bytes         bytes [start, end), end exclusive; short at the end of
                                                the object, b"" from its end on
    head(key) -> ObjectInfo                     ObjectNotFoundError if missing
    list(prefix) -> [ObjectInfo]                every key starting with `prefix`, sorted
    list_after(prefix, start_after, limit)      the first `limit` of those sorted after `start_after`
                                                (S3's ListObjectsV2 `StartAfter` + `MaxKeys`)
    list_prefixes(prefix) -> [str]              the "directories" right under `prefix` (delimiter '/')
    delete(key), delete_many(keys)              idempotent: a missing key is not an error

Keys are relative, `/`-separated (`orders-0/manifest.json`); a store adds its own prefix (an S3 key
prefix, a root directory). `data` is bytes or a `Payload` (a sized, seekable byte source such as a
slice of a local file) so that large segments are streamed, not copied into memory.

Etags are opaque strings: S3's, or a content hash on the filesystem. Writes are atomic: a reader sees
the old or the new object, never a mix; conditional writes are atomic against each other.

Errors are typed (tiering/errors.py): TransientStoreError (retry later), ObjectNotFoundError,
PreconditionFailedError, StoreConfigurationError, StoreError. Every request is counted in
`store.stats` by kind (PUT, GET, HEAD, LIST, DELETE) with the bytes moved, so "requests per MB"
can be computed.

Concurrency: implementations are thread-safe; calls block (run them off the event loop).
"""

from __future__ import annotations

import abc
import io
import os
import threading
from dataclasses import dataclass
from typing import Iterable, Protocol, runtime_checkable

from lakelog.tiering.errors import InvalidObjectKeyError

#: Longest key (after the store's prefix) accepted, as S3's limit.
MAX_KEY_BYTES = 1024
#: Names a key component may not start with (the filesystem store keeps its internals there).
RESERVED_PREFIX = ".lakelog-"


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One stored object. `etag` may be None in listings where it would cost a read."""

    key: str
    size: int
    etag: str | None
    last_modified_ms: int


@runtime_checkable
class Payload(Protocol):
    """A sized, seekable source of bytes to upload (see `FileSlice`)."""

    def __len__(self) -> int: ...

    def read(self, n: int = -1) -> bytes: ...

    def seek(self, offset: int, whence: int = 0) -> int: ...

    def tell(self) -> int: ...


class FileSlice(io.RawIOBase):
    """Bytes [start, end) of an open file descriptor, as a seekable read-only stream.

    Reads use `os.pread`, so several slices may share a descriptor. The descriptor is not closed.
    """

    def __init__(self, fd: int, start: int, end: int) -> None:
        super().__init__()
        if not 0 <= start <= end:
            raise ValueError(f"bad file slice [{start}, {end})")
        self._fd = fd
        self._start = start
        self._end = end
        self._pos = 0

    def __len__(self) -> int:
        return self._end - self._start

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = len(self) + offset
        else:
            raise ValueError(f"bad whence {whence}")
        if pos < 0:
            raise ValueError("negative seek position")
        self._pos = pos
        return pos

    def readinto(self, buffer) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        n = min(len(view), len(self) - self._pos)
        if n <= 0:
            return 0
        data = os.pread(self._fd, n, self._start + self._pos)
        view[:len(data)] = data
        self._pos += len(data)
        return len(data)

    def read(self, n: int = -1) -> bytes:  # type: ignore[override]
        left = len(self) - self._pos
        if n is None or n < 0 or n > left:
            n = left
        if n <= 0:
            return b""
        parts = []
        while n > 0:
            chunk = os.pread(self._fd, n, self._start + self._pos)
            if not chunk:
                raise OSError(f"file ended {n} bytes before its slice [{self._start}, {self._end})")
            parts.append(chunk)
            self._pos += len(chunk)
            n -= len(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def readall(self) -> bytes:
        return self.read(-1)


class StoreStats:
    """Requests and bytes per request kind; thread-safe. `snapshot()` for metrics."""

    KINDS = ("PUT", "GET", "HEAD", "LIST", "DELETE")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = {k: 0 for k in self.KINDS}
        self.errors = {k: 0 for k in self.KINDS}
        self.bytes_written = 0
        self.bytes_read = 0

    def record(self, kind: str, *, written: int = 0, read: int = 0, error: bool = False) -> None:
        with self._lock:
            self.requests[kind] += 1
            if error:
                self.errors[kind] += 1
            self.bytes_written += written
            self.bytes_read += read

    def add_read_bytes(self, n: int) -> None:
        with self._lock:
            self.bytes_read += n

    def snapshot(self) -> dict:
        with self._lock:
            return {"requests": dict(self.requests), "errors": dict(self.errors),
                    "bytes_written": self.bytes_written, "bytes_read": self.bytes_read}


def check_key(key: str) -> str:
    """Return `key` if it is a valid relative object key, else raise InvalidObjectKeyError."""
    if not isinstance(key, str) or not key:
        raise InvalidObjectKeyError("an object key must be a non-empty string", key=repr(key))
    if len(key.encode("utf-8")) > MAX_KEY_BYTES:
        raise InvalidObjectKeyError(f"object key is longer than {MAX_KEY_BYTES} bytes", key=key[:64] + "...")
    if key.startswith("/") or "\\" in key or any(ord(c) < 0x20 for c in key):
        raise InvalidObjectKeyError("object key is absolute or holds a backslash or a control character", key=key)
    for part in key.split("/"):
        if part in ("", ".", "..") or part.startswith(RESERVED_PREFIX):
            raise InvalidObjectKeyError(f"object key component {part!r} is empty, relative or reserved", key=key)
    return key


def check_prefix(prefix: str) -> str:
    """A listing prefix: empty, or a key prefix (it may end inside a component or with '/')."""
    if prefix:
        check_key(prefix.rstrip("/") or "x")
    return prefix


class ObjectStore(abc.ABC):
    """The interface every remote tier store implements (see the module docstring)."""

    #: Requests and bytes moved, by request kind.
    stats: StoreStats

    @property
    @abc.abstractmethod
    def url(self) -> str:
        """Where the store points (`s3://bucket/prefix`, `file:///path`)."""

    @abc.abstractmethod
    def put(self, key: str, data: bytes | bytearray | memoryview | Payload) -> str:
        """Write `key` unconditionally. Returns the new etag."""

    @abc.abstractmethod
    def put_if_absent(self, key: str, data: bytes | bytearray | memoryview | Payload) -> str:
        """Create `key` only if it does not exist; PreconditionFailedError otherwise."""

    @abc.abstractmethod
    def put_if_match(self, key: str, data: bytes | bytearray | memoryview | Payload, etag: str) -> str:
        """Replace `key` only if its etag is `etag`; PreconditionFailedError otherwise (or if missing)."""

    @abc.abstractmethod
    def get(self, key: str) -> tuple[bytes, str]:
        """(content, etag) of `key`; ObjectNotFoundError if missing."""

    @abc.abstractmethod
    def get_range(self, key: str, start: int, end: int) -> bytes:
        """Bytes [start, end) of `key` (short at its end); ObjectNotFoundError if missing."""

    @abc.abstractmethod
    def head(self, key: str) -> ObjectInfo:
        """Size and etag of `key`; ObjectNotFoundError if missing."""

    @abc.abstractmethod
    def list(self, prefix: str = "") -> list[ObjectInfo]:
        """Every object whose key starts with `prefix`, sorted by key."""

    def list_after(self, prefix: str, start_after: str, limit: int) -> list[ObjectInfo]:
        """The first `limit` objects (by key) whose key starts with `prefix` and sorts after
        `start_after`. Stores override this to list only those (S3's `StartAfter`), so that its
        cost does not grow with the keys before `start_after`; this default lists every key."""
        if limit < 1:
            raise ValueError(f"list_after limit must be >= 1, not {limit}")
        return [o for o in self.list(prefix) if o.key > start_after][:limit]

    def list_prefixes(self, prefix: str = "") -> list[str]:
        """The distinct "directories" right under `prefix` (which is empty or ends with '/'): every
        `prefix + name + '/'` that some key starts with, sorted. Stores override this with a
        delimiter listing; this default lists every key."""
        check_prefix(prefix)
        out = {prefix + o.key[len(prefix):].split("/", 1)[0] + "/" for o in self.list(prefix)
               if "/" in o.key[len(prefix):]}
        return sorted(out)

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Delete `key`; a missing key is not an error."""

    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete every key (batched where the store allows); missing keys are not errors."""
        for key in keys:
            self.delete(key)

    def close(self) -> None:
        """Release connections and handles."""

    def __enter__(self) -> "ObjectStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
