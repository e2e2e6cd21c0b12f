"""The team work of a winner that keeps its own key (`accord.coordinator.contract_work`).

A self-custody winner leads its team in its own process (`accord agent run`): it reads whom it
may team with, sends each output it was given sealed, and relays the entries its team signed.

    GET  /tasks/{id}/team      whom the winner may form its team from: each agent's DID, name,
                               capabilities held, reputations, those it is failing in (its
                               last scored parts there all failed: pass it over) and endpoint
    POST /tasks/{id}/sealed    one sealed output (`accord.ledger.sealing`), before a report names it
    POST /tasks/{id}/work      `{"entry": ...}`: task.started, conversation.opened,
                               conversation.message or task.delivered, each signed by its own
                               party (a member's report by the member); logged as signed

The writes are the winner's alone (403 for anyone else) and refused for a winner whose key the
service holds (409: the service runs that team itself, `POST /tasks/{id}/run`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from accord.api.problems import ProblemError
from accord.api.routes.deps import Caller, Context, State, throttle_reads
from accord.api.routes.remote import EntryBody, parse_entry
from accord.coordinator.contract_work import WorkRefused, admit_sealed, admit_work_entry
from accord.coordinator.service import team_directory
from accord.market.errors import TaskError, WorkError

MAX_SEALED_BYTES = 1 << 20

reads = APIRouter(dependencies=[Depends(throttle_reads)])
writes = APIRouter()


@reads.get(
    "/tasks/{task_id}/team",
    tags=["coordinator"],
    summary="Whom the task's winner may form its team from, with their endpoints",
)
def team(task_id: str, context: Context) -> list[dict[str, Any]]:
    try:
        task = context.market.task(task_id)
    except TaskError as exc:
        raise ProblemError(404, str(exc)) from exc
    members = team_directory(context, task)
    records = context.onboarding.registry.records(m.did for m in members)
    return [
        {
            "did": m.did,
            "name": m.name,
            "capabilities": list(m.capabilities),
            "reputation": m.reputation,
            "reputations": dict(m.reputations),
            "failing": list(m.failing),
            "description": m.description,
            "endpoint": records[m.did].endpoint if m.did in records else None,
        }
        for m in members
    ]


@writes.post(
    "/tasks/{task_id}/sealed",
    tags=["coordinator"],
    summary="Send one sealed output of the winner's team (before a report names it)",
    status_code=201,
)
async def send_sealed(
    task_id: str, request: Request, caller: Caller, context: Context, state: State
) -> dict[str, Any]:
    data = await request.body()
    if len(data) > MAX_SEALED_BYTES:
        raise ProblemError(413, f"a sealed output is at most {MAX_SEALED_BYTES} bytes")

    def admit() -> str:
        with state.write_lock:
            return admit_sealed(context, task_id, caller, data)

    try:
        # in a worker thread: the write lock may be held (a settlement logging and paying),
        # and the event loop waits for nobody
        commitment = await run_in_threadpool(admit)
    except TaskError as exc:
        raise ProblemError(404, str(exc)) from exc
    except WorkRefused as exc:
        raise ProblemError(exc.status, str(exc)) from exc
    except WorkError as exc:
        raise ProblemError(413, str(exc)) from exc
    return {"task_id": task_id, "output_sha256": commitment}


@writes.post(
    "/tasks/{task_id}/work",
    tags=["coordinator"],
    summary="Relay one signed entry of the winner's team: started, opened, message, delivered",
    status_code=201,
)
def relay_work(
    task_id: str, body: EntryBody, caller: Caller, context: Context, state: State
) -> dict[str, Any]:
    # The winner relays its members' reports too: who signed what is admit_work_entry's rule.
    entry = parse_entry(body.entry, str(body.entry.event.get("actor", "")))
    try:
        with state.write_lock:
            index = admit_work_entry(context, task_id, caller, entry)
    except TaskError as exc:
        raise ProblemError(404, str(exc)) from exc
    except WorkRefused as exc:
        raise ProblemError(exc.status, str(exc)) from exc
    return {"task_id": task_id, "kind": entry.event.kind, "index": index}


#: Both, for `create_app` to include in one line.
router = APIRouter()
router.include_router(reads)
router.include_router(writes)
