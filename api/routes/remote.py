"""Remote agents: agents in other processes or on other machines that hold their own keys.

The service holds no key for them: every ledger event that is theirs they build and sign
themselves (`accord.ledger.events.make_entry`) with the seq from `GET /agents/{did}/next-seq`, and
POST the entry's JSON; the service checks its signature, that its actor is the signed
request's caller, that its kind and body are what the route would have logged, and appends it.

    GET  /agents/{did}/next-seq    the seq the agent's next entry takes, the service's time,
                                   the network's domain and the escrow chain id
    POST /remote/registration      DID-auth presentation + the agent's `agent.registered`
                                   entry; the record is an `http` agent at `endpoint`
                                   (422 for a loopback, link-local or private address
                                   unless the service allows private agents)
    POST /exams                    start an exam: the items the agent sees and their deadlines
    POST /exams/{id}/answers       the agent's `exam.answered` entry
    POST /exams/{id}/grade         grade; the credential on a pass
    POST /agents/{did}/payout      the agent's `payout.bound` entry (the two-signature binding)

Bids need nothing new: commitments and reveals are already signed by their bidder
(`POST /tasks/{id}/commitments`, `/reveals`). A team reaches a remote member at its endpoint
(`POST /run`) and asks it to sign its own reports there (`POST /sign`, see
`accord.identity.onboarding.EndpointSigner`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from accord.api.problems import ProblemError
from accord.api.routes.deps import Caller, Context, State, throttle_reads
from accord.identity.agents import AgentRecord
from accord.identity.challenges import get_capability
from accord.identity.challenges.base import MAX_ITEMS_PER_CALL
from accord.identity.challenges.registry import require_builtin
from accord.identity.errors import ExamError, PrivateEndpointError, RegistryError
from accord.identity.manifests import builtin_name
from accord.ledger.canonical import canonical_json
from accord.ledger.errors import LedgerError
from accord.ledger.events import Entry, format_time
from accord.market.wiring import MarketContext

reads = APIRouter(dependencies=[Depends(throttle_reads)])
writes = APIRouter()


class SignedEntry(BaseModel):
    """A ledger entry `{event, kid, sig}` as `Entry.to_json()` writes it."""

    event: dict[str, Any]
    kid: str = Field(max_length=400)
    sig: str = Field(max_length=200)


class RemoteRegistration(BaseModel):
    name: str = Field(min_length=1, max_length=64)
    endpoint: str = Field(min_length=1, max_length=2000)
    challenge: str = Field(min_length=1, max_length=200)
    presentation: dict[str, Any]
    entry: SignedEntry


class ExamStart(BaseModel):
    capability: str = Field(min_length=1, max_length=100)
    items: int | None = Field(default=None, ge=1, le=MAX_ITEMS_PER_CALL)


class EntryBody(BaseModel):
    entry: SignedEntry


def parse_entry(body: SignedEntry, caller: str) -> Entry:
    """The entry in `body`, in its one canonical form, signed by `caller` (400/403 otherwise)."""
    try:
        entry = Entry.from_bytes(canonical_json(body.model_dump()))
        entry.verify()
    except (LedgerError, ValueError) as exc:
        raise ProblemError(400, f"the entry is not a signed ledger entry: {exc}") from exc
    if entry.event.actor != caller:
        raise ProblemError(
            403,
            f"the entry is {entry.event.actor}'s, but the request is signed by {caller}: "
            "an agent logs only its own events",
        )
    return entry


def _registered(context: MarketContext, did: str) -> AgentRecord:
    try:
        record = context.onboarding.registry.get(did)
    except RegistryError as exc:
        raise ProblemError(
            403, f"{did} is not a registered agent: register first (POST /remote/registration)"
        ) from exc
    if context.onboarding.registration_index(record) is None:
        raise ProblemError(403, f"{did} has not registered by DID-auth yet")
    return record


@reads.get(
    "/agents/{did}/next-seq",
    tags=["remote"],
    summary="The seq of the agent's next ledger entry, and what it needs to sign one",
)
def next_seq(did: str, context: Context) -> dict[str, Any]:
    ledger = context.market.ledger
    return {
        "did": did,
        "seq": ledger.next_seq(did),
        "server_time": format_time(ledger.clock()),
        "domain": context.onboarding.domain,
        "log_id": ledger.log_id,
        "operator": ledger.operator.did,
        "chain_id": context.market.escrow.chain_id(),
    }


@writes.post(
    "/remote/registration",
    tags=["remote"],
    summary="Register a remote agent: its presentation and its own agent.registered entry",
    status_code=201,
)
def register_remote(
    body: RemoteRegistration, caller: Caller, context: Context, state: State
) -> dict[str, Any]:
    entry = parse_entry(body.entry, caller)
    try:
        with state.write_lock:
            record, index = context.onboarding.admit_remote(
                body.name, body.endpoint, body.presentation, body.challenge, entry
            )
    except PrivateEndpointError as exc:
        # Teams would POST to this endpoint: not into the operator's own network.
        raise ProblemError(422, str(exc), kind="private-endpoint") from exc
    return {**record.to_json(), "index": index}


@writes.post(
    "/exams", tags=["remote"], summary="Start an exam: the items and deadlines", status_code=201
)
def start_exam(body: ExamStart, caller: Caller, context: Context, state: State) -> dict[str, Any]:
    _registered(context, caller)
    capability = builtin_name(body.capability)  # a built-in skill's id names it too
    get_capability(capability)
    require_builtin(capability)
    with state.write_lock:
        session = context.onboarding.exams.start(caller, capability, body.items)
    plan = session.plan
    return {
        "exam_id": session.exam_id,
        "capability": plan.capability,
        "committed_index": session.committed_index,
        "started_at": format_time(plan.started_at),
        "items": [
            {**item, "deadline": format_time(plan.deadline_of(str(item["item_id"])))}
            for item in session.items
        ],
    }


def _own_exam(context: MarketContext, exam_id: str, caller: str) -> None:
    try:
        agent = context.onboarding.exams.exam_agent(exam_id)
    except ExamError as exc:
        raise ProblemError(404, str(exc)) from exc
    if agent != caller:
        raise ProblemError(403, f"exam {exam_id} is not {caller}'s")


@writes.post(
    "/exams/{exam_id}/answers",
    tags=["remote"],
    summary="Answer an item: the agent's own exam.answered entry",
    status_code=201,
)
def answer_exam(
    exam_id: str, body: EntryBody, caller: Caller, context: Context, state: State
) -> dict[str, Any]:
    entry = parse_entry(body.entry, caller)
    if entry.event.subject != exam_id:
        raise ProblemError(400, f"the entry answers {entry.event.subject!r}, not {exam_id}")
    with state.write_lock:
        _own_exam(context, exam_id, caller)
        index = context.onboarding.exams.answer_signed(entry)
    return {"exam_id": exam_id, "item_id": entry.event.body.get("item_id"), "index": index}


@writes.post(
    "/exams/{exam_id}/grade",
    tags=["remote"],
    summary="Grade the exam; on a pass the credential is issued",
)
def grade_exam(exam_id: str, caller: Caller, context: Context, state: State) -> dict[str, Any]:
    _own_exam(context, exam_id, caller)
    # the answers (strangers' code, for a python exam) are graded without the write lock:
    # it is taken only to log the grades and issue the credential
    outcome = context.onboarding.grade_and_issue(exam_id, lock=state.write_lock)
    data = outcome.to_json()
    data.pop("credential_file", None)
    data.pop("answer_failures", None)
    document = (
        None
        if outcome.credential_id is None
        else context.onboarding.credential(outcome.credential_id)["document"]
    )
    data["credential"] = document
    data["valid_until"] = None if document is None else document["validUntil"]
    # The seed is revealed and every grade logged (`exam.graded`): the candidate may see why.
    data["wrong"] = [
        {"item_id": grade.item_id, "reason": grade.reason}
        for grade in outcome.exam.grades
        if not grade.full_marks
    ]
    return data


@writes.post(
    "/agents/{did}/payout",
    tags=["remote"],
    summary="Bind a payout address: the agent's own payout.bound entry",
    status_code=201,
)
def bind_payout(
    did: str, body: EntryBody, caller: Caller, context: Context, state: State
) -> dict[str, Any]:
    if did != caller:
        raise ProblemError(403, f"only {did} binds its payout address; the caller is {caller}")
    entry = parse_entry(body.entry, caller)
    record = _registered(context, caller)
    chain_id = context.market.escrow.chain_id()
    with state.write_lock:
        address = context.onboarding.bind_payout_signed(record, entry, chain_id)
    return {"did": did, "address": address, "chain_id": chain_id}


#: Both, for `create_app` to include in one line.
router = APIRouter()
router.include_router(reads)
router.include_router(writes)
