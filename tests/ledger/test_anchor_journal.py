"""The anchor journal (`accord.ledger.anchor_journal`): its writes, and the `ledger_anchors` table
of homes written before the journal left `LogStore` (same name, same columns), on SQLite and
PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.schema import CreateIndex, CreateTable

from accord.ledger.anchor_journal import AnchorJournal, AnchorRecord, LedgerAnchor
from accord.ledger.anchoring import Anchorer
from accord.ledger.chain import MemoryAnchorChain
from accord.ledger.signing import Ed25519Signer
from accord.ledger.store import LogStore
from accord.ledger.verify import verify_log
from tests.ledger.conftest import LOG_ID, START, EntryMaker, append_signed

# The DDL `LogStore` issued for `ledger_anchors` before the journal had a module of its own
# (SQLAlchemy's CreateTable of the old `accord.ledger.store.LedgerAnchor`, whitespace folded).
OLD_TABLE = {
    "sqlite": (
        "CREATE TABLE ledger_anchors (size BIGINT NOT NULL, root BLOB NOT NULL, "
        "status VARCHAR NOT NULL, chain_id INTEGER NOT NULL, registry_address VARCHAR NOT NULL, "
        "nonce INTEGER NOT NULL, tx_hash BLOB NOT NULL, raw_tx BLOB NOT NULL, "
        "block_number INTEGER, sent_at VARCHAR NOT NULL, PRIMARY KEY (size))"
    ),
    "postgres": (
        "CREATE TABLE ledger_anchors (size BIGINT NOT NULL, root BYTEA NOT NULL, "
        "status VARCHAR NOT NULL, chain_id INTEGER NOT NULL, registry_address VARCHAR NOT NULL, "
        "nonce INTEGER NOT NULL, tx_hash BYTEA NOT NULL, raw_tx BYTEA NOT NULL, "
        "block_number INTEGER, sent_at VARCHAR NOT NULL, PRIMARY KEY (size))"
    ),
}
OLD_INDEX = "CREATE INDEX ix_ledger_anchors_status ON ledger_anchors (status)"
DIALECTS = {"sqlite": sqlite.dialect(), "postgres": postgresql.dialect()}
SENT_AT = "2026-11-29T12:00:00.000Z"


def _folded(ddl: str) -> str:
    return " ".join(ddl.split()).replace("( ", "(").replace(" )", ")")


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_the_table_is_the_one_the_store_created(dialect: str) -> None:
    table = LedgerAnchor.__table__  # type: ignore[attr-defined]
    assert _folded(str(CreateTable(table).compile(dialect=DIALECTS[dialect]))) == OLD_TABLE[dialect]
    [index] = table.indexes
    assert str(CreateIndex(index).compile(dialect=DIALECTS[dialect])) == OLD_INDEX


def _record(size: int, tx_hash: bytes, **changes: object) -> AnchorRecord:
    record = AnchorRecord(
        size=size,
        root=bytes([size]) * 32,
        status="pending",
        chain_id=31337,
        registry_address="0x" + "ab" * 20,
        nonce=size,
        tx_hash=tx_hash,
        raw_tx=b"raw-" + tx_hash,
        block_number=None,
        sent_at=SENT_AT,
    )
    return replace(record, **changes)  # type: ignore[arg-type]


def test_a_size_is_recorded_once(store: LogStore) -> None:
    journal = AnchorJournal(store.engine)
    assert journal.records() == [] and journal.latest() is None
    first = _record(3, b"\x01" * 32)
    assert journal.add(first)
    assert not journal.add(_record(3, b"\x02" * 32))  # another process's signing of size 3
    assert journal.records() == [first] == journal.pending()
    assert AnchorJournal(store.engine).records() == [first]  # a second opening finds it


def test_confirm_reopen_and_latest(store: LogStore) -> None:
    journal = AnchorJournal(store.engine)
    journal.add(_record(3, b"\x01" * 32))
    journal.add(_record(5, b"\x05" * 32))
    twin = b"\x06" * 32  # the transaction that mined it: one signed before, at its nonce
    journal.confirm(5, twin, 9)
    [done] = journal.records("confirmed")
    assert (done.size, done.tx_hash, done.block_number) == (5, twin, 9)
    assert journal.latest() == done
    assert [r.size for r in journal.pending()] == [3]
    assert not journal.reopen(3)  # pending: nothing to reopen
    assert journal.reopen(5)
    assert [(r.size, r.status, r.block_number) for r in journal.records()] == [
        (3, "pending", None),
        (5, "pending", None),
    ]


def test_replace_writes_only_over_the_pending_transaction_it_names(store: LogStore) -> None:
    journal = AnchorJournal(store.engine)
    old = _record(4, b"\x01" * 32)
    journal.add(old)
    bumped = _record(4, b"\x02" * 32, nonce=4, sent_at="2026-11-29T12:05:00.000Z")
    assert not journal.replace(b"\x09" * 32, bumped)  # not the one it holds
    assert journal.replace(old.tx_hash, bumped)
    assert journal.records() == [bumped]
    assert not journal.replace(old.tx_hash, _record(4, b"\x03" * 32))  # replaced already
    journal.confirm(4, bumped.tx_hash, 2)
    assert not journal.replace(bumped.tx_hash, _record(4, b"\x03" * 32))  # resolved
    assert journal.records()[0].tx_hash == bumped.tx_hash


def test_drop_deletes_a_pending_record_only(store: LogStore) -> None:
    journal = AnchorJournal(store.engine)
    journal.add(_record(2, b"\x02" * 32))
    journal.add(_record(7, b"\x07" * 32))
    journal.confirm(2, b"\x02" * 32, 1)
    journal.drop(2)
    journal.drop(7)
    assert [(r.size, r.status) for r in journal.records()] == [(2, "confirmed")]


def test_a_home_written_before_the_journal_moved_finds_its_anchors(
    backend: str,
    open_engine: Callable[[], Engine],
    operator: Ed25519Signer,
    maker: EntryMaker,
) -> None:
    """An older accord's home: its log, and `ledger_anchors` as its `LogStore` created it,
    holding a confirmed anchor and one signed but never sent (a crash before the broadcast).
    The new code finds both, and sends the pending one's recorded bytes, once."""
    chain = MemoryAnchorChain()
    old = make_old_home(open_engine(), backend, chain, operator, maker)

    store = LogStore(open_engine(), LOG_ID)
    anchorer = Anchorer(store, chain, operator, lambda: START, receipt_timeout=0)
    assert anchorer.journal.records() == old
    outcome = anchorer.anchor_latest()
    assert (outcome.status, outcome.size, outcome.tx_hash) == ("confirmed", 5, old[1].tx_hash)
    assert [(a.size, a.tx_hash) for a in chain.anchors(LOG_ID)] == [
        (3, old[0].tx_hash),
        (5, old[1].tx_hash),
    ]
    assert [(r.size, r.status) for r in anchorer.journal.records()] == [
        (3, "confirmed"),
        (5, "confirmed"),
    ]
    assert anchorer.anchor_latest().status == "already-anchored"
    assert verify_log(store, operator.did, chain).ok


