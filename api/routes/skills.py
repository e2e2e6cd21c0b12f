"""Skills: manifests named by their hash, declared by any registered DID (`accord.identity.
skill_registry`).

    GET  /skills                the shipped skills, then the declared ones in log order
                                (`after`: the last entry index of the page before)
    GET  /skills/{id}/export?format=a2a|mcp|folder
                                the skill as an A2A AgentSkill, an MCP tool definition, or the
                                files of an Agent Skills folder (SKILL.md, skill.json, code)
    GET  /skills/{id}           one skill by id (a shipped one by its old name too), in full
    POST /skills                declare: `{"entry": <the caller's own signed skill.declared>}`,
                                or `{"manifest": ...}` from a caller whose key the service holds
                                (the operator, a hosted agent). The gates run in the box first; a
                                refusal is problem+json naming the rule (`path`) or gate (`reason`)

    POST /skills/{id}/attempts                 start an exam of a declared skill: the operator
                                               commits H(service nonce), logged
    POST /skills/attempts/{attempt}/nonce      the candidate's own `skill.attempt.nonce` entry;
                                               answers the items (never logged)
    POST /skills/attempts/{attempt}/answers    the candidate's own `skill.attempt.answered`;
                                               graded in the box, the nonce revealed, and the
                                               credential (capability: the skill id) on a pass

To sign its own entry a client takes its seq from `GET /agents/{did}/next-seq` and signs
`{kind: "skill.declared", subject: <skill id>, body: {"skill_id", "manifest"}}`, the skill id
being the hex SHA-256 of the manifest's RFC 8785 bytes.
"""

from __future__ import annotations

import math
import threading
import weakref
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query
from pydantic import BaseModel

from accord.api.problems import ProblemError
from accord.api.routes.deps import Caller, Context, State, throttle_reads
from accord.api.routes.remote import SignedEntry, parse_entry
from accord.identity.errors import KeyStoreError, RegistryError
from accord.identity.skill_exams import GateReport
from accord.identity.skill_exports import a2a_skill, mcp_tool, skill_folder
from accord.identity.skill_registry import MAX_PAGE, DeclaredSkill
from accord.ledger.canonical import MAX_SAFE_INTEGER
from accord.ledger.events import Entry
from accord.ledger.signing import Signer
from accord.ledger.store import LogStore
from accord.market.agreement import (
    AGREEMENT_KINDS,
    AgreementTally,
    SkillAgreement,
    capability_key,
)
from accord.market.wiring import MarketContext

AGREEMENT_PAGE = 1000
reads = APIRouter(dependencies=[Depends(throttle_reads)])
writes = APIRouter()


class Declaration(BaseModel):
    """Either the caller's own signed entry, or the manifest for the service to sign."""

    entry: SignedEntry | None = None
    manifest: dict[str, Any] | None = None
    bank: list[Any] | None = None
    """A bank exam's items (`{"input", "answer"}` each, in the order its root commits to):
    checked against the root and kept off the log."""


@reads.get("/skills", tags=["skills"], summary="Skills: shipped, then declared in log order")
def list_skills(
    context: Context,
    after: Annotated[
        int, Query(ge=-1, le=MAX_SAFE_INTEGER, description="The last declaration index seen")
    ] = -1,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = MAX_PAGE,
) -> list[dict[str, Any]]:
    skills = context.onboarding.skills.page(after=after, limit=limit)
    return [skill.summary() for skill in skills]


@reads.get("/skills/{skill}", tags=["skills"], summary="One skill, its manifest and agreement")
def show_skill(skill: str, context: Context) -> dict[str, Any]:
    """The skill, its whole manifest, and its exam→field agreement (`accord.market.agreement`):
    each credentialed agent's exam score beside the share of its real parts that passed."""
    found = context.onboarding.skills.get(skill)
    store = context.market.ledger.store
    return {**found.to_json(), "agreement": logged_agreement(store, found)}


class AgreementFeed:
    """A log's exam→field agreement, kept level with it: each read folds in only the
    `credential.issued` and `task.settled` entries appended since the one before (the first
    reads them all), under a lock, so readers at the same moment fold each entry once. An
    unsigned `GET /skills/{id}` or skill page so costs the log's growth, not the log."""

    def __init__(self) -> None:
        self._tally = AgreementTally()
        self._lock = threading.Lock()

    def agreement(self, store: LogStore, capability: str) -> SkillAgreement:
        """`capability`'s agreement over `store`'s whole log as it is now. Raises StoreError
        when the log cannot be read, MalformedError when a stored entry does not parse."""
        with self._lock:
            new = store.find_each(
                kinds=AGREEMENT_KINDS, after=self._tally.seen, chunk=AGREEMENT_PAGE
            )
            for stored in new:
                self._tally.add(stored.index, Entry.from_bytes(stored.data).event)
            return self._tally.agreement(capability)


_FEEDS: weakref.WeakKeyDictionary[LogStore, AgreementFeed] = weakref.WeakKeyDictionary()
_FEEDS_LOCK = threading.Lock()


