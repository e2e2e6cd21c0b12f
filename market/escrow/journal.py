"""Where the market records escrow transactions before sending them: `EscrowJournal`, in
memory (`MemoryEscrowJournal`) or in the market's SQL database (`SqlEscrowJournal`, table
`market_escrow_txs`; a table of an older accord, without `sent_at`, gains the column when
opened; `market_escrow_intact` remembers up to which block the chain held every done one).

A record's statuses are the journal engine's (`accord.ledger.txjournal.JournalStatus`), all of
them; the ledger's anchor journal (`accord.ledger.anchor_journal`) is built the same way and
says where anchors differ.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Protocol

from sqlalchemy import (
    BigInteger,
    Engine,
    Float,
    Integer,
    LargeBinary,
    insert,
    inspect,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.exc import SQLAlchemyError
from sqlmodel import Column, Field, SQLModel

from accord.ledger.database import create_tables, statement_connection, upsert
from accord.ledger.txjournal import DONE, UNRESOLVED, JournalStatus
from accord.market.errors import EscrowError
from accord.market.escrow.values import EscrowIntent, SignedEscrowTx


@dataclass(frozen=True)
class EscrowTxRecord:
    """One signed escrow transaction as the market recorded it (before sending it)."""

    tx_hash: bytes
    intent: EscrowIntent
    sender: str
    nonce: int
    raw: bytes
    chain_id: int
    escrow_address: str
    status: JournalStatus = "pending"
    block_number: int | None = None
    sent_at: float | None = None
    """Seconds since the epoch when it was signed (None in records of an older accord)."""

    def signed(self) -> SignedEscrowTx:
        return SignedEscrowTx(
            self.intent.kind, self.intent.task_id, self.nonce, self.tx_hash, self.raw, self.sender
        )


class EscrowJournal(Protocol):
    """Where the market records escrow transactions before sending them."""

    def add(self, record: EscrowTxRecord) -> None:
        """Record a new transaction (status pending). Raises EscrowError if known."""
        ...

    def pending(self) -> list[EscrowTxRecord]:
        """Unresolved records (pending or forgotten), oldest first."""
        ...

    def records(self, task_id: str | None = None) -> list[EscrowTxRecord]:
        """Every record (of the task), oldest first."""
        ...

    def mark(self, tx_hash: bytes, status: JournalStatus, block_number: int | None) -> None:
        """Record a pending transaction's outcome. Raises EscrowError if unknown."""
        ...

    def replace(self, old_hash: bytes, record: EscrowTxRecord) -> bool:
        """In one write: mark `old_hash` replaced and add `record` (pending). Returns False,
        writing nothing, when `old_hash` is not unresolved (another process resolved it).
        Raises EscrowError if `record` is known."""
        ...

    def done_after(self, block_number: int) -> list[EscrowTxRecord]:
        """Records done on chain (confirmed or superseded) not known to be in a block at or
        below `block_number` (a superseded one has no block), oldest first."""
        ...

    def intact_through(self) -> tuple[int, bytes] | None:
        """The block (number, hash) up to which the chain held every done record when last
        checked, or None."""
        ...

    def record_intact(self, block_number: int, block_hash: bytes) -> None:
        """Remember that the chain held every done record up to this block."""
        ...


