"""What every route shares: the service state (opened lazily), the signed caller, throttling."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Request

from api.auth import (
    DEFAULT_WINDOW,
    DID_HEADER,
    AuthError,
    NonceMemory,
    RateLimiter,
    RequestNonces,
    SqlRequestNonces,
    verify_request,
)
from api.problems import ProblemError
from identity.errors import IdentityError
from ledger.chain import AnchorChain
from ledger.errors import LedgerError
from ledger.runtime import connect_chain
from ledger.settings import Settings
from market.errors import MarketError
from market.escrow import EscrowChain
from market.runtime import MarketContext, connect_escrow, open_market


@dataclass(frozen=True)
class ApiConfig:
    """Limits of the service.

    max_body: request bodies above this many bytes get 413.
    rate, burst: each DID (each client address for unsigned requests) may make `burst`
    requests at once and `rate` per second after that; above it, 429 with Retry-After.
    window: signed requests are accepted within ±window seconds of the service's clock.
    """

    max_body: int = 1024 * 1024 + 64 * 1024
    """Large enough for a task input file of `market.blobs.MAX_FILE_BYTES`."""
    rate: float = 20.0
    burst: float = 100.0
    window: float = DEFAULT_WINDOW
    service_name: str = "accord"
    version: str = "0.1.0"


@dataclass
class ApiState:
    """The service's state. The market (ledger, credentials, escrow, chain) is opened on the
    first request that needs it, never at import or app creation."""

    settings: Settings
    config: ApiConfig
    opener: Callable[[Settings], MarketContext] = open_market
    context_: MarketContext | None = None
    anchors: AnchorChain | None = None
    escrow_chain: EscrowChain | None = None
    nonces: RequestNonces | None = None
    """Request nonces: in the service's database (shared by all workers) once it is open."""
    limiter: RateLimiter = field(init=False)
    write_lock: threading.RLock = field(default_factory=threading.RLock)
    _open_lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.limiter = RateLimiter(self.config.rate, self.config.burst)

    def request_nonces(self) -> RequestNonces:
        """The replay guard, in the database every worker shares (opened with the market)."""
        if self.nonces is None:
            with self._open_lock:
                if self.nonces is None:
                    engine = self.context_.market.ledger.store.engine if self.context_ else None
                    self.nonces = (
                        SqlRequestNonces(engine, self.config.window)
                        if engine is not None
                        else NonceMemory(self.config.window)
                    )
        return self.nonces

    def context(self) -> MarketContext:
        if self.context_ is None:
            with self._open_lock:
                if self.context_ is None:
                    self.context_ = self.opener(self.settings)
        return self.context_

    def audit_chains(self) -> tuple[AnchorChain, EscrowChain]:
        """The anchor registry and the escrow contract the audit reads (not started here)."""
        anchors = self.anchors or connect_chain(self.settings, start_devnet=False)
        escrow = self.escrow_chain or connect_escrow(self.settings, start_devnet=False)[0]
        return anchors, escrow


def get_state(request: Request) -> ApiState:
    state: ApiState = request.app.state.accord
    return state


def get_context(state: Annotated[ApiState, Depends(get_state)]) -> MarketContext:
    return state.context()


def _throttle(state: ApiState, key: str) -> None:
    wait = state.limiter.take(key)
    if wait is not None:
        seconds = max(1, int(wait + 0.999))
        raise ProblemError(
            429,
            f"too many requests from {key}: try again in {seconds} s",
            headers={"Retry-After": str(seconds)},
        )


def throttle_reads(request: Request, state: Annotated[ApiState, Depends(get_state)]) -> None:
    """Unsigned requests are rate-limited per client address (or per the DID they claim)."""
    claimed = request.headers.get(DID_HEADER)
    host = request.client.host if request.client else "unknown"
    _throttle(state, f"did {claimed}" if claimed else f"address {host}")


async def signed_caller(request: Request, state: Annotated[ApiState, Depends(get_state)]) -> str:
    """The DID that signed this request (401 otherwise), rate-limited per DID (429)."""
    body = await request.body()
    # The replay guard lives in the service's database; if it cannot open, the route reports
    # the unavailable service itself (503) and the guard falls back to this process.
    with contextlib.suppress(LedgerError, MarketError, IdentityError):
        state.context()
    raw: Any = request.scope.get("raw_path") or request.url.path.encode()
    target = raw.decode("latin-1")
    query = request.scope.get("query_string", b"")
    if query:
        target += "?" + query.decode("latin-1")
    try:
        did = verify_request(
            request.method,
            target,
            request.headers,
            body,
            nonces=state.request_nonces(),
            window=state.config.window,
        )
    except AuthError as exc:
        raise ProblemError(
            401, str(exc), kind="unauthenticated", headers={"WWW-Authenticate": "Accord-Signature"}
        ) from exc
    _throttle(state, f"did {did}")
    return did


State = Annotated[ApiState, Depends(get_state)]
Context = Annotated[MarketContext, Depends(get_context)]
Caller = Annotated[str, Depends(signed_caller)]
