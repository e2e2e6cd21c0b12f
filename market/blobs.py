"""Content-addressed files: a task's input files and its deliverables, by SHA-256.

A blob's name is the hex SHA-256 of its bytes, so what the log names (`task.posted` holds the
hashes of its files, `task.delivered` the hash of its deliverable) is checked on every read:
bytes that do not hash to their name are refused. Blobs live in the service's database (one
table, so several service processes share them), limited to `MAX_FILE_BYTES` each.

Who holds a blob (`market_blob_holders`, one row per blob and holder):
- a requester's upload (`upload`) is held by the requester's DID, until `expires_at`; a task
  spec may name only files its requester holds (`claim`, which every posting goes through, in
  `Market.post`), and posting the task keeps them for good (`expires_at` NULL, `task_id` the
  task). Two requesters uploading the same bytes each hold them; the bytes are stored once.
- what the service stores itself (`put`: deliverables) and every blob stored before holders
  were recorded are held by `SERVICE` for good.
- an upload no task names expires: every upload first sweeps away the expired holds and the
  bytes nobody holds any more. An expired hold counts as gone at once, swept or not.

Uploads are bounded by a `FileQuota`: the uploads a caller holds that no task names yet (their
number and bytes), and the bytes of all such uploads together. Holds are changed one writer at a
time (SQLite's `BEGIN IMMEDIATE`, a transaction-scoped advisory lock on PostgreSQL), so quotas
hold across service processes.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import (
    BigInteger,
    Connection,
    Engine,
    Index,
    delete,
    func,
    insert,
    literal,
    select,
    text,
)
from sqlalchemy import update as sql_update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlmodel import Column, Field, LargeBinary, SQLModel

from accord.ledger.database import create_tables, statement_connection
from accord.market.errors import MarketError, WorkError
from accord.market.work import MAX_FILE_BYTES

SERVICE = ""
"""The holder of the blobs the service stores itself (deliverables) and of those stored before
holders were recorded: kept for good, and nobody's to name in a spec."""

MIB = 1024 * 1024


@dataclass(frozen=True)
class FileQuota:
    """Bounds on uploads that no task names yet (see the module's docstring).

    ttl: seconds an upload is held before it expires, unless a posted task names it.
    files_per_caller, bytes_per_caller: what one caller may hold unnamed at once.
    bytes_total: the bytes all callers together may hold unnamed at once.
    """

    ttl: float = 3600.0
    files_per_caller: int = 32
    bytes_per_caller: int = 32 * MIB
    bytes_total: int = 256 * MIB

    def __post_init__(self) -> None:
        for name in ("ttl", "files_per_caller", "bytes_per_caller", "bytes_total"):
            if getattr(self, name) <= 0:
                raise ValueError(f"the file quota's {name} must be positive")


@dataclass(frozen=True)
class Upload:
    """A file held for its uploader: its name, and when it expires unless a posted task
    names it (None: a task names it, it is kept for good)."""

    sha256: str
    size: int
    expires_at: datetime | None


class BlobError(MarketError):
    """A blob is missing, corrupted, or the store cannot be reached."""


class MissingBlob(BlobError):
    """No blob is stored under this sha256."""


