"""Compare-and-swap access to one partition's manifest (remote log metadata).

`commit(writer_epoch, change)` is the only way a manifest changes:

    1. start from the last manifest this process read or wrote, with its etag (or GET it);
    2. fence: a writer whose leader epoch is below the manifest's is refused
       (FencedLeaderEpochError — a zombie leader); so is a writer of another incarnation of the
       topic (TopicIdMismatchError) or of a deleted one (RemotePartitionDeletedError);
    3. `change(manifest)` — a pure function from manifest_transitions.py — returns the next manifest, or None
       when there is nothing to do (e.g. a transition that already happened: retries are safe);
    4. stamp generation + 1 and leader epoch = max(manifest's, writer's); PUT it with
       `If-Match: <etag>` (or `If-None-Match: *` when there is no manifest yet);
    5. on PreconditionFailed another writer won the race: re-read, and apply `change` again to the
       new manifest — it re-checks whether the change is still valid and raises if not. After
       `max_attempts` lost races: ManifestConflictError.

A transient store error propagates; whether that PUT landed is unknown, and the caller's next
round finds out (the state machine tolerates both outcomes). `current(max_age_ms)` serves readers
from the cache; a commit in this process refreshes the cache at once.

Concurrency: thread-safe; commits of one ManifestStore are serialised by a lock (callers of one
partition share one instance), commits from other processes race through the store's CAS.
"""

from __future__ import annotations

import random
import threading
import time
from typing import Callable

from lakelog.tiering import manifest_codec
from lakelog.tiering.config import TIERING_CONFIG
from lakelog.tiering.errors import (
    FencedLeaderEpochError,
    ManifestConflictError,
    ObjectNotFoundError,
    PreconditionFailedError,
    RemotePartitionDeletedError,
    TopicIdMismatchError,
)
from lakelog.tiering.layout import manifest_key
from lakelog.tiering.manifest_model import PartitionManifest
from lakelog.tiering.store import ObjectStore

Change = Callable[[PartitionManifest], PartitionManifest | None]

#: The declared key bounding a commit's CAS attempts. A node passes its configured value; a writer
#: without a node's configuration (a Spark job, a tool) takes the key's default.
COMMIT_MAX_ATTEMPTS = TIERING_CONFIG.keys["remote.log.metadata.commit.max.attempts"]


class ManifestStore:
    """The manifest of one partition: cached reads and CAS commits."""

    def __init__(self, store: ObjectStore, topic: str, partition: int, *, topic_id: str | None = None,
                 max_attempts: int = COMMIT_MAX_ATTEMPTS.default, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.store = store
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.key = manifest_key(topic, partition)
        self.max_attempts = max_attempts
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._cached: tuple[PartitionManifest, str | None, float] | None = None  # manifest, etag, read at
        self._last_known: PartitionManifest | None = None  # never forgotten: see `last_known`
        #: Lost CAS races, for metrics and tests.
        self.conflicts = 0
        self.commits = 0

    # ------------------------------------------------------------------ reads

    def _fetch(self) -> tuple[PartitionManifest, str | None]:
        try:
            data, etag = self.store.get(self.key)
        except ObjectNotFoundError:
            m, etag = PartitionManifest.empty(self.topic, self.partition, self.topic_id), None
        else:
            m = manifest_codec.decode(data, key=self.key)
        self._cached = (m, etag, self._clock())
        self._last_known = m
        return m, etag

    def load(self) -> PartitionManifest:
        """GET the manifest now (an empty one if none exists yet) and cache it."""
        with self._lock:
            return self._fetch()[0]

    def current(self, max_age_ms: int = 0) -> PartitionManifest:
        """The cached manifest if it is at most `max_age_ms` old, else a fresh one."""
        cached = self._cached
        if cached is not None and (self._clock() - cached[2]) * 1000 <= max_age_ms:
            return cached[0]
        return self.load()

    @property
    def cached(self) -> PartitionManifest | None:
        """The last manifest read or written by this process, without any request."""
        return self._cached[0] if self._cached else None

    @property
    def last_known(self) -> PartitionManifest | None:
        """The last manifest known to have been stored, kept even when the cache is dropped after an
        ambiguous commit (whose PUT may or may not have landed): the remote tier covers at least
        what it says, so local retention may rely on it while the store is unreachable."""
        return self._last_known

    def invalidate(self) -> None:
        self._cached = None

    # ------------------------------------------------------------------ commits

    def _admit(self, m: PartitionManifest, writer_epoch: int, *, force: bool, allow_deleted: bool
               ) -> PartitionManifest:
        """Fencing; returns the manifest the change applies to (a fresh one replacing the tombstone
        of a deleted older incarnation)."""
        if self.topic_id is not None and m.topic_id is not None and m.topic_id != self.topic_id:
            if m.deleted:
                # A new incarnation of the topic takes over the tombstone of the deleted one.
                return PartitionManifest.empty(self.topic, self.partition, self.topic_id).replace(
                    generation=m.generation)
            raise TopicIdMismatchError(f"manifest {self.key} belongs to topic id {m.topic_id}, "
                                       f"not {self.topic_id}")
        if m.deleted and not allow_deleted:
            raise RemotePartitionDeletedError(f"the remote data of {self.topic}-{self.partition} was deleted "
                                              f"with its topic")
        if not force and writer_epoch < m.leader_epoch:
            raise FencedLeaderEpochError(f"leader epoch {writer_epoch} is fenced: the manifest of "
                                         f"{self.topic}-{self.partition} is at epoch {m.leader_epoch}")
        if m.topic_id is None and self.topic_id is not None:
            m = m.replace(topic_id=self.topic_id)
        return m

    def commit(self, writer_epoch: int, change: Change, *, force: bool = False,
               allow_deleted: bool = False) -> PartitionManifest:
        """Apply `change` with compare-and-swap, stamped with `writer_epoch`; returns the manifest now
        stored (unchanged when `change` returned None). `force` skips the epoch check (topic
        deletion); `allow_deleted` lets a deleted partition's cleanup continue."""
        with self._lock:
            if self._cached is None:
                self._fetch()
            m, etag, _ = self._cached  # type: ignore[misc]
            attempt = 0
            while True:
                base = self._admit(m, writer_epoch, force=force, allow_deleted=allow_deleted)
                new = change(base)
                if new is None and base is m and m.leader_epoch >= writer_epoch:
                    return m
                new = (new or base).replace(generation=m.generation + 1,
                                            leader_epoch=max(base.leader_epoch, writer_epoch))
                data = manifest_codec.encode(new)
                try:
                    if etag is None:
                        new_etag = self.store.put_if_absent(self.key, data)
                    else:
                        new_etag = self.store.put_if_match(self.key, data, etag)
                except PreconditionFailedError:
                    attempt += 1
                    self.conflicts += 1
                    if attempt >= self.max_attempts:
                        self._cached = None
                        raise ManifestConflictError(f"manifest {self.key}: {attempt} compare-and-swap attempts "
                                                    f"lost to other writers") from None
                    self._sleep(random.uniform(0, min(0.2, 0.002 * 2 ** attempt)))
                    m, etag = self._fetch()
                    continue
                except BaseException:
                    # The PUT may or may not have landed: forget the cache, re-read next time.
                    self._cached = None
                    raise
                self.commits += 1
                self._cached = (new, new_etag, self._clock())
                self._last_known = new
                return new
