"""`POST /files` is bounded: only callers who may post tasks upload, within per-caller and
total quotas on the uploads no task names yet, and such an upload expires (on the market's
clock, which the test moves). A spec names only files its own requester uploaded, whichever
way it is posted (REST, A2A, the market the CLI drives). The app is served for real by uvicorn
on 127.0.0.1 and every request is signed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from accord.api.routes.deps import ApiConfig
from accord.identity.http_auth import AccordAuth
from accord.ledger.signing import Ed25519Signer, Signer
from accord.market.blobs import FileQuota, MissingBlob, sha256_hex
from accord.market.errors import WorkError
from accord.market.tasks import TASK_POSTED
from accord.market.wiring import DEVNET_REQUESTER_KEY
from tests.api.test_app import World, assert_problem, build_world
from tests.market.blob_holds import unnamed_uploads
from tests.serving import serve

TTL = 600.0


@pytest.fixture
def world(tmp_path: Path) -> World:
    return build_world(tmp_path / "home", bidders=("ada",))


@contextmanager
def service(world: World, **limits: Any) -> Iterator[str]:
    config = ApiConfig(rate=1000.0, burst=10_000.0, file_ttl=TTL, **limits)
    with serve(world.app(config)) as url:
        yield url


def call(url: str, signer: Signer, method: str, path: str, **kwargs: Any) -> httpx.Response:
    with httpx.Client(base_url=url, auth=AccordAuth(signer), timeout=30) as client:
        return client.request(method, path, **kwargs)


def upload(url: str, signer: Signer, data: bytes) -> httpx.Response:
    return call(url, signer, "POST", "/files", content=data)


def spec(*digests: str) -> dict[str, Any]:
    """A task whose extraction parts read the files `digests`, one part each."""
    parts = [
        {
            "id": f"fields-{k}",
            "capability": "extraction",
            "input": {
                "document": {"$file": digest},
                "fields": {"total": {"type": "amount", "description": "the total payable"}},
            },
        }
        for k, digest in enumerate(digests)
    ]
    # the total the requester expects each to read (this service has no judge)
    checks = [
        {
            "id": f"total-{k}",
            "weight": 1,
            "kind": "expect",
            "part": f"fields-{k}",
            "path": "$.total",
            "equals": "3128.46",
        }
        for k in range(len(digests))
    ]
    return {"title": "Read the invoice", "budget": "0.1eth", "parts": parts, "checks": checks}


def stored(world: World) -> tuple[int, tuple[int, int]]:
    """The blobs stored, and (files, bytes) of the uploads no task names yet."""
    blobs = world.context.market.blobs
    return blobs.count(), unnamed_uploads(blobs, None, world.clock())


# -- who may upload -----------------------------------------------------------------------------


def test_any_signed_did_uploads_within_its_own_quota(world: World) -> None:
    """A requester holding its own key (the service holds none for it) uploads the files its
    signed spec names, counted against its own quota; an unsigned upload is refused."""
    stranger = Ed25519Signer.generate()
    before = stored(world)
    with service(world, files_per_caller=1) as url:
        accepted = upload(url, stranger, b"the total is 3128.46")
        over = upload(url, stranger, b"the total is 17.00")
        unsigned = httpx.post(f"{url}/files", content=b"the total is 1.00")
    assert accepted.status_code == 201, accepted.text
    assert accepted.json()["sha256"] == sha256_hex(b"the total is 3128.46")
    assert accepted.json()["stored_by"] == stranger.did
    assert_problem(over, 429)
    assert_problem(unsigned, 401)
    assert stored(world) == (before[0] + 1, (1, len(b"the total is 3128.46")))


# -- quotas -------------------------------------------------------------------------------------


def test_the_number_of_files_a_caller_holds_unnamed_is_bounded(world: World) -> None:
    req = world.signers["req"]
    with service(world, files_per_caller=2) as url:
        assert upload(url, req, b"one").status_code == 201
        assert upload(url, req, b"two").status_code == 201
        before = stored(world)
        refused = upload(url, req, b"three")
        body = assert_problem(refused, 429)
        assert body["reason"] == "files-per-caller" and "2" in body["detail"]
        assert int(refused.headers["Retry-After"]) == TTL
        assert stored(world) == before
        # the same bytes again take no more room; another caller has its own quota
        assert upload(url, req, b"two").status_code == 201
        assert upload(url, world.signers["ada"], b"three").status_code == 201
        # a posted task's files no longer count: the caller may upload again
        world.clock.advance(100)
        posted = call(url, req, "POST", "/tasks", json=spec(sha256_hex(b"one")))
        assert posted.status_code == 201, posted.text
        assert upload(url, req, b"three").status_code == 201
        refused = upload(url, req, b"four")
        assert assert_problem(refused, 429)["reason"] == "files-per-caller"
        assert int(refused.headers["Retry-After"]) == TTL - 100  # when "two" expires


def test_the_bytes_a_caller_holds_unnamed_are_bounded(world: World) -> None:
    req = world.signers["req"]
    with service(world, file_bytes_per_caller=100) as url:
        assert upload(url, req, b"a" * 60).status_code == 201
        before = stored(world)
        refused = upload(url, req, b"b" * 50)
        assert assert_problem(refused, 429)["reason"] == "bytes-per-caller"
        assert "Retry-After" in refused.headers
        never = upload(url, req, b"c" * 101)  # more than a caller may ever hold: 413
        body = assert_problem(never, 413)
        assert body["reason"] == "bytes-per-caller" and "101 bytes" in body["detail"]
        assert stored(world) == before
        assert upload(url, req, b"b" * 40).status_code == 201


def test_the_bytes_all_callers_hold_unnamed_are_bounded(world: World) -> None:
    req, ada, operator = world.signers["req"], world.signers["ada"], world.operator
    with service(world, file_bytes_per_caller=100, file_bytes_total=150) as url:
        assert upload(url, req, b"r" * 90).status_code == 201
        world.clock.advance(10)
        assert upload(url, ada, b"a" * 50).status_code == 201
        before = stored(world)
        refused = upload(url, operator, b"o" * 20)
        body = assert_problem(refused, 429)
        assert body["reason"] == "bytes-total" and "all callers" in body["detail"]
        assert int(refused.headers["Retry-After"]) == TTL - 10  # when req's upload expires
        assert stored(world) == before
        assert upload(url, operator, b"o" * 10).status_code == 201


def test_a_file_over_the_size_limit_is_413(world: World) -> None:
    from accord.market.work import MAX_FILE_BYTES

    before = stored(world)
    with service(world) as url:
        refused = upload(url, world.signers["req"], b"x" * (MAX_FILE_BYTES + 1))
    assert assert_problem(refused, 413)["reason"] == "file-size"
    assert stored(world) == before


def test_quotas_come_from_the_environment() -> None:
    config = ApiConfig.from_env(
        {
            "ACCORD_FILE_TTL": "90",
            "ACCORD_FILES_PER_CALLER": "3",
            "ACCORD_FILE_BYTES_PER_CALLER": "1000",
            "ACCORD_FILE_BYTES_TOTAL": "5000",
            "ACCORD_STREAMS_PER_CALLER": "2",
            "ACCORD_STREAMS_TOTAL": "7",
        }
    )
    assert config.file_quota() == FileQuota(90.0, 3, 1000, 5000)
    assert (config.streams_per_caller, config.streams_total) == (2, 7)
    defaults = ApiConfig.from_env({})
    assert defaults.file_quota() == FileQuota()
    for bad in ("0", "-1", "lots", "nan"):
        with pytest.raises(ValueError, match="ACCORD_FILES_PER_CALLER"):
            ApiConfig.from_env({"ACCORD_FILES_PER_CALLER": bad})


# -- expiry -------------------------------------------------------------------------------------


def test_an_upload_no_task_names_expires_and_a_named_one_stays(world: World) -> None:
    req = world.signers["req"]
    named, unnamed = b"INVOICE 1: total 10.00 EUR", b"INVOICE 2: total 20.00 EUR"
    blobs = world.context.market.blobs
    with service(world) as url:
        assert upload(url, req, named).status_code == 201
        answer = upload(url, req, unnamed).json()
        expires = world.clock() + timedelta(seconds=TTL)
        assert answer["expires_unless_posted"] == expires.isoformat()
        posted = call(url, req, "POST", "/tasks", json=spec(sha256_hex(named)))
        assert posted.status_code == 201, posted.text
        task_id = posted.json()["task_id"]
        count = blobs.count()

        world.clock.advance(TTL - 1)  # not yet: still held, still stored
        assert blobs.held(req.did, [sha256_hex(unnamed)], world.clock()) == []
        world.clock.advance(1)
        # expired: no longer the requester's to name, even before it is swept
        late = call(url, req, "POST", "/tasks", json=spec(sha256_hex(unnamed)))
        body = assert_problem(late, 422)
        assert sha256_hex(unnamed) in body["detail"] and body["path"] == "$.parts[0]"
        # the next upload (anybody's) sweeps it away; the named file stays
        assert upload(url, world.signers["ada"], b"anything").status_code == 201
        assert blobs.count() == count  # one gone, one new
        assert unnamed_uploads(world.context.market.blobs, req.did, world.clock()) == (0, 0)
        with pytest.raises(MissingBlob):
            blobs.get(sha256_hex(unnamed))
        shown = call(url, req, "GET", f"/tasks/{task_id}/files/{sha256_hex(named)}")
        assert shown.status_code == 200 and shown.content == named
        world.clock.advance(100 * TTL)
        assert upload(url, world.signers["ada"], b"more").status_code == 201
        assert blobs.get(sha256_hex(named)) == named


# -- a spec names only its requester's files ----------------------------------------------------


def test_a_requester_cannot_name_another_requesters_file(world: World) -> None:
    alice, bob = world.signers["req"], world.signers["ada"]
    secret = b"CONFIDENTIAL: Alice's invoice, total 9999.00 EUR"
    digest = sha256_hex(secret)
    store = world.context.market.ledger.store
    with service(world) as url:
        assert upload(url, alice, secret).status_code == 201
        before = store.size()
        # over REST: refused, naming the file, nothing logged
        refused = call(url, bob, "POST", "/tasks", json=spec(digest))
        body = assert_problem(refused, 422)
        assert digest in body["detail"] and "you" in body["detail"]
        assert body["path"] == "$.parts[0]"
        # a file nobody uploaded reads the same: nothing tells bob that alice's exists
        nobody = call(url, bob, "POST", "/tasks", json=spec("ab" * 32))
        assert assert_problem(nobody, 422)["detail"] == body["detail"].replace(digest, "ab" * 32)
        # over A2A: the same refusal as a JSON-RPC error
        message = {
            "message": {
                "messageId": "m-steal",
                "role": "ROLE_USER",
                "parts": [{"data": spec(digest), "mediaType": "application/json"}],
            }
        }
        rpc = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": message}
        answer = call(url, bob, "POST", "/a2a", json=rpc, headers={"A2A-Version": "1.0"}).json()
        assert answer["error"]["code"] == -32602 and digest in answer["error"]["message"]
        assert store.size() == before
        assert store.find(kind=TASK_POSTED) == []

        # alice names her own file
        mine = call(url, alice, "POST", "/tasks", json=spec(digest))
        assert mine.status_code == 201, mine.text
        # bob, having uploaded the same bytes himself, may name them too
        assert upload(url, bob, secret).status_code == 201
        his = call(url, bob, "POST", "/tasks", json=spec(digest))
        assert his.status_code == 201, his.text
        assert {t.requester for t in world.context.market.tasks()} == {alice.did, bob.did}


def test_the_market_refuses_a_file_the_requester_does_not_hold(world: World) -> None:
    """`Market.post`, which the CLI, REST and A2A all go through, checks it itself."""
    market = world.context.market
    alice, bob = world.signers["req"], world.signers["ada"]
    digest = market.upload_file(alice.did, b"INVOICE 3: total 30.00 EUR").sha256
    task_spec = market.spec_from_request(spec(digest))  # read without naming a requester
    with pytest.raises(WorkError, match=digest) as refused:
        market.post(bob, task_spec, requester_key=DEVNET_REQUESTER_KEY)
    assert refused.value.path == "$.parts[0]"
    with pytest.raises(WorkError, match=digest):
        market.spec_from_request(spec(digest), requester=bob.did)
    assert market.ledger.store.find(kind=TASK_POSTED) == []
    task = market.post(alice, task_spec, requester_key=DEVNET_REQUESTER_KEY)
    assert task.spec.files.keys() == {digest}
    assert unnamed_uploads(market.blobs, alice.did, world.clock()) == (0, 0)  # kept for the task
