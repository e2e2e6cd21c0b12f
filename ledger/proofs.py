"""The log's proofs: tree roots, RFC 9162 inclusion and consistency proofs, and the stored
tiles they are read from (`accord.ledger.tiles`), outside every write.

A proof or root reads one tile row per tile level it crosses (about three at a million
entries) and hashes nothing: a row holds the tile as served (its 256, or W, hashes of tree
level 8*L) and the perfect subtrees inside it (tree levels 8*L+1 to 8*L+7). A reader asks for
any row of a tile at least as wide as it needs; a partial tile is a prefix of every wider one,
so no reader sees a hash change while an append widens it. Full tiles of tile level 1 and up
never change and are kept in a small in-memory cache.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.exc import SQLAlchemyError

from accord.ledger import merkle, tiles
from accord.ledger.database import (
    HEAD,
    as_bytes,
    db_reason,
    driver_mark,
    raw_select,
    read_connection,
)
from accord.ledger.errors import StoreError
from accord.ledger.merkle import NodeId
from accord.ledger.tiles import TILE_HEIGHT, TILE_WIDTH, tile_key


class TileProofs:
    """Roots, proofs and tiles of the log in `engine`'s database, read from its tile rows.

    Raises StoreError when a tile is missing or the database cannot be read, ValueError for a
    size beyond the log or an index outside it.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # A size the log is known to have reached (it only grows), and full tiles of tile
        # level 1 and up (never rewritten).
        self._known_size = 0
        self._tile_cache: dict[tuple[int, int], bytes] = {}
        self._raw_sqlite = engine.dialect.name == "sqlite"

    def root(self, size: int | None = None) -> bytes:
        """The tree hash at `size` (default: now). Raises ValueError beyond the log's size."""
        if size is None or not 0 <= size <= self._known_size:
            current = self._head_size()
            size = current if size is None else size
            if not 0 <= size <= current:
                raise ValueError(f"the log has {current} entries, not {size}")
        pieces = merkle.perfect_subtrees(0, size)
        nodes = self._read_nodes(pieces)
        return merkle.fold_right([nodes[piece] for piece in pieces])

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """The RFC 9162 inclusion proof of entry `index` in the tree of `size` (default: now).

        Raises ValueError when index or size are out of range.
        """
        if size is None or not 0 <= size <= self._known_size:
            current = self._head_size()
            size = current if size is None else size
            if size > current:
                raise ValueError(f"the log has {current} entries, not {size}")
        groups = _inclusion_groups(index, size)
        nodes = self._read_nodes([node for group in groups for node in group])
        return [
            nodes[group[0]] if len(group) == 1 else merkle.fold_right([nodes[k] for k in group])
            for group in groups
        ]

    def consistency_proof(self, old_size: int, new_size: int | None = None) -> list[bytes]:
        """The RFC 9162 consistency proof between two sizes. Raises ValueError out of range."""
        if new_size is None or not 0 <= new_size <= self._known_size:
            current = self._head_size()
            new_size = current if new_size is None else new_size
            if new_size > current:
                raise ValueError(f"the log has {current} entries, not {new_size}")
        needed = merkle.nodes_for_consistency(old_size, new_size)
        nodes = self._read_nodes(needed)
        return merkle.consistency_proof_by(old_size, new_size, merkle.subtree_from_nodes(nodes))

    def level_hashes(self, level: int, start: int, count: int) -> list[bytes]:
        """The hashes of the perfect subtrees `NodeId(level, start)` up to
        `NodeId(level, start + count - 1)`, in order, read from the tiles that hold them.
        Only complete subtrees are stored: ask within the size.

        Raises ValueError for a negative level, start or count, StoreError when one of them
        is not stored or the database cannot be read.
        """
        if level < 0 or start < 0 or count < 0:
            raise ValueError(f"no stored nodes at level {level} from {start}, {count} of them")
        nodes = [NodeId(level, position) for position in range(start, start + count)]
        found = self._read_nodes(nodes)
        return [found[node] for node in nodes]

    def tile(self, level: int, index: int, width: int) -> bytes:
        """The bytes of tile `index` of tile level `level`, `width` hashes wide (C2SP
        tlog-tiles: 32 bytes a hash), read from its stored row. Raises StoreError when the
        log holds no such tile (yet) or the database cannot be read, ValueError for a tile
        that cannot exist."""
        wanted = {(level, index): width}
        _stored_width, row = self._read_tiles(wanted)[(level, index)]
        return row[: merkle.HASH_SIZE * width]

    def _head_size(self) -> int:
        """The log's size now (read path); remembers it as reached."""
        if self._raw_sqlite:
            rows = raw_select(self.engine, _HEAD_QUERY, ())
            current = int(rows[0][0])
        else:
            with read_connection(self.engine) as connection:
                current = int(connection.execute(select(HEAD.c.size)).scalar_one())
        if current > self._known_size:
            self._known_size = current
        return current

    def _read_nodes(self, needed: Iterable[NodeId]) -> dict[NodeId, bytes]:
        """The hashes of the perfect subtrees `needed` (complete ones: ask within the size),
        each read from the tile row that holds it (`tile_place`, inlined: this is every proof's
        path). Raises StoreError when one is not stored or the database cannot be read."""
        wanted: dict[tuple[int, int], int] = {}
        places: list[tuple[NodeId, tuple[int, int], int, int]] = []
        for node in needed:
            level, position = node
            height = level & 7
            span = TILE_HEIGHT - height
            tile = (level >> 3, position >> span)
            within = position & ((1 << span) - 1)
            width = (within + 1) << height
            if wanted.get(tile, 0) < width:
                wanted[tile] = width
            places.append((node, tile, height, within))
        rows = self._read_tiles(wanted)
        found: dict[NodeId, bytes] = {}
        offsets = _ROW_OFFSETS
        for node, tile, height, within in places:
            width, row = rows[tile]
            start = (offsets[width][height] + within) << 5
            found[node] = row[start : start + 32]
        return found

    def _read_tiles(
        self, wanted: dict[tuple[int, int], int]
    ) -> dict[tuple[int, int], tuple[int, bytes]]:
        """The stored rows of the tiles `wanted` ((tile level, index) -> the width at least
        needed) as (width, row), outside writes: any row of the tile at least that wide
        serves (a partial tile is a prefix of every wider one). Full tiles of tile level 1
        and up never change and are few, so they are kept in memory; the rest are read in one
        statement, on SQLite through the raw driver cursor in autocommit (no BEGIN
        IMMEDIATE), on a memory-mapped connection.

        Raises StoreError when a tile is not stored that wide or the database cannot be read.
        """
        cache = self._tile_cache
        found: dict[tuple[int, int], tuple[int, bytes]] = {}
        asked: list[tuple[int, int]] = []
        for tile in wanted:
            row = cache.get(tile)
            if row is None:
                asked.append(tile)
            else:
                found[tile] = (TILE_WIDTH, row)
        if not asked:
            return found
        params: list[int] = []
        for level, index in asked:
            params += [
                tile_key(level, index, wanted[(level, index)]),
                tile_key(level, index, TILE_WIDTH),
            ]
        if self._raw_sqlite:
            rows = raw_select(self.engine, _tile_query(len(asked), "?"), params)
        else:
            try:
                with read_connection(self.engine) as connection:
                    rows = connection.exec_driver_sql(
                        _tile_query(len(asked), driver_mark(self.engine)), tuple(params)
                    ).all()
            except SQLAlchemyError as exc:
                raise StoreError(f"cannot read the log database: {db_reason(exc)}") from exc
        for key, value in rows:
            stored = tiles.key_tile(int(key))
            place = (stored.level or 0, stored.index)
            row = as_bytes(value)
            if place not in found or stored.width > found[place][0]:
                found[place] = (stored.width, row)
            if stored.full and place[0] >= 1 and len(cache) < _CACHE_MAX_TILES:
                cache[place] = row
        missing = [tile for tile in asked if tile not in found]
        if missing:
            level, index = missing[0]
            raise StoreError(
                f"the log is missing tile {level}/{index} ({wanted[missing[0]]} hashes wide)"
            )
        return found


