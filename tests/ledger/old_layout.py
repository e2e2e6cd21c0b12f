"""A log as accord stored it before tiles: its tree as one row per perfect subtree in
`ledger_nodes` (keyed by `level << 48 | position`, pairs of leaves not stored), written here
straight through SQL so tests can migrate it (`accord.ledger.tile_migration.migrate_to_tiles`)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Engine, insert
from sqlmodel import SQLModel

from accord.ledger import merkle
from accord.ledger.database import LedgerCheckpoint, LedgerEntry, LedgerHead, LedgerNode, LedgerOnce
from accord.ledger.events import Entry

OLD_NODE_INDEX_BITS = 48


def old_node_rows(
    start: int, frontier: list[bytes], datas: Sequence[bytes]
) -> tuple[list[bytes], list[dict[str, object]]]:
    """The node rows an earlier accord wrote for `datas` appended to a log of `start` entries
    (every perfect subtree they complete but the pairs of leaves), and the new frontier."""
    after, made = merkle.extend_frontier(frontier, start, datas)
    rows = [
        {"id": (level << OLD_NODE_INDEX_BITS) | position, "hash": value}
        for level, position, value in made
        if level != 1
    ]
    return after, rows


def write_old_log(
    engine: Engine,
    log_id: str,
    entries: Sequence[Entry] | None = None,
    *,
    datas: Sequence[bytes] | None = None,
    batch: int = 10_000,
) -> list[bytes]:
    """Write a log in the node-row layout: signed `entries` (their columns from the signed
    event) or bare leaf `datas` (placeholder columns: a log to migrate, not to verify).
    Returns the leaf hashes."""
    tables = [
        LedgerHead.__table__,  # type: ignore[attr-defined]
        LedgerEntry.__table__,  # type: ignore[attr-defined]
        LedgerNode.__table__,  # type: ignore[attr-defined]
        LedgerCheckpoint.__table__,  # type: ignore[attr-defined]
        LedgerOnce.__table__,  # type: ignore[attr-defined]
    ]
    SQLModel.metadata.create_all(engine, tables=tables)
    if entries is not None:
        rows = [
            {
                "actor": e.event.actor,
                "seq": e.event.seq,
                "kind": e.event.kind,
                "subject": e.event.subject,
                "at": e.event.at,
                "data": e.data,
            }
            for e in entries
        ]
    else:
        assert datas is not None
        rows = [
            {
                "actor": "did:key:old",
                "seq": i + 1,
                "kind": "note.added",
                "subject": "s",
                "at": "t",
                "data": d,
            }
            for i, d in enumerate(datas)
        ]
    frontier: list[bytes] = []
    leaves: list[bytes] = []
    with engine.begin() as connection:
        connection.execute(insert(tables[0]).values(id=1, log_id=log_id, size=len(rows)))
        for start in range(0, len(rows), batch):
            chunk = rows[start : start + batch]
            for offset, row in enumerate(chunk):
                row["idx"] = start + offset
            chunk_datas = [bytes(row["data"]) for row in chunk]  # type: ignore[arg-type]
            leaves += [merkle.leaf_hash(d) for d in chunk_datas]
            frontier, node_rows = old_node_rows(start, frontier, chunk_datas)
            connection.execute(insert(tables[1]), chunk)
            connection.execute(insert(tables[2]), node_rows)
    return leaves
