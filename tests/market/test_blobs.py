"""Content-addressed files: stored once, refused over the size limit, and refused on read
when the stored bytes no longer hash to their name; an altered stored deliverable is caught.
Who holds a blob: what the service stores is kept for good, an upload until it expires or a
task names it (the quotas over HTTP: tests/api/test_uploads.py)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import insert, update

from accord.ledger.database import create_tables, make_engine
from accord.market.blobs import (
    _BLOBS,
    SERVICE,
    BlobError,
    BlobStore,
    FileQuota,
    MissingBlob,
    QuotaExceeded,
    sha256_hex,
)
from accord.market.errors import WorkError
from accord.market.service import Market
from accord.market.settlement import deliverable_view
from accord.market.work import MAX_FILE_BYTES
from tests.audit.conftest import build_world
from tests.ledger.conftest import postgres_schema_url
from tests.market.blob_holds import swept_by_an_upload, unnamed_uploads


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'blobs.db'}"
        return
    with postgres_schema_url() as url:
        yield url


@pytest.fixture
def blobs(db_url: str) -> Iterator[BlobStore]:
    engine = make_engine(db_url)
    yield BlobStore(engine)
    engine.dispose()


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
    from accord.api.problems import domain_problem

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


# -- holders: who may name a blob, and for how long ----------------------------------------------

NOW = datetime(2030, 1, 1, tzinfo=UTC)


def test_what_the_service_stores_outlives_an_expired_upload_of_the_same_bytes(
    blobs: BlobStore,
) -> None:
    digest = blobs.put(b'{"deliverable": 1}')
    upload = blobs.upload(b'{"deliverable": 1}', holder="did:key:z6Mkstranger", now=NOW)
    assert upload.sha256 == digest and upload.expires_at is not None
    assert swept_by_an_upload(blobs, upload.expires_at) == {(digest, "did:key:z6Mkstranger")}
    assert blobs.get(digest) == b'{"deliverable": 1}'
    assert blobs.held("did:key:z6Mkstranger", [digest], upload.expires_at) == [digest]


def test_blobs_stored_before_holders_were_recorded_are_kept_for_good(db_url: str) -> None:
    engine = make_engine(db_url)
    create_tables(engine, [_BLOBS])
    with engine.begin() as connection:
        connection.execute(insert(_BLOBS).values(sha256=sha256_hex(b"old"), size=3, data=b"old"))
    blobs = BlobStore(engine)
    BlobStore(engine)  # a second start finds them recorded already
    blobs.upload(b"old", holder="did:key:z6Mkre", now=NOW)
    swept = swept_by_an_upload(blobs, NOW + timedelta(days=365))
    assert swept == {(sha256_hex(b"old"), "did:key:z6Mkre")}
    assert blobs.get(sha256_hex(b"old")) == b"old"
    assert blobs.held(SERVICE, [sha256_hex(b"old")], NOW) == []
    engine.dispose()


def test_a_claim_keeps_all_of_a_specs_files_or_none(blobs: BlobStore) -> None:
    mine = blobs.upload(b"mine", holder="did:key:z6Mka", now=NOW).sha256
    theirs = blobs.upload(b"theirs", holder="did:key:z6Mkb", now=NOW).sha256
    assert blobs.claim("did:key:z6Mka", [mine, theirs], "task-1", NOW) == [theirs]
    assert unnamed_uploads(blobs, "did:key:z6Mka", NOW) == (1, 4)  # nothing was kept
    assert blobs.claim("did:key:z6Mka", [mine], "task-1", NOW) == []
    assert unnamed_uploads(blobs, "did:key:z6Mka", NOW) == (0, 0)
    swept = swept_by_an_upload(blobs, NOW + timedelta(days=365))
    assert swept == {(theirs, "did:key:z6Mkb")}  # theirs expired; mine is kept
    assert blobs.get(mine) == b"mine"
    with pytest.raises(MissingBlob):
        blobs.get(theirs)


def test_a_quota_holds_when_uploads_race_from_several_processes(db_url: str) -> None:
    """Ten writers on engines of their own (as ten service processes would be), one holder
    with room for four: four uploads are stored, six refused."""
    engines = [make_engine(db_url) for _ in range(10)]
    stores = [BlobStore(engine) for engine in engines]
    quota = FileQuota(ttl=60, files_per_caller=4)
    start = threading.Barrier(len(stores))

    def one(k: int) -> str:
        start.wait()
        try:
            stores[k].upload(f"file {k}".encode(), holder="did:key:z6Mkrace", now=NOW, quota=quota)
        except QuotaExceeded as exc:
            return exc.limit
        return "stored"

    with ThreadPoolExecutor(len(stores)) as pool:
        outcomes = list(pool.map(one, range(len(stores))))
    assert sorted(outcomes) == ["files-per-caller"] * 6 + ["stored"] * 4
    assert unnamed_uploads(stores[0], "did:key:z6Mkrace", NOW)[0] == 4 == stores[0].count()
    for engine in engines:
        engine.dispose()