# The read path keeps full tiles of tile level >= 1 in memory (one for each 65,536 entries,
# 16 KiB each), up to this many.
_CACHE_MAX_TILES = 4096
_HEAD_QUERY = "SELECT size FROM ledger_head"
_TILE_QUERIES: dict[tuple[int, str], str] = {}
# Where each height starts in a stored row of each width, in hashes (`tiles.row_offset`).
_ROW_OFFSETS = [
    [tiles.row_offset(width, height) for height in range(TILE_HEIGHT)]
    for width in range(TILE_WIDTH + 1)
]


def _tile_query(count: int, mark: str) -> str:
    """One statement reading the rows of `count` tiles, each asked as a key range (from the
    narrowest width that serves to the full tile), in the driver's parameter style."""
    query = _TILE_QUERIES.get((count, mark))
    if query is None:
        one = f"SELECT id, hashes FROM ledger_tiles WHERE id >= {mark} AND id <= {mark}"
        query = _TILE_QUERIES.setdefault((count, mark), " UNION ALL ".join([one] * count))
    return query


def tile_place(node: NodeId) -> tuple[tuple[int, int], int, int, int]:
    """Where a perfect subtree is stored: its tile (tile level, index), its height within
    the tile, its position among that height's hashes of the tile, and the tile width that
    holds it (pure)."""
    level, height = node.level // TILE_HEIGHT, node.level % TILE_HEIGHT
    span = TILE_HEIGHT - height
    index = node.position >> span
    position = node.position & ((1 << span) - 1)
    return (level, index), height, position, (position + 1) << height


