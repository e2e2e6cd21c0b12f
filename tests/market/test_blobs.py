"""Content-addressed files: stored once, refused over the size limit, and refused on read
when the stored bytes no longer hash to their name; an altered stored deliverable is caught."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import update

from ledger.store import make_engine
from market.blobs import _BLOBS, BlobError, BlobStore, MissingBlob, sha256_hex
from market.errors import WorkError
from market.service import Market
from market.settlement import deliverable_view
from market.work import MAX_FILE_BYTES
from tests.audit.conftest import build_world


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    return BlobStore(make_engine(f"sqlite:///{tmp_path / 'blobs.db'}"))


def test_a_blob_is_named_by_its_sha256_and_stored_once(blobs: BlobStore) -> None:
    digest = blobs.put(b"invoice")
    assert digest == sha256_hex(b"invoice")
    assert blobs.put(b"invoice") == digest
    assert blobs.get(digest) == b"invoice" and blobs.text(digest) == "invoice"


def test_a_file_over_the_limit_is_refused(blobs: BlobStore) -> None:
    with pytest.raises(WorkError, match="at most"):
        blobs.put(b"x" * (MAX_FILE_BYTES + 1), name="big.txt")


def test_missing_altered_and_binary_blobs_are_refused(blobs: BlobStore) -> None:
    with pytest.raises(BlobError, match="no stored file"):
        blobs.get("0" * 64)
    digest = blobs.put(b"the total is 3128.46")
    with blobs.engine.begin() as connection:
        connection.execute(
            update(_BLOBS).where(_BLOBS.c.sha256 == digest).values(data=b"the total is 9")
        )
    with pytest.raises(BlobError, match="altered"):
        blobs.get(digest)
    binary = blobs.put(b"\xff\xfe")
    with pytest.raises(BlobError, match="not UTF-8"):
        blobs.text(binary)


def test_an_altered_stored_deliverable_is_refused_to_the_requester(tmp_path: Path) -> None:
    world = build_world(tmp_path / "home", until="delivered")
    market: Market = world.market
    view = deliverable_view(market, world.task_id)
    with market.blobs.engine.begin() as connection:
        connection.execute(
            update(_BLOBS).where(_BLOBS.c.sha256 == view["sha256"]).values(data=b"{}")
        )
    with pytest.raises(BlobError, match="altered"):
        deliverable_view(market, world.task_id)


def test_a_missing_file_is_404_and_an_altered_one_500_over_http(blobs: BlobStore) -> None:
    from api.problems import domain_problem

    with pytest.raises(BlobError) as missing:
        blobs.get("0" * 64)
    assert isinstance(missing.value, MissingBlob)
    assert domain_problem(missing.value).status == 404
    digest = blobs.put(b"kept")
    with blobs.engine.begin() as connection:
        connection.execute(update(_BLOBS).where(_BLOBS.c.sha256 == digest).values(data=b"x"))
    with pytest.raises(BlobError) as altered:
        blobs.get(digest)
    problem = domain_problem(altered.value)
    assert (problem.status, problem.kind) == (500, "integrity")
