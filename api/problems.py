"""Errors as RFC 9457 problem details (`application/problem+json`).

Every failure the API returns is a JSON object with `type`, `title`, `status` and `detail` (a
sentence a person can act on), plus `reason` where the domain gives a stable code (a refused
bid's `late`, `second-bid`...). Domain errors map to statuses by their place in the error trees:

    bad input (malformed JSON, a bid for another task)                   400
    an invalid task spec (`path` names the JSON path of the problem)     422
    unknown object (task, agent, credential, conversation, entry)        404 (raised by routes)
    conflicts: a lifecycle transition, a refused bid, an auction not due  409
    (and an exam already graded, or whose answers kept changing)
    exam attempts exhausted                                               429 (Retry-After)
    an upload over its quota (413: a file that can never fit)             429 (Retry-After)
    the chain or the database is away                                     503
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from sqlalchemy.exc import InterfaceError, OperationalError

from accord.coordinator.errors import CoordinatorError
from accord.identity.errors import (
    CredentialError,
    ExamConflict,
    GateFailed,
    IdentityError,
    JudgeUnavailable,
    KeyStoreError,
    ManifestError,
    NonceError,
    RateLimitedError,
    RegistryError,
    SandboxUnavailable,
    SkillError,
    UnknownSkill,
)
from accord.ledger.errors import (
    AlreadyLoggedError,
    CanonicalizationError,
    ChainError,
    DevnetError,
    FeesAboveCeilingError,
    LedgerError,
    MalformedError,
    ProofError,
    QueryError,
    SequenceError,
    StoreError,
)
from accord.market.blobs import BlobError, MissingBlob, QuotaExceeded
from accord.market.errors import (
    AmountError,
    AuctionError,
    BidRejected,
    DepositRefused,
    EscrowError,
    IdempotencyConflict,
    LimitError,
    MarketError,
    SettlementWaits,
    TaskError,
    TransitionError,
    WorkError,
)

if TYPE_CHECKING:  # FastAPI is imported where a response is made: the CLI maps its exit
    # codes through `domain_problem` and never serves (`accord.api.output.exit_code_of`)
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

PROBLEM_MEDIA_TYPE = "application/problem+json"
PROBLEM_BASE = "urn:accord:problem:"

TITLES = {
    400: "Bad request",
    401: "Not authenticated",
    402: "Payment required",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Request body too large",
    415: "Unsupported media type",
    422: "Unprocessable request",
    429: "Too many requests",
    500: "Internal error",
    503: "Service unavailable",
}

#: Bid refusals that are the request's fault (400); every other reason is a conflict (409).
_BAD_BID_REASONS = frozenset({"malformed", "bad-signature", "wrong-task"})


class Problem(BaseModel):
    """The OpenAPI schema of a problem detail."""

    type: str
    title: str
    status: int
    detail: str
    reason: str | None = None
    path: str | None = None
    """For an invalid task spec: the JSON path of the first problem (`$.parts[0].input`)."""


class ProblemError(Exception):
    """Raised by routes and middleware to answer with a problem detail."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        kind: str | None = None,
        reason: str | None = None,
        headers: dict[str, str] | None = None,
        path: str | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.kind = kind or _kind(status)
        self.reason = reason
        self.headers = headers or {}
        self.path = path


def _kind(status: int) -> str:
    return TITLES.get(status, "error").lower().replace(" ", "-")


def problem_body(
    status: int,
    detail: str,
    *,
    kind: str | None = None,
    reason: str | None = None,
    path: str | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": PROBLEM_BASE + (kind or _kind(status)),
        "title": TITLES.get(status, "Error"),
        "status": status,
        "detail": detail,
    }
    if reason is not None:
        body["reason"] = reason
    if path is not None:
        body["path"] = path
    return body


def problem_response(
    status: int,
    detail: str,
    *,
    kind: str | None = None,
    reason: str | None = None,
    headers: Mapping[str, str] | None = None,
    path: str | None = None,
) -> JSONResponse:
    from fastapi.responses import JSONResponse

    return JSONResponse(
        problem_body(status, detail, kind=kind, reason=reason, path=path),
        status_code=status,
        media_type=PROBLEM_MEDIA_TYPE,
        headers=headers,
    )


