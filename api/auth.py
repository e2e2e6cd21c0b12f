"""The service's side of signed requests, beyond the RFC 9421 rules themselves (those are
`accord.identity.http_signatures`, which clients and agents use too): what a service with several
workers and a database needs.

    SqlRequestNonces   the replay guard in the service's database (table `api_request_nonces`),
                       so every worker sees every nonce
    PurgeSchedule      when that table's expired rows are deleted
    RateLimiter        a token bucket per signing DID (or client address), in memory

`accord.api.routes.deps.signed_caller` is the FastAPI dependency that verifies a request with
`accord.identity.http_signatures.verify_request` and these.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Engine, delete
from sqlalchemy.exc import IntegrityError
from sqlmodel import Field, SQLModel

from accord.identity.http_signatures import DEFAULT_WINDOW
from accord.ledger.database import create_tables, driver_mark, statement_connection


class ApiRequestNonce(SQLModel, table=True):
    __tablename__ = "api_request_nonces"

    did: str = Field(primary_key=True)
    nonce: str = Field(primary_key=True)
    timestamp: float = Field(index=True)


_REQUEST_NONCES = ApiRequestNonce.__table__  # type: ignore[attr-defined]


def _insert_nonce_sql(engine: Engine) -> str:
    """The nonce INSERT as the driver's own SQL text: every signed request runs it, and
    passing it through SQLAlchemy's compiled-statement machinery cost more CPU than the
    database's insert."""
    mark = driver_mark(engine)
    return f"INSERT INTO api_request_nonces (did, nonce, timestamp) VALUES ({mark}, {mark}, {mark})"


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
        self._insert = _insert_nonce_sql(engine)
        create_tables(engine, [_REQUEST_NONCES])

    def use(self, did: str, nonce: str, timestamp: float, now: float) -> bool:
        try:
            with statement_connection(self.engine) as connection, connection.begin():
                # each statement stands alone: the purge and the insert need no shared
                # transaction (on PostgreSQL they run in autocommit, one round trip each)
                if self.purge.due(now):
                    connection.execute(
                        delete(_REQUEST_NONCES).where(
                            _REQUEST_NONCES.c.timestamp < now - 2 * self.window
                        )
                    )
                connection.exec_driver_sql(self._insert, (did, nonce, timestamp))
        except IntegrityError:
            return False
        return True


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
