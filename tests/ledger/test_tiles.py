"""C2SP tlog-tiles coordinates, paths and bytes (`accord.ledger.tiles`), and the store's reads
of a tile's hashes and entries."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import pytest

from accord.ledger import merkle
from accord.ledger.database import make_engine
from accord.ledger.errors import MalformedError, StoreError
from accord.ledger.events import make_entry
from accord.ledger.signing import Ed25519Signer
from accord.ledger.store import LogStore
from accord.ledger.tiles import (
    Tile,
    encode_index,
    entry_bundle,
    parse_tile_path,
    tile_path,
    width_in_tree,
)


@pytest.mark.parametrize(
    ("index", "text"),
    [(0, "000"), (5, "005"), (999, "999"), (1000, "x001/000"), (1234067, "x001/x234/067")],
)
def test_an_index_is_groups_of_three_digits(index: int, text: str) -> None:
    assert encode_index(index) == text
    assert parse_tile_path(f"0/{text}") == Tile(0, index, 256)


def test_paths_round_trip() -> None:
    rng = random.Random(7)
    for _ in range(500):
        tile = Tile(
            rng.choice([None, 0, 1, 2, 63]),
            rng.choice([0, rng.randrange(1000), rng.randrange(10**12)]),
            rng.choice([256, rng.randrange(1, 256)]),
        )
        path = tile_path(tile)
        assert parse_tile_path(path.removeprefix("tile/")) == tile
    assert tile_path(Tile(None, 1234067, 8)) == "tile/entries/x001/x234/067.p/8"
    assert tile_path(Tile(3, 0, 256)) == "tile/3/000"


@pytest.mark.parametrize(
    "path",
    [
        "0/1",
        "0/0000",
        "00/000",
        "-1/000",
        "64/000",
        "0/x000/001",
        "0/001/x000",
        "0/000.p/256",
        "0/000.p/0",
        "0/000.p/07",
        "0/000.p/",
        "0/000.p",
        "0/000/",
        "entries/",
        "entries",
        "data/000",
        "0/x1/000",
        "0/000.p/1/2",
        "0/" + "x001/" * 7 + "000",
    ],
)
def test_other_spellings_are_no_tile_path(path: str) -> None:
    with pytest.raises(MalformedError):
        parse_tile_path(path)


def test_widths_in_a_tree_follow_the_spec_examples() -> None:
    # "a tree of size 70,000 will be represented by 273 full level 0 tiles, one partial level
    # 0 tile of width 112, one full level 1 tile, one partial level 1 tile of width 17, and
    # one partial level 2 tile of width 1"
    assert [width_in_tree(0, n, 70_000) for n in (0, 272, 273, 274)] == [256, 256, 112, 0]
    assert [width_in_tree(1, n, 70_000) for n in (0, 1, 2)] == [256, 17, 0]
    assert [width_in_tree(2, n, 70_000) for n in (0, 1)] == [1, 0]
    assert width_in_tree(3, 0, 70_000) == 0
    # "a tree of size 256 will be represented by a full level 0 tile and a partial level 1
    # tile of width 1"
    assert [width_in_tree(0, 0, 256), width_in_tree(1, 0, 256), width_in_tree(2, 0, 256)] == [
        256,
        1,
        0,
    ]
    assert Tile(1, 0, 17).entries_needed() == 17 * 256
    assert Tile(0, 273, 112).entries_needed() == 70_000
    assert Tile(None, 1, 256).entries_needed() == 512


def test_bundle_bytes() -> None:
    assert entry_bundle(0, [b"ab", b"", b"x" * 300]) == (
        b"\x00\x02ab" + b"\x00\x00" + b"\x01\x2c" + b"x" * 300
    )
    assert entry_bundle(0, [b"y" * 0xFFFF]).startswith(b"\xff\xff")
    with pytest.raises(MalformedError, match="entry 9 has 65,536 bytes"):
        entry_bundle(8, [b"", b"z" * 0x10000])


def test_the_store_reads_tile_hashes_and_entries(db_url: str) -> None:
    store = LogStore(make_engine(db_url), "tiles")
    signer = Ed25519Signer(bytes(32))
    now = datetime(2026, 1, 1, tzinfo=UTC)
    entries = [
        make_entry(signer, kind="note.added", seq=seq, at=now, body={"n": seq})
        for seq in range(1, 601)
    ]
    store.append_batch(entries)
    leaves = [merkle.leaf_hash(entry.data) for entry in entries]
    assert store.level_hashes(0, 256, 256) == leaves[256:512]
    assert store.level_hashes(8, 0, 2) == [merkle.root(leaves[:256]), merkle.root(leaves[256:512])]
    assert store.level_hashes(0, 599, 0) == []
    assert store.leaf_datas(510, 514) == [entry.data for entry in entries[510:514]]
    assert store.level_hashes(1, 0, 2) == [
        merkle.node_hash(leaves[0], leaves[1]),
        merkle.node_hash(leaves[2], leaves[3]),
    ]
    assert store.tile(0, 2, 88) == b"".join(leaves[512:600])
    assert store.tile(0, 2, 5) == b"".join(leaves[512:517])  # a prefix of the stored row
    with pytest.raises(StoreError, match="missing tile 1/0"):
        store.level_hashes(8, 0, 3)  # the third tile is not complete
    with pytest.raises(StoreError, match="missing tile 0/2"):
        store.tile(0, 2, 89)
    with pytest.raises(StoreError, match="lacks some of the entries"):
        store.leaf_datas(590, 601)
    with pytest.raises(ValueError, match="level -1"):
        store.level_hashes(-1, 0, 1)
    store.engine.dispose()
