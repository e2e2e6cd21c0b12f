"""The log as C2SP `tlog-tiles` (https://c2sp.org/tlog-tiles): tile coordinates, their paths,
and the bytes of a tile and of an entry bundle. Pure: numbers, strings and bytes in and out.

A tile is 256 consecutive Merkle tree hashes of one *tile level*: hash `i` of tile `n` at
tile level `l` is MTH(D[(n*256 + i) * 256**l : (n*256 + i + 1) * 256**l]), the perfect subtree
`NodeId(8*l, n*256 + i)` of `accord.ledger.merkle`. Level 0 holds the leaf hashes. A tile
whose 256 hashes are not all complete yet is served *partial*, `W` hashes wide
(1 <= W <= 255): in a tree of `s` entries the rightmost tile of level `l` is
`floor(s / 256**l) mod 256` wide. Every hash is a completed perfect subtree, which never
changes, so the bytes at a tile path never change either, whatever the tree grows to: a
partial tile is a prefix of the full tile it becomes.

Paths (below the service's root):

    tile/<L>/<N>[.p/<W>]          the hashes, 32 bytes each, concatenated
    tile/entries/<N>[.p/<W>]      the entry bundle: each entry as big-endian uint16 length
                                  followed by the leaf data the log hashes

`<L>` is decimal 0..63 without leading zeros; `<N>` is split into zero-padded groups of three
digits, all but the last prefixed with `x` (1234067 is `x001/x234/067`); `<W>` is decimal
1..255 without leading zeros and only present for a partial tile. Exactly one spelling of
each tile is a path (a padded `x000/...` or `.p/256` is not).

Raises, from one tree (`accord.ledger.errors`):

    MalformedError   a path that is not a tile path, hashes that are not 32 bytes each, or an
                     entry too long for a bundle's uint16 length
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from accord.ledger.errors import MalformedError
from accord.ledger.merkle import HASH_SIZE

TILE_HEIGHT = 8
"""Merkle tree levels per tile level: a tile's hashes are the nodes of tree level 8 * L."""
TILE_WIDTH = 1 << TILE_HEIGHT
"""Hashes in a full tile, entries in a full bundle."""
MAX_TILE_LEVEL = 63
MAX_BUNDLE_ENTRY_BYTES = 0xFFFF
"""The longest entry an entry bundle's uint16 length prefix can carry."""
ENTRIES = "entries"
"""The path element that names entry bundles instead of a tile level."""

_LEVEL = re.compile(r"0|[1-9][0-9]?")
_WIDTH = re.compile(r"[1-9][0-9]{0,2}")
_GROUP = re.compile(r"x[0-9]{3}")
_LAST_GROUP = re.compile(r"[0-9]{3}")
MAX_INDEX_GROUPS = 7
"""Groups of `<N>` a path may have: 10**21 tiles is beyond any log (2**64 entries)."""


@dataclass(frozen=True, slots=True)
class Tile:
    """One tile: `level` is the tile level (0..63), or None for the entry bundle of the
    level-0 tile `index`; `width` is 256 for a full tile, 1..255 for a partial one."""

    level: int | None
    index: int
    width: int

    @property
    def full(self) -> bool:
        return self.width == TILE_WIDTH

    @property
    def tree_level(self) -> int:
        """The Merkle tree level of the tile's hashes (a bundle's entries are its leaves)."""
        return TILE_HEIGHT * (self.level or 0)

    @property
    def first(self) -> int:
        """The position, within its tree level, of the tile's first hash (or first entry)."""
        return self.index * TILE_WIDTH

    def entries_needed(self) -> int:
        """The smallest tree size that holds every hash (or entry) of the tile."""
        return (self.first + self.width) << self.tree_level


def width_in_tree(level: int, index: int, size: int) -> int:
    """How many hashes tile `index` of tile level `level` has in a tree of `size` entries:
    256 when full, 0 when none of them is complete yet (the same for entry bundles, level 0).
    """
    complete = size >> (TILE_HEIGHT * level)
    return max(0, min(TILE_WIDTH, complete - index * TILE_WIDTH))


