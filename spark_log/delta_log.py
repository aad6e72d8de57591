"""The one reader of a Delta table's log (`<remote>/tables/<table>/_delta_log/`) in the object
store: the table's newest version, and the actions of a commit. No pyspark here. Used by
sync-tables (`delta_commits.appended_rows`) and rebuild-index (`remote_index_table.table_state`).

Files of the log (Delta's PROTOCOL.md: "Delta Log Entries", "Checkpoints", "Log Compaction Files",
"Last Checkpoint File", "Metadata Cleanup"); `<v>` is a version zero-padded to 20 digits, `<o>` and
`<p>` are zero-padded to 10:

    <v>.json                           commit v: newline-delimited JSON, one action per line
                                       (commitInfo, txn, add, remove, metaData, protocol, ...)
    <v>.checkpoint.parquet             classic checkpoint: the table's whole state at version v
    <v>.checkpoint.<o>.<p>.parquet     part o of a p-part checkpoint; complete only with all p parts
    <v>.checkpoint.<uuid>.json|parquet V2 (UUID-named) checkpoint
    <x>.<y>.compacted.json             log compaction of commits x..y (the commits stay; not read)
    <v>.crc                            version checksum (optional; not read)
    _last_checkpoint                   JSON `{"version": v, "size": n, "parts": p, ...}`: a recent
                                       checkpoint, written after it (so it may lag a newer one)
    _sidecars/, _staged_commits/, ...  not read

Rules, each with its reason:
  1. Versions are contiguous integers from 0 (the protocol's "single serial history"), and a
     commit file is written whole, once (put-if-absent or rename).
  2. Metadata cleanup deletes commits and checkpoints older than a checkpoint it keeps, so a log
     may legitimately start at a checkpoint, with or without that version's commit file.
  3. Hence: the commits after the newest complete checkpoint (from version 0 when there is none)
     must all be there. A missing one is corruption (`DeltaLogGapError`), never a newest version:
     Delta itself refuses such a log (DELTA_TRUNCATED_TRANSACTION_LOG, or "versions are not
     contiguous": tests/integration/test_delta_log_tables.py), and with commits 0, 11 and 13
     alone neither 0 (where probing by HEADs stops) nor 13 (where a LIST ends) is the state of a
     table. A gap below a checkpoint is cleanup, not an error.
  4. The newest version is found by ONE LIST that starts at the anchor, the version
     `_last_checkpoint` names (S3's ListObjectsV2 `StartAfter`, as the protocol suggests), judged
     by rule 3. Its size is the files since the last checkpoint (Delta checkpoints every 10
     commits by default), not the table's age. Probing by HEADs from the anchor (doubling, then
     bisecting) was the other way and is not used: it can jump over a gap (with 10, 11 and 13 it
     answers 13) as well as stop before one, so proving the answer would take a HEAD per version.
  5. When the LIST from the anchor cannot vouch for the versions (neither a complete checkpoint at
     or after it nor its commit: a `_last_checkpoint` past the log), or there is no
     `_last_checkpoint` (a young table, a lost or unparseable one: it is then ignored, as Delta
     does; its optional checksum is not checked), the log is LISTed from its first file.
  6. A commit that is not UTF-8 newline-delimited JSON objects of one action each, or holds no
     action (Delta writes commitInfo into every commit), is corrupt (`DeltaLogCorruptError`,
     naming the file and line): a torn or empty commit is never read as "no actions".

Requests: 1 ranged GET (`_last_checkpoint`, bounded) and 1 LIST (at most `MAX_LISTED_FILES` keys)
for any table, or for no table; 2 LISTs only when `_last_checkpoint` names a version the log
does not hold. Then one ranged GET per commit read.

Concurrency: read-only. A commit made while it looks may or may not be seen.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from lakelog.infra.errors import ErrorKind, LakelogError
from lakelog.tiering.errors import ObjectNotFoundError
from lakelog.tiering.remote_scan import TABLES_DIR
from lakelog.tiering.store import ObjectStore

LOG_DIR = "_delta_log"
LAST_CHECKPOINT = "_last_checkpoint"
#: `_last_checkpoint` is a few hundred bytes (more with its optional `checkpointSchema`); a
#: bigger one is not read (rule 5).
MAX_LAST_CHECKPOINT_BYTES = 1024 * 1024
#: A commit larger than this is not read (ours hold a few actions; a table rewritten file by file
#: may hold many thousands of add/remove actions of a few hundred bytes).
MAX_COMMIT_BYTES = 16 * 1024 * 1024
#: Keys read by the LIST of a log from its anchor (rule 4): about 2 per version since the last
#: checkpoint (commit, checksum), more on a log without checkpoints.
MAX_LISTED_FILES = 100_000

_VERSION = r"(\d{20})"
_COMMIT = re.compile(_VERSION + r"\.json")
_UUID = r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}"
_CHECKPOINT_WHOLE = re.compile(_VERSION + r"\.checkpoint(?:\.parquet|\." + _UUID + r"\.(?:parquet|json))")
_CHECKPOINT_PART = re.compile(_VERSION + r"\.checkpoint\.(\d{10})\.(\d{10})\.parquet")


class DeltaLogError(LakelogError, ValueError):
    """A Delta table's log cannot be read as Delta's protocol lays it out."""

    kind = ErrorKind.CORRUPT


class DeltaLogCorruptError(DeltaLogError):
    """A file of a Delta log is not what its name says (a torn or empty commit, not JSON)."""


class DeltaLogGapError(DeltaLogError):
    """A version is missing between a Delta log's anchor (a checkpoint, or 0) and a later commit."""

    def __init__(self, table: str, missing: int, later: int) -> None:
        super().__init__(f"Delta table {table}: commit {missing} is missing but commit {later} exists, "
                         f"and no checkpoint covers it: the log is not contiguous")
        self.table = table
        self.missing = missing
        self.later = later


