"""Rate limits key on what is proven: the verified DID of a signed request, the client address
of an unsigned one (whatever `keyid` its Signature-Input claims), and registration challenges
per address; expired request nonces and challenges are purged on a schedule."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from accord.api.auth import PurgeSchedule, SqlRequestNonces
from accord.api.routes.deps import ApiConfig
from accord.identity.http_auth import AccordAuth
from accord.identity.presentations import IdentityNonce
from accord.ledger.signing import Ed25519Signer
from tests.api.test_app import FIGURES, World, build_world

_NONCES = IdentityNonce.__table__  # type: ignore[attr-defined]


def _claiming(did: str) -> dict[str, str]:
    """Signature headers that name `did` as keyid but prove nothing (reads are not verified)."""
    return {
        "Signature-Input": f'accord=("@method");created=1;nonce="n";keyid="{did}";tag="accord"',
        "Signature": "accord=:AAAA:",
    }


@pytest.fixture
def world(tmp_path: Path) -> World:
    return build_world(tmp_path / "home", bidders=("ada",))


def test_unsigned_reads_claiming_a_did_do_not_spend_its_signed_bucket(world: World) -> None:
    client = TestClient(world.app(ApiConfig(rate=0.01, burst=3, challenge_burst=100)))
    ada = world.signers["ada"]
    for _ in range(3):
        assert client.get("/tasks", headers=_claiming(ada.did)).status_code == 200
    response = client.post("/registration/challenge", auth=AccordAuth(ada))
    assert response.status_code == 200, response.text


def test_a_fresh_claimed_did_per_read_is_still_limited_by_address(world: World) -> None:
    client = TestClient(world.app(ApiConfig(rate=0.01, burst=3)))
    statuses = [
        client.get("/tasks", headers=_claiming(Ed25519Signer.generate().did)).status_code
        for _ in range(5)
    ]
    assert statuses[:3] == [200, 200, 200]
    assert statuses[3:] == [429, 429]


def test_registration_challenges_are_limited_per_address(world: World) -> None:
    client = TestClient(world.app(ApiConfig(rate=1000, burst=1000, challenge_burst=2)))
    statuses = [
        client.post(
            "/registration/challenge", auth=AccordAuth(Ed25519Signer.generate())
        ).status_code
        for _ in range(3)
    ]
    assert statuses == [200, 200, 429]


def test_expired_challenges_are_purged_when_a_new_one_is_issued(world: World) -> None:
    client = TestClient(world.app(ApiConfig(rate=1000, burst=1000, purge_every=0)))
    carol = world.signers["carol"]
    engine = world.onboarding.nonces.engine  # type: ignore[attr-defined]

    def rows() -> int:
        with engine.connect() as connection:
            return int(connection.execute(select(func.count()).select_from(_NONCES)).scalar_one())

    before = rows()
    assert client.post("/registration/challenge", auth=AccordAuth(carol)).status_code == 200
    assert rows() == before + 1
    world.clock.advance(3600)
    assert client.post("/registration/challenge", auth=AccordAuth(carol)).status_code == 200
    assert rows() == 1


def test_request_nonces_past_the_window_are_purged(world: World) -> None:
    engine = world.context.market.ledger.store.engine
    nonces = SqlRequestNonces(engine, window=300, purge_every=60)
    assert nonces.use("did:key:a", "n" * 16, 1000.0, 1000.0)
    assert not nonces.use("did:key:a", "n" * 16, 1000.0, 1001.0)
    assert nonces.use("did:key:b", "m" * 16, 2000.0, 2000.0)  # due: the first is 1000 s old
    assert nonces.use("did:key:a", "n" * 16, 1000.0, 2000.0)  # forgotten (refused as expired)


def test_the_purge_schedule_is_at_most_once_per_interval_or_every_nth_insert() -> None:
    schedule = PurgeSchedule(every=60, inserts=3)
    assert schedule.due(0.0)
    assert not schedule.due(1.0)
    assert not schedule.due(2.0)
    assert schedule.due(3.0)  # the third insert since the last purge
    assert schedule.due(100.0)  # a minute has passed


def test_postings_are_limited_per_did(world: World) -> None:
    """Posting costs a log entry and a chain read per lifecycle round until the task ends, so
    each DID posts `post_burst` tasks at once and `posts_per_hour` after that."""
    config = ApiConfig(rate=1000, burst=1000, post_burst=2, posts_per_hour=2)
    client = TestClient(world.app(config))
    body = {
        "title": "Add the figures",
        "budget": "0.1eth",
        "parts": [{"id": "sum", "capability": "arithmetic", "input": FIGURES}],
        "checks": [
            {
                "id": "right",
                "weight": 1,
                "kind": "expect",
                "part": "sum",
                "path": "$",
                "within": "163.69",
                "tolerance": "0.005",
            }
        ],
    }
    req, ada = world.signers["req"], world.signers["ada"]
    answers = [client.post("/tasks", json=body, auth=AccordAuth(req)) for _ in range(3)]
    assert [a.status_code for a in answers] == [201, 201, 429], answers[-1].text
    refused = answers[-1]
    assert refused.headers["content-type"].startswith("application/problem+json")
    assert refused.json()["type"].endswith("post-rate")
    assert 1700 <= int(refused.headers["Retry-After"]) <= 1801  # one posting per 30 minutes
    assert req.did in refused.json()["detail"]
    # the limit is the DID's: another requester posts all the same
    assert client.post("/tasks", json=body, auth=AccordAuth(ada)).status_code == 201
    # and the refused posting logged nothing
    assert len(list(world.context.market.iter_tasks(requester=req.did))) == 2


def test_the_posting_limits_are_read_from_the_environment() -> None:
    config = ApiConfig.from_env({"ACCORD_POST_BURST": "5", "ACCORD_POSTS_PER_HOUR": "7"})
    assert (config.post_burst, config.posts_per_hour) == (5, 7)
    with pytest.raises(ValueError, match="ACCORD_POSTS_PER_HOUR"):
        ApiConfig.from_env({"ACCORD_POSTS_PER_HOUR": "0"})