def make_old_home(
    engine: Engine,
    backend: str,
    chain: MemoryAnchorChain,
    operator: Ed25519Signer,
    maker: EntryMaker,
) -> list[AnchorRecord]:
    """A log of 5 entries and the old `ledger_anchors`, written with the old DDL and plain
    SQL: size 3 anchored and confirmed, size 5 signed and recorded pending, never sent."""
    store = LogStore(engine, LOG_ID)
    append_signed(store, maker, 3)
    done = chain.build_anchor_tx(LOG_ID, 3, store.root(3))
    chain.broadcast(done)
    [mined] = chain.anchors(LOG_ID)
    append_signed(store, maker, 2)
    unsent = chain.build_anchor_tx(LOG_ID, 5, store.root(5))
    records = [
        AnchorRecord(
            3,
            done.root,
            "confirmed",
            chain.chain_id(),
            chain.registry_address(),
            done.nonce,
            done.tx_hash,
            done.raw,
            mined.block_number,
            SENT_AT,
        ),
        AnchorRecord(
            5,
            unsent.root,
            "pending",
            chain.chain_id(),
            chain.registry_address(),
            unsent.nonce,
            unsent.tx_hash,
            unsent.raw,
            None,
            SENT_AT,
        ),
    ]
    with engine.begin() as connection:
        connection.execute(text(OLD_TABLE[backend]))
        connection.execute(text(OLD_INDEX))
        for record in records:
            connection.execute(
                text(
                    "INSERT INTO ledger_anchors (size, root, status, chain_id, registry_address, "
                    "nonce, tx_hash, raw_tx, block_number, sent_at) VALUES (:size, :root, "
                    ":status, :chain_id, :registry_address, :nonce, :tx_hash, :raw_tx, "
                    ":block_number, :sent_at)"
                ),
                record.__dict__,
            )
    engine.dispose()
    return records
