"""Per-partition job leases in the remote tier (`_jobs/<topic>-<partition>.lease`).

Layout: canonical JSON `{"version": 1, "owner": str, "job": str, "expires_ms": int}`.

A job takes the lease of a partition before it changes anything there, and renews it between
steps; two runs (two schedulers, a cron job and an operator) therefore never work on one partition
at once. Acquisition is a conditional write: `If-None-Match: *` when there is no lease, `If-Match:
<etag>` to take over an expired lease (or renew one's own), so of two racing runs exactly one
wins. The lease is a courtesy between jobs, not the safety net: every manifest change still goes
through the manifest compare-and-swap, which also orders jobs against the nodes' tiering.

Crash behaviour: a crashed holder's lease expires after its TTL; the next run takes it over.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from lakelog.tiering.errors import LeaseHeldError
from lakelog.tiering.errors import ObjectNotFoundError, PreconditionFailedError
from lakelog.tiering.store import ObjectStore

LEASE_VERSION = 1
DEFAULT_TTL_MS = 10 * 60 * 1000


def lease_key(topic: str, partition: int) -> str:
    return f"_jobs/{topic}-{partition}.lease"


@dataclass
class Lease:
    """A held lease; `renew()` extends it, `release()` gives it up (both conditional)."""

    store: ObjectStore
    key: str
    owner: str
    job: str
    ttl_ms: int
    etag: str
    expires_ms: int

    def _body(self, expires_ms: int) -> bytes:
        return json.dumps({"version": LEASE_VERSION, "owner": self.owner, "job": self.job,
                           "expires_ms": expires_ms}, sort_keys=True, separators=(",", ":")).encode()

    def renew(self, now_ms: int | None = None) -> None:
        """Extend the lease; raises LeaseHeldError if it was lost (expired and taken over)."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        expires = now + self.ttl_ms
        try:
            self.etag = self.store.put_if_match(self.key, self._body(expires), self.etag)
        except PreconditionFailedError:
            holder = _read(self.store, self.key)
            raise LeaseHeldError(self.key, holder[0] if holder else "nobody", holder[1] if holder else 0) from None
        self.expires_ms = expires

    def release(self) -> None:
        """Expire the lease now (a no-op if it was lost meanwhile)."""
        try:
            self.etag = self.store.put_if_match(self.key, self._body(0), self.etag)
        except (PreconditionFailedError, ObjectNotFoundError):
            pass


def _read(store: ObjectStore, key: str) -> tuple[str, int, str] | None:
    try:
        data, etag = store.get(key)
    except ObjectNotFoundError:
        return None
    try:
        doc = json.loads(data)
        if doc.get("version") != LEASE_VERSION:
            raise ValueError
        return str(doc["owner"]), int(doc["expires_ms"]), etag
    except (ValueError, KeyError, TypeError):
        return "unreadable lease", 0, etag  # treated as expired: a torn lease must not block jobs forever


def acquire(store: ObjectStore, topic: str, partition: int, *, owner: str, job: str,
            ttl_ms: int = DEFAULT_TTL_MS, now_ms: int | None = None) -> Lease:
    """Take the partition's lease (or renew our own); LeaseHeldError if another run holds it."""
    if not 1_000 <= ttl_ms <= 24 * 3600 * 1000:
        raise ValueError("a lease TTL must lie between 1 s and 24 h")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    key = lease_key(topic, partition)
    lease = Lease(store, key, owner, job, ttl_ms, "", now + ttl_ms)
    current = _read(store, key)
    try:
        if current is None:
            lease.etag = store.put_if_absent(key, lease._body(now + ttl_ms))
            return lease
        holder, expires, etag = current
        if holder != owner and expires > now:
            raise LeaseHeldError(key, holder, expires)
        lease.etag = store.put_if_match(key, lease._body(now + ttl_ms), etag)
        return lease
    except PreconditionFailedError:
        again = _read(store, key)
        raise LeaseHeldError(key, again[0] if again else "another run", again[1] if again else 0) from None
