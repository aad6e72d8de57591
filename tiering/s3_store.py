"""The S3 object store (`s3://bucket/prefix`), on boto3. The only module that imports boto3.

Settings come from the environment as every AWS tool reads them — `AWS_ENDPOINT_URL` (or
`AWS_ENDPOINT_URL_S3`) for S3-compatible stores (MinIO, moto's server), `AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION` (or `AWS_DEFAULT_REGION`, default
us-east-1) — unless passed explicitly. Timeouts, attempts and the connection pool come from
`TieringConfig` (`remote.storage.*`); botocore's "standard" retry mode retries throttling,
5xx and connection errors with jittered backoff, then the error surfaces as TransientStoreError.

Conditional writes are S3's: `If-None-Match: *` (create only) and `If-Match: <etag>` (replace only
that version); a lost race is 412 PreconditionFailed (or 409 ConditionalRequestConflict while
another conditional write is in flight), both raised as PreconditionFailedError. An `If-Match` on a
missing object answers 404 on S3 and moto: also PreconditionFailedError here.

Request checksums are computed only when S3 requires them: the data carries its own (batch CRCs,
the manifest's CRC-32C, per-file CRCs in the manifest).

Concurrency: a boto3 client is thread-safe; so is this store.
"""

from __future__ import annotations

import os
import re
import time
from typing import Iterable

import boto3
import botocore.config
import botocore.exceptions

from lakelog.tiering.config import TieringConfig
from lakelog.tiering.errors import (
    ObjectNotFoundError,
    PreconditionFailedError,
    StoreConfigurationError,
    StoreError,
    TransientStoreError,
)
from lakelog.tiering.store import ObjectInfo, ObjectStore, Payload, StoreStats, check_key, check_prefix

_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_IP_ADDRESS = re.compile(r"^\d+\.\d+\.\d+\.\d+$")
#: Keys per DeleteObjects request (S3's limit).
DELETE_BATCH = 1000

_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}
_PRECONDITION = {"PreconditionFailed", "412", "ConditionalRequestConflict"}
_CONFIGURATION = {"NoSuchBucket", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch",
                  "InvalidBucketName", "AllAccessDisabled", "PermanentRedirect", "AuthorizationHeaderMalformed",
                  "InvalidToken", "ExpiredToken", "403"}
_TRANSIENT = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestTimeTooSkewed",
              "InternalError", "ServiceUnavailable", "OperationAborted", "503", "500"}


def check_bucket_name(bucket: str) -> str:
    """S3's bucket naming rules (3-63 chars of a-z 0-9 . -, alphanumeric ends, not an IP)."""
    if (not _BUCKET_NAME.match(bucket or "") or ".." in bucket or ".-" in bucket or "-." in bucket
            or _IP_ADDRESS.match(bucket) or bucket.startswith(("xn--", "sthree-"))
            or bucket.endswith(("-s3alias", "--ol-s3"))):
        raise StoreConfigurationError(f"{bucket!r} is not a valid S3 bucket name")
    return bucket


