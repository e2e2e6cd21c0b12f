"""The accord HTTP service: `create_app(settings)` builds it; nothing is opened at import.

The market (ledger, credentials, escrow, chain) is opened on the first request that needs it.
Every mutating request is signed by its caller's DID (see `accord.identity.http_signatures`); errors
are problem+json (see `accord.api.problems`); bodies above `ApiConfig.max_body` get 413, callers
over their rate 429.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from accord._process import prepare_process
from accord.api import a2a, cards
from accord.api.problems import (
    PROBLEM_MEDIA_TYPE,
    Problem,
    ProblemError,
    install_problem_handlers,
    problem_response,
)
from accord.api.routes import identity, market, records, remote, skills, tiles, work
from accord.api.routes.deps import ApiConfig, ApiState
from accord.identity.http_signatures import ALGORITHM, SIGNATURE_HEADER, TAG
from accord.ledger.chain import AnchorChain
from accord.ledger.errors import LedgerError
from accord.ledger.service import AnchorTimer
from accord.ledger.settings import Settings
from accord.ledger.signing import Signer
from accord.ledger.store import LogStore
from accord.ledger.wiring import operator_signer
from accord.market.escrow import EscrowChain
from accord.market.lifecycle import LifecycleWorker
from accord.market.wiring import MarketContext

DESCRIPTION = (
    "The trust and economics layer for an Internet of Agents: DID-auth onboarding, capability "
    "credentials, sealed-bid task markets with on-chain escrow, coordinated teams, and audits "
    "of every step against a signed Merkle ledger anchored on an EVM chain."
)


@dataclass(frozen=True)
class _ExplorerSources:
    """What the explorer reads, from the service's (lazily opened) market and chains."""

    store: LogStore
    anchors: AnchorChain
    escrow: EscrowChain

    @classmethod
    def of(cls, state: ApiState) -> _ExplorerSources:
        anchors, escrow = state.audit_chains()
        return cls(state.context().market.ledger.store, anchors, escrow)


class BodyLimit:
    """Refuse request bodies larger than `limit` bytes with 413 (declared or streamed)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        too_large = problem_response(
            413, f"the request body is larger than {self.limit} bytes", kind="too-large"
        )
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > self.limit:
                    await too_large(scope, receive, send)
                    return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                await too_large(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def create_app(
    settings: Settings,
    *,
    config: ApiConfig | None = None,
    context: MarketContext | None = None,
    anchors: AnchorChain | None = None,
    escrow_chain: EscrowChain | None = None,
) -> FastAPI:
    """The service over `settings`. Tests may pass an already-built market `context` and the
    chains the audit reads; otherwise they are opened on first use. The service's process is
    prepared first (`accord._process`: the recursion limit kept against hostile JSON)."""
    prepare_process()
    config = config or ApiConfig()
    state = ApiState(settings, config, context_=context, anchors=anchors, escrow_chain=escrow_chain)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        """The lifecycle rounds (`accord.market.lifecycle`) and the anchor timer
        (`accord.ledger.service.AnchorTimer`) run while the service does."""
        worker = None
        if config.lifecycle_interval > 0:
            worker = LifecycleWorker(state.context, config.lifecycle_interval, state.write_lock)
            worker.start()
        app.state.lifecycle = worker
        timer = None
        if config.anchor_tick > 0:
            timer = AnchorTimer(lambda: state.context().market.ledger, config.anchor_tick)
            timer.start()
        app.state.anchor_timer = timer
        try:
            yield
        finally:  # this lifespan's own workers (app.state shows them to who holds the app)
            for running in (timer, worker):
                if running is not None:
                    running.stop()

    app = FastAPI(
        title="accord",
        version=config.version,
        description=DESCRIPTION,
        docs_url="/docs",
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.accord = state
    install_problem_handlers(app)
    app.add_middleware(BodyLimit, limit=config.max_body)

    @app.get("/health", tags=["meta"], summary="Liveness")
    def health() -> dict[str, Any]:
        return {"status": "ok", "service": config.service_name, "version": config.version}

    operator_keys: list[Signer] = []

    def operator() -> Signer:
        """The operator's key: the open market's, else read (created on first use) once."""
        if state.context_ is not None:
            return state.context_.market.ledger.operator
        if not operator_keys:
            try:
                operator_keys.append(operator_signer(settings))
            except LedgerError as exc:
                raise ProblemError(503, f"the operator's key cannot be read: {exc}") from exc
        return operator_keys[0]

    @app.get("/.well-known/agent-card.json", tags=["meta"], summary="The service's A2A agent card")
    def service_card(request: Request) -> dict[str, Any]:
        """The A2A v1.0 card of the service, signed by the operator (`accord.api.cards`)."""
        return cards.service_card(
            str(request.base_url).rstrip("/"),
            name=config.service_name,
            description=DESCRIPTION,
            version=config.version,
            operator=operator(),
        )

    for router in (identity.reads, identity.writes, market.reads, market.writes, records.reads):
        app.include_router(router)
    app.include_router(tiles.reads)
    app.include_router(remote.router)
    app.include_router(skills.reads)
    app.include_router(skills.writes)
    app.include_router(work.router)
    app.include_router(a2a.router)

    # -- the web audit explorer (api/explorer.py) --
    from accord.api.explorer import explorer_router

    app.include_router(explorer_router(lambda: _ExplorerSources.of(state), state.audits))

    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


#: The routers whose every route needs a signed request.
SIGNED_ROUTERS = (identity.writes, market.writes, remote.writes, skills.writes, work.writes)

_PROBLEMS = {
    400: "Bad input: the detail says which field and why",
    401: "Not signed, forged, for another host, outside the time window, or a replayed nonce",
    403: "Signed, but the caller may not act on this object",
    404: "No such object",
    409: "Conflicts with the object's state (a refused bid says why in `reason`)",
    413: "The request body is too large",
    422: "The request does not validate",
    429: "Too many requests: see Retry-After",
    503: "The chain or the database is away",
}


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema, with the problem responses and the request signature declared."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    components = schema.setdefault("components", {})
    components.setdefault("schemas", {})["Problem"] = Problem.model_json_schema()
    components["securitySchemes"] = {
        "AccordSignature": {
            "type": "apiKey",
            "in": "header",
            "name": SIGNATURE_HEADER,
            "description": f"RFC 9421 HTTP Message Signature, alg {ALGORITHM}, tag {TAG}, keyid "
            "the caller's did:key, covering @method, @target-uri, @authority and the body's "
            "RFC 9530 Content-Digest and Content-Type (identity.http_signatures)",
        }
    }
    ref = {"$ref": "#/components/schemas/Problem"}
    signed_ops = {
        (route.path, method.lower())
        for router in SIGNED_ROUTERS
        for route in router.routes
        if isinstance(route, APIRoute)
        for method in route.methods or ()
    }
    for path, operations in schema.get("paths", {}).items():
        for method, operation in operations.items():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            codes = [400, 404, 413, 422, 429, 503]
            if (path, method) in signed_ops:
                codes += [401, 403, 409]
                operation["security"] = [{"AccordSignature": []}]
            for code in sorted(codes):
                if str(code) in responses:
                    continue
                responses[str(code)] = {
                    "description": _PROBLEMS[code],
                    "content": {PROBLEM_MEDIA_TYPE: {"schema": ref}},
                }
    schema["components"]["schemas"].pop("HTTPValidationError", None)
    schema["components"]["schemas"].pop("ValidationError", None)
    app.openapi_schema = schema
    return schema
