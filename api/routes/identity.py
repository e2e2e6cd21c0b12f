"""Agents and their A2A cards, capabilities, DID-auth registration, credentials."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, Field

from accord.api import cards
from accord.api.problems import ProblemError
from accord.api.routes.deps import (
    Caller,
    Context,
    State,
    next_page,
    purge_expired_challenges,
    throttle_challenges,
    throttle_reads,
)
from accord.coordinator.service import discover
from accord.identity.agents import AgentRecord
from accord.identity.challenges import REGISTRY
from accord.identity.errors import CredentialError, IdentityError, KeyStoreError, RegistryError
from accord.identity.manifests import builtin_name, resolve_builtin, skill_id_of
from accord.identity.onboarding import REGISTRATION_CHALLENGE_TTL
from accord.ledger.signing import Signer
from accord.ledger.views import DEFAULT_LIMIT, MAX_LIMIT, check_limit, decode_cursor, encode_cursor
from accord.market.discovery import VIEW_NAME as DISCOVERY_VIEW
from accord.market.discovery import fraction_text
from accord.market.wiring import MarketContext

reads = APIRouter(dependencies=[Depends(throttle_reads)])
AGENTS_VIEW = "agents"
writes = APIRouter()


def _agent(context: MarketContext, name_or_did: str) -> AgentRecord:
    try:
        return context.onboarding.registry.get(name_or_did)
    except RegistryError as exc:
        raise ProblemError(404, str(exc)) from exc


def _valid_capabilities(context: MarketContext, did: str) -> list[str]:
    held = {
        row["capability"]
        for row in context.onboarding.credentials_of(did)
        if row["revoked_at"] is None and context.market.eligible(did, (row["capability"],))
    }
    return sorted(held)


def resolve_skill_id(name: str) -> str | None:
    """The skill id of a built-in capability (what parts, exams and discovery also accept)."""
    manifest = resolve_builtin(name)
    return None if manifest is None else manifest.skill_id


def capability_rows() -> list[dict[str, Any]]:
    return [
        {
            "name": c.name,
            "skill_id": resolve_skill_id(c.name),
            "description": c.description,
            "items": c.item_count,
            "threshold": str(c.threshold),
            "version": c.version,
        }
        for c in REGISTRY.values()
    ]


@reads.get("/capabilities", tags=["identity"], summary="Capabilities with exams")
def list_capabilities() -> list[dict[str, Any]]:
    return capability_rows()


@reads.get(
    "/agents",
    tags=["identity"],
    summary="Registered agents, or discovery for a need; a page at a time (next page: Link)",
)
def list_agents(
    request: Request,
    response: Response,
    context: Context,
    capability: Annotated[
        str | None, Query(max_length=64, description="Only agents credentialed for this")
    ] = None,
    need: Annotated[
        str, Query(max_length=500, description="Rank by relevance of their description")
    ] = "",
    limit: Annotated[
        int | None,
        Query(ge=1, le=MAX_LIMIT, description=f"Agents per page (default {DEFAULT_LIMIT})"),
    ] = None,
    cursor: Annotated[
        str | None,
        Query(
            pattern=r"^(agents\.[a-z0-9][a-z0-9_-]{0,63}|discovery\.[0-9]{1,18})?$",
            description="The next page (from Link)",
        ),
    ] = None,
) -> list[dict[str, Any]]:
    """Without `capability`: registered agents by name. With it: discovery (`coordinator.
    service.discover`), from the credential index: the agents holding a valid credential for
    it, by relevance of their description to `need`, then reputation in it, then DID. When more
    match, `Link: <...&cursor=...>; rel="next"` and `Accord-Next-Cursor` name the next page."""
    if cursor and cursor.startswith(f"{DISCOVERY_VIEW}." if capability is None else "agents."):
        raise ProblemError(
            404,
            "this cursor pages the other agent list (discovery pages need the same "
            "capability; the registry pages need none): start again without it",
        )
    if capability is None:
        size = check_limit(limit)
        after = decode_cursor(AGENTS_VIEW, cursor)
        records = context.onboarding.registry.page(after=after, limit=size + 1)
        more = len(records) > size
        records = records[:size]
        next_page(request, response, encode_cursor(AGENTS_VIEW, records[-1].name) if more else None)
        return [record.to_json() for record in records]
    page = discover(context, builtin_name(capability), need, limit=limit, cursor=cursor)
    next_page(request, response, page.next_cursor)
    return [
        {
            "did": c.member.did,
            "name": c.member.name,
            "capabilities": list(c.member.capabilities),
            "reputation": fraction_text(c.reputation),
            "relevance": str(c.relevance),
            "description": c.member.description,
        }
        for c in page.candidates
    ]


def _credential_row(context: MarketContext, did: str, row: dict[str, Any]) -> dict[str, Any]:
    """A credential of `did` as its agent's page lists it: its score and expiry, and whether
    it is `valid` now (unrevoked, unexpired, its proof and status checked), which is what
    admits the agent to bid and what a kit agent reads to skip an exam it has passed."""
    subject = row["document"].get("credentialSubject", {})
    try:
        context.onboarding.verify(row["document"], holder_did=did, capability=row["capability"])
        valid = row["revoked_at"] is None
    except IdentityError:
        valid = False
    return {
        **{key: row[key] for key in ("id", "capability", "issued_at", "revoked_at")},
        "skill_id": skill_id_of(row["capability"]),
        "valid_until": row["document"].get("validUntil"),
        "score": subject.get("score"),
        "valid": valid,
    }


@reads.get("/agents/{agent}", tags=["identity"], summary="One agent and its credentials")
def show_agent(agent: str, context: Context) -> dict[str, Any]:
    record = _agent(context, agent)
    credentials = [
        _credential_row(context, record.did, row)
        for row in context.onboarding.credentials_of(record.did)
    ]
    registered = context.onboarding.registration_index(record)
    return {**record.to_json(), "registered_index": registered, "credentials": credentials}


@reads.get("/agents/{agent}/card", tags=["identity"], summary="The agent's A2A agent card")
def agent_card(agent: str, request: Request, context: Context) -> dict[str, Any]:
    """The agent's A2A v1.0 card (`accord.api.cards`): its credentialed capabilities as skills, the
    service's JSON-RPC endpoint with the agent's DID as tenant, signed by the agent's key, or,
    for a remote agent whose key the service never holds, by the operator."""
    record = _agent(context, agent)
    try:
        signer: Signer = context.onboarding.registry.signer(record)
    except KeyStoreError:
        signer = context.market.ledger.operator
    return cards.agent_card(
        str(request.base_url).rstrip("/"),
        name=record.name,
        did=record.did,
        runtime=record.runtime,
        capabilities=_valid_capabilities(context, record.did),
        signer=signer,
    )


# -- registration (DID-auth) ----------------------------------------------------------------


class RegistrationBody(BaseModel):
    challenge: str = Field(min_length=1, max_length=200)
    presentation: dict[str, Any]


@writes.post(
    "/registration/challenge",
    tags=["identity"],
    summary="A single-use DID-auth challenge for the caller",
    dependencies=[Depends(throttle_challenges)],
)
def registration_challenge(caller: Caller, context: Context, state: State) -> dict[str, Any]:
    onboarding = context.onboarding
    now = onboarding.ledger.clock()
    with state.write_lock:
        if state.challenge_purge.due(now.timestamp()):
            purge_expired_challenges(onboarding.nonces, now)
        nonce = onboarding.nonces.issue(onboarding.domain, now, REGISTRATION_CHALLENGE_TTL)
    return {
        "challenge": nonce,
        "domain": onboarding.domain,
        "did": caller,
        "expires_in": int(REGISTRATION_CHALLENGE_TTL.total_seconds()),
    }


@writes.post(
    "/registration",
    tags=["identity"],
    summary="Register by DID-auth: a presentation over the challenge",
)
def register(body: RegistrationBody, caller: Caller, context: Context, state: State) -> Any:
    holder = body.presentation.get("holder")
    if holder != caller:
        raise ProblemError(403, f"the presentation's holder is {holder!r}, not the caller {caller}")
    record = _agent(context, caller)
    with state.write_lock:
        existing = context.onboarding.registration_index(record)
        if existing is not None:
            return {"did": caller, "index": existing, "already": True}
        index = context.onboarding.admit(record, body.presentation, body.challenge)
    return {"did": caller, "index": index, "already": False}


# -- credentials ----------------------------------------------------------------------------


class VerifyBody(BaseModel):
    credential: dict[str, Any]
    holder: str | None = None
    capability: str | None = None


class RevokeBody(BaseModel):
    reason: str = Field(min_length=1, max_length=500)


@writes.post(
    "/credentials/{credential_id}/revoke",
    tags=["identity"],
    summary="Revoke a credential (the operator only): flips its status-list bit, logged",
)
def revoke_credential(
    credential_id: str, body: RevokeBody, caller: Caller, context: Context, state: State
) -> dict[str, Any]:
    if caller != context.market.ledger.operator.did:
        raise ProblemError(403, "only the operator, the issuer, revokes credentials")
    with state.write_lock:
        try:
            index = context.onboarding.revoke(credential_id, body.reason)
        except RegistryError as exc:
            raise ProblemError(404, str(exc)) from exc
    return {"credential_id": credential_id, "revoked": True, "index": index}


@reads.get("/credentials/{credential_id}", tags=["identity"], summary="An issued credential")
def show_credential(credential_id: str, context: Context) -> dict[str, Any]:
    try:
        return context.onboarding.credential(credential_id)
    except RegistryError as exc:
        raise ProblemError(404, str(exc)) from exc


@reads.post(
    "/credentials/verify",
    tags=["identity"],
    summary="Run the credential checklist (a pure check: unsigned)",
)
def verify_credential(body: VerifyBody, context: Context) -> dict[str, Any]:
    try:
        verified = context.onboarding.verify(
            body.credential, holder_did=body.holder, capability=body.capability
        )
    except CredentialError as exc:
        return {"valid": False, "step": exc.step, "reason": exc.reason}
    return {
        "valid": True,
        "id": verified.id,
        "subject": verified.subject,
        "capability": verified.capability,
        "score": {"earned": verified.earned, "possible": verified.possible},
        "valid_until": verified.document.get("validUntil"),
    }
