"""The migration of a log whose tree an earlier accord stored as one row per tree node
(`ledger_nodes`) to tiles (`accord ledger migrate`), proving the roots unchanged."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, delete, func, insert, inspect, select
from sqlalchemy.exc import SQLAlchemyError

from accord.ledger import merkle
from accord.ledger.database import (
    CHECKPOINTS,
    ENTRIES,
    HEAD,
    NODES,
    TILES,
    as_bytes,
    create_tables,
    db_reason,
    lock_head,
)
from accord.ledger.errors import StoreError
from accord.ledger.log import extend_tree
from accord.ledger.merkle import NodeId
from accord.ledger.proofs import root_on
from accord.ledger.tiles import EdgeTile

NODE_INDEX_BITS = 48
"""The key of a node row of the earlier layout (`LedgerNode`) is `level << 48 | position`."""


def node_key(node: NodeId) -> int:
    """The key of a perfect subtree's row in the earlier layout (`LedgerNode`)."""
    return (node.level << NODE_INDEX_BITS) | node.position


@dataclass(frozen=True)
class TileMigration:
    """What `migrate_to_tiles` did: the log's size, the tile rows it wrote, the roots it
    proved equal (size -> root) and the node rows it dropped; `already`: the log was on
    tiles, nothing was done."""

    log_id: str
    size: int
    tile_rows: int
    roots: dict[int, bytes]
    node_rows: int
    already: bool = False


MIGRATION_CHUNK = 4096
"""Entries read and hashed at a time by a migration (a multiple of a tile's 256)."""


def migrate_to_tiles(engine: Engine, log_id: str, *, sizes: Iterable[int] = ()) -> TileMigration:
    """Convert a log whose tree is stored as node rows (`ledger_nodes`, an earlier accord)
    into tiles, in one transaction under the head lock (appends wait): hash every entry's
    leaf data into tile rows, then prove that the tiles give the same root as the node rows
    and as each stored checkpoint at every checkpoint's size, the current size, seven sizes
    spread over the log and the `sizes` asked, and only then drop the node rows. A log
    already on tiles is left as it is.

    Raises StoreError, with nothing changed, when the database holds no log or another log
    than `log_id`, an entry is missing, a root differs, or the database fails; ValueError for
    an asked size beyond the log.
    """
    try:
        with engine.connect() as probe:
            if not inspect(probe).has_table("ledger_head"):
                raise StoreError("this database holds no log to migrate")
        create_tables(engine, [TILES])
        with engine.begin() as connection:
            head = connection.execute(select(HEAD.c.log_id)).scalar_one_or_none()
            if head != log_id:
                raise StoreError(
                    f"this database holds log {head!r}, not {log_id!r} (check ACCORD_LOG_ID)"
                )
            size = lock_head(connection)
            asked = sorted(set(sizes))
            if asked and not 1 <= asked[0] <= asked[-1] <= size:
                raise ValueError(f"the log has {size} entries: no root at sizes {asked}")
            if connection.execute(select(TILES.c.id).limit(1)).first() is not None:
                return TileMigration(log_id, size, 0, {}, 0, already=True)
            written = _write_all_tiles(connection, size)
            has_nodes = inspect(connection).has_table("ledger_nodes")
            checkpoints = {
                int(row.size): bytes(row.root)
                for row in connection.execute(select(CHECKPOINTS.c.size, CHECKPOINTS.c.root))
            }
            proved = {*asked, *checkpoints, *(size * k // 8 for k in range(1, 8)), size} - {0}
            roots: dict[int, bytes] = {}
            for at in sorted(proved):
                root = root_on(connection, at)
                if has_nodes and (old := _node_rows_root(connection, at)) != root:
                    raise StoreError(
                        f"the tiles give root {root.hex()} at size {at}, the node rows "
                        f"{old.hex()}: nothing was migrated"
                    )
                if at in checkpoints and checkpoints[at] != root:
                    raise StoreError(
                        f"the tiles give root {root.hex()} at size {at}, its checkpoint "
                        f"{checkpoints[at].hex()}: nothing was migrated"
                    )
                roots[at] = root
            dropped = 0
            if has_nodes:
                dropped = int(
                    connection.execute(select(func.count()).select_from(NODES)).scalar_one()
                )
                NODES.drop(connection)
        return TileMigration(log_id, size, written, roots, dropped)
    except SQLAlchemyError as exc:
        raise StoreError(
            f"the migration to tiles failed, nothing was changed: {db_reason(exc)}"
        ) from exc


def _write_all_tiles(connection: Any, size: int) -> int:
    """Hash the log's `size` entries into tile rows on `connection`; returns how many rows
    it left stored. Raises StoreError when an entry is missing."""
    frontier: list[tuple[NodeId, bytes]] = []
    edges: dict[int, EdgeTile] = {}
    kept: set[int] = set()
    for start in range(0, size, MIGRATION_CHUNK):
        stop = min(size, start + MIGRATION_CHUNK)
        rows = connection.execute(
            select(ENTRIES.c.idx, ENTRIES.c.data)
            .where(ENTRIES.c.idx >= start, ENTRIES.c.idx < stop)
            .order_by(ENTRIES.c.idx)
        ).all()
        if [int(row.idx) for row in rows] != list(range(start, stop)):
            raise StoreError(f"the log is missing entries between {start} and {stop}: not migrated")
        frontier, edges, tile_rows, replaced = extend_tree(
            frontier, edges, start, [as_bytes(row.data) for row in rows]
        )
        connection.execute(insert(TILES), [{"id": key, "hashes": row} for key, row in tile_rows])
        if replaced:
            connection.execute(delete(TILES).where(TILES.c.id.in_(replaced)))
        kept |= {key for key, _row in tile_rows}
        kept -= set(replaced)
    return len(kept)


def _node_rows_root(connection: Any, size: int) -> bytes:
    """The root at `size` from the node rows of an earlier accord (a pair of leaves, level 1,
    from the two leaf rows under it when its own row is not there). Raises StoreError when a
    node it needs is missing."""
    pieces = merkle.perfect_subtrees(0, size)
    keys = {node_key(piece) for piece in pieces}
    keys |= {
        node_key(NodeId(0, 2 * p.position + side))
        for p in pieces
        if p.level == 1
        for side in (0, 1)
    }
    found = {
        int(key): bytes(value)
        for key, value in connection.execute(
            select(NODES.c.id, NODES.c.hash).where(NODES.c.id.in_(sorted(keys)))
        )
    }
    hashes = []
    for piece in pieces:
        value = found.get(node_key(piece))
        if value is None and piece.level == 1:
            left, right = (found.get(node_key(NodeId(0, 2 * piece.position + s))) for s in (0, 1))
            value = None if left is None or right is None else merkle.node_hash(left, right)
        if value is None:
            raise StoreError(f"the node rows lack tree node {tuple(piece)}: nothing was migrated")
        hashes.append(value)
    return merkle.fold_right(hashes)
