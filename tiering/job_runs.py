"""Spark job runs recorded in the remote tier: `_jobs/runs/<run id>.json`, and the scheduler's
heartbeat `_jobs/scheduler.json`.

The remote tier is the one place both the Spark jobs (`lakelog jobs run`, `lakelog jobs schedule`)
and every node reach, so the record of a run lives there: the nodes read it for the console's jobs
page (`/jobs/runs`), and a run asked for through a node is a record in state QUEUED that a
scheduler claims.

Layout of a run record: canonical JSON `{"version": 1, "crc32c": <CRC-32C of the canonical JSON
of "run">, "run": {...}}`; "run" holds `id`, `job`, `topics` (null: every topic), `state`,
`requested_by`, `requested_ms`, `started_ms`, `finished_ms`, `heartbeat_ms`, `runner`,
`tasks_total`, `tasks_done`, `seconds`, `totals`, `rows` (at most MAX_ROWS), `rows_total`, `log`
(the last MAX_LOG_LINES lines), `error`. A reader refuses another version or a CRC mismatch
(RemoteCorruptionError). The run id is `<requested_ms, 13 digits>-<8 hex>`: names sort by time.

Lifecycle (RunState): QUEUED -> RUNNING -> SUCCEEDED | FAILED | CANCELLED, and QUEUED -> CANCELLED;
a run started by the CLI or the
scheduler's own timer is written RUNNING at once. A scheduler claims a QUEUED record with a
conditional write (`If-Match` on the etag it read), so of two schedulers exactly one runs it. The
runner rewrites the record as tasks finish and at least every HEARTBEAT_MS; a RUNNING record
whose heartbeat is older than LOST_AFTER_MS is shown as LOST (its runner died): nothing resumes
it, the next run of that job does the work (every job is idempotent).

Cancelling (`cancel_run`, the console's Cancel): a QUEUED run is written CANCELLED with a conditional
write on the etag read (a scheduler claiming it at the same moment wins one way or the other: the
loser re-reads and sees RUNNING, or CANCELLED). A RUNNING run's record belongs to its runner, which
rewrites it whole, so a cancel of it is a separate object, `_jobs/cancel/<run id>.json` (who asked
and when): the runner looks for it with every heartbeat, cancels its Spark jobs, stops at the next
task boundary and writes the run CANCELLED, then deletes the request. Jobs are idempotent and commit
through the manifest's compare-and-swap, so a run stopped half way leaves work done or not done,
never half done. A LOST run (its runner is gone) is written CANCELLED at once.

Crash behaviour: each write is a PUT of the whole object, so a reader sees the old or the new
record. Bounds: at most MAX_KEPT records are kept (the runner deletes the oldest finished ones
after each run), a listing reads at most MAX_LIST records.
"""

from __future__ import annotations

import enum
import json
import re
import time
import uuid
from dataclasses import dataclass, field

from lakelog.logstore.record_batch import crc32c
from lakelog.tiering.errors import ObjectNotFoundError, PreconditionFailedError, RemoteCorruptionError
from lakelog.tiering.store import ObjectStore

JOB_NAMES = ("compaction", "retention", "rebuild-index", "sync-tables")
RUNS_DIR = "_jobs/runs/"
SCHEDULER_KEY = "_jobs/scheduler.json"
CANCEL_DIR = "_jobs/cancel/"
VERSION = 1
MAX_ROWS = 200
MAX_LOG_LINES = 200
MAX_LINE_CHARS = 2000
MAX_TOPICS = 100
MAX_KEPT = 500
MAX_LIST = 200
HEARTBEAT_MS = 5_000
LOST_AFTER_MS = 60_000
#: A scheduler whose heartbeat is older than this is shown as gone.
SCHEDULER_GONE_AFTER_MS = 30_000
RUN_ID = re.compile(r"^\d{13}-[0-9a-f]{8}$")