@dataclass(frozen=True, slots=True)
class LogTail:
    """What the end of a table's log holds."""

    #: The newest version: of a commit file, or of a checkpoint whose commits were cleaned up;
    #: -1 when the log holds none.
    newest: int
    #: False only when the log holds no file at all (no table there).
    exists: bool


def log_prefix(table: str) -> str:
    """The store prefix of the log of the table `<remote>/tables/<table>` (ends with '/')."""
    return f"{TABLES_DIR}/{table}/{LOG_DIR}/"


def commit_key(table: str, version: int) -> str:
    """The store key of commit `version` of the table `<remote>/tables/<table>`."""
    return f"{log_prefix(table)}{version:020d}.json"


def last_checkpoint(store: ObjectStore, table: str) -> int | None:
    """The version `_last_checkpoint` names; None without one, or when it does not parse (rule 5)."""
    try:
        data = store.get_range(log_prefix(table) + LAST_CHECKPOINT, 0, MAX_LAST_CHECKPOINT_BYTES + 1)
    except ObjectNotFoundError:
        return None
    if len(data) > MAX_LAST_CHECKPOINT_BYTES:
        return None
    try:
        version = json.loads(data)["version"]
    except (ValueError, TypeError, KeyError):
        return None
    return version if isinstance(version, int) and not isinstance(version, bool) and version >= 0 else None


def newest_version(store: ObjectStore, table: str) -> int:
    """The table's newest version, -1 for none; DeltaLogGapError on a log with a gap (rule 3)."""
    return log_tail(store, table).newest


def log_tail(store: ObjectStore, table: str) -> LogTail:
    """The newest version of the table's log and whether there is a log (the module's rules)."""
    anchor = last_checkpoint(store, table)
    if anchor:
        newest, _ = _listed(store, table, anchor)
        if newest is not None:
            return LogTail(newest, True)
    newest, files = _listed(store, table, 0)
    return LogTail(newest if newest is not None else -1, anchor is not None or files)