class QuotaExceeded(BlobError):
    """An upload over a `FileQuota` bound (nothing was stored). `limit` names the bound:
    `file-size`, `files-per-caller`, `bytes-per-caller` or `bytes-total`; `retry_after` is
    how many seconds until an upload held now expires (None: the file can never fit)."""

    def __init__(self, message: str, *, limit: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.limit = limit
        self.retry_after = retry_after


class StoredBlob(SQLModel, table=True):
    __tablename__ = "market_blobs"

    sha256: str = Field(primary_key=True, max_length=64)
    size: int
    data: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


class BlobHolder(SQLModel, table=True):
    """Who may name a blob in a task spec, and until when (see the module's docstring)."""

    __tablename__ = "market_blob_holders"
    __table_args__ = (
        Index("ix_market_blob_holders_holder", "holder", "expires_at"),
        Index("ix_market_blob_holders_expires", "expires_at"),
    )

    sha256: str = Field(primary_key=True, max_length=64)
    holder: str = Field(primary_key=True, max_length=400)
    """The uploader's DID, or `SERVICE`."""
    size: int
    expires_at: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    """Unix seconds when an unnamed upload expires; NULL once a posted task names it."""
    task_id: str | None = Field(default=None, max_length=64)
    """The first task that named it."""


_BLOBS = StoredBlob.__table__  # type: ignore[attr-defined]
_HOLDERS = BlobHolder.__table__  # type: ignore[attr-defined]
_LOCK_KEY = 0x61636364_66696C65 & 0x7FFFFFFFFFFFFFFF
"""The PostgreSQL advisory lock every change of holds takes ("accdfile")."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _seconds(now: datetime) -> float:
    return now.timestamp()


def _held_now(now_s: float) -> object:
    """Holds not expired at `now_s` (kept for good, or expiring later)."""
    return (_HOLDERS.c.expires_at.is_(None)) | (_HOLDERS.c.expires_at > now_s)


class BlobStore:
    """Blobs in the market's database, and who holds them. Raises BlobError (QuotaExceeded for
    an upload over its quota); `put` raises WorkError for a blob over the size limit."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._lock = threading.Lock()
        try:
            create_tables(engine, [_BLOBS, _HOLDERS])
            self._hold_unheld()
        except SQLAlchemyError as exc:
            raise BlobError(f"cannot create the blob tables: {exc}") from exc

    def _hold_unheld(self) -> None:
        """Blobs stored before holders were recorded are the service's, kept for good (a
        posted task may name them). Every other blob has a holder from the moment it is
        stored, so after the first start this finds nothing."""
        held = select(_HOLDERS.c.sha256).where(_HOLDERS.c.sha256 == _BLOBS.c.sha256).exists()
        unheld = select(_BLOBS.c.sha256, literal(SERVICE), _BLOBS.c.size).where(~held)
        with self.engine.connect() as connection:  # a read first: most starts find nothing
            if connection.execute(unheld.limit(1)).first() is None:
                return
        try:
            with self._writing() as connection:
                connection.execute(
                    insert(_HOLDERS).from_select(["sha256", "holder", "size"], unheld)
                )
        except IntegrityError:
            pass  # another process starting at the same time recorded them

    @contextmanager
    def _writing(self) -> Iterator[Connection]:
        """A transaction in which this writer alone changes holds: one thread of this process
        at a time, and on PostgreSQL one process at a time (SQLite's BEGIN IMMEDIATE already
        makes writers take turns)."""
        with self._lock, self.engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _LOCK_KEY})
            yield connection

    def put(self, data: bytes, *, name: str = "file") -> str:
        """Store `data` as the service's own, kept for good (idempotent); returns its hex
        SHA-256. For what the service makes itself, the deliverables: a requester's files go
        through `upload`."""
        if len(data) > MAX_FILE_BYTES:
            raise WorkError(
                f"{name} is {len(data)} bytes: a file may be at most {MAX_FILE_BYTES} bytes"
            )
        digest = sha256_hex(data)
        try:
            with self._writing() as connection:
                self._store(connection, digest, data)
                held = connection.execute(
                    select(_HOLDERS.c.expires_at).where(
                        (_HOLDERS.c.sha256 == digest) & (_HOLDERS.c.holder == SERVICE)
                    )
                ).first()
                if held is None:
                    connection.execute(
                        insert(_HOLDERS).values(sha256=digest, holder=SERVICE, size=len(data))
                    )
        except SQLAlchemyError as exc:
            raise BlobError(f"cannot store a blob: {exc}") from exc
        return digest

    def upload(
        self,
        data: bytes,
        *,
        holder: str,
        now: datetime,
        quota: FileQuota | None = None,
        name: str = "the file",
    ) -> Upload:
        """Store `data` held by `holder` (a requester's DID) until `quota.ttl` seconds after
        `now`, unless a posted task names it first. Uploading what
        the holder holds already changes nothing but its expiry. Expired uploads are swept
        first. With a `quota`, an upload over it raises QuotaExceeded and stores nothing;
        without one (the operator's own CLI), only the size of one file is limited."""
        quota = quota or FileQuota()
        size = len(data)
        if size > MAX_FILE_BYTES:
            raise QuotaExceeded(
                f"{name} is {size} bytes: a file may be at most {MAX_FILE_BYTES} bytes "
                f"({MAX_FILE_BYTES // MIB} MiB)",
                limit="file-size",
                retry_after=None,
            )
        digest = sha256_hex(data)
        now_s = _seconds(now)
        expires = math.ceil(now_s + quota.ttl)
        try:
            with self._writing() as connection:
                self._sweep(connection, now_s)
                mine = connection.execute(
                    select(_HOLDERS.c.expires_at).where(
                        (_HOLDERS.c.sha256 == digest) & (_HOLDERS.c.holder == holder)
                    )
                ).first()
                if mine is not None:
                    if mine.expires_at is None:  # a posted task names it: kept for good
                        return Upload(digest, size, None)
                    connection.execute(  # unnamed yet: held for another ttl
                        sql_update(_HOLDERS)
                        .where((_HOLDERS.c.sha256 == digest) & (_HOLDERS.c.holder == holder))
                        .values(expires_at=expires)
                    )
                    return Upload(digest, size, _moment(expires))
                self._check_quota(connection, holder, size, now_s, quota, name)
                self._store(connection, digest, data)
                connection.execute(
                    insert(_HOLDERS).values(
                        sha256=digest, holder=holder, size=size, expires_at=expires
                    )
                )
        except SQLAlchemyError as exc:
            raise BlobError(f"cannot store a blob: {exc}") from exc
        return Upload(digest, size, _moment(expires))

    def _check_quota(
        self,
        connection: Connection,
        holder: str,
        size: int,
        now_s: float,
        quota: FileQuota,
        name: str,
    ) -> None:
        """Raise QuotaExceeded when holding `size` more unnamed bytes would break `quota`
        (the expired holds were swept just before)."""
        for limit, bound in (
            ("bytes-per-caller", quota.bytes_per_caller),
            ("bytes-total", quota.bytes_total),
        ):
            if size > bound:
                raise QuotaExceeded(
                    f"{name} is {size} bytes, more than the {_bytes(bound)} "
                    f"{'one caller' if limit == 'bytes-per-caller' else 'all callers'} may "
                    "upload here before posting a task: split it or make it smaller",
                    limit=limit,
                    retry_after=None,
                )
        unnamed = _HOLDERS.c.expires_at.is_not(None)
        count, held, soonest = connection.execute(
            select(
                func.count(),
                func.coalesce(func.sum(_HOLDERS.c.size), 0),
                func.min(_HOLDERS.c.expires_at),
            ).where(unnamed & (_HOLDERS.c.holder == holder))
        ).one()
        ttl_hint = (
            "post a task naming them (a posted task's files no longer count), or wait until "
            "the oldest expires"
        )
        if count + 1 > quota.files_per_caller:
            raise QuotaExceeded(
                f"you hold {count} uploaded files no task names yet, the most one caller may "
                f"({quota.files_per_caller}): {ttl_hint}, in {_wait(soonest, now_s)} s",
                limit="files-per-caller",
                retry_after=_wait(soonest, now_s),
            )
        if held + size > quota.bytes_per_caller:
            raise QuotaExceeded(
                f"you hold {_bytes(held)} of uploaded files no task names yet; {name} "
                f"({_bytes(size)}) would pass the {_bytes(quota.bytes_per_caller)} one caller "
                f"may hold: {ttl_hint}, in {_wait(soonest, now_s)} s",
                limit="bytes-per-caller",
                retry_after=_wait(soonest, now_s),
            )
        total, first = connection.execute(
            select(
                func.coalesce(func.sum(_HOLDERS.c.size), 0), func.min(_HOLDERS.c.expires_at)
            ).where(unnamed)
        ).one()
        if total + size > quota.bytes_total:
            raise QuotaExceeded(
                f"the service holds {_bytes(total)} of uploads no task names yet; {name} "
                f"({_bytes(size)}) would pass the {_bytes(quota.bytes_total)} it keeps for all "
                f"callers together: try again in {_wait(first, now_s)} s, when the oldest "
                "expires",
                limit="bytes-total",
                retry_after=_wait(first, now_s),
            )

    @staticmethod
    def _store(connection: Connection, digest: str, data: bytes) -> None:
        """The bytes under `digest`, inserted unless they are stored already."""
        exists = connection.execute(select(_BLOBS.c.sha256).where(_BLOBS.c.sha256 == digest))
        if exists.first() is None:
            connection.execute(insert(_BLOBS).values(sha256=digest, size=len(data), data=data))

    def held(self, holder: str, digests: Collection[str], now: datetime) -> list[str]:
        """Those of `digests` that `holder` does not hold at `now` (never uploaded by it, or
        expired), in their order."""
        wanted = sorted(set(digests))
        if not wanted:
            return []
        try:
            with statement_connection(self.engine) as connection:
                found = set(
                    connection.execute(
                        select(_HOLDERS.c.sha256).where(
                            (_HOLDERS.c.holder == holder)
                            & _HOLDERS.c.sha256.in_(wanted)
                            & _held_now(_seconds(now))
                        )
                    ).scalars()
                )
        except SQLAlchemyError as exc:
            raise BlobError(f"cannot read who holds the files: {exc}") from exc
        return [digest for digest in digests if digest not in found]

    def claim(
        self, holder: str, digests: Collection[str], task_id: str, now: datetime
    ) -> list[str]:
        """Keep for good the files `holder` holds among `digests`, named by `task_id`: all of
        them, or none when `holder` does not hold one of them at `now`. Returns those it does
        not hold (empty: all were kept)."""
        wanted = sorted(set(digests))
        if not wanted:
            return []
        now_s = _seconds(now)
        mine = (_HOLDERS.c.holder == holder) & _HOLDERS.c.sha256.in_(wanted)
        try:
            with self._writing() as connection:
                found = set(
                    connection.execute(
                        select(_HOLDERS.c.sha256).where(mine & _held_now(now_s))
                    ).scalars()
                )
                missing = [digest for digest in digests if digest not in found]
                if missing:
                    return missing
                connection.execute(
                    sql_update(_HOLDERS)
                    .where(mine)
                    .values(
                        expires_at=None,
                        task_id=func.coalesce(_HOLDERS.c.task_id, task_id),
                    )
                )
        except SQLAlchemyError as exc:
            raise BlobError(f"cannot keep the task's files: {exc}") from exc
        return []

    @staticmethod
    def _sweep(connection: Connection, now_s: float) -> None:
        """Delete the uploads that expired by `now_s` unnamed, and the bytes nobody holds any
        more (in the caller's writing transaction)."""
        expired = _HOLDERS.c.expires_at.is_not(None) & (_HOLDERS.c.expires_at <= now_s)
        digests = sorted(
            set(connection.execute(select(_HOLDERS.c.sha256).where(expired)).scalars())
        )
        if not digests:
            return
        connection.execute(delete(_HOLDERS).where(expired))
        for start in range(0, len(digests), 500):
            chunk = digests[start : start + 500]
            still_held = select(_HOLDERS.c.sha256).where(_HOLDERS.c.sha256 == _BLOBS.c.sha256)
            connection.execute(
                delete(_BLOBS).where(_BLOBS.c.sha256.in_(chunk) & ~still_held.exists())
            )

    def count(self) -> int:
        """How many blobs are stored (each distinct content once)."""
        try:
            with statement_connection(self.engine) as connection:
                return int(
                    connection.execute(select(func.count()).select_from(_BLOBS)).scalar_one()
                )
        except SQLAlchemyError as exc:
            raise BlobError(f"cannot count the blobs: {exc}") from exc

    def get(self, digest: str) -> bytes:
        """The bytes named `digest`. Raises BlobError when missing or not hashing to it."""
        try:
            with statement_connection(self.engine) as connection:
                row = connection.execute(
                    select(_BLOBS.c.data).where(_BLOBS.c.sha256 == digest)
                ).first()
        except SQLAlchemyError as exc:
            raise BlobError(f"cannot read blob {digest}: {exc}") from exc
        if row is None:
            raise MissingBlob(f"no stored file {digest}")
        data = bytes(row[0])
        if sha256_hex(data) != digest:
            raise BlobError(f"the stored file {digest} does not hash to its name: it was altered")
        return data

    def sealed(self, commitment: str) -> bytes | None:
        """The sealed bytes named `commitment` (`accord.ledger.sealing`), or None when not held.
        Raises BlobError when they were altered or cannot be read."""
        try:
            return self.get(commitment)
        except MissingBlob:
            return None

    def text(self, digest: str) -> str:
        """The blob as UTF-8 text. Raises BlobError when missing, altered, or not text."""
        try:
            return self.get(digest).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BlobError(f"file {digest} is not UTF-8 text") from exc


def _moment(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _bytes(size: int) -> str:
    """A size as a person reads it."""
    if size >= MIB:
        return f"{size / MIB:.1f} MiB"
    if size >= 1024:
        return f"{size / 1024:.1f} KiB"
    return f"{size} bytes"


def _wait(expires_at: int | None, now_s: float) -> int:
    """Whole seconds from `now_s` until `expires_at` (at least 1)."""
    if expires_at is None:
        return 1
    return max(1, math.ceil(expires_at - now_s))