def domain_problem(exc: Exception) -> ProblemError:
    """The problem detail of an expected failure of the domain."""
    detail = str(exc) or type(exc).__name__
    match exc:
        case QueryError(parameter=parameter):
            return ProblemError(422, detail, kind="query", reason=parameter)
        case FeesAboveCeilingError():
            return ProblemError(503, detail, kind="fees-above-ceiling")
        case ChainError() | DevnetError() | StoreError():
            return ProblemError(503, detail, kind="unavailable")
        case BidRejected(reason=reason):
            status = 400 if reason in _BAD_BID_REASONS else 409
            message = detail.split(": ", 1)[-1]
            return ProblemError(status, message, kind=f"bid-{reason}", reason=reason)
        case TransitionError():
            return ProblemError(409, detail, kind="transition")
        case IdempotencyConflict():
            return ProblemError(409, detail, kind="idempotency")
        case DepositRefused():
            return ProblemError(402, detail, kind="deposit-refused", reason="unfunded")
        case AuctionError() | EscrowError():
            return ProblemError(409, detail)
        case WorkError(path=path):
            return ProblemError(422, detail, kind="invalid-spec", path=path)
        case SettlementWaits():
            return ProblemError(409, detail, kind="settlement-waits")
        case QuotaExceeded(retry_after=None, limit=limit):
            return ProblemError(413, detail, kind="file-quota", reason=limit)
        case QuotaExceeded(retry_after=after, limit=limit):
            wait = str(max(1, math.ceil(after or 1)))
            return ProblemError(
                429, detail, kind="file-quota", reason=limit, headers={"Retry-After": wait}
            )
        case MissingBlob():
            return ProblemError(404, detail, kind="file")
        case BlobError():
            # A stored file that no longer hashes to its name: the service's store is damaged.
            return ProblemError(500, detail, kind="integrity")
        case LimitError():
            return ProblemError(422, detail, kind="limit")
        case AmountError() | TaskError():
            return ProblemError(400, detail)
        case MarketError():
            return ProblemError(400, detail)
        case SandboxUnavailable():
            # The box for strangers' code cannot be made on this machine: the operator's to fix.
            return ProblemError(503, detail, kind="sandbox-unavailable")
        case ManifestError(path=path):
            return ProblemError(422, detail, kind="invalid-skill", path=path)
        case GateFailed(gate=gate):
            return ProblemError(422, detail, kind="skill-gate", reason=gate)
        case UnknownSkill():
            return ProblemError(404, detail, kind="skill")
        case JudgeUnavailable():
            # the judge model is down: nothing was graded, the candidate answers again later
            return ProblemError(503, detail, kind="judge-unavailable")
        case SkillError():
            return ProblemError(409, detail, kind="skill")
        case ExamConflict():
            return ProblemError(409, detail, kind="exam-conflict")
        case RateLimitedError(retry_after=after):
            return ProblemError(429, detail, headers={"Retry-After": str(max(1, int(after + 1)))})
        case CredentialError(step=step):
            return ProblemError(422, detail, kind="credential", reason=step)
        case NonceError():
            return ProblemError(409, detail, kind="challenge")
        case KeyStoreError():
            return ProblemError(409, detail, kind="key")
        case RegistryError() | IdentityError():
            return ProblemError(400, detail)
        case MalformedError() | CanonicalizationError() | ProofError():
            return ProblemError(400, detail)
        case SequenceError():
            return ProblemError(409, detail)
        case AlreadyLoggedError():
            # Logged once per subject, and another request (maybe at another service process
            # on the same database) logged it first.
            return ProblemError(409, detail, kind="already-logged")
        case LedgerError():
            return ProblemError(500, detail)
        case CoordinatorError():
            return ProblemError(409, detail)
    return ProblemError(500, "an unexpected error; the operator's log has the details")


DATABASE_AWAY: tuple[type[Exception], ...] = (OperationalError, InterfaceError)
"""What the database driver raises when the server is away (restarted, unreachable, the
connection cut): the request fails, nothing of it was committed, and the pool reconnects."""


def database_problem(exc: Exception) -> ProblemError:
    """503: the database did not answer (the driver's message stays in the operator's log)."""
    cause = type(getattr(exc, "orig", None) or exc).__name__
    return ProblemError(
        503,
        f"the database did not answer ({cause}); nothing was changed, retry shortly",
        kind="unavailable",
        headers={"Retry-After": "1"},
    )


DOMAIN_ERRORS: tuple[type[Exception], ...] = (
    MarketError,
    IdentityError,
    LedgerError,
    CoordinatorError,
)


def install_problem_handlers(app: FastAPI) -> None:
    """Every error the app can raise answers as problem+json."""
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    async def on_problem(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ProblemError)
        return problem_response(
            exc.status,
            exc.detail,
            kind=exc.kind,
            reason=exc.reason,
            headers=exc.headers,
            path=exc.path,
        )

    async def on_domain(_: Request, exc: Exception) -> JSONResponse:
        return await on_problem(_, domain_problem(exc))

    async def on_http(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        return problem_response(exc.status_code, str(exc.detail), headers=exc.headers)

    async def on_validation(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        parts = []
        for error in exc.errors()[:5]:
            where = ".".join(str(part) for part in error.get("loc", ()))
            parts.append(f"{where}: {error.get('msg', 'invalid')}")
        return problem_response(422, "; ".join(parts) or "the request is not valid")

    app.add_exception_handler(ProblemError, on_problem)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(RequestValidationError, on_validation)
    for error in DOMAIN_ERRORS:
        app.add_exception_handler(error, on_domain)

    async def on_database(_: Request, exc: Exception) -> JSONResponse:
        return await on_problem(_, database_problem(exc))

    for error in DATABASE_AWAY:
        app.add_exception_handler(error, on_database)
