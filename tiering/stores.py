"""Opening a store by URL: `s3://bucket[/prefix]` (tiering/s3_store.py, the only module that imports
boto3) or `file:///absolute/path` (tiering/fs_store.py). Kept apart from tiering/store.py, the
interface both implement, so that neither implementation imports the module that imports it."""

from __future__ import annotations

from urllib.parse import unquote, urlparse

from lakelog.tiering.config import TieringConfig
from lakelog.tiering.errors import StoreConfigurationError
from lakelog.tiering.fs_store import FileSystemStore
from lakelog.tiering.store import ObjectStore


def open_store(url: str, config: TieringConfig | None = None, **options) -> ObjectStore:
    """The store named by `url`: `s3://bucket[/prefix]` or `file:///absolute/path`.

    S3 takes `AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION` from the
    environment unless `options` (endpoint_url, region, access_key_id, secret_access_key) say
    otherwise; timeouts and retries come from `config`.
    """
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        from lakelog.tiering.s3_store import S3Store  # imported only when asked: it imports boto3

        bucket = parsed.netloc
        prefix = unquote(parsed.path).strip("/")
        return S3Store(bucket, prefix, config=config, **options)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise StoreConfigurationError(f"file URL {url!r} names a host; use file:///absolute/path")
        path = unquote(parsed.path)
        if not path.startswith("/"):
            raise StoreConfigurationError(f"file URL {url!r} must hold an absolute path")
        if options:
            raise StoreConfigurationError(f"file stores take no options, got {sorted(options)}")
        return FileSystemStore(path)
    raise StoreConfigurationError(f"remote storage URL {url!r}: the scheme must be s3:// or file://")