class MemoryEscrowJournal:
    """An EscrowJournal in a list (survives a "crash" of the EscrowActions using it)."""

    def __init__(self) -> None:
        self._records: list[EscrowTxRecord] = []
        self._intact: tuple[int, bytes] | None = None

    def add(self, record: EscrowTxRecord) -> None:
        if any(r.tx_hash == record.tx_hash for r in self._records):
            raise EscrowError(f"escrow tx 0x{record.tx_hash.hex()} is already recorded")
        self._records.append(record)

    def pending(self) -> list[EscrowTxRecord]:
        return [r for r in self._records if r.status in UNRESOLVED]

    def records(self, task_id: str | None = None) -> list[EscrowTxRecord]:
        return [r for r in self._records if task_id is None or r.intent.task_id == task_id]

    def mark(self, tx_hash: bytes, status: JournalStatus, block_number: int | None) -> None:
        for index, record in enumerate(self._records):
            if record.tx_hash == tx_hash:
                self._records[index] = replace(record, status=status, block_number=block_number)
                return
        raise EscrowError(f"escrow tx 0x{tx_hash.hex()} is not recorded")

    def replace(self, old_hash: bytes, record: EscrowTxRecord) -> bool:
        if any(r.tx_hash == record.tx_hash for r in self._records):
            raise EscrowError(f"escrow tx 0x{record.tx_hash.hex()} is already recorded")
        if not any(r.tx_hash == old_hash and r.status in UNRESOLVED for r in self._records):
            return False
        self.mark(old_hash, "replaced", None)
        self._records.append(record)
        return True

    def done_after(self, block_number: int) -> list[EscrowTxRecord]:
        return [
            r
            for r in self._records
            if r.status in DONE and (r.block_number is None or r.block_number > block_number)
        ]

    def intact_through(self) -> tuple[int, bytes] | None:
        return self._intact

    def record_intact(self, block_number: int, block_hash: bytes) -> None:
        self._intact = (block_number, block_hash)


class MarketEscrowTx(SQLModel, table=True):
    """One row per signed escrow transaction (see EscrowTxRecord)."""

    __tablename__ = "market_escrow_txs"

    id: int | None = Field(default=None, sa_column=Column(Integer, primary_key=True))
    tx_hash: bytes = Field(sa_column=Column(LargeBinary, nullable=False, unique=True))
    kind: str
    task_id: str = Field(index=True)
    intent: str
    sender: str
    nonce: int = Field(sa_column=Column(BigInteger, nullable=False))
    raw: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    chain_id: int = Field(sa_column=Column(BigInteger, nullable=False))
    escrow_address: str
    status: str = Field(index=True)
    block_number: int | None = Field(default=None, sa_column=Column(BigInteger, nullable=True))
    sent_at: float | None = Field(default=None, sa_column=Column(Float, nullable=True))


_TXS = MarketEscrowTx.__table__  # type: ignore[attr-defined]


class MarketEscrowIntact(SQLModel, table=True):
    """One row: the block up to which the chain held every done escrow transaction when the
    market last looked (so the next look starts after it, while that block is unchanged)."""

    __tablename__ = "market_escrow_intact"

    id: int = Field(default=1, primary_key=True)
    block_number: int = Field(sa_column=Column(BigInteger, nullable=False))
    block_hash: bytes = Field(sa_column=Column(LargeBinary, nullable=False))


_INTACT = MarketEscrowIntact.__table__  # type: ignore[attr-defined]


class _AlreadyResolved(Exception):
    """Inside a journal write: the record to replace is no longer unresolved (roll back)."""


def _add_missing_columns(engine: Engine) -> None:
    """Bring a `market_escrow_txs` of an older accord to this shape: `sent_at` was added
    (nullable; old records simply have none). Raises SQLAlchemyError."""
    present = {column["name"] for column in inspect(engine).get_columns(_TXS.name)}
    if "sent_at" in present:
        return
    try:
        with engine.begin() as connection:
            connection.execute(text(f"ALTER TABLE {_TXS.name} ADD COLUMN sent_at FLOAT"))
    except SQLAlchemyError:
        # Another process opening the same old database added it first.
        if "sent_at" not in {c["name"] for c in inspect(engine).get_columns(_TXS.name)}:
            raise


