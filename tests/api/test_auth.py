"""Signed requests: unsigned, forged, expired, replayed or tampered requests get 401 on every
mutating route; an agent acts only on its own objects (403 otherwise)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from fastapi.testclient import TestClient

from api.auth import (
    DID_HEADER,
    SIGNATURE_HEADER,
    AccordAuth,
    NonceMemory,
    RateLimiter,
    sign_request,
)
from identity.presentations import create_presentation
from ledger.signing import Ed25519Signer
from tests.api.test_app import (
    World,
    assert_problem,
    build_world,
    commitment_json,
    post_task,
    reveal_json,
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build_world(tmp_path_factory.mktemp("api-auth") / "home")


@pytest.fixture(scope="module")
def client(world: World) -> TestClient:
    return TestClient(world.app())


@pytest.fixture(scope="module")
def task_id(client: TestClient, world: World) -> str:
    return str(post_task(client, world.signers["req"])["id"])


Route = tuple[str, Callable[[World, str], dict[str, Any] | None]]


def _post_body(world: World, task: str) -> dict[str, Any]:
    return {"title": "t", "capabilities": ["arithmetic"], "budget": "1000wei"}


MUTATING: dict[str, Route] = {
    "post-task": ("/tasks", _post_body),
    "commit": (
        "/tasks/{task}/commitments",
        lambda w, t: commitment_json(w.signers["ada"], t, 10**17),
    ),
    "reveal": ("/tasks/{task}/reveals", lambda w, t: reveal_json(w.signers["ada"], t, 10**17)),
    "award": ("/tasks/{task}/award", lambda w, t: None),
    "challenge": ("/registration/challenge", lambda w, t: None),
    "register": ("/registration", lambda w, t: {"challenge": "x" * 43, "presentation": {}}),
}


def _request(name: str, world: World, task: str) -> tuple[str, bytes]:
    path, body_of = MUTATING[name]
    body = body_of(world, task)
    return path.format(task=task), b"" if body is None else json.dumps(body).encode()


def _send(client: TestClient, path: str, body: bytes, headers: dict[str, str]) -> Any:
    return client.post(path, content=body, headers={**headers, "content-type": "application/json"})


@pytest.mark.parametrize("name", sorted(MUTATING))
def test_unsigned_is_401(client: TestClient, world: World, task_id: str, name: str) -> None:
    path, body = _request(name, world, task_id)
    response = _send(client, path, body, {})
    detail = assert_problem(response, 401)["detail"]
    assert "not signed" in detail
    assert response.headers["WWW-Authenticate"] == "Accord-Signature"


@pytest.mark.parametrize("name", sorted(MUTATING))
def test_forged_is_401(client: TestClient, world: World, task_id: str, name: str) -> None:
    path, body = _request(name, world, task_id)
    ada = world.signers["ada"]
    forged = sign_request(Ed25519Signer.generate(), "POST", path, body)
    forged[DID_HEADER] = ada.did  # claims to be ada, signed by another key
    assert "does not verify" in assert_problem(_send(client, path, body, forged), 401)["detail"]
    garbage = {**sign_request(ada, "POST", path, body), SIGNATURE_HEADER: "!!!"}
    assert_problem(_send(client, path, body, garbage), 401)


@pytest.mark.parametrize("name", sorted(MUTATING))
def test_tampered_is_401(client: TestClient, world: World, task_id: str, name: str) -> None:
    path, body = _request(name, world, task_id)
    headers = sign_request(world.signers["ada"], "POST", path, body)
    assert_problem(_send(client, path, body + b" ", headers), 401)  # another body
    assert_problem(_send(client, path + "?x=1", body, headers), 401)  # another target


@pytest.mark.parametrize("name", sorted(MUTATING))
@pytest.mark.parametrize("skew", [-301, 301, -3600])
def test_expired_is_401(
    client: TestClient, world: World, task_id: str, name: str, skew: int
) -> None:
    path, body = _request(name, world, task_id)
    headers = sign_request(
        world.signers["ada"], "POST", path, body, timestamp=int(time.time()) + skew
    )
    assert "time" in assert_problem(_send(client, path, body, headers), 401)["detail"]


@pytest.mark.parametrize("name", sorted(MUTATING))
def test_replayed_is_401(client: TestClient, world: World, task_id: str, name: str) -> None:
    path, body = _request(name, world, task_id)
    headers = sign_request(world.signers["ada"], "POST", path, body)
    first = _send(client, path, body, headers)
    assert first.status_code != 401, first.text
    replay = _send(client, path, body, headers)
    assert "replay" in assert_problem(replay, 401)["detail"]


def test_a_fresh_signature_inside_the_window_passes(client: TestClient, world: World) -> None:
    headers = sign_request(
        world.signers["ada"], "POST", "/registration/challenge", timestamp=int(time.time()) - 250
    )
    assert _send(client, "/registration/challenge", b"", headers).status_code == 200


# -- the cross-user matrix -------------------------------------------------------------------


def test_b_cannot_commit_or_reveal_for_a(client: TestClient, world: World) -> None:
    ada, bob = world.signers["ada"], world.signers["bob"]
    task = str(post_task(client, world.signers["req"])["id"])
    as_bob = AccordAuth(bob)
    commit_a = commitment_json(ada, task, 10**17)
    assert_problem(client.post(f"/tasks/{task}/commitments", json=commit_a, auth=as_bob), 403)
    reveal_a = reveal_json(ada, task, 10**17)
    assert_problem(client.post(f"/tasks/{task}/reveals", json=reveal_a, auth=as_bob), 403)
    # the owner can
    ok = client.post(f"/tasks/{task}/commitments", json=commit_a, auth=AccordAuth(ada))
    assert ok.status_code == 201, ok.text
    # bob's body but ada's signature on the request: still not ada's to send
    commit_b = commitment_json(bob, task, 10**17)
    assert_problem(
        client.post(f"/tasks/{task}/commitments", json=commit_b, auth=AccordAuth(ada)), 403
    )


def test_only_the_requester_or_operator_awards(client: TestClient, world: World) -> None:
    task = str(post_task(client, world.signers["req"])["id"])
    for intruder in ("ada", "bob", "carol"):
        response = client.post(f"/tasks/{task}/award", auth=AccordAuth(world.signers[intruder]))
        assert "only the requester" in assert_problem(response, 403)["detail"]
    stranger = Ed25519Signer.generate()
    assert_problem(client.post(f"/tasks/{task}/award", auth=AccordAuth(stranger)), 403)
    # the requester and the operator pass authorisation (the auction is not due yet: 409)
    for owner in (world.signers["req"], world.operator):
        assert_problem(client.post(f"/tasks/{task}/award", auth=AccordAuth(owner)), 409)


def test_b_cannot_register_as_a(client: TestClient, world: World) -> None:
    ada, bob = world.signers["ada"], world.signers["bob"]
    challenge = client.post("/registration/challenge", auth=AccordAuth(ada)).json()
    presentation = create_presentation(
        ada, [], challenge["challenge"], challenge["domain"], world.clock()
    )
    body = {"challenge": challenge["challenge"], "presentation": presentation}
    assert_problem(client.post("/registration", json=body, auth=AccordAuth(bob)), 403)


def test_b_cannot_post_as_a(client: TestClient, world: World) -> None:
    """A task is posted by the signer of the request, never by a DID named in the body."""
    bob = world.signers["bob"]
    task = post_task(client, bob)
    assert task["requester"] == bob.did


# -- units --------------------------------------------------------------------------------------


def test_nonce_memory_forgets_after_the_window() -> None:
    memory = NonceMemory(window=10)
    assert memory.use("did:a", "n" * 16, 100.0, 100.0)
    assert not memory.use("did:a", "n" * 16, 100.0, 105.0)
    assert memory.use("did:b", "n" * 16, 100.0, 105.0)  # per DID
    memory.use("did:a", "m" * 16, 200.0, 200.0)  # purges old entries
    assert len(memory) == 1


def test_token_bucket() -> None:
    now = [0.0]
    limiter = RateLimiter(rate=1.0, burst=2, clock=lambda: now[0])
    assert limiter.take("k") is None and limiter.take("k") is None
    wait = limiter.take("k")
    assert wait is not None and 0 < wait <= 1
    now[0] += 1.0
    assert limiter.take("k") is None


def test_sql_nonces_refuse_a_replay_across_workers(tmp_path: Any) -> None:
    """Two workers share the service's database: a nonce used at one is refused at the other."""
    from api.auth import SqlRequestNonces
    from ledger.store import make_engine

    engine = make_engine(f"sqlite:///{tmp_path / 'shared.db'}")
    worker_a, worker_b = SqlRequestNonces(engine, 300), SqlRequestNonces(engine, 300)
    now = 1_000_000.0
    assert worker_a.use("did:key:z6MkA", "n1", now, now)
    assert not worker_b.use("did:key:z6MkA", "n1", now, now)
    assert worker_b.use("did:key:z6MkB", "n1", now, now)  # nonces are per DID
    later = now + 10 * 300
    assert worker_a.use("did:key:z6MkA", "n2", later, later)  # old ones are purged
    assert worker_b.use("did:key:z6MkA", "n1", later, later)
    engine.dispose()