def read_commit(store: ObjectStore, table: str, version: int) -> list[dict]:
    """The actions of commit `version`, in order (ObjectNotFoundError when it is not there)."""
    key = commit_key(table, version)
    data = store.get_range(key, 0, MAX_COMMIT_BYTES + 1)
    if len(data) > MAX_COMMIT_BYTES:
        raise DeltaLogCorruptError(f"{key}: a commit of more than {MAX_COMMIT_BYTES} bytes is not read")
    return parse_commit(data, key)


def parse_commit(data: bytes, key: str) -> list[dict]:
    """The actions of a commit file's bytes (rule 6); `key` names it in errors."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DeltaLogCorruptError(f"{key}: not UTF-8 at byte {e.start}") from None
    actions = []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            action = json.loads(line)
        except ValueError as e:
            raise DeltaLogCorruptError(f"{key}: line {number} is not JSON ({e.msg}): torn or not a commit") from None
        if not isinstance(action, dict) or len(action) != 1:
            raise DeltaLogCorruptError(f"{key}: line {number} is not one action (an object of one key)")
        actions.append(action)
    if not actions:
        raise DeltaLogCorruptError(f"{key}: holds no action (every commit has at least its commitInfo)")
    return actions


def commit_info(actions: list[dict]) -> dict:
    """The commit's `commitInfo` action ({} without one)."""
    info = next((a["commitInfo"] for a in actions if "commitInfo" in a), None)
    return info if isinstance(info, dict) else {}


def transaction(actions: list[dict], app_id: str) -> int | None:
    """The version of the commit's `txn` action of application `app_id`, None without one."""
    for a in actions:
        txn = a.get("txn")
        if isinstance(txn, dict) and txn.get("appId") == app_id:
            version = txn.get("version")
            if isinstance(version, int) and not isinstance(version, bool):
                return version
            raise DeltaLogCorruptError(f"txn of {app_id!r} has the version {version!r}, not an integer")
    return None


# ------------------------------------------------------------------ internals


def _listed(store: ObjectStore, table: str, anchor: int) -> tuple[int | None, bool]:
    """(the newest version, whether any file was listed) by a LIST of the log from version
    `anchor` on (rules 3 to 5). The newest version is -1 for a log without commit or checkpoint,
    None when a LIST from `anchor` > 0 cannot vouch for it (no complete checkpoint at or after
    it, no commit `anchor`)."""
    prefix = log_prefix(table)
    start_after = prefix + (f"{anchor:020d}" if anchor > 0 else "")  # a key's own prefix sorts first
    listed = store.list_after(prefix, start_after, MAX_LISTED_FILES)
    if len(listed) >= MAX_LISTED_FILES:
        raise DeltaLogError(f"Delta table {table}: more than {MAX_LISTED_FILES} log files after version {anchor}")
    commits: set[int] = set()
    parts: dict[tuple[int, int], set[int]] = {}
    checkpoints: set[int] = set()
    for o in listed:
        name = o.key[len(prefix):]
        if m := _COMMIT.fullmatch(name):
            commits.add(int(m.group(1)))
        elif m := _CHECKPOINT_WHOLE.fullmatch(name):
            checkpoints.add(int(m.group(1)))
        elif m := _CHECKPOINT_PART.fullmatch(name):
            parts.setdefault((int(m.group(1)), int(m.group(3))), set()).add(int(m.group(2)))
    # A multi-part checkpoint with a part missing is ignored (the protocol's rule for readers).
    checkpoints |= {v for (v, p), seen in parts.items() if seen == set(range(1, p + 1))}
    checkpoint = max(checkpoints, default=-1)
    newest_commit = max(commits, default=-1)
    if checkpoint >= 0:
        first = checkpoint + 1
    elif anchor == 0:
        first = 0
    elif anchor in commits:
        first = anchor  # `_last_checkpoint` vouches for the versions before it
    else:
        return None, bool(listed)
    for version in range(first, newest_commit + 1):
        if version not in commits:
            raise DeltaLogGapError(table, version, newest_commit)
    return max(checkpoint, newest_commit), bool(listed)
