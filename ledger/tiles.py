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


def tile_bytes(hashes: Sequence[bytes]) -> bytes:
    """The body of a tile: its hashes concatenated. Raises MalformedError unless there are 1
    to 256 hashes of 32 bytes each."""
    if not 1 <= len(hashes) <= TILE_WIDTH:
        raise MalformedError(f"a tile holds 1 to {TILE_WIDTH} hashes, not {len(hashes)}")
    if any(len(value) != HASH_SIZE for value in hashes):
        raise MalformedError(f"a tile's hashes are {HASH_SIZE} bytes each")
    return b"".join(hashes)


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
