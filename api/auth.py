"""Signed requests: every mutating request carries its caller's DID and an Ed25519 signature.

A request is signed with four headers (an envelope equivalent to an RFC 9421 signature over the
covered components):

    Accord-DID         the caller's did:key
    Accord-Nonce       16 to 128 URL-safe characters, never used twice by one DID
    Accord-Timestamp   Unix seconds when it was signed; accepted within ±5 minutes
    Accord-Signature   Ed25519 over the canonical string, unpadded base64url

The canonical string is the UTF-8 of these lines joined by "\\n":

    accord-request-v1
    METHOD                  upper case
    /path?query             the request target exactly as sent
    timestamp
    nonce
    sha256(body) in hex     of the exact body bytes (of b"" when there is none)

A nonce is remembered (with its timestamp) for as long as its timestamp could still be accepted,
so a replay inside the window is refused and a replay after it is refused as expired.
`sign_request` makes the headers, `AccordAuth` signs every httpx request.
"""

from __future__ import annotations

import hashlib
import math
import re
import secrets
import threading
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import httpx
from sqlalchemy import Engine, delete, insert
from sqlalchemy.exc import IntegrityError
from sqlmodel import Field, SQLModel

from ledger.errors import MalformedError, SignatureError
from ledger.signing import Signer, b64url, from_b64url, verify_signature

DID_HEADER = "Accord-DID"
NONCE_HEADER = "Accord-Nonce"
TIMESTAMP_HEADER = "Accord-Timestamp"
SIGNATURE_HEADER = "Accord-Signature"
SIGNED_HEADERS = (DID_HEADER, NONCE_HEADER, TIMESTAMP_HEADER, SIGNATURE_HEADER)
SCHEME = "accord-request-v1"
DEFAULT_WINDOW = 300.0

_NONCE = re.compile(r"^[A-Za-z0-9_-]{16,128}$")
_TIMESTAMP = re.compile(r"^[0-9]{1,12}$")


class AuthError(Exception):
    """A request is not signed, or its signature, time or nonce does not hold."""


def canonical_request(method: str, target: str, timestamp: str, nonce: str, body: bytes) -> bytes:
    """The bytes a caller signs (see the module docstring)."""
    digest = hashlib.sha256(body).hexdigest()
    return "\n".join((SCHEME, method.upper(), target, timestamp, nonce, digest)).encode()


def sign_request(
    signer: Signer,
    method: str,
    path: str,
    body: bytes = b"",
    *,
    timestamp: int | None = None,
    nonce: str | None = None,
) -> dict[str, str]:
    """The four `Accord-*` headers signing `method path` with `body` as `signer`.

    `path` is the request target as it will be sent: the path and any query string.
    """
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    nonce = nonce or b64url(secrets.token_bytes(18))
    signature = signer.sign(canonical_request(method, path, stamp, nonce, body))
    return {
        DID_HEADER: signer.did,
        NONCE_HEADER: nonce,
        TIMESTAMP_HEADER: stamp,
        SIGNATURE_HEADER: b64url(signature),
    }


_Request = TypeVar("_Request", bound=Any)


class AccordAuth(httpx.Auth):
    """httpx authentication that signs every request as `signer`."""

    requires_request_body = True

    def __init__(self, signer: Signer) -> None:
        self.signer = signer

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        yield self(request)

    def __call__(self, request: _Request) -> _Request:
        """Sign one request in place (also usable as a plain callable auth, for clients
        built on an httpx-compatible package such as Starlette's TestClient)."""
        target = request.url.raw_path.decode("ascii")
        request.headers.update(sign_request(self.signer, request.method, target, request.content))
        return request


class RequestNonces(Protocol):
    def use(self, did: str, nonce: str, timestamp: float, now: float) -> bool:
        """Record the nonce; False when this DID already used it (a replay)."""
        ...


class NonceMemory:
    """Nonces seen per DID with their timestamps, forgotten once they fall out of the window.

    In one process only; `SqlRequestNonces` is what a service with several workers uses.
    """

    def __init__(self, window: float = DEFAULT_WINDOW) -> None:
        self.window = window
        self._seen: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self._next_purge = 0.0

    def use(self, did: str, nonce: str, timestamp: float, now: float) -> bool:
        """Record the nonce; False when this DID already used it (a replay)."""
        with self._lock:
            if now >= self._next_purge:
                horizon = now - 2 * self.window
                self._seen = {k: t for k, t in self._seen.items() if t >= horizon}
                self._next_purge = now + self.window / 10
            key = (did, nonce)
            if key in self._seen:
                return False
            self._seen[key] = timestamp
            return True

    def __len__(self) -> int:
        return len(self._seen)


class ApiRequestNonce(SQLModel, table=True):
    __tablename__ = "api_request_nonces"

    did: str = Field(primary_key=True)
    nonce: str = Field(primary_key=True)
    timestamp: float = Field(index=True)


