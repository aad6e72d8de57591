"""sync-tables' progress, kept in the topic's Delta table itself: each sync commit carries the
offsets it covers, so the table is the truth about what was synced (no pyspark here).

Every append of a sync step to `tables/<topic>` is one Delta commit holding, besides its `add`
actions:

    {"txn": {"appId": "lakelog-sync-<topic>", "version": <seq>, "lastUpdated": <ms>}}
    {"commitInfo": {..., "userMetadata": "<SyncRange as JSON>"}}

    SyncRange JSON (the commit's `userMetadata`, written by the writer option `userMetadata`):
      {"lakelog.sync": 1,                 format version; a reader refuses another (SyncStateError)
       "seq": <int>,                      the commit's txn version (the sync step's sequence number)
       "from": {"<partition>": <offset>}, the first offset the step read, per partition
       "next": {"<partition>": <offset>}, one past the last offset it covers: where the next step starts
       "dead": <int>}                     dead letters the step has for `<topic>_errors` (0: none)

Why a sequence number, not one txn per partition with the next offset as its version: Delta's
writer puts one `txn` per commit and skips an append whose version is not above the table's
(`txnVersion(appId) >= version`). With seq = the table's seq + 1, that skip is an exact
compare-and-set on the state the step planned from: a retried step (same seq) is skipped, a step
planned from a stale state (a concurrent sync committed meanwhile: the table's seq is already
>= its own) is skipped, and two steps committing at once with the same seq conflict in Delta
(`ConcurrentTransactionException`: both read the appId's txn), so one of them fails and plans
again. A version per partition holding its next offset could not refuse a stale plan whose range
only partly overlaps what a concurrent sync added.

The same seq is the txn version of the step's follow-ups, each idempotent on its own table:
the dead-letter append to `<topic>_errors` (appId `lakelog-sync-<topic>_errors`) and the write
or MERGE of `<topic>_latest` (appId `lakelog-sync-<topic>_latest`). A sync that finds a follow-up
behind the table's newest step (the previous run died between its append and its follow-ups)
runs that step again over its recorded range first: Delta skips the append, the follow-ups land.

After a crash: a commit is the Delta log's atomic unit, so either the step's rows and its range
are in the table or neither is; nothing else is stored.

Reading the state: the newest commits are read back (spark_log/delta_log.py) until one carries
the appId's txn, at most MAX_COMMITS_BACK commits and never below a missing one (Delta's
metadata cleanup). A table whose newest txn-carrying commit has no SyncRange (made before this
format) or that has none in reach yields `last = None`: the sync then starts each partition
after the highest offset its tables hold, and numbers its step after the txn version it found.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from lakelog.infra.errors import ErrorKind, LakelogError
from lakelog.spark_log.delta_log import commit_info, newest_version, read_commit, transaction
from lakelog.tiering.errors import ObjectNotFoundError
from lakelog.tiering.store import ObjectStore

FORMAT_KEY = "lakelog.sync"
FORMAT_VERSION = 1
#: Commits read back from the newest looking for the newest sync commit (other writers, such as
#: OPTIMIZE, may have committed after it).
MAX_COMMITS_BACK = 64


class SyncStateError(LakelogError, ValueError):
    """A sync commit's recorded range cannot be read (an unknown format version, a bad field)."""

    kind = ErrorKind.CORRUPT


def app_id(topic: str, suffix: str = "") -> str:
    """The Delta application id of the sync of `topic` (`suffix`: of one of its follow-up tables)."""
    return f"lakelog-sync-{topic}{suffix}"


@dataclass(frozen=True, slots=True)
class SyncRange:
    """What one sync step covers: offsets [start, next) of each partition, under txn version `seq`."""

    seq: int
    starts: dict[int, int]
    nexts: dict[int, int]
    dead: int = 0

    def encode(self) -> str:
        return json.dumps({FORMAT_KEY: FORMAT_VERSION, "seq": self.seq,
                           "from": {str(p): o for p, o in sorted(self.starts.items())},
                           "next": {str(p): o for p, o in sorted(self.nexts.items())}, "dead": self.dead},
                          separators=(",", ":"))

    @staticmethod
    def decode(text: object, where: str) -> "SyncRange | None":
        """The range in a commit's userMetadata; None when it is not a sync range at all."""
        if not isinstance(text, str):
            return None
        try:
            doc = json.loads(text)
        except ValueError:
            return None
        if not isinstance(doc, dict) or FORMAT_KEY not in doc:
            return None
        if doc[FORMAT_KEY] != FORMAT_VERSION:
            raise SyncStateError(f"{where}: sync range format {doc[FORMAT_KEY]!r} is not {FORMAT_VERSION}")
        try:
            starts = {int(p): int(o) for p, o in doc["from"].items()}
            nexts = {int(p): int(o) for p, o in doc["next"].items()}
            rng = SyncRange(int(doc["seq"]), starts, nexts, int(doc.get("dead", 0)))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise SyncStateError(f"{where}: bad sync range {text[:200]!r} ({e})") from None
        if set(starts) != set(nexts) or any(nexts[p] < starts[p] for p in starts):
            raise SyncStateError(f"{where}: sync range whose partitions or offsets do not match: {text[:200]!r}")
        return rng


@dataclass(frozen=True, slots=True)
class SyncState:
    """A table's sync state: the newest txn version of the appId (None: no sync commit found) and
    the range of that commit (None when it has none: an older sync, or none found)."""

    txn_version: int | None = None
    last: SyncRange | None = None
    commit_version: int | None = None

    @property
    def next_seq(self) -> int:
        return 0 if self.txn_version is None else self.txn_version + 1


def read_sync_state(store: ObjectStore, table: str, app: str, *, max_back: int = MAX_COMMITS_BACK) -> SyncState:
    """The newest commit of `table` carrying `app`'s txn, and its range (see the module docstring)."""
    newest = newest_version(store, table)
    for version in range(newest, max(newest - max_back, -1), -1):
        try:
            actions = read_commit(store, table, version)
        except ObjectNotFoundError:
            break  # cleaned up below a checkpoint: so are the older ones
        txn = transaction(actions, app)
        if txn is None:
            continue
        rng = SyncRange.decode(commit_info(actions).get("userMetadata"), f"{table} commit {version}")
        if rng is not None and rng.seq != txn:
            raise SyncStateError(f"{table} commit {version}: its sync range says seq {rng.seq}, its txn {txn}")
        return SyncState(txn, rng, version)
    return SyncState()


def txn_version(store: ObjectStore, table: str, app: str) -> int | None:
    """The newest txn version of `app` in `table` (None: none in reach, or no table)."""
    return read_sync_state(store, table, app).txn_version