def logged_agreement(store: LogStore, skill: DeclaredSkill) -> dict[str, Any]:
    """The skill's agreement over the whole log (credentials issued, tasks settled), from the
    store's `AgreementFeed` (one per open store, gone with it). Raises as
    `AgreementFeed.agreement`."""
    with _FEEDS_LOCK:
        feed = _FEEDS.get(store)
        if feed is None:
            feed = _FEEDS[store] = AgreementFeed()
    key = capability_key(skill.manifest.builtin, skill.manifest.skill_id)
    return feed.agreement(store, key).to_json()


@reads.get(
    "/skills/{skill}/export",
    tags=["skills"],
    summary="The skill as an A2A AgentSkill, an MCP tool, or an Agent Skills folder's files",
)
def export_skill(
    skill: str,
    context: Context,
    format: Annotated[Literal["a2a", "mcp", "folder"], Query(description="Which shape")] = "a2a",
) -> dict[str, Any]:
    manifest = context.onboarding.skills.get(skill).manifest
    if format == "a2a":
        return a2a_skill(manifest)
    if format == "mcp":
        return mcp_tool(manifest)
    return skill_folder(manifest)


def _held_signer(context: MarketContext, caller: str) -> Signer:
    """The key the service holds for `caller` (403 when it holds none)."""
    operator = context.market.ledger.operator
    if caller == operator.did:
        return operator
    try:
        return context.onboarding.registry.signer(context.onboarding.registry.get(caller))
    except (RegistryError, KeyStoreError) as exc:
        raise ProblemError(
            403,
            f"the service holds no key for {caller}: send your own signed skill.declared "
            'entry as {"entry": ...}',
        ) from exc


def _declared(skill: DeclaredSkill, report: GateReport) -> dict[str, Any]:
    return {**skill.summary(), "gates": report.to_json()}


@writes.post(
    "/skills",
    tags=["skills"],
    summary="Declare a skill: its manifest passes the rules and the gates, then is logged",
    status_code=201,
)
def declare_skill(
    body: Declaration, caller: Caller, context: Context, state: State
) -> dict[str, Any]:
    if (body.entry is None) == (body.manifest is None):
        raise ProblemError(422, 'send exactly one of {"entry": ...} and {"manifest": ...}')
    wait = state.post_limiter.take(f"skill {caller}")  # each declaration runs its gates
    if wait is not None:
        seconds = max(1, math.ceil(wait))
        raise ProblemError(
            429,
            f"{caller} declares skills at the posting rate ({state.config.posts_per_hour} an "
            f"hour after {state.config.post_burst}): declare again in {seconds} s",
            headers={"Retry-After": str(seconds)},
        )
    skills = context.onboarding.skills
    if body.entry is not None:
        entry = parse_entry(body.entry, caller)
        return _declared(*skills.declare_signed(entry, bank=body.bank, lock=state.write_lock))
    signer = _held_signer(context, caller)
    return _declared(*skills.declare(signer, body.manifest, bank=body.bank, lock=state.write_lock))


@writes.post(
    "/skills/{skill}/attempts",
    tags=["skills"],
    summary="Start an exam of a declared skill: the service commits to its nonce",
    status_code=201,
)
def start_attempt(skill: str, caller: Caller, context: Context, state: State) -> dict[str, Any]:
    with state.write_lock:
        return context.onboarding.skill_attempts.start(caller, skill)


class EntryOnly(BaseModel):
    entry: SignedEntry


@writes.post(
    "/skills/attempts/{attempt_id}/nonce",
    tags=["skills"],
    summary="The candidate's nonce (its own signed entry); answers the exam's items",
    status_code=201,
)
def give_nonce(
    attempt_id: str, body: EntryOnly, caller: Caller, context: Context, state: State
) -> dict[str, Any]:
    entry = parse_entry(body.entry, caller)
    if entry.event.subject != attempt_id:
        raise ProblemError(400, f"the entry is for {entry.event.subject!r}, not {attempt_id}")
    items = context.onboarding.skill_attempts.begin(entry, lock=state.write_lock)
    return {"attempt_id": attempt_id, "items": items}


@writes.post(
    "/skills/attempts/{attempt_id}/answers",
    tags=["skills"],
    summary="The candidate's answers (its own signed entry): graded, the seed revealed",
)
def give_answers(
    attempt_id: str, body: EntryOnly, caller: Caller, context: Context, state: State
) -> dict[str, Any]:
    entry = parse_entry(body.entry, caller)
    if entry.event.subject != attempt_id:
        raise ProblemError(400, f"the entry is for {entry.event.subject!r}, not {attempt_id}")
    outcome = context.onboarding.skill_attempts.answer(entry, lock=state.write_lock)
    data = outcome.to_json()
    data["credential"] = (
        None
        if outcome.credential_id is None
        else context.onboarding.credential(outcome.credential_id)["document"]
    )
    return data