class RunState(enum.Enum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def finished(self) -> bool:
        return self in (RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED)


_NEXT = {RunState.QUEUED: {RunState.QUEUED, RunState.RUNNING, RunState.FAILED, RunState.CANCELLED},
         RunState.RUNNING: {RunState.RUNNING, RunState.SUCCEEDED, RunState.FAILED, RunState.CANCELLED},
         RunState.SUCCEEDED: {RunState.SUCCEEDED}, RunState.FAILED: {RunState.FAILED},
         RunState.CANCELLED: {RunState.CANCELLED}}


def now_ms() -> int:
    return int(time.time() * 1000)


def new_run_id(at_ms: int | None = None) -> str:
    return f"{(now_ms() if at_ms is None else at_ms):013d}-{uuid.uuid4().hex[:8]}"


def run_key(run_id: str) -> str:
    if not RUN_ID.match(run_id):
        raise ValueError(f"{run_id!r} is not a run id")
    return RUNS_DIR + run_id + ".json"


@dataclass
class JobRun:
    """One run of a Spark job, as recorded in the remote tier."""

    id: str
    job: str
    topics: list[str] | None = None
    state: RunState = RunState.QUEUED
    requested_by: str = ""
    requested_ms: int = 0
    started_ms: int | None = None
    finished_ms: int | None = None
    heartbeat_ms: int | None = None
    runner: str = ""
    tasks_total: int | None = None
    tasks_done: int = 0
    seconds: float | None = None
    totals: dict = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)
    rows_total: int = 0
    log: list[str] = field(default_factory=list)
    error: str = ""

    def move(self, state: RunState) -> None:
        if state not in _NEXT[self.state]:
            raise ValueError(f"run {self.id}: {self.state.value} -> {state.value} is not a transition")
        self.state = state

    def add_log(self, line: str, at_ms: int | None = None) -> None:
        stamp = time.strftime("%H:%M:%S", time.gmtime((now_ms() if at_ms is None else at_ms) / 1000))
        self.log.append(f"{stamp} {line[:MAX_LINE_CHARS]}")
        del self.log[:-MAX_LOG_LINES]

    def set_rows(self, rows: list[dict]) -> None:
        self.rows_total = len(rows)
        self.rows = [{k: v for k, v in r.items() if isinstance(v, (str, int, float, bool, type(None)))}
                     for r in rows[:MAX_ROWS]]

    def lost(self, at_ms: int) -> bool:
        """RUNNING, but its runner has not written for LOST_AFTER_MS."""
        return self.state is RunState.RUNNING and (self.heartbeat_ms or self.started_ms or 0) < at_ms - LOST_AFTER_MS

    def view(self, at_ms: int | None = None, *, full: bool = True, cancel_requested: bool = False) -> dict:
        """What the HTTP API answers: the record, `state` LOST for a RUNNING one whose runner went quiet,
        `elapsed_s` for a run in progress, `cancel_requested` while a cancel waits for its runner;
        without `full`, no rows nor log."""
        doc = self.body()
        now = now_ms() if at_ms is None else at_ms
        doc["cancel_requested"] = bool(cancel_requested and self.state is RunState.RUNNING)
        if self.lost(now):
            doc["state"] = "LOST"
        if self.state is RunState.RUNNING and self.started_ms:
            doc["elapsed_s"] = round((now - self.started_ms) / 1000, 1)
        if not full:
            doc.pop("rows")
            doc.pop("log")
        return doc

    def body(self) -> dict:
        return {"id": self.id, "job": self.job, "topics": self.topics, "state": self.state.value,
                "requested_by": self.requested_by, "requested_ms": self.requested_ms, "started_ms": self.started_ms,
                "finished_ms": self.finished_ms, "heartbeat_ms": self.heartbeat_ms, "runner": self.runner,
                "tasks_total": self.tasks_total, "tasks_done": self.tasks_done, "seconds": self.seconds,
                "totals": self.totals, "rows": self.rows, "rows_total": self.rows_total, "log": self.log,
                "error": self.error}


def _canonical(body: dict) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def encode_run(run: JobRun) -> bytes:
    body = run.body()
    return json.dumps({"version": VERSION, "crc32c": crc32c(_canonical(body)), "run": body},
                      sort_keys=True, separators=(",", ":")).encode()


