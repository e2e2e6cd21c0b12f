"""Content-addressed files: a task's input files and its deliverables, by SHA-256.

A blob's name is the hex SHA-256 of its bytes, so what the log names (`task.posted` holds the
hashes of its files, `task.delivered` the hash of its deliverable) is checked on every read:
bytes that do not hash to their name are refused. Blobs live in the service's database (one
table, so several service processes share them), limited to `MAX_FILE_BYTES` each.
"""

from __future__ import annotations

import hashlib

from sqlalchemy import Engine, insert, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlmodel import Column, Field, LargeBinary, SQLModel

from ledger.store import create_tables
from market.errors import MarketError, WorkError
from market.work import MAX_FILE_BYTES

MAX_TASK_FILES = 16


class BlobError(MarketError):
    """A blob is missing, corrupted, or the store cannot be reached."""


class MissingBlob(BlobError):
    """No blob is stored under this sha256."""


class StoredBlob(SQLModel, table=True):
    __tablename__ = "market_blobs"

    sha256: str = Field(primary_key=True, max_length=64)
    size: int
    data: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


_BLOBS = StoredBlob.__table__  # type: ignore[attr-defined]


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class BlobStore:
    """Blobs in the market's database. Raises BlobError; `put` raises WorkError for a blob over
    the size limit."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        try:
            create_tables(engine, [_BLOBS])
        except SQLAlchemyError as exc:
            raise BlobError(f"cannot create the blob table: {exc}") from exc

    def put(self, data: bytes, *, name: str = "file") -> str:
        """Store `data` (idempotent); returns its hex SHA-256."""
        if len(data) > MAX_FILE_BYTES:
            raise WorkError(
                f"{name} is {len(data)} bytes: a file may be at most {MAX_FILE_BYTES} bytes"
            )
        digest = sha256_hex(data)
        try:
            with self.engine.begin() as connection:
                exists = connection.execute(
                    select(_BLOBS.c.sha256).where(_BLOBS.c.sha256 == digest)
                ).first()
                if exists is None:
                    connection.execute(
                        insert(_BLOBS).values(sha256=digest, size=len(data), data=data)
                    )
        except IntegrityError:
            pass  # stored by another process at the same time: same bytes, same name
        except SQLAlchemyError as exc:
            raise BlobError(f"cannot store a blob: {exc}") from exc
        return digest

    def get(self, digest: str) -> bytes:
        """The bytes named `digest`. Raises BlobError when missing or not hashing to it."""
        try:
            with self.engine.connect() as connection:
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

    def text(self, digest: str) -> str:
        """The blob as UTF-8 text. Raises BlobError when missing, altered, or not text."""
        try:
            return self.get(digest).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BlobError(f"file {digest} is not UTF-8 text") from exc