_REQUEST_NONCES = ApiRequestNonce.__table__  # type: ignore[attr-defined]


class PurgeSchedule:
    """When to delete expired rows: at most once per `every` seconds (of the clock passed in),
    and at the latest on every `inserts`-th insert, whichever comes first."""

    def __init__(self, every: float = 60.0, inserts: int = 1000) -> None:
        self.every = every
        self.inserts = inserts
        self._next = -math.inf
        self._count = 0
        self._lock = threading.Lock()

    def due(self, now: float) -> bool:
        """Count one insert; True (and the schedule restarts) when a purge is due."""
        with self._lock:
            self._count += 1
            if now < self._next and self._count < self.inserts:
                return False
            self._next = now + self.every
            self._count = 0
            return True


class SqlRequestNonces:
    """Request nonces in the service's database, so every worker sees every nonce: the primary
    key (did, nonce) makes a second use fail however the requests are spread. Nonces older
    than twice the window (no request carrying them is accepted any more) are deleted on the
    `PurgeSchedule` of `purge_every` seconds."""

    def __init__(
        self, engine: Engine, window: float = DEFAULT_WINDOW, purge_every: float = 60.0
    ) -> None:
        self.engine = engine
        self.window = window
        self.purge = PurgeSchedule(min(purge_every, window / 10))
        SQLModel.metadata.create_all(engine, tables=[_REQUEST_NONCES])

    def use(self, did: str, nonce: str, timestamp: float, now: float) -> bool:
        try:
            with self.engine.begin() as connection:
                if self.purge.due(now):
                    connection.execute(
                        delete(_REQUEST_NONCES).where(
                            _REQUEST_NONCES.c.timestamp < now - 2 * self.window
                        )
                    )
                connection.execute(
                    insert(_REQUEST_NONCES).values(did=did, nonce=nonce, timestamp=timestamp)
                )
        except IntegrityError:
            return False
        return True


def _header(headers: Mapping[str, str], name: str) -> str:
    value = headers.get(name)
    if not value:
        raise AuthError(
            f"the request is not signed: it lacks the {name} header; sign every mutating "
            f"request with {', '.join(SIGNED_HEADERS)} (see api.auth.sign_request)"
        )
    return value


def verify_request(
    method: str,
    target: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    nonces: RequestNonces,
    now: float | None = None,
    window: float = DEFAULT_WINDOW,
) -> str:
    """The caller's DID, once the signature, time window and nonce hold. Raises AuthError."""
    did = _header(headers, DID_HEADER)
    nonce = _header(headers, NONCE_HEADER)
    stamp = _header(headers, TIMESTAMP_HEADER)
    signature_text = _header(headers, SIGNATURE_HEADER)
    if not _NONCE.match(nonce):
        raise AuthError(f"{NONCE_HEADER} must be 16 to 128 base64url characters")
    if not _TIMESTAMP.match(stamp):
        raise AuthError(f"{TIMESTAMP_HEADER} must be whole Unix seconds")
    moment = now if now is not None else time.time()
    skew = int(stamp) - moment
    if not math.isfinite(skew) or abs(skew) > window:
        raise AuthError(
            f"the request was signed at {stamp}, more than {int(window)} s from the service's "
            f"clock ({int(moment)}): sign it again with the current time"
        )
    try:
        signature = from_b64url(signature_text)
    except MalformedError as exc:
        raise AuthError(f"{SIGNATURE_HEADER} is not base64url: {exc}") from exc
    try:
        verify_signature(did, canonical_request(method, target, stamp, nonce, body), signature)
    except SignatureError as exc:
        raise AuthError(
            f"the signature does not verify for {did} over {method.upper()} {target}"
        ) from exc
    except MalformedError as exc:
        raise AuthError(f"{DID_HEADER} is not a did:key the service can resolve: {exc}") from exc
    if not nonces.use(did, nonce, float(stamp), moment):
        raise AuthError(f"the nonce {nonce} was already used by {did}: a replay is refused")
    return did


@dataclass
class _Bucket:
    tokens: float
    at: float


class RateLimiter:
    """A token bucket per key (a DID, or a client address for unsigned reads), in memory."""

    def __init__(
        self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def take(self, key: str) -> float | None:
        """Spend one token; None when allowed, else the seconds until one is back."""
        now = self.clock()
        with self._lock:
            bucket = self._buckets.get(key)
            if bucket is None:
                if len(self._buckets) > 100_000:
                    self._buckets.clear()
                bucket = self._buckets[key] = _Bucket(self.burst, now)
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.at) * self.rate)
            bucket.at = now
            if bucket.tokens >= 1:
                bucket.tokens -= 1
                return None
            return (1 - bucket.tokens) / self.rate
