"""The log served as C2SP tlog-tiles, read by a client written from the specs alone
(`tests/tlog_tiles_client.py`) over a real HTTP server on 127.0.0.1: `/checkpoint`, the hash
tiles `/tile/<L>/<N>[.p/<W>]` and the entry bundles `/tile/entries/<N>[.p/<W>]`."""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from accord.api.app import create_app
from accord.api.routes.deps import ApiConfig
from accord.api.routes.tiles import accepts_gzip
from accord.ledger.events import make_entry
from accord.ledger.note import origin_for
from accord.ledger.signing import Ed25519Signer
from tests.audit.conftest import World, open_world
from tests.serving import serve
from tests.tlog_tiles_client import (
    LogMisbehaves,
    TiledLogClient,
    inclusion_holds,
    leaf_hash,
)

CLIENT_FILE = Path(__file__).resolve().parents[1] / "tlog_tiles_client.py"
_SEQS = itertools.count(1)
_WRITER = Ed25519Signer(bytes(range(32)))


def grow(world: World, size: int) -> None:
    """Append notes until the log holds `size` entries."""
    store = world.ledger.store
    while (missing := size - store.size()) > 0:
        now = world.clock()
        world.ledger.append_entries(
            [
                make_entry(
                    _WRITER,
                    kind="note.added",
                    seq=next(_SEQS),
                    at=now,
                    body={"text": f"note {index}"},
                )
                for index in range(min(missing, 500))
            ]
        )


@pytest.fixture
def world(tmp_path: Path) -> World:
    return open_world(tmp_path / "home")


@pytest.fixture
def served(world: World) -> Iterator[tuple[str, TiledLogClient]]:
    app = create_app(
        world.settings,
        config=ApiConfig(rate=10_000.0, burst=100_000.0),
        context=world.context,
        anchors=world.anchors,
        escrow_chain=world.escrow_chain,
    )
    origin = origin_for(world.settings.public_url, world.ledger.store.log_id)
    operator = world.ledger.operator
    assert isinstance(operator, Ed25519Signer)
    with serve(app) as url, httpx.Client(timeout=30) as http:
        yield url, TiledLogClient(http, url, origin, operator.public_key)


