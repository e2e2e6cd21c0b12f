"""Where the ledger records each checkpoint-anchoring transaction before sending it:
`AnchorJournal`, table `ledger_anchors`, in the log's own database (the engine of its
`LogStore`; a journal of its own, not a part of the log).

The same design as the escrow's journal (`accord.market.escrow.journal`), for the same engine
(`accord.ledger.txjournal`, which `accord.ledger.anchoring` drives): a transaction is signed,
journalled *pending* with its raw bytes, and only then broadcast; the engine resolves the
record against the chain and the journal follows it, so a crash anywhere leaves at most a
pending record, which the next reconciliation finishes without sending anything twice. The
statuses are the engine's (`JournalStatus`); an anchor's record takes two of them, and differs
from an escrow record where anchors differ from escrow actions:

* one record per checkpoint size (the table's key). A stuck transaction signed again (the
  same nonce with fees bumped, or a new nonce) takes the place of the old one in the record,
  in one write (`replace`): whichever transaction puts the checkpoint's root on chain counts
  as the anchor's (the registry shows it by size), so no record of the old one is needed;
* a record that can never be mined (its nonce went to another transaction), or that a larger
  anchor on chain made needless, is deleted (`drop`): nothing is owed, the next anchor covers
  its entries; an escrow action in that case is kept as dropped or superseded;
* a confirmed record the chain no longer holds (a restart from an older state, a reorg) is
  made pending again (`reopen`), where an escrow record becomes "forgotten";
* where a pending transaction was seen mined but not yet deep is not written: it is kept in
  memory until confirmed (after a crash the chain shows it again);
* `sent_at` is RFC 3339 text (`accord.ledger.events.format_time`), as it always was.

The table's name and columns are those `LogStore` created before this module held them, so a
home written by an older accord (SQLite or PostgreSQL) finds its anchors
(tests/ledger/test_anchor_journal.py pins the DDL).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import BigInteger, Engine, LargeBinary, delete, insert, select, update
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlmodel import Column, Field, SQLModel

from accord.ledger.database import create_tables, db_reason, statement_connection
from accord.ledger.errors import StoreError

AnchorRecordStatus = Literal["pending", "confirmed"]
"""The two `accord.ledger.txjournal.JournalStatus` values an anchor's record takes: "pending"
(signed and journalled, sent or about to be, or reopened) until the engine confirms it."""


@dataclass(frozen=True)
class AnchorRecord:
    """One checkpoint's anchoring transaction as the journal holds it.

    root: the checkpoint's root at `size`; registry_address and chain_id: where it is
    anchored; raw_tx: the signed bytes (broadcast again, byte for byte, while pending);
    block_number: where it was mined (confirmed records); sent_at: when it was signed.
    """

    size: int
    root: bytes
    status: AnchorRecordStatus
    chain_id: int
    registry_address: str
    nonce: int
    tx_hash: bytes
    raw_tx: bytes
    block_number: int | None
    sent_at: str


class LedgerAnchor(SQLModel, table=True):
    """One row per anchored checkpoint size (see AnchorRecord)."""

    __tablename__ = "ledger_anchors"

    size: int = Field(sa_column=Column(BigInteger, primary_key=True, autoincrement=False))
    root: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    status: str = Field(index=True)  # pending | confirmed
    chain_id: int
    registry_address: str
    nonce: int
    tx_hash: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    raw_tx: bytes = Field(sa_column=Column(LargeBinary, nullable=False))
    block_number: int | None = None
    sent_at: str


_ANCHORS = LedgerAnchor.__table__  # type: ignore[attr-defined]


class AnchorJournal:
    """The anchor journal in the `ledger_anchors` table (SQLite or PostgreSQL), created when
    missing. Several processes may share it: a record is added once per size, and `replace`
    writes only over the transaction it was asked to replace.

    Raises StoreError when the database refuses.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        try:
            create_tables(engine, [_ANCHORS])
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot prepare the anchor journal: {db_reason(exc)}") from exc

    # -- writing -----------------------------------------------------------------------------

    def add(self, record: AnchorRecord) -> bool:
        """Record a signed anchor transaction before it is sent.

        Returns False, writing nothing, when a record of that size is already there (another
        process anchoring the same checkpoint wrote it). Raises StoreError.
        """
        try:
            with self.engine.begin() as connection:
                connection.execute(insert(_ANCHORS).values(**record.__dict__))
        except IntegrityError:
            if self._record(record.size) is not None:
                return False
            raise StoreError(f"cannot record the anchor of size {record.size}") from None
        except SQLAlchemyError as exc:
            raise StoreError(
                f"cannot record the anchor of size {record.size}: {db_reason(exc)}"
            ) from exc
        return True

    def confirm(self, size: int, tx_hash: bytes, block_number: int) -> None:
        """Record the anchor of `size` done by `tx_hash` (its own transaction, or one signed
        before it at the same nonce) in `block_number`. Raises StoreError."""
        try:
            with self.engine.begin() as connection:
                connection.execute(
                    update(_ANCHORS)
                    .where(_ANCHORS.c.size == size)
                    .values(status="confirmed", block_number=block_number, tx_hash=tx_hash)
                )
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot confirm the anchor of size {size}: {db_reason(exc)}") from exc

    def reopen(self, size: int) -> bool:
        """Mark a confirmed anchor pending again: the chain no longer holds it (a restart
        from an older state, a reorg), so it is reconciled (sent again) like any pending one.
        Returns False when no confirmed record of that size is there. Raises StoreError."""
        try:
            with self.engine.begin() as connection:
                result = connection.execute(
                    update(_ANCHORS)
                    .where(_ANCHORS.c.size == size, _ANCHORS.c.status == "confirmed")
                    .values(status="pending", block_number=None)
                )
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot reopen the anchor of size {size}: {db_reason(exc)}") from exc
        return bool(result.rowcount == 1)

    def replace(self, old_hash: bytes, record: AnchorRecord) -> bool:
        """In one write, put `record`'s transaction (another signing of the same anchor: the
        same nonce with higher fees, or a new nonce) in the place of the pending `old_hash`
        in the record of `record.size`. Returns False, writing nothing, when that record no
        longer holds `old_hash` pending (another process resolved it). Raises StoreError."""
        size = record.size
        try:
            with self.engine.begin() as connection:
                result = connection.execute(
                    update(_ANCHORS)
                    .where(
                        _ANCHORS.c.size == size,
                        _ANCHORS.c.tx_hash == old_hash,
                        _ANCHORS.c.status == "pending",
                    )
                    .values(
                        nonce=record.nonce,
                        tx_hash=record.tx_hash,
                        raw_tx=record.raw_tx,
                        sent_at=record.sent_at,
                    )
                )
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot replace the anchor of size {size}: {db_reason(exc)}") from exc
        return bool(result.rowcount == 1)

    def drop(self, size: int) -> None:
        """Delete the pending record of `size`: the chain proved it can never be mined, or a
        larger anchor covers it (the next anchor covers its entries). A confirmed record is
        left as it is. Raises StoreError."""
        try:
            with self.engine.begin() as connection:
                connection.execute(
                    delete(_ANCHORS).where(_ANCHORS.c.size == size, _ANCHORS.c.status == "pending")
                )
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot drop the anchor of size {size}: {db_reason(exc)}") from exc

    # -- reading -----------------------------------------------------------------------------

    def records(self, status: AnchorRecordStatus | None = None) -> list[AnchorRecord]:
        """Every record (of `status` when given), by size. Raises StoreError."""
        query = select(_ANCHORS).order_by(_ANCHORS.c.size)
        if status is not None:
            query = query.where(_ANCHORS.c.status == status)
        return self._select(query)

    def pending(self) -> list[AnchorRecord]:
        """The records not confirmed yet, by size. Raises StoreError."""
        return self.records("pending")

    def latest(self) -> AnchorRecord | None:
        """The record of the largest size, or None (one row read, not all). Raises StoreError."""
        found = self._select(select(_ANCHORS).order_by(_ANCHORS.c.size.desc()).limit(1))
        return found[0] if found else None

    def _record(self, size: int) -> AnchorRecord | None:
        found = self._select(select(_ANCHORS).where(_ANCHORS.c.size == size))
        return found[0] if found else None

    def _select(self, query: Any) -> list[AnchorRecord]:
        try:
            with statement_connection(self.engine) as connection:
                rows = connection.execute(query).all()
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot read the anchor journal: {db_reason(exc)}") from exc
        return [
            AnchorRecord(
                size=int(row.size),
                root=bytes(row.root),
                status=row.status,
                chain_id=int(row.chain_id),
                registry_address=row.registry_address,
                nonce=int(row.nonce),
                tx_hash=bytes(row.tx_hash),
                raw_tx=bytes(row.raw_tx),
                block_number=None if row.block_number is None else int(row.block_number),
                sent_at=row.sent_at,
            )
            for row in rows
        ]