def _inclusion_groups(index: int, size: int) -> list[list[NodeId]]:
    """The perfect subtrees behind each element of PATH(index, D[0:size]), leaf side first.

    The ranges `merkle.inclusion_proof_by` asks for, in its order, each split into perfect
    subtrees as `merkle.perfect_subtrees` does; an element is the right fold of its group.
    Raises ValueError as it does.
    """
    if not 0 <= index < size:
        raise ValueError(f"leaf index {index} is outside a tree of size {size}")
    groups: list[list[NodeId]] = []
    start, end = 0, size
    while end - start > 1:
        k = 1 << ((end - start - 1).bit_length() - 1)
        if index < start + k:
            low, width = start + k, end - start - k
            if width & (width - 1):  # not a power of two: only on the tree's right edge
                groups.append(merkle.perfect_subtrees(low, end))
            else:  # one perfect subtree (low is a multiple of k, so of width)
                level = width.bit_length() - 1
                groups.append([NodeId(level, low >> level)])
            end = low
        else:
            level = k.bit_length() - 1
            groups.append([NodeId(level, start >> level)])
            start += k
    groups.reverse()
    return groups


def root_on(connection: Any, size: int) -> bytes:
    """The root at `size` read from the tiles on `connection` (inside a transaction)."""
    pieces = merkle.perfect_subtrees(0, size)
    wanted: dict[tuple[int, int], int] = {}
    for piece in pieces:
        tile, _height, _position, width = tile_place(piece)
        wanted[tile] = max(wanted.get(tile, 0), width)
    mark = driver_mark(connection)
    params: list[int] = []
    for (level, index), width in wanted.items():
        params += [tile_key(level, index, width), tile_key(level, index, TILE_WIDTH)]
    stored: dict[tuple[int, int], tuple[int, bytes]] = {}
    for key, value in connection.exec_driver_sql(_tile_query(len(wanted), mark), tuple(params)):
        found = tiles.key_tile(int(key))
        place = (found.level or 0, found.index)
        if place not in stored or found.width > stored[place][0]:
            stored[place] = (found.width, as_bytes(value))
    hashes = []
    for piece in pieces:
        tile, height, position, _width = tile_place(piece)
        if tile not in stored:
            raise StoreError(f"the migration left no tile {tile[0]}/{tile[1]}")
        width, row = stored[tile]
        hashes.append(tiles.row_hash(row, width, height, position))
    return merkle.fold_right(hashes)