def encode_index(index: int) -> str:
    """`<N>`: groups of three digits, all but the last prefixed with `x` (5 is `005`,
    1234067 is `x001/x234/067`). Raises MalformedError for a negative index."""
    if index < 0:
        raise MalformedError(f"a tile index is not negative: {index}")
    groups = [f"{index % 1000:03d}"]
    index //= 1000
    while index:
        groups.append(f"x{index % 1000:03d}")
        index //= 1000
    return "/".join(reversed(groups))


def tile_path(tile: Tile) -> str:
    """The path of `tile` (below the service's root, without a leading slash)."""
    level = ENTRIES if tile.level is None else str(tile.level)
    suffix = "" if tile.full else f".p/{tile.width}"
    return f"tile/{level}/{encode_index(tile.index)}{suffix}"


def parse_tile_path(path: str) -> Tile:
    """The tile a path names: `<L>/<N>[.p/<W>]` or `entries/<N>[.p/<W>]`, the part after
    `tile/`. Raises MalformedError, naming the rule, for any other spelling.
    """
    level_text, slash, rest = path.partition("/")
    if not slash or not rest:
        raise MalformedError(f"a tile path is <L>/<N>[.p/<W>] or entries/<N>[.p/<W>]: {path!r}")
    level: int | None = None
    if level_text != ENTRIES:
        if _LEVEL.fullmatch(level_text) is None or int(level_text) > MAX_TILE_LEVEL:
            raise MalformedError(
                f"a tile level is 0 to {MAX_TILE_LEVEL} without leading zeros: {level_text!r}"
            )
        level = int(level_text)
    groups = rest.split("/")
    width = TILE_WIDTH
    if len(groups) >= 2 and groups[-2].endswith(".p"):
        width_text = groups.pop()
        groups[-1] = groups[-1][: -len(".p")]
        if _WIDTH.fullmatch(width_text) is None or int(width_text) >= TILE_WIDTH:
            raise MalformedError(
                f"a partial tile's width is 1 to {TILE_WIDTH - 1} without leading zeros: "
                f"{width_text!r}"
            )
        width = int(width_text)
    if len(groups) > MAX_INDEX_GROUPS:
        raise MalformedError(f"a tile index has at most {MAX_INDEX_GROUPS} groups of digits")
    if _LAST_GROUP.fullmatch(groups[-1]) is None or any(
        _GROUP.fullmatch(group) is None for group in groups[:-1]
    ):
        raise MalformedError(
            "a tile index is groups of three digits, all but the last prefixed with 'x' "
            f"(1234067 is x001/x234/067): {rest!r}"
        )
    index = 0
    for group in groups:
        index = index * 1000 + int(group.lstrip("x"))
    tile = Tile(level, index, width)
    if tile_path(tile) != f"tile/{path}":
        raise MalformedError(
            f"a tile index has no leading zero groups: {path!r} is spelled {tile_path(tile)!r}"
        )
    return tile


def entry_bundle(first: int, datas: Iterable[bytes]) -> bytes:
    """The body of an entry bundle: each entry's big-endian uint16 length, then its bytes
    (`first` is the log index of the first, to name one that does not fit). Raises
    MalformedError for an entry longer than 65,535 bytes, which no bundle can carry."""
    parts: list[bytes] = []
    for offset, data in enumerate(datas):
        if len(data) > MAX_BUNDLE_ENTRY_BYTES:
            raise MalformedError(
                f"entry {first + offset} has {len(data):,} bytes; an entry bundle carries "
                f"entries of at most {MAX_BUNDLE_ENTRY_BYTES:,}"
            )
        parts.append(len(data).to_bytes(2, "big"))
        parts.append(data)
    return b"".join(parts)