def test_the_client_imports_nothing_of_accord() -> None:
    tree = ast.parse(CLIENT_FILE.read_text())
    imported = {
        (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    allowed = {"__future__", "base64", "hashlib", "hmac", "dataclasses", "httpx"}
    assert {name for name in imported if not name.startswith("cryptography.")} <= allowed


def test_a_spec_client_recomputes_the_root_and_inclusion_proofs(
    world: World, served: tuple[str, TiledLogClient]
) -> None:
    grow(world, 600)  # level 0: tiles 000, 001 and 002.p/88; level 1: 000.p/2
    world.ledger.checkpoint()
    _url, client = served
    head = client.checkpoint()
    assert head.size == 600
    assert client.tree_hash(0, head.size, head.size) == head.root
    assert "tile/1/000.p/2" in client.fetched and "tile/0/002.p/88" in client.fetched
    store = world.ledger.store
    for index in (0, 1, 255, 256, 300, 511, 512, 598, 599):
        entry = client.entries(index // 256, head.size)[index % 256]
        assert entry == store.entry(index).data
        proof = client.inclusion_proof(index, head.size)
        assert proof == store.inclusion_proof(index, head.size)
        assert inclusion_holds(leaf_hash(entry), index, head.size, proof, head.root)
        assert not inclusion_holds(leaf_hash(entry + b" "), index, head.size, proof, head.root)
    # a checkpoint signed by another key is refused
    other = TiledLogClient(client.http, client.prefix, client.origin, bytes(32))
    with pytest.raises(LogMisbehaves, match="no signature by"):
        other.checkpoint()


def test_partial_tiles_agree_with_full_tiles_once_the_tree_grows(
    world: World, served: tuple[str, TiledLogClient]
) -> None:
    url, client = served
    grow(world, 100)
    world.ledger.checkpoint()
    old = client.checkpoint()
    assert old.size == 100
    assert client.tree_hash(0, 100, 100) == old.root
    partial_tile = client.http.get(f"{url}/tile/0/000.p/100").content
    partial_bundle = client.http.get(f"{url}/tile/entries/000.p/100").content
    level_one = client.http.get(f"{url}/tile/1/000.p/1")
    assert level_one.status_code == 404  # no full level-0 tile yet: nothing at level 1

    grow(world, 700)  # past the first full tile
    world.ledger.checkpoint()
    new = client.checkpoint()
    assert new.size == 700
    full_tile = client.http.get(f"{url}/tile/0/000")
    assert full_tile.status_code == 200 and len(full_tile.content) == 256 * 32
    assert full_tile.content[: 100 * 32] == partial_tile
    assert client.http.get(f"{url}/tile/0/000.p/100").content == partial_tile
    full_bundle = client.http.get(f"{url}/tile/entries/000").content
    assert full_bundle.startswith(partial_bundle)
    assert client.http.get(f"{url}/tile/entries/000.p/100").content == partial_bundle
    # the level-1 hash of the now full tile 0 is the tree hash of its 256 leaves
    [first] = client.tile(1, 0, 256)
    assert first == client.tree_hash(0, 256, new.size)
    # the old tree is a prefix of the new one: its root recomputes from the new tiles
    assert client.tree_hash(0, old.size, new.size) == old.root
    assert client.tree_hash(0, new.size, new.size) == new.root


def _problem(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.headers["cache-control"] == "no-store"
    body: dict[str, Any] = response.json()
    return body


def test_tiles_are_cacheable_and_a_missing_or_misspelt_one_is_not_found(
    world: World, served: tuple[str, TiledLogClient]
) -> None:
    url, client = served
    grow(world, 300)
    world.ledger.checkpoint()
    checkpoint = client.http.get(f"{url}/checkpoint")
    assert checkpoint.headers["cache-control"] == "no-cache"
    assert checkpoint.content == client.http.get(f"{url}/ledger/checkpoint").content
    for path in ("tile/0/000", "tile/0/001.p/44", "tile/1/000.p/1", "tile/entries/001.p/44"):
        response = client.http.get(f"{url}/{path}")
        assert response.status_code == 200, (path, response.text)
        assert response.headers["content-type"] == "application/octet-stream"
        assert response.headers["cache-control"] == "public, max-age=31536000, immutable"
    ahead = _problem(client.http.get(f"{url}/tile/0/001"), 404)
    assert "holds 44 of that tile's hashes: ask /tile/0/001.p/44" in ahead["detail"]
    _problem(client.http.get(f"{url}/tile/0/001.p/45"), 404)
    _problem(client.http.get(f"{url}/tile/entries/002.p/1"), 404)
    _problem(client.http.get(f"{url}/tile/2/000.p/1"), 404)
    _problem(client.http.get(f"{url}/tile/63/x999/x999/x999/x999/x999/x999/999"), 404)
    for path in (
        "tile/0/0",
        "tile/0/1.p/4",
        "tile/00/000",
        "tile/64/000",
        "tile/0/x000/001",
        "tile/0/000.p/256",
        "tile/0/000.p/0",
        "tile/0/000.p/044",
        "tile/0/000/",
        "tile/0/001/x000",
        "tile/data/000",
        "tile/0",
        "tile/0/x001/x002/x003/x004/x005/x006/x007/008",
    ):
        detail = _problem(client.http.get(f"{url}/{path}"), 404)["detail"]
        assert "c2sp.org/tlog-tiles" in detail, path


def test_entry_bundles_are_gzipped_for_a_client_that_takes_gzip(
    world: World, served: tuple[str, TiledLogClient]
) -> None:
    url, client = served
    grow(world, 40)
    bundle = f"{url}/tile/entries/000.p/40"
    zipped = client.http.get(bundle, headers={"Accept-Encoding": "gzip"})
    assert zipped.headers["content-encoding"] == "gzip"
    assert zipped.headers["vary"] == "Accept-Encoding"
    datas = world.ledger.store.leaf_datas(0, 40)
    assert len(zipped.content) == sum(2 + len(data) for data in datas)
    assert int(zipped.headers["content-length"]) < len(zipped.content)  # httpx decoded it
    plain = client.http.get(bundle, headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.content == zipped.content
    tile = client.http.get(f"{url}/tile/0/000.p/40", headers={"Accept-Encoding": "gzip"})
    assert "content-encoding" not in tile.headers  # hashes do not compress


@pytest.mark.parametrize(
    ("header", "takes"),
    [
        ("gzip", True),
        ("gzip, deflate, br", True),
        ("br;q=1.0, gzip;q=0.5", True),
        ("*", True),
        ("", False),
        ("identity", False),
        ("gzip;q=0", False),
        ("*, gzip;q=0", False),
        ("GZIP;Q=0.1", True),
        ("gzip;q=nonsense", False),
    ],
)
def test_accept_encoding_is_read_with_its_weights(header: str, takes: bool) -> None:
    assert accepts_gzip(header) is takes


def test_an_entry_too_long_for_a_bundle_is_named(
    world: World, served: tuple[str, TiledLogClient]
) -> None:
    url, client = served
    grow(world, 3)
    world.ledger.append_entries(
        [
            make_entry(
                _WRITER,
                kind="note.added",
                seq=next(_SEQS),
                at=world.clock(),
                body={"text": "x" * 70_000},
            )
        ]
    )
    response = client.http.get(f"{url}/tile/entries/000.p/4")
    assert response.status_code == 500
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "entry 3 has 70," in response.json()["detail"]
    assert client.http.get(f"{url}/tile/entries/000.p/3").status_code == 200
    assert client.http.get(f"{url}/tile/0/000.p/4").status_code == 200
