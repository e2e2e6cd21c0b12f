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
from tests.api.test_app import World, build_world

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