def _translate(e: Exception, key: str | None) -> StoreError:
    """A botocore exception as a typed store error."""
    if isinstance(e, botocore.exceptions.ClientError):
        err = e.response.get("Error", {})
        code = str(err.get("Code", ""))
        status = int(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        message = f"S3 {code or status}: {err.get('Message', '')}".rstrip(": ")
        if code in _NOT_FOUND:
            return ObjectNotFoundError(message, key=key)
        if code in _PRECONDITION or status == 412:
            return PreconditionFailedError(message, key=key)
        if code in _CONFIGURATION:
            return StoreConfigurationError(message, key=key)
        if code in _TRANSIENT or status >= 500 or status == 429:
            return TransientStoreError(message, key=key)
        return StoreError(message, key=key)
    if isinstance(e, (botocore.exceptions.NoCredentialsError, botocore.exceptions.PartialCredentialsError)):
        return StoreConfigurationError(f"S3 credentials: {e}", key=key)
    if isinstance(e, (botocore.exceptions.ConnectionError, botocore.exceptions.HTTPClientError)):
        return TransientStoreError(f"S3 unreachable: {e}", key=key)
    if isinstance(e, botocore.exceptions.BotoCoreError):
        return StoreError(f"S3 client error: {e}", key=key)
    raise e


class S3Store(ObjectStore):
    """Objects under `prefix` in one S3 bucket."""

    def __init__(self, bucket: str, prefix: str = "", *, config: TieringConfig | None = None,
                 endpoint_url: str | None = None, region: str | None = None,
                 access_key_id: str | None = None, secret_access_key: str | None = None,
                 session_token: str | None = None) -> None:
        self.bucket = check_bucket_name(bucket)
        self.prefix = prefix.strip("/")
        if self.prefix:
            check_key(self.prefix)
        cfg = config or TieringConfig()
        self.endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        self.region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
        style = cfg.remote_storage_s3_addressing_style
        if style == "auto":
            style = "path" if self.endpoint_url else "auto"
        client_config = botocore.config.Config(
            connect_timeout=cfg.remote_storage_connect_timeout_ms / 1000,
            read_timeout=cfg.remote_storage_request_timeout_ms / 1000,
            retries={"max_attempts": cfg.remote_storage_max_attempts, "mode": "standard"},
            max_pool_connections=cfg.remote_storage_max_connections,
            s3={"addressing_style": style},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            user_agent_extra="lakelog",
        )
        session = boto3.session.Session(aws_access_key_id=access_key_id, aws_secret_access_key=secret_access_key,
                                        aws_session_token=session_token, region_name=self.region)
        try:
            self._client = session.client("s3", endpoint_url=self.endpoint_url, config=client_config)
        except (botocore.exceptions.BotoCoreError, ValueError) as e:
            raise StoreConfigurationError(f"cannot build an S3 client: {e}") from None
        self.stats = StoreStats()

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def __repr__(self) -> str:
        return f"S3Store({self.url}, endpoint={self.endpoint_url or 'aws'})"

    def _full(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _call(self, kind: str, key: str | None, fn, *, written: int = 0):
        try:
            result = fn()
        except Exception as e:  # noqa: BLE001 - translated or re-raised
            self.stats.record(kind, error=True)
            raise _translate(e, key) from None
        self.stats.record(kind, written=written)
        return result

    # ------------------------------------------------------------------ writes

    def _put(self, key: str, data, **conditions) -> str:
        full = self._full(key)
        size = len(data)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            data.seek(0)
        elif isinstance(data, memoryview):
            data = data.tobytes()
        resp = self._call("PUT", key, lambda: self._client.put_object(
            Bucket=self.bucket, Key=full, Body=data, ContentLength=size, **conditions), written=size)
        return resp["ETag"]

    def put(self, key: str, data: bytes | bytearray | memoryview | Payload) -> str:
        return self._put(key, data)

    def put_if_absent(self, key: str, data: bytes | bytearray | memoryview | Payload) -> str:
        return self._put(key, data, IfNoneMatch="*")

    def put_if_match(self, key: str, data: bytes | bytearray | memoryview | Payload, etag: str) -> str:
        try:
            return self._put(key, data, IfMatch=etag)
        except ObjectNotFoundError:
            raise PreconditionFailedError("object does not exist (If-Match)", key=key) from None

    # ------------------------------------------------------------------ reads

    def get(self, key: str) -> tuple[bytes, str]:
        full = self._full(key)

        def fetch():
            resp = self._client.get_object(Bucket=self.bucket, Key=full)
            return resp["Body"].read(), resp["ETag"]

        data, etag = self._call("GET", key, fetch)
        self.stats.add_read_bytes(len(data))
        return data, etag

    def get_range(self, key: str, start: int, end: int) -> bytes:
        if start < 0 or end < start:
            raise StoreError(f"bad range [{start}, {end})", key=key)
        if end == start:
            return b""
        full = self._full(key)

        def fetch():
            try:
                resp = self._client.get_object(Bucket=self.bucket, Key=full, Range=f"bytes={start}-{end - 1}")
            except botocore.exceptions.ClientError as e:
                if e.response.get("Error", {}).get("Code") == "InvalidRange":
                    return b""  # the range starts at or past the end of the object
                raise
            return resp["Body"].read()

        data = self._call("GET", key, fetch)
        self.stats.add_read_bytes(len(data))
        return data

    def head(self, key: str) -> ObjectInfo:
        full = self._full(key)
        resp = self._call("HEAD", key, lambda: self._client.head_object(Bucket=self.bucket, Key=full))
        return ObjectInfo(key, int(resp["ContentLength"]), resp["ETag"],
                          int(resp["LastModified"].timestamp() * 1000))

    def list(self, prefix: str = "") -> list[ObjectInfo]:
        return self._listed(prefix)

    def list_after(self, prefix: str, start_after: str, limit: int) -> list[ObjectInfo]:
        check_prefix(prefix)
        if limit < 1:
            raise ValueError(f"list_after limit must be >= 1, not {limit}")
        return self._listed(prefix, start_after=start_after, limit=limit)

    def _listed(self, prefix: str, *, start_after: str | None = None, limit: int | None = None) -> list[ObjectInfo]:
        """Keys under `prefix` in key order, every page of ListObjectsV2 followed; with `start_after`
        (S3's StartAfter) only the keys after it, with `limit` at most that many (MaxKeys cut to it)."""
        check_prefix(prefix)
        full = f"{self.prefix}/{prefix}" if self.prefix else prefix
        strip = len(self.prefix) + 1 if self.prefix else 0
        after = None
        if start_after is not None:
            after = f"{self.prefix}/{start_after}" if self.prefix else start_after
        out: list[ObjectInfo] = []
        token: str | None = None
        while limit is None or len(out) < limit:
            kwargs = {"Bucket": self.bucket, "Prefix": full, "MaxKeys": 1000 if limit is None else min(1000, limit - len(out))}
            if token:
                kwargs["ContinuationToken"] = token
            elif after is not None and after > full:
                kwargs["StartAfter"] = after
            resp = self._call("LIST", prefix, lambda: self._client.list_objects_v2(**kwargs))
            for obj in resp.get("Contents", []):
                out.append(ObjectInfo(obj["Key"][strip:], int(obj["Size"]), obj.get("ETag"),
                                      int(obj["LastModified"].timestamp() * 1000)))
            if not resp.get("IsTruncated"):
                break
            token = resp.get("NextContinuationToken")
        out.sort(key=lambda o: o.key)
        return out if limit is None else out[:limit]

    def list_prefixes(self, prefix: str = "") -> list[str]:
        check_prefix(prefix)
        full = f"{self.prefix}/{prefix}" if self.prefix else prefix
        strip = len(self.prefix) + 1 if self.prefix else 0
        out: list[str] = []
        token: str | None = None
        while True:
            kwargs = {"Bucket": self.bucket, "Prefix": full, "Delimiter": "/", "MaxKeys": 1000}
            if token:
                kwargs["ContinuationToken"] = token
            resp = self._call("LIST", prefix, lambda: self._client.list_objects_v2(**kwargs))
            out.extend(p["Prefix"][strip:] for p in resp.get("CommonPrefixes", []))
            if not resp.get("IsTruncated"):
                break
            token = resp.get("NextContinuationToken")
        return sorted(out)

    # ------------------------------------------------------------------ deletes

    def delete(self, key: str) -> None:
        full = self._full(key)
        self._call("DELETE", key, lambda: self._client.delete_object(Bucket=self.bucket, Key=full))

    def delete_many(self, keys: Iterable[str]) -> None:
        fulls = [self._full(k) for k in keys]
        for i in range(0, len(fulls), DELETE_BATCH):
            batch = fulls[i:i + DELETE_BATCH]
            resp = self._call("DELETE", batch[0], lambda: self._client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True}))
            errors = [e for e in resp.get("Errors", []) if e.get("Code") not in _NOT_FOUND]
            if errors:
                first = errors[0]
                code = str(first.get("Code", ""))
                cls = TransientStoreError if code in _TRANSIENT else StoreError
                raise cls(f"S3 DeleteObjects: {len(errors)} key(s) failed, first {code}: "
                          f"{first.get('Message', '')}", key=first.get("Key"))

    # ------------------------------------------------------------------ dev and tests

    def ensure_bucket(self) -> None:
        """Create the bucket if it does not exist (development servers and tests)."""
        try:
            self._client.head_bucket(Bucket=self.bucket)
            return
        except botocore.exceptions.ClientError:
            pass
        except Exception as e:  # noqa: BLE001
            raise _translate(e, None) from None
        kwargs = {"Bucket": self.bucket}
        if self.region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
        try:
            self._client.create_bucket(**kwargs)
        except botocore.exceptions.ClientError as e:
            if e.response.get("Error", {}).get("Code") not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise _translate(e, None) from None

    def close(self) -> None:
        self._client.close()


def wait_until_reachable(store: S3Store, timeout_s: float = 10.0) -> None:
    """Poll the store with a cheap LIST until it answers (tests starting a server)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            store.list("lakelog-probe/")
            return
        except TransientStoreError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
