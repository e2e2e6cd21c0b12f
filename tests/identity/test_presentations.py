"""DID-auth presentations and the one-time challenge nonces behind them."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from accord.identity.errors import CredentialError, NonceError
from accord.identity.presentations import (
    InMemoryNonceStore,
    NonceStore,
    SqlNonceStore,
    create_presentation,
    verify_presentation,
)
from accord.ledger.database import make_engine
from accord.ledger.signing import from_b64url
from tests.identity.test_credentials import AGENT, NOW, OPERATOR, STRANGER, World

DOMAIN = "accord.example"
TTL = timedelta(minutes=5)
LATER = NOW + timedelta(seconds=30)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = make_engine(f"sqlite:///{tmp_path / 'identity.db'}")
    yield engine
    engine.dispose()


@pytest.fixture(params=["memory", "sql"])
def nonces(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[NonceStore]:
    if request.param == "memory":
        yield InMemoryNonceStore()
        return
    engine = make_engine(f"sqlite:///{tmp_path / 'nonces.db'}")
    yield SqlNonceStore(engine)
    engine.dispose()


def _verify(world: World, vp: dict[str, Any], nonces: NonceStore | None, **overrides: Any) -> Any:
    arguments: dict[str, Any] = {
        "challenge": vp.get("proof", {}).get("challenge", "c"),
        "domain": DOMAIN,
        "now": LATER,
        "trusted_issuers": {OPERATOR.did},
        "status_lookup": world.lookup,
        "nonces": nonces,
    }
    arguments.update(overrides)
    return verify_presentation(vp, **arguments)


# --- presentations ------------------------------------------------------------------------


def test_presentation_round_trip(nonces: NonceStore) -> None:
    world = World()
    credentials = [world.issue(), world.issue(capability="translation", index=5)]
    challenge = nonces.issue(DOMAIN, NOW, TTL)
    vp = create_presentation(AGENT, credentials, challenge, DOMAIN, NOW)
    verified = _verify(world, vp, nonces, required_capabilities=["arithmetic", "translation"])
    assert [credential.capability for credential in verified] == ["arithmetic", "translation"]
    assert {credential.subject for credential in verified} == {AGENT.did}


def test_presentation_shape() -> None:
    world = World()
    vp = create_presentation(AGENT, [world.issue()], "nonce-1", DOMAIN, NOW)
    assert vp["@context"] == ["https://www.w3.org/ns/credentials/v2"]
    assert vp["type"] == ["VerifiablePresentation"]
    assert vp["holder"] == AGENT.did
    proof = vp["proof"]
    assert proof["proofPurpose"] == "authentication"
    assert proof["challenge"] == "nonce-1"
    assert proof["domain"] == DOMAIN
    assert proof["verificationMethod"] == AGENT.kid
    assert proof["cryptosuite"] == "eddsa-jcs-2022"


def test_replayed_presentation_is_refused(nonces: NonceStore) -> None:
    world = World()
    challenge = nonces.issue(DOMAIN, NOW, TTL)
    vp = create_presentation(AGENT, [world.issue()], challenge, DOMAIN, NOW)
    _verify(world, vp, nonces)
    with pytest.raises(NonceError, match="already used"):
        _verify(world, vp, nonces)


def test_presentation_for_another_domain_is_refused(nonces: NonceStore) -> None:
    world = World()
    challenge = nonces.issue(DOMAIN, NOW, TTL)
    vp = create_presentation(AGENT, [world.issue()], challenge, "evil.example", NOW)
    with pytest.raises(CredentialError) as caught:
        _verify(world, vp, nonces)
    assert caught.value.step == "authentication"
    assert "domain" in caught.value.reason
    _verify(world, create_presentation(AGENT, [], challenge, DOMAIN, NOW), nonces)


def test_nonce_of_another_domain_is_refused(nonces: NonceStore) -> None:
    world = World()
    challenge = nonces.issue("other.example", NOW, TTL)
    vp = create_presentation(AGENT, [world.issue()], challenge, DOMAIN, NOW)
    with pytest.raises(NonceError, match="another domain"):
        _verify(world, vp, nonces)


def test_wrong_challenge_is_refused(nonces: NonceStore) -> None:
    world = World()
    issued = nonces.issue(DOMAIN, NOW, TTL)
    vp = create_presentation(AGENT, [world.issue()], "a challenge I made up", DOMAIN, NOW)
    with pytest.raises(CredentialError) as caught:
        _verify(world, vp, nonces, challenge=issued)
    assert caught.value.step == "authentication"
    assert "challenge" in caught.value.reason


def test_self_made_challenge_is_an_unknown_nonce(nonces: NonceStore) -> None:
    world = World()
    vp = create_presentation(AGENT, [world.issue()], "a challenge I made up", DOMAIN, NOW)
    with pytest.raises(NonceError, match="unknown"):
        _verify(world, vp, nonces)


def test_expired_nonce_is_refused(nonces: NonceStore) -> None:
    world = World()
    challenge = nonces.issue(DOMAIN, NOW, TTL)
    vp = create_presentation(AGENT, [world.issue()], challenge, DOMAIN, NOW)
    with pytest.raises(NonceError, match="expired"):
        _verify(world, vp, nonces, now=NOW + TTL)


def test_failed_authentication_does_not_burn_the_nonce(nonces: NonceStore) -> None:
    world = World()
    challenge = nonces.issue(DOMAIN, NOW, TTL)
    forged = create_presentation(STRANGER, [world.issue()], challenge, DOMAIN, NOW)
    forged["holder"] = AGENT.did
    with pytest.raises(CredentialError) as caught:
        _verify(world, forged, nonces)
    assert caught.value.step == "authentication"
    _verify(world, create_presentation(AGENT, [world.issue()], challenge, DOMAIN, NOW), nonces)


def test_tampered_presentation_is_refused() -> None:
    world = World()
    vp = create_presentation(AGENT, [world.issue()], "c", DOMAIN, NOW)
    vp["verifiableCredential"].append(world.issue(capability="translation"))
    with pytest.raises(CredentialError) as caught:
        _verify(world, vp, None)
    assert caught.value.step == "authentication"


def test_unsigned_presentation_is_refused() -> None:
    world = World()
    vp = create_presentation(AGENT, [world.issue()], "c", DOMAIN, NOW)
    del vp["proof"]
    with pytest.raises(CredentialError, match="unsigned") as caught:
        _verify(world, vp, None, challenge="c")
    assert caught.value.step == "authentication"


def test_presenting_someone_elses_credential_fails_the_holder_step() -> None:
    world = World()
    vp = create_presentation(STRANGER, [world.issue()], "c", DOMAIN, NOW)
    with pytest.raises(CredentialError, match="credential #0") as caught:
        _verify(world, vp, None)
    assert caught.value.step == "holder"


def test_a_bad_credential_inside_is_reported_with_its_step() -> None:
    world = World()
    good, revoked = world.issue(index=1), world.issue(index=2)
    world.revoke(2)
    vp = create_presentation(AGENT, [good, revoked], "c", DOMAIN, NOW)
    with pytest.raises(CredentialError, match="credential #1") as caught:
        _verify(world, vp, None)
    assert caught.value.step == "revocation"


def test_missing_required_capability_is_refused() -> None:
    world = World()
    vp = create_presentation(AGENT, [world.issue()], "c", DOMAIN, NOW)
    with pytest.raises(CredentialError, match="translation") as caught:
        _verify(world, vp, None, required_capabilities=["arithmetic", "translation"])
    assert caught.value.step == "capability"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda vp: vp.update(type=["VerifiableCredential"]), "VerifiablePresentation"),
        (lambda vp: vp.update(holder="agent-7"), "holder"),
        (lambda vp: vp.update(verifiableCredential=["a jwt?"]), "credential objects"),
        (lambda vp: vp.pop("@context"), "@context"),
    ],
)
def test_malformed_presentation_is_refused(change: Any, message: str) -> None:
    world = World()
    vp = create_presentation(AGENT, [world.issue()], "c", DOMAIN, NOW)
    change(vp)
    with pytest.raises(CredentialError, match=message) as caught:
        _verify(world, vp, None, challenge="c")
    assert caught.value.step == "presentation"


def test_empty_challenge_or_domain_is_a_caller_error() -> None:
    with pytest.raises(ValueError):
        create_presentation(AGENT, [], "", DOMAIN, NOW)
    world = World()
    vp = create_presentation(AGENT, [], "c", DOMAIN, NOW)
    with pytest.raises(ValueError):
        _verify(world, vp, None, domain="")


# --- nonce stores -------------------------------------------------------------------------


def test_nonces_are_32_random_bytes_in_base64url(nonces: NonceStore) -> None:
    issued = {nonces.issue(DOMAIN, NOW, TTL) for _ in range(50)}
    assert len(issued) == 50
    for nonce in issued:
        assert len(nonce) == 43
        assert len(from_b64url(nonce)) == 32


def test_a_nonce_works_once(nonces: NonceStore) -> None:
    nonce = nonces.issue(DOMAIN, NOW, TTL)
    nonces.consume(nonce, DOMAIN, LATER)
    with pytest.raises(NonceError, match="already used"):
        nonces.consume(nonce, DOMAIN, LATER)


def test_nonce_expiry_is_exclusive(nonces: NonceStore) -> None:
    nonce = nonces.issue(DOMAIN, NOW, TTL)
    with pytest.raises(NonceError, match="expired"):
        nonces.consume(nonce, DOMAIN, NOW + TTL)
    still = nonces.issue(DOMAIN, NOW, TTL)
    nonces.consume(still, DOMAIN, NOW + TTL - timedelta(microseconds=1))


def test_refused_consumption_leaves_the_nonce_usable(nonces: NonceStore) -> None:
    nonce = nonces.issue(DOMAIN, NOW, TTL)
    with pytest.raises(NonceError, match="another domain"):
        nonces.consume(nonce, "other.example", LATER)
    nonces.consume(nonce, DOMAIN, LATER)


def test_issue_refuses_bad_arguments(nonces: NonceStore) -> None:
    with pytest.raises(ValueError):
        nonces.issue("", NOW, TTL)
    with pytest.raises(ValueError):
        nonces.issue(DOMAIN, NOW, timedelta(0))
    with pytest.raises(ValueError):
        nonces.issue(DOMAIN, NOW.replace(tzinfo=None), TTL)


def test_purge_forgets_expired_nonces(nonces: NonceStore) -> None:
    old = nonces.issue(DOMAIN, NOW, TTL)
    fresh = nonces.issue(DOMAIN, NOW + TTL, TTL)
    assert isinstance(nonces, InMemoryNonceStore | SqlNonceStore)
    assert nonces.purge_expired(NOW + TTL) == 1
    with pytest.raises(NonceError, match="unknown"):
        nonces.consume(old, DOMAIN, NOW)
    nonces.consume(fresh, DOMAIN, NOW + TTL)


def test_sql_nonces_survive_a_new_store_on_the_same_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    first, second = make_engine(url), make_engine(url)
    try:
        nonce = SqlNonceStore(first).issue(DOMAIN, NOW, TTL)
        SqlNonceStore(second).consume(nonce, DOMAIN, LATER)
        with pytest.raises(NonceError, match="already used"):
            SqlNonceStore(first).consume(nonce, DOMAIN, LATER)
    finally:
        first.dispose()
        second.dispose()


def _race(stores: list[NonceStore], nonce: str, threads: int) -> tuple[int, list[BaseException]]:
    """`threads` threads consume `nonce` at once, thread i through `stores[i % len(stores)]`;
    returns the number of successes and the errors raised."""
    barrier = threading.Barrier(threads)
    lock = threading.Lock()
    successes = 0
    errors: list[BaseException] = []

    def contend(store: NonceStore) -> None:
        nonlocal successes
        barrier.wait()
        try:
            store.consume(nonce, DOMAIN, LATER)
        except BaseException as exc:  # collected and checked by the test
            with lock:
                errors.append(exc)
        else:
            with lock:
                successes += 1

    workers = [
        threading.Thread(target=contend, args=(stores[number % len(stores)],))
        for number in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    return successes, errors


ROUNDS = 50


def test_concurrent_consumers_of_one_nonce_on_sqlite_exactly_one_wins(engine: Engine) -> None:
    store = SqlNonceStore(engine)
    for round_number in range(ROUNDS):
        threads = 2 + round_number % 7  # 2..8
        nonce = store.issue(DOMAIN, NOW, TTL)
        successes, errors = _race([store], nonce, threads)
        assert successes == 1, (round_number, errors)
        assert len(errors) == threads - 1
        assert all(isinstance(error, NonceError) for error in errors), errors


def test_concurrent_consumers_with_their_own_engines_exactly_one_wins(tmp_path: Path) -> None:
    """As several API workers would: one engine (connection pool) each, one database file."""
    url = f"sqlite:///{tmp_path / 'workers.db'}"
    engines = [make_engine(url) for _ in range(4)]
    try:
        stores: list[NonceStore] = [SqlNonceStore(engine) for engine in engines]
        for round_number in range(10):
            nonce = stores[round_number % 4].issue(DOMAIN, NOW, TTL)
            successes, errors = _race(stores, nonce, 4 + round_number % 5)
            assert successes == 1, errors
            assert all(isinstance(error, NonceError) for error in errors), errors
    finally:
        for engine in engines:
            engine.dispose()


@pytest.mark.postgres
def test_concurrent_consumers_on_postgres_exactly_one_wins(postgres_url: str) -> None:
    engines = [make_engine(postgres_url) for _ in range(2)]
    try:
        stores: list[NonceStore] = [SqlNonceStore(engine) for engine in engines]
        for round_number in range(ROUNDS):
            nonce = stores[0].issue(DOMAIN, NOW, TTL)
            successes, errors = _race(stores, nonce, 2 + round_number % 7)
            assert successes == 1, errors
            assert all(isinstance(error, NonceError) for error in errors), errors
        expired = stores[1].issue(DOMAIN, NOW, TTL)
        with pytest.raises(NonceError, match="expired"):
            stores[0].consume(expired, DOMAIN, NOW + TTL)
    finally:
        for engine in engines:
            engine.dispose()


def test_concurrent_consumers_in_memory_exactly_one_wins() -> None:
    store = InMemoryNonceStore()
    for round_number in range(ROUNDS):
        nonce = store.issue(DOMAIN, NOW, TTL)
        successes, errors = _race([store], nonce, 2 + round_number % 7)
        assert successes == 1
        assert all(isinstance(error, NonceError) for error in errors)


def test_a_database_failure_names_the_driver_reason_not_the_sql(engine: Engine) -> None:
    """The message of a failed nonce write reaches the caller as a problem's detail: it says
    what the database said, without SQLAlchemy's statement and parameters (the table's layout
    and other callers' values are the operator's)."""
    store = SqlNonceStore(engine)
    with engine.begin() as connection:
        connection.exec_driver_sql("DROP TABLE identity_nonces")
    with pytest.raises(NonceError) as raised:
        store.issue(DOMAIN, NOW, TTL)
    message = str(raised.value)
    assert message.startswith("cannot store the nonce: ") and "identity_nonces" in message
    assert "[SQL" not in message and "parameters" not in message and "INSERT" not in message