# ---------------------------------------------------------------------------------------------
# How the log stores its tiles (`accord.ledger.store`, table `ledger_tiles`)
#
# A stored tile row is keyed by (tile level, tile index, width) packed into one integer, so a
# tile's rows are adjacent and ordered by width, and a tile level's rows by index. Its value
# is the tile as served (its `width` hashes of tree level 8*L) followed by the perfect
# subtrees inside the tile: the `width >> k` hashes of tree level 8*L + k, for k = 1..7. A
# proof then reads a hash of any level from the one row of its tile instead of hashing up to
# 255 hashes of the level below, and the served tile is the row's first `32 * width` bytes.

_KEY_WIDTH_BITS = 9
_KEY_INDEX_BITS = 47
MAX_TILE_INDEX = (1 << _KEY_INDEX_BITS) - 1


def tile_key(level: int, index: int, width: int) -> int:
    """The integer key of the stored row of tile `index` of tile level `level`, `width`
    hashes wide (1..256). Raises ValueError outside those ranges."""
    if not 0 <= level <= MAX_TILE_LEVEL or not 0 <= index <= MAX_TILE_INDEX:
        raise ValueError(f"no stored tile at level {level}, index {index}")
    if not 1 <= width <= TILE_WIDTH:
        raise ValueError(f"a stored tile is 1 to {TILE_WIDTH} hashes wide, not {width}")
    return (((level << _KEY_INDEX_BITS) | index) << _KEY_WIDTH_BITS) | width


def key_tile(key: int) -> Tile:
    """The tile a stored row's key names (the inverse of `tile_key`)."""
    width = key & ((1 << _KEY_WIDTH_BITS) - 1)
    rest = key >> _KEY_WIDTH_BITS
    return Tile(rest >> _KEY_INDEX_BITS, rest & MAX_TILE_INDEX, width)


def row_offset(width: int, height: int) -> int:
    """Where the hashes of tree level 8*L + `height` start in a row `width` hashes wide,
    counted in hashes."""
    return sum(width >> below for below in range(height))


def row_hash_count(width: int) -> int:
    """How many hashes a stored row of a tile `width` hashes wide holds."""
    return row_offset(width, TILE_HEIGHT)


def tile_row(levels: Sequence[Sequence[bytes]]) -> bytes:
    """A stored row from the hashes inside one tile, `levels[k]` those of tree level
    8*L + k (k = 0..7, `len(levels[0]) >> k` of them each). Raises MalformedError when the
    counts do not fit one tile."""
    width = len(levels[0]) if levels else 0
    if len(levels) != TILE_HEIGHT or not 1 <= width <= TILE_WIDTH:
        raise MalformedError(f"a tile row holds {TILE_HEIGHT} levels of 1 to 256 hashes")
    if any(len(level) != width >> height for height, level in enumerate(levels)):
        raise MalformedError(f"a tile {width} hashes wide holds {width} >> k hashes at height k")
    return b"".join(b"".join(level) for level in levels)


def row_hash(row: bytes, width: int, height: int, position: int) -> bytes:
    """Hash `position` (within the tile) of tree level 8*L + `height` in a stored row `width`
    hashes wide. Raises MalformedError when the row does not hold it."""
    if not 0 <= position < width >> height or len(row) != HASH_SIZE * row_hash_count(width):
        raise MalformedError(f"a tile row {width} wide holds no hash {position} at {height}")
    start = HASH_SIZE * (row_offset(width, height) + position)
    return row[start : start + HASH_SIZE]


def row_levels(row: bytes, width: int) -> list[list[bytes]]:
    """The hashes of a stored row by height (the inverse of `tile_row`). Raises
    MalformedError when its length does not match its width."""
    if len(row) != HASH_SIZE * row_hash_count(width):
        raise MalformedError(f"a tile row {width} hashes wide is not {len(row)} bytes")
    levels: list[list[bytes]] = []
    start = 0
    for height in range(TILE_HEIGHT):
        count = width >> height
        levels.append(
            [row[i : i + HASH_SIZE] for i in range(start, start + count * HASH_SIZE, HASH_SIZE)]
        )
        start += count * HASH_SIZE
    return levels