class SqlEscrowJournal:
    """An EscrowJournal in the `market_escrow_txs` table (SQLite or PostgreSQL).

    Raises EscrowError when the database refuses.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        try:
            create_tables(engine, [_TXS, _INTACT])
            _add_missing_columns(engine)
        except SQLAlchemyError as exc:
            raise EscrowError(f"cannot prepare the escrow journal: {exc}") from exc

    def add(self, record: EscrowTxRecord) -> None:
        try:
            with self.engine.begin() as connection:
                self._insert(connection, record)
        except SQLAlchemyError as exc:
            raise EscrowError(f"cannot record escrow tx 0x{record.tx_hash.hex()}: {exc}") from exc

    def replace(self, old_hash: bytes, record: EscrowTxRecord) -> bool:
        try:
            with self.engine.begin() as connection:
                result = connection.execute(
                    update(_TXS)
                    .where(_TXS.c.tx_hash == old_hash, _TXS.c.status.in_(UNRESOLVED))
                    .values(status="replaced")
                )
                if result.rowcount != 1:
                    raise _AlreadyResolved
                self._insert(connection, record)
        except _AlreadyResolved:
            return False  # rolled back: nothing written
        except SQLAlchemyError as exc:
            raise EscrowError(f"cannot replace escrow tx 0x{old_hash.hex()}: {exc}") from exc
        return True

    @staticmethod
    def _insert(connection: Any, record: EscrowTxRecord) -> None:
        connection.execute(
            insert(_TXS).values(
                tx_hash=record.tx_hash,
                kind=record.intent.kind,
                task_id=record.intent.task_id,
                intent=record.intent.to_json(),
                sender=record.sender,
                nonce=record.nonce,
                raw=record.raw,
                chain_id=record.chain_id,
                escrow_address=record.escrow_address,
                status=record.status,
                block_number=record.block_number,
                sent_at=record.sent_at,
            )
        )

    def _select(self, *conditions: Any) -> list[EscrowTxRecord]:
        try:
            with statement_connection(self.engine) as connection:
                rows = connection.execute(select(_TXS).where(*conditions).order_by(_TXS.c.id)).all()
        except SQLAlchemyError as exc:
            raise EscrowError(f"cannot read the escrow journal: {exc}") from exc
        return [
            EscrowTxRecord(
                tx_hash=bytes(row.tx_hash),
                intent=EscrowIntent.from_json(row.intent),
                sender=row.sender,
                nonce=int(row.nonce),
                raw=bytes(row.raw),
                chain_id=int(row.chain_id),
                escrow_address=row.escrow_address,
                status=row.status,
                block_number=None if row.block_number is None else int(row.block_number),
                sent_at=None if row.sent_at is None else float(row.sent_at),
            )
            for row in rows
        ]

    def pending(self) -> list[EscrowTxRecord]:
        return self._select(_TXS.c.status.in_(UNRESOLVED))

    def records(self, task_id: str | None = None) -> list[EscrowTxRecord]:
        if task_id is None:
            return self._select()
        return self._select(_TXS.c.task_id == task_id)

    def done_after(self, block_number: int) -> list[EscrowTxRecord]:
        return self._select(
            _TXS.c.status.in_(DONE),
            or_(_TXS.c.block_number.is_(None), _TXS.c.block_number > block_number),
        )

    def intact_through(self) -> tuple[int, bytes] | None:
        try:
            with statement_connection(self.engine) as connection:
                row = connection.execute(
                    select(_INTACT.c.block_number, _INTACT.c.block_hash)
                ).first()
        except SQLAlchemyError as exc:
            raise EscrowError(f"cannot read the escrow journal: {exc}") from exc
        return None if row is None else (int(row[0]), bytes(row[1]))

    def record_intact(self, block_number: int, block_hash: bytes) -> None:
        """One statement, an upsert of the one row: services sharing the database record it at
        the same time (with a DELETE then an INSERT, two of them could both find no row, and
        the second INSERT failed on the key). The last writer's block wins; any of them is a
        block the chain held every done transaction through."""
        statement = upsert(
            _INTACT, self.engine.dialect.name, [_INTACT.c.id], ["block_number", "block_hash"]
        )
        row = {"id": 1, "block_number": block_number, "block_hash": block_hash}
        try:
            with self.engine.begin() as connection:
                connection.execute(statement, row)
        except SQLAlchemyError as exc:
            raise EscrowError(f"cannot update the escrow journal: {exc}") from exc

    def mark(self, tx_hash: bytes, status: JournalStatus, block_number: int | None) -> None:
        try:
            with self.engine.begin() as connection:
                result = connection.execute(
                    update(_TXS)
                    .where(_TXS.c.tx_hash == tx_hash)
                    .values(status=status, block_number=block_number)
                )
        except SQLAlchemyError as exc:
            raise EscrowError(f"cannot update escrow tx 0x{tx_hash.hex()}: {exc}") from exc
        if result.rowcount != 1:
            raise EscrowError(f"escrow tx 0x{tx_hash.hex()} is not recorded")