def decode_run(data: bytes, key: str = "") -> JobRun:
    try:
        doc = json.loads(data)
        if doc.get("version") != VERSION:
            raise ValueError(f"unsupported version {doc.get('version')!r}")
        b = doc["run"]
        if crc32c(_canonical(b)) != doc["crc32c"]:
            raise ValueError("CRC-32C mismatch")
        return JobRun(id=str(b["id"]), job=str(b["job"]), topics=b["topics"], state=RunState(b["state"]),
                      requested_by=str(b["requested_by"]), requested_ms=int(b["requested_ms"]),
                      started_ms=b["started_ms"], finished_ms=b["finished_ms"], heartbeat_ms=b["heartbeat_ms"],
                      runner=str(b["runner"]), tasks_total=b["tasks_total"], tasks_done=int(b["tasks_done"]),
                      seconds=b["seconds"], totals=dict(b["totals"]), rows=list(b["rows"]),
                      rows_total=int(b["rows_total"]), log=[str(x) for x in b["log"]], error=str(b["error"]))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise RemoteCorruptionError(f"job run record {key}: {e}", key=key) from None


def check_request(job: str, topics: list[str] | None) -> None:
    """ValueError unless `job` is a job and `topics` a short list of names (None: every topic)."""
    if job not in JOB_NAMES:
        raise ValueError(f"unknown job {job!r}; jobs: {', '.join(JOB_NAMES)}")
    if topics is not None and (not topics or len(topics) > MAX_TOPICS):
        raise ValueError(f"topics: 1 to {MAX_TOPICS} names, or none for every topic")


def queue_run(store: ObjectStore, job: str, topics: list[str] | None, requested_by: str) -> JobRun:
    """Write a QUEUED run (a request for a scheduler to run `job`); returns it."""
    check_request(job, topics)
    at = now_ms()
    run = JobRun(new_run_id(at), job, topics, RunState.QUEUED, requested_by, at)
    run.add_log(f"requested by {requested_by}; waiting for a scheduler", at)
    store.put_if_absent(run_key(run.id), encode_run(run))
    return run


def read_run(store: ObjectStore, run_id: str) -> tuple[JobRun, str] | None:
    """(run, etag), or None when there is no such run."""
    key = run_key(run_id)
    try:
        data, etag = store.get(key)
    except ObjectNotFoundError:
        return None
    return decode_run(data, key), etag


def write_run(store: ObjectStore, run: JobRun) -> None:
    store.put(run_key(run.id), encode_run(run))


def claim_run(store: ObjectStore, run_id: str, runner: str) -> JobRun | None:
    """Take a QUEUED run for `runner` (RUNNING); None when another runner took it first or it is gone."""
    found = read_run(store, run_id)
    if found is None or found[0].state is not RunState.QUEUED:
        return None
    run, etag = found
    at = now_ms()
    run.move(RunState.RUNNING)
    run.runner, run.started_ms, run.heartbeat_ms = runner, at, at
    run.add_log(f"started by {runner}", at)
    try:
        store.put_if_match(run_key(run.id), encode_run(run), etag)
    except (PreconditionFailedError, ObjectNotFoundError):
        return None
    return run


def run_ids(store: ObjectStore) -> list[str]:
    """Every recorded run id, newest first."""
    ids = [info.key[len(RUNS_DIR):-len(".json")] for info in store.list(RUNS_DIR) if info.key.endswith(".json")]
    return sorted((i for i in ids if RUN_ID.match(i)), reverse=True)


def list_runs(store: ObjectStore, *, limit: int = 50, job: str | None = None) -> list[JobRun]:
    """The newest `limit` runs (at most MAX_LIST records read), of one job when `job` is given."""
    out: list[JobRun] = []
    for i in run_ids(store)[:MAX_LIST]:
        found = read_run(store, i)
        if found is None or (job and found[0].job != job):
            continue
        out.append(found[0])
        if len(out) >= limit:
            break
    return out


def queued_runs(store: ObjectStore) -> list[str]:
    """Ids of QUEUED runs, oldest first (read among the newest MAX_LIST records)."""
    out = []
    for i in run_ids(store)[:MAX_LIST]:
        found = read_run(store, i)
        if found is not None and found[0].state is RunState.QUEUED:
            out.append(i)
    return sorted(out)


def prune_runs(store: ObjectStore, keep: int = MAX_KEPT) -> int:
    """Delete the oldest records beyond `keep` (and their cancel requests); returns how many."""
    old = run_ids(store)[keep:]
    if old:
        store.delete_many([run_key(i) for i in old] + [cancel_key(i) for i in old])
    return len(old)


class RunFinishedError(ValueError):
    """The run has already finished: there is nothing to cancel."""


