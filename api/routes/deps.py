"""What every route shares: the service state (opened lazily), the signed caller, throttling."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import Depends, Request, Response
from starlette.concurrency import run_in_threadpool

from accord.api.audits import AuditCache
from accord.api.auth import PurgeSchedule, RateLimiter, SqlRequestNonces
from accord.api.problems import ProblemError
from accord.api.streams import StreamSlots
from accord.client import NEXT_CURSOR_HEADER
from accord.identity.errors import IdentityError
from accord.identity.http_signatures import (
    DEFAULT_WINDOW,
    AuthError,
    NonceMemory,
    PendingNonce,
    RequestNonces,
    Target,
    challenge_headers,
    normalize_authority,
    verify_request,
)
from accord.ledger.chain import AnchorChain
from accord.ledger.errors import LedgerError
from accord.ledger.settings import Settings
from accord.ledger.wiring import connect_chain
from accord.market.blobs import FileQuota
from accord.market.errors import MarketError
from accord.market.escrow import EscrowChain
from accord.market.wiring import MarketContext, connect_escrow, open_market


@dataclass(frozen=True)
class ApiConfig:
    """Limits of the service.

    max_body: request bodies above this many bytes get 413.
    rate, burst: each signing DID (each client address for unsigned requests) may make
    `burst` requests at once and `rate` per second after that; above it, 429 with Retry-After.
    challenge_rate, challenge_burst: the same for registration challenges, per client address
    (a fresh did:key costs nothing, so the DID cannot be what limits them).
    post_burst, posts_per_hour: each DID may post `post_burst` tasks at once and
    `posts_per_hour` an hour after that (`POST /tasks`, A2A `SendMessage`), whether or not it
    funds them; above it, 429 with Retry-After.
    purge_every: expired request nonces and challenges are deleted at most this often (s).
    window: signed requests are accepted within ±window seconds of the service's clock.
    file_ttl, files_per_caller, file_bytes_per_caller, file_bytes_total: `POST /files` (see
    `accord.market.blobs.FileQuota`): an upload no posted task names expires after `file_ttl`
    seconds; until then it counts against its uploader's number and bytes, and against the
    bytes of all callers' together (429 above them, 413 for a file that can never fit).
    streams_per_caller, streams_total: server-sent event streams open at once in this
    process, per caller (its DID; its address when unsigned) and in all (429 above them).
    public_url: `scheme://host[:port]` clients address the service by, when it runs behind a
    proxy or under a public name: request signatures must cover that `@authority` and
    `@target-uri` (a request signed for another host is refused, whatever Host it carries).
    None: the scheme and Host header of each request, as received.
    lifecycle_interval: seconds between the rounds in which the service awards, expires,
    refunds and settles the tasks whose windows closed (`accord.market.lifecycle`); 0 runs none
    (`accord serve` runs one every 5 s unless ACCORD_LIFECYCLE_INTERVAL says otherwise).
    audits_per_caller, audits_total: audits computed at once in this process, per caller
    (its client address) and in all (429 above them); a report already computed for the log
    and the chain as they are is served without a computation (`accord.api.audits`).
    anchor_tick: seconds between the looks whether the log's tail is due to be anchored
    (`accord.ledger.service.AnchorTimer`), so that a quiet log is anchored within
    ACCORD_ANCHOR_INTERVAL; 0 runs none (`accord serve` derives it from that interval:
    `accord.ledger.service.anchor_tick`).
    """

    max_body: int = 1024 * 1024 + 64 * 1024
    """Large enough for a task input file of `accord.market.blobs.MAX_FILE_BYTES`."""
    rate: float = 20.0
    burst: float = 100.0
    window: float = DEFAULT_WINDOW
    challenge_rate: float = 0.5
    challenge_burst: float = 20.0
    post_burst: int = 20
    posts_per_hour: int = 60
    purge_every: float = 60.0
    file_ttl: float = FileQuota.ttl
    files_per_caller: int = FileQuota.files_per_caller
    file_bytes_per_caller: int = FileQuota.bytes_per_caller
    file_bytes_total: int = FileQuota.bytes_total
    streams_per_caller: int = 4
    streams_total: int = 32
    service_name: str = "accord"
    version: str = "0.1.0"
    public_url: str | None = None
    lifecycle_interval: float = 0.0
    anchor_tick: float = 0.0
    audits_per_caller: int = 2
    audits_total: int = 4

    def __post_init__(self) -> None:
        if not 0 <= self.lifecycle_interval < float("inf"):
            raise ValueError("the lifecycle interval is a number of seconds, 0 for none")
        if not 0 <= self.anchor_tick < float("inf"):
            raise ValueError("the anchor tick is a number of seconds, 0 for none")
        if self.public_url is not None:
            self.public_origin()
        self.file_quota()
        if self.streams_per_caller < 1 or self.streams_total < 1:
            raise ValueError("the stream caps must be at least 1")
        if self.post_burst < 1 or self.posts_per_hour < 1:
            raise ValueError("the posting limits must be at least 1")
        if self.audits_per_caller < 1 or self.audits_total < 1:
            raise ValueError("the audit limits must be at least 1")

    def file_quota(self) -> FileQuota:
        """The bounds of `POST /files`. Raises ValueError for a bound that is not positive."""
        return FileQuota(
            ttl=self.file_ttl,
            files_per_caller=self.files_per_caller,
            bytes_per_caller=self.file_bytes_per_caller,
            bytes_total=self.file_bytes_total,
        )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **fields: Any) -> ApiConfig:
        """The limits `ENV_LIMITS` names, from the environment (the defaults where unset), and
        `fields`. Raises ValueError naming a variable that is not a positive number."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for variable, name in ENV_LIMITS.items():
            raw = env.get(variable, "").strip()
            if not raw:
                continue
            kind = float if name in ("file_ttl", "lifecycle_interval") else int
            try:
                value = kind(raw)
            except ValueError:
                value = -1
            off = name == "lifecycle_interval" and value == 0  # 0: no lifecycle rounds
            if (value <= 0 and not off) or value != value or value == float("inf"):
                what = "seconds" if kind is float else "whole number"
                raise ValueError(f"{variable} must be a positive {what}, not {raw!r}")
            values[name] = value
        return cls(**{**values, **fields})

    def public_origin(self) -> Target | None:
        """`public_url` as a target without a path (None when unset); raises ValueError when
        it is not `http(s)://host[:port]`."""
        if self.public_url is None:
            return None
        origin = Target.from_url(self.public_url)
        if origin.path not in ("", "/") or origin.query is not None:
            raise ValueError(
                f"the public URL {self.public_url!r} must be scheme://host[:port], without a path"
            )
        return origin


