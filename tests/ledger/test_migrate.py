"""`accord ledger migrate`: a log an earlier accord stored as tree-node rows, 100,000 entries
long, converted to C2SP tiles on SQLite and PostgreSQL. The roots it proves, and the roots and
proofs the store serves afterwards, equal the RFC 9162 reference over the same leaves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import inspect
from typer.testing import CliRunner

from accord.api.cli import app as cli_app
from accord.ledger import merkle
from accord.ledger.database import make_engine
from accord.ledger.errors import StoreError
from accord.ledger.store import LogStore
from tests.ledger.conftest import LOG_ID
from tests.ledger.old_layout import write_old_log

ENTRIES = 100_000
SIZES = (1, 2, 255, 256, 257, 65_535, 65_536, 65_537, 99_999, ENTRIES)


def test_a_100000_entry_log_migrated_proves_and_serves_the_same_roots(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(db_url)
    datas = [b"entry %d " % i + bytes(i % 251 for _ in range(i % 97)) for i in range(ENTRIES)]
    leaves = write_old_log(engine, LOG_ID, datas=datas)
    reference = {size: merkle.root(leaves[:size]) for size in SIZES}
    with pytest.raises(StoreError, match="run `accord ledger migrate`"):
        LogStore(engine, LOG_ID)

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("ACCORD_HOME", str(home))
    monkeypatch.setenv("ACCORD_DB_URL", db_url)
    monkeypatch.setenv("ACCORD_LOG_ID", LOG_ID)
    asked = [arg for size in SIZES for arg in ("--at", str(size))]
    done = CliRunner().invoke(cli_app, ["ledger", "migrate", *asked, "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    assert report["size"] == ENTRIES and not report["already_on_tiles"]
    assert report["node_rows_dropped"] > ENTRIES
    # level 0: 390 full tiles and one 160 wide; level 1: one full tile and one 134 wide;
    # level 2: one tile 1 wide
    assert report["tile_rows"] == 391 + 2 + 1
    for size in SIZES:
        assert report["roots"][str(size)] == reference[size].hex()
    assert not inspect(engine).has_table("ledger_nodes")

    store = LogStore(engine, LOG_ID)
    for size in SIZES:
        assert store.root(size) == reference[size]
    for index, size in ((0, 1), (200, 257), (65_536, 99_999), (ENTRIES - 1, ENTRIES)):
        proof = store.inclusion_proof(index, size)
        merkle.verify_inclusion(leaves[index], index, size, proof, reference[size])
    merkle.verify_consistency(
        256, ENTRIES, reference[256], reference[ENTRIES], store.consistency_proof(256, ENTRIES)
    )
    assert store.tile(0, 390, 160) == b"".join(leaves[390 * 256 :])

    again = CliRunner().invoke(cli_app, ["ledger", "migrate", "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["already_on_tiles"] is True
    beyond = CliRunner().invoke(cli_app, ["ledger", "migrate", "--at", str(ENTRIES + 1)])
    assert beyond.exit_code == 2 and "no root at sizes" in beyond.output
    engine.dispose()