@dataclass(frozen=True, slots=True)
class EdgeTile:
    """The rightmost tile of a tile level while it is partial: its hashes by height within
    the tile (`levels[k]`: tree level 8*L + k)."""

    level: int
    index: int
    levels: tuple[list[bytes], ...]

    @property
    def width(self) -> int:
        return len(self.levels[0])

    @property
    def key(self) -> int:
        return tile_key(self.level, self.index, self.width)


def grow_tiles(
    edges: dict[int, EdgeTile], runs: dict[int, tuple[int, list[bytes]]]
) -> tuple[dict[int, EdgeTile], list[tuple[int, bytes]], list[int]]:
    """The tiles after the new perfect subtrees `runs` (by tree level: the first position and
    the hashes from there on, as `merkle.extend_levels` returns them) are added to a tree
    whose partial tiles are `edges` (by tile level; `edges` is not changed).

    Returns the partial tiles after them, the rows to store as (key, row) in key order (each
    tile they touched, full or partial, once), and the keys of the partial rows those
    replace. Raises ValueError when a run of hashes does not follow the tile it falls in.
    """
    touched: dict[tuple[int, int], EdgeTile] = {}
    for tree_level in sorted(runs):
        position, values = runs[tree_level]
        level, height = tree_level >> 3, tree_level & 7
        span = TILE_HEIGHT - height
        taken = 0
        while taken < len(values):
            index = position >> span
            edge = touched.get((level, index))
            if edge is None:
                before = edges.get(level)
                levels: tuple[list[bytes], ...] = (
                    tuple(list(hashes) for hashes in before.levels)
                    if before is not None and before.index == index
                    else tuple([] for _ in range(TILE_HEIGHT))
                )
                edge = touched[(level, index)] = EdgeTile(level, index, levels)
            hashes = edge.levels[height]
            if position - (index << span) != len(hashes):
                raise ValueError(f"tree node ({tree_level}, {position}) does not follow its tile")
            chunk = values[taken : taken + ((index + 1) << span) - position]
            hashes += chunk
            taken += len(chunk)
            position += len(chunk)
    current = dict(edges)
    for (level, index), edge in touched.items():
        if level not in current or current[level].index <= index:
            current[level] = edge
    rows = sorted((edge.key, tile_row(edge.levels)) for edge in touched.values())
    replaced = [edge.key for level, edge in edges.items() if (level, edge.index) in touched]
    after = {level: edge for level, edge in current.items() if edge.width < TILE_WIDTH}
    return after, rows, replaced


def row_node(level: int, index: int, width: int, offset: int) -> tuple[int, int]:
    """The perfect subtree (tree level, position) of hash number `offset` of the stored row
    of tile `index` of tile level `level`, `width` hashes wide (the inverse of where
    `tile_row` puts it). Raises MalformedError when the row holds no such hash."""
    for height in range(TILE_HEIGHT):
        count = width >> height
        if offset < count:
            return TILE_HEIGHT * level + height, (index << (TILE_HEIGHT - height)) + offset
        offset -= count
    raise MalformedError(f"a tile row {width} hashes wide holds no hash {offset}")


def expected_rows(levels: Sequence[Sequence[bytes]]) -> Iterable[tuple[int, bytes]]:
    """Every tile row (key, row), in key order, that the tree whose tree levels are `levels`
    (`levels[t]`: every complete perfect subtree of tree level t, in order) stores."""
    level = 0
    while TILE_HEIGHT * level < len(levels) and (count := len(levels[TILE_HEIGHT * level])):
        for index in range(-(-count // TILE_WIDTH)):
            width = min(TILE_WIDTH, count - index * TILE_WIDTH)
            hashes = [
                levels[TILE_HEIGHT * level + height][
                    index << (TILE_HEIGHT - height) : (index << (TILE_HEIGHT - height))
                    + (width >> height)
                ]
                if TILE_HEIGHT * level + height < len(levels)
                else []
                for height in range(TILE_HEIGHT)
            ]
            yield tile_key(level, index, width), tile_row(hashes)
        level += 1