def cancel_key(run_id: str) -> str:
    run_key(run_id)  # checks the id
    return CANCEL_DIR + run_id + ".json"


def cancel_requests(store: ObjectStore) -> set[str]:
    """Ids of the runs a cancel was asked for and their runner has not acted on yet."""
    return {info.key[len(CANCEL_DIR):-len(".json")] for info in store.list(CANCEL_DIR) if info.key.endswith(".json")}


def read_cancel_request(store: ObjectStore, run_id: str) -> dict | None:
    """{"by", "at_ms"} of a cancel asked for `run_id`, or None."""
    try:
        data, _ = store.get(cancel_key(run_id))
    except ObjectNotFoundError:
        return None
    try:
        doc = json.loads(data)
        if doc.get("version") != VERSION:
            raise ValueError(f"unsupported version {doc.get('version')!r}")
        return {"by": str(doc["by"]), "at_ms": int(doc["at_ms"])}
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise RemoteCorruptionError(f"cancel request {cancel_key(run_id)}: {e}", key=cancel_key(run_id)) from None


def clear_cancel_request(store: ObjectStore, run_id: str) -> None:
    store.delete_many([cancel_key(run_id)])


def _write_cancelled(store: ObjectStore, run: JobRun, etag: str, by: str, why: str) -> bool:
    at = now_ms()
    run.move(RunState.CANCELLED)
    run.finished_ms = at
    if run.started_ms:
        run.seconds = round((at - run.started_ms) / 1000, 3)
    run.add_log(f"cancelled by {by}{why}", at)
    try:
        store.put_if_match(run_key(run.id), encode_run(run), etag)
    except (PreconditionFailedError, ObjectNotFoundError):
        return False
    return True


def cancel_run(store: ObjectStore, run_id: str, by: str, attempts: int = 5) -> tuple[JobRun, bool]:
    """Cancel a run: (its record now, whether a runner still has to act on it). A QUEUED or LOST run
    is CANCELLED at once; a RUNNING one gets a cancel request its runner honours within a heartbeat.
    None-like outcomes raise: KeyError (no such run), RunFinishedError (already finished)."""
    for _ in range(attempts):
        found = read_run(store, run_id)
        if found is None:
            raise KeyError(run_id)
        run, etag = found
        if run.state.finished:
            raise RunFinishedError(f"run {run_id} has already finished ({run.state.value})")
        if run.state is RunState.QUEUED or run.lost(now_ms()):
            why = "" if run.state is RunState.QUEUED else " (its runner had stopped reporting)"
            if _write_cancelled(store, run, etag, by, why):
                return run, False
            continue  # claimed or rewritten meanwhile: look again
        doc = {"version": VERSION, "by": by, "at_ms": now_ms()}
        store.put(cancel_key(run_id), json.dumps(doc, sort_keys=True).encode())
        return run, True
    raise PreconditionFailedError(f"run {run_id} kept changing; retry the cancel")


def write_scheduler_heartbeat(store: ObjectStore, runner: str, intervals: dict[str, float]) -> None:
    doc = {"version": VERSION, "runner": runner, "heartbeat_ms": now_ms(), "intervals_s": dict(intervals)}
    store.put(SCHEDULER_KEY, json.dumps(doc, sort_keys=True).encode())


def read_scheduler(store: ObjectStore, at_ms: int | None = None) -> dict | None:
    """The last scheduler heartbeat, with `alive` (heard from within SCHEDULER_GONE_AFTER_MS); None if none."""
    try:
        data, _ = store.get(SCHEDULER_KEY)
    except ObjectNotFoundError:
        return None
    try:
        doc = json.loads(data)
        if doc.get("version") != VERSION:
            raise ValueError(f"unsupported version {doc.get('version')!r}")
        beat = int(doc["heartbeat_ms"])
    except (ValueError, KeyError, TypeError) as e:
        raise RemoteCorruptionError(f"scheduler heartbeat {SCHEDULER_KEY}: {e}", key=SCHEDULER_KEY) from None
    now = now_ms() if at_ms is None else at_ms
    return {"runner": str(doc.get("runner", "")), "heartbeat_ms": beat, "intervals_s": doc.get("intervals_s", {}),
            "alive": now - beat <= SCHEDULER_GONE_AFTER_MS}