ENV_LIMITS: Mapping[str, str] = {
    "ACCORD_FILE_TTL": "file_ttl",
    "ACCORD_FILES_PER_CALLER": "files_per_caller",
    "ACCORD_FILE_BYTES_PER_CALLER": "file_bytes_per_caller",
    "ACCORD_FILE_BYTES_TOTAL": "file_bytes_total",
    "ACCORD_STREAMS_PER_CALLER": "streams_per_caller",
    "ACCORD_STREAMS_TOTAL": "streams_total",
    "ACCORD_LIFECYCLE_INTERVAL": "lifecycle_interval",
    "ACCORD_POST_BURST": "post_burst",
    "ACCORD_POSTS_PER_HOUR": "posts_per_hour",
    "ACCORD_AUDITS_PER_CALLER": "audits_per_caller",
    "ACCORD_AUDITS_TOTAL": "audits_total",
}
"""The environment variables of `ApiConfig.from_env` and the fields they set."""


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
    challenge_limiter: RateLimiter = field(init=False)
    post_limiter: RateLimiter = field(init=False)
    """Task postings per DID (`ApiConfig.post_burst`, `ApiConfig.posts_per_hour`)."""
    challenge_purge: PurgeSchedule = field(init=False)
    streams: StreamSlots = field(init=False)
    """The event streams open in this process, capped per caller and in all
    (`accord.api.streams`)."""
    audits: AuditCache = field(init=False)
    """Audit reports computed once per log size and chain head, computations capped per
    caller and in all (`accord.api.audits`)."""
    write_lock: threading.RLock = field(default_factory=threading.RLock)
    """One write at a time in this process for the routes that move money or change a task's
    state. Taken only in worker threads, never on the event loop; a settlement's checks
    (strangers' code) run before it is taken (`settle_task`'s `lock`). Bids do not take it:
    the log's head lock and once-keys admit them correctly from any number of processes, so
    threads of one process need nothing more (their cache of each task's bids has its own
    lock, `Market._task_log`)."""
    _open_lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.limiter = RateLimiter(self.config.rate, self.config.burst)
        self.challenge_limiter = RateLimiter(
            self.config.challenge_rate, self.config.challenge_burst
        )
        self.post_limiter = RateLimiter(self.config.posts_per_hour / 3600, self.config.post_burst)
        self.challenge_purge = PurgeSchedule(self.config.purge_every)
        self.streams = StreamSlots(self.config.streams_per_caller, self.config.streams_total)
        self.audits = AuditCache(self.config.audits_per_caller, self.config.audits_total)

    def request_nonces(self) -> RequestNonces:
        """The replay guard, in the database every worker shares (opened with the market)."""
        if self.nonces is None:
            with self._open_lock:
                if self.nonces is None:
                    engine = self.context_.market.ledger.store.engine if self.context_ else None
                    self.nonces = (
                        SqlRequestNonces(engine, self.config.window, self.config.purge_every)
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


# Both dependencies are async so that FastAPI calls them on the event loop: a sync one costs
# a hop to a worker thread and back on every request, for an attribute read once the market
# is open. Opening it (the first request's) still runs in a worker thread.


async def get_state(request: Request) -> ApiState:
    state: ApiState = request.app.state.accord
    return state


async def get_context(state: Annotated[ApiState, Depends(get_state)]) -> MarketContext:
    if state.context_ is not None:
        return state.context_
    return await run_in_threadpool(state.context)


def _throttle(state: ApiState, key: str) -> None:
    wait = state.limiter.take(key)
    if wait is not None:
        seconds = max(1, int(wait + 0.999))
        raise ProblemError(
            429,
            f"too many requests from {key}: try again in {seconds} s",
            headers={"Retry-After": str(seconds)},
        )


def address_of(request: Request) -> str:
    """The key of an unsigned caller: its client address."""
    return _address(request)


def _address(request: Request) -> str:
    return f"address {request.client.host if request.client else 'unknown'}"


async def throttle_reads(request: Request, state: Annotated[ApiState, Depends(get_state)]) -> None:
    """Unsigned requests are rate-limited per client address (429). A claimed `keyid` in a
    Signature-Input is ignored: nothing proves it, and it must not spend its owner's bucket.

    Async, so that it runs on the event loop: taking a token is a dictionary update under a
    lock held for nothing else, and a sync dependency would cost every read a hop to a worker
    thread and back before the route's own."""
    _throttle(state, _address(request))


async def throttle_challenges(
    request: Request, state: Annotated[ApiState, Depends(get_state)]
) -> None:
    """Registration challenges are limited per client address (429), and issuing one purges
    the expired ones at most every `ApiConfig.purge_every` seconds.

    Async, as `throttle_reads` is: a token is taken from memory, so a worker-thread hop
    would cost more than the check."""
    wait = state.challenge_limiter.take(_address(request))
    if wait is not None:
        seconds = max(1, int(wait + 0.999))
        raise ProblemError(
            429,
            f"too many registration challenges from {_address(request)}: try again in {seconds} s",
            headers={"Retry-After": str(seconds)},
        )


def _unauthenticated(detail: str) -> ProblemError:
    return ProblemError(401, detail, kind="unauthenticated", headers=challenge_headers())


async def signed_caller(request: Request, state: Annotated[ApiState, Depends(get_state)]) -> str:
    """The did:key that signed this request (RFC 9421, see `accord.identity.http_signatures`),
    rate-limited per did:key (429). Raises ProblemError 401, with `WWW-Authenticate` and
    `Accept-Signature`, when the signature is missing or does not hold.

    The body is read on the event loop; the check runs in a worker thread, because the
    nonce is recorded in the database (and the market may open on the first request):
    the loop keeps serving other requests meanwhile. A route that goes to a worker thread
    itself takes `SignedLater` instead, and spends one hop fewer."""
    body = await request.body()
    return await run_in_threadpool(_signed_caller, request, body, state)


def _signed_caller(request: Request, body: bytes, state: ApiState) -> str:
    _open_market(state)
    return _verified_signer(request, body, state, state.request_nonces())


def _open_market(state: ApiState) -> None:
    # The replay guard lives in the service's database; if it cannot open, the route reports
    # the unavailable service itself (503) and the guard falls back to this process.
    with contextlib.suppress(LedgerError, MarketError, IdentityError):
        state.context()


def _verified_signer(request: Request, body: bytes, state: ApiState, nonces: RequestNonces) -> str:
    """The did:key whose signature holds over this request, its nonce used with `nonces`, a
    token taken from its bucket. Raises ProblemError 401 or 429."""
    raw: Any = request.scope.get("raw_path") or request.url.path.encode()
    path = raw.decode("latin-1")
    query_bytes: bytes = request.scope.get("query_string", b"")
    query = query_bytes.decode("latin-1") if query_bytes else None
    scheme = str(request.scope.get("scheme", "http"))
    host = request.headers.get("host")
    try:
        received = Target(scheme, normalize_authority(host, scheme), path, query) if host else None
    except ValueError as exc:
        raise _unauthenticated(f"the Host header is not a host name: {exc}") from exc
    origin = state.config.public_origin()
    target = Target(origin.scheme, origin.authority, path, query) if origin else received
    if target is None:
        raise _unauthenticated("the request has no Host header: send the host it is signed for")
    fields = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
    try:
        did = verify_request(
            request.method,
            target,
            fields,
            body,
            nonces=nonces,
            window=state.config.window,
            received=received,
        )
    except AuthError as exc:
        raise _unauthenticated(str(exc)) from exc
    _throttle(state, f"did {did}")
    return did


@dataclass(frozen=True)
class SignedCaller:
    """A request whose signature holds but whose nonce is not spent yet (`signed_later`)."""

    did: str
    nonce: PendingNonce
    state: ApiState

    def confirm(self) -> str:
        """Spend the request's nonce in the replay guard and return the did:key that signed it;
        call it first, in the route's worker thread. Raises ProblemError 401 for a replay."""
        _open_market(self.state)
        try:
            self.nonce.spend(self.state.request_nonces())
        except AuthError as exc:
            raise _unauthenticated(str(exc)) from exc
        return self.did


async def signed_later(
    request: Request, state: Annotated[ApiState, Depends(get_state)]
) -> SignedCaller:
    """`signed_caller` for a route that does its work in a worker thread anyway: the signature
    is checked here, on the event loop (CPU only: the key is in the did:key), and the nonce is
    spent by the route's own thread (`SignedCaller.confirm`), so a request makes one hop to a
    worker thread rather than two (each about 0.15 ms of CPU on this service's machines).
    Raises ProblemError 401 or 429 as `signed_caller` does; a replay is refused by `confirm`,
    after the body's validation (so a replayed request with a malformed body gets 422)."""
    body = await request.body()
    nonce = PendingNonce()
    return SignedCaller(_verified_signer(request, body, state, nonce), nonce, state)


def purge_expired_challenges(nonces: object, now: datetime) -> int:
    """Delete the registration challenges that expired by `now`; returns how many.

    Both of identity's nonce stores can (`purge_expired`); a store that cannot is left alone.
    A database failure is not raised here: issuing the challenge that follows reports it.
    """
    purge = getattr(nonces, "purge_expired", None)
    if purge is None:
        return 0
    try:
        return int(purge(now))
    except IdentityError:
        return 0


State = Annotated[ApiState, Depends(get_state)]
Context = Annotated[MarketContext, Depends(get_context)]
Caller = Annotated[str, Depends(signed_caller)]
SignedLater = Annotated[SignedCaller, Depends(signed_later)]


def next_page(request: Request, response: Response, cursor: str | None) -> None:
    """Point a paged list's answer at its next page: `Link: <path?...&cursor=...>; rel="next"`
    (RFC 8288, relative to the request) and the bare cursor in `Accord-Next-Cursor`; nothing
    on the last page."""
    if cursor is None:
        return
    params = [(k, v) for k, v in request.query_params.multi_items() if k != "cursor"]
    query = urlencode([*params, ("cursor", cursor)])
    response.headers["Link"] = f'<{request.url.path}?{query}>; rel="next"'
    response.headers[NEXT_CURSOR_HEADER] = cursor
