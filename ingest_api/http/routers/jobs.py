"""`/jobs/*`: the Spark job runs recorded in the remote tier (tiering/job_runs.py), for the console.

The jobs run outside the nodes (`lakelog jobs run`, `lakelog jobs schedule`, `lakelog up --jobs`);
they record every run in the remote tier, which every node reads, so any node lists them. Starting a
run through a node writes a QUEUED record that a scheduler claims and runs; with no scheduler
running (`scheduler.alive` false) it waits. `POST /jobs/runs/{id}/cancel` cancels a queued run at
once and asks a running one's runner to stop (it does within a heartbeat; `cancel_requested` until
then). DESCRIBE on the cluster to see the runs, ALTER to start or cancel one.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from lakelog.ingest_api.errors import InvalidRequestError, InvalidTopicError, NotFoundError
from lakelog.ingest_api.groups.errors import IllegalStateError
from lakelog.ingest_api.cluster.names import validate_topic_name
from lakelog.ingest_api.http.routers.deps import get_node
from lakelog.ingest_api.security.acl import CLUSTER_NAME, Operation, ResourceType
from lakelog.ingest_api.http.security_middleware import authorize, request_principal
from lakelog.tiering import job_runs

router = APIRouter(prefix="/jobs", tags=["console"])


class StartRun(BaseModel):
    job: str = Field(max_length=40, description=f"one of {', '.join(job_runs.JOB_NAMES)}")
    topics: list[str] | None = Field(None, max_length=job_runs.MAX_TOPICS,
                                     description="the topics to work on; absent or null: every topic")


def _store(request: Request):
    node = get_node(request)
    return node.tier.store


@router.get("/runs", summary="The newest Spark job runs (no rows nor log) and the scheduler's heartbeat")
async def list_runs(request: Request, limit: int = Query(50, ge=1, le=job_runs.MAX_LIST),
                    job: str | None = Query(None, max_length=40)):
    authorize(request, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
    if job is not None and job not in job_runs.JOB_NAMES:
        raise InvalidRequestError(f"unknown job {job!r}; jobs: {', '.join(job_runs.JOB_NAMES)}")
    store = _store(request)

    def read() -> dict:
        now = job_runs.now_ms()
        runs = job_runs.list_runs(store, limit=limit, job=job)
        cancels = job_runs.cancel_requests(store)
        return {"jobs": list(job_runs.JOB_NAMES), "scheduler": job_runs.read_scheduler(store, now),
                "runs": [r.view(now, full=False, cancel_requested=r.id in cancels) for r in runs]}

    return JSONResponse(await asyncio.to_thread(read))


@router.get("/runs/{run_id}", summary="One run: state, progress, totals, rows and its log")
async def get_run(run_id: str, request: Request):
    authorize(request, Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME)
    if not job_runs.RUN_ID.match(run_id):
        raise NotFoundError(f"no job run {run_id!r}")
    store = _store(request)

    def read():
        found = job_runs.read_run(store, run_id)
        return None if found is None else (found[0], job_runs.read_cancel_request(store, run_id) is not None)

    found = await asyncio.to_thread(read)
    if found is None:
        raise NotFoundError(f"no job run {run_id!r}")
    return JSONResponse(found[0].view(cancel_requested=found[1]))


@router.post("/runs/{run_id}/cancel", summary="Cancel a queued run, or ask a running one's runner to stop it")
async def cancel_run(run_id: str, request: Request):
    authorize(request, Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    if not job_runs.RUN_ID.match(run_id):
        raise NotFoundError(f"no job run {run_id!r}")
    store = _store(request)
    try:
        run, pending = await asyncio.to_thread(job_runs.cancel_run, store, run_id, request_principal(request))
    except KeyError:
        raise NotFoundError(f"no job run {run_id!r}") from None
    except job_runs.RunFinishedError as e:
        raise IllegalStateError(str(e)) from None
    return JSONResponse(run.view(cancel_requested=pending))


@router.post("/runs", status_code=201, summary="Ask for a run (QUEUED until a scheduler claims it)")
async def start_run(body: StartRun, request: Request):
    authorize(request, Operation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
    if body.topics is not None:
        for t in body.topics:
            try:
                validate_topic_name(t)
            except InvalidTopicError as e:
                raise InvalidRequestError(str(e)) from None
    try:
        job_runs.check_request(body.job, body.topics)
    except ValueError as e:
        raise InvalidRequestError(str(e)) from None
    store = _store(request)
    run = await asyncio.to_thread(job_runs.queue_run, store, body.job, body.topics, request_principal(request))
    return JSONResponse(run.view(), status_code=201)
