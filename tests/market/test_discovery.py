"""The discovery view (`market.discovery`) against a ranking of every agent done by hand, on
SQLite and PostgreSQL: names that share words with capabilities and needs, agents holding
several capabilities, revoked, expired and not-yet-valid credentials, agents credentialed
before they registered or never registered, reputations from settlements and forfeits. Every
page, followed to the end, equals the hand ranking; so does a view attached late (folding what
a view-less writer appended) and a view rebuilt from the log."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from identity.credential_views import CredentialView
from identity.credentials import REVOCATION_EVENT_KIND
from identity.registration import REGISTERED_KIND
from identity.status import format_timestamp
from ledger.events import Entry, make_entry
from ledger.signing import Ed25519Signer
from ledger.store import LogStore, make_engine
from ledger.views import view_rows
from market.discovery import DiscoveryView, description, ranked_page, relevance
from market.reputation import reputation
from market.tasks import TASK_AWARDED, TASK_SETTLED
from market.views import ReputationView
from tests.ledger.conftest import postgres_schema_url

NOW = datetime(2026, 6, 1, tzinfo=UTC)
CAPABILITIES = ("arithmetic", "extraction", "retrieval", "python_code")
NAME_WORDS = ("ada", "fast", "arithmetic", "agent", "sum", "bot", "extraction", "careful", "7")
NEEDS = ("", "careful arithmetic agent", "sum numbers fast", "python code", "zzz", "ada-7 bot")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'log.db'}")
        yield engine
        engine.dispose()
        return
    with postgres_schema_url() as url:
        engine = make_engine(url)
        yield engine
        engine.dispose()


@dataclass
class World:
    """Signed entries and, beside them, the facts a hand ranking needs."""

    operator: Ed25519Signer
    entries: list[Entry] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    credentials: dict[str, tuple[str, str, datetime, datetime]] = field(default_factory=dict)
    revoked: set[str] = field(default_factory=set)
    deliveries: dict[str, list[Fraction]] = field(default_factory=dict)
    forfeits: dict[str, int] = field(default_factory=dict)
    seqs: dict[str, int] = field(default_factory=dict)

    def log(self, signer: Ed25519Signer, kind: str, subject: str, body: dict[str, Any]) -> None:
        seq = self.seqs[signer.did] = self.seqs.get(signer.did, 0) + 1
        at = NOW - timedelta(days=30) + timedelta(seconds=len(self.entries))
        self.entries.append(
            make_entry(signer, kind=kind, seq=seq, at=at, subject=subject, body=body)
        )

    def register(self, agent: Ed25519Signer, name: str) -> None:
        self.names[agent.did] = name
        self.log(agent, REGISTERED_KIND, agent.did, {"name": name})

    def issue(self, did: str, capability: str, start: datetime, end: datetime) -> str:
        credential_id = f"urn:uuid:{len(self.credentials):032x}"
        self.credentials[credential_id] = (did, capability, start, end)
        body = {
            "credentialId": credential_id,
            "agent": did,
            "capability": capability,
            "validUntil": format_timestamp(end),
            "credential": {"validFrom": format_timestamp(start)},
        }
        self.log(self.operator, "credential.issued", credential_id, body)
        return credential_id

    def revoke(self, credential_id: str) -> None:
        self.revoked.add(credential_id)
        self.log(self.operator, REVOCATION_EVENT_KIND, credential_id, {})

    def settle(self, qualities: dict[str, Fraction]) -> None:
        for did, quality in qualities.items():
            self.deliveries.setdefault(did, []).append(quality)
        body = {"quality": {did: f"{q.numerator}/{q.denominator}" for did, q in qualities.items()}}
        self.log(self.operator, TASK_SETTLED, f"task-{len(self.entries)}", body)

    def forfeit(self, dids: list[str]) -> None:
        for did in dids:
            self.forfeits[did] = self.forfeits.get(did, 0) + 1
        self.log(self.operator, TASK_AWARDED, f"task-{len(self.entries)}", {"forfeited": dids})

    def by_hand(self, capability: str, need: str, now: datetime) -> list[tuple[Any, ...]]:
        """Every registered holder of `capability` at `now`, ranked as discovery promises."""
        held: dict[str, set[str]] = {}
        for credential_id, (did, held_capability, start, end) in self.credentials.items():
            if credential_id not in self.revoked and start <= now < end:
                held.setdefault(did, set()).add(held_capability)
        ranked = []
        for did, name in self.names.items():
            if capability not in held.get(did, set()):
                continue
            capabilities = tuple(sorted(held[did]))
            text = description(name, capabilities)
            standing = reputation(self.deliveries.get(did, []), forfeits=self.forfeits.get(did, 0))
            ranked.append((did, name, capabilities, standing, text, relevance(need, text)))
        ranked.sort(key=lambda row: (-row[5], -row[3], row[0]))
        return ranked


def random_world(seed: int) -> World:
    rng = random.Random(seed)
    world = World(Ed25519Signer(rng.randbytes(32)))
    agents = [Ed25519Signer(rng.randbytes(32)) for _ in range(40)]
    unregistered = set(rng.sample(range(len(agents)), 4))
    late = set(rng.sample(sorted(set(range(len(agents))) - unregistered), 6))
    for k, agent in enumerate(agents):
        name = "-".join(rng.sample(NAME_WORDS, rng.randint(1, 3))) + f"-{k}"
        if k not in unregistered and k not in late:
            world.register(agent, name)
        for capability in rng.sample(CAPABILITIES, rng.randint(1, 3)):
            window = rng.choice(["valid", "valid", "valid", "expired", "not yet"])
            start, end = NOW - timedelta(days=20), NOW + timedelta(days=100)
            if window == "expired":
                end = NOW - timedelta(days=1)
            elif window == "not yet":
                start = NOW + timedelta(days=1)
            credential_id = world.issue(agent.did, capability, start, end)
            if rng.random() < 0.15:
                world.revoke(credential_id)
        if k in late:
            world.register(agent, name)
    for _ in range(15):
        chosen = rng.sample(agents, 3)
        world.settle({a.did: Fraction(rng.randint(0, 4), 4) for a in chosen})
    world.forfeit([a.did for a in rng.sample(agents, 5)])
    return world


def views(world: World) -> list[Any]:
    return [CredentialView(world.operator.did), ReputationView(), DiscoveryView(world.operator.did)]


def paged(store: LogStore, capability: str, need: str, now: datetime) -> list[tuple[Any, ...]]:
    """Every page of discovery, three at a time, followed to its end."""
    found: list[tuple[Any, ...]] = []
    while True:
        with store.engine.connect() as connection:
            page, more = ranked_page(connection, capability, need, now, offset=len(found), size=3)
        found += [
            (d.did, d.name, d.capabilities, d.reputation, d.description, d.relevance) for d in page
        ]
        if not more:
            return found


def append_in_batches(store: LogStore, entries: list[Entry], size: int = 17) -> None:
    for start in range(0, len(entries), size):
        store.append_batch(entries[start : start + size])


@pytest.mark.parametrize("seed", [1, 2])
def test_every_page_ranks_as_the_hand_ranking(engine: Engine, seed: int) -> None:
    world = random_world(seed)
    store = LogStore(engine, "log-discovery", projections=views(world))
    append_in_batches(store, world.entries)
    for capability in CAPABILITIES:
        for need in NEEDS:
            for now in (NOW, NOW + timedelta(days=2), NOW + timedelta(days=101)):
                expected = world.by_hand(capability, need, now)
                assert paged(store, capability, need, now) == expected, (capability, need, now)
    assert world.by_hand("arithmetic", "careful arithmetic agent", NOW)  # not vacuous


def test_a_late_view_and_a_rebuilt_view_answer_the_same(engine: Engine) -> None:
    world = random_world(3)
    half = len(world.entries) // 2
    viewless = LogStore(engine, "log-discovery")
    append_in_batches(viewless, world.entries[:half])
    store = LogStore(engine, "log-discovery", projections=views(world))  # folds the first half
    append_in_batches(store, world.entries[half:])
    for need in NEEDS:
        assert paged(store, "arithmetic", need, NOW) == world.by_hand("arithmetic", need, NOW)
    with engine.connect() as connection:
        before = list(view_rows(connection, views(world)))
    store.reindex()
    with engine.connect() as connection:
        assert list(view_rows(connection, views(world))) == before
    assert any(row[0] == "view_discovery" for row in before)


def test_only_an_agents_own_registration_names_it(engine: Engine) -> None:
    """An entry in which one key registers another DID names neither: the impostor, though
    credentialed, stays out of discovery, and its victims keep the names they signed."""
    world = random_world(4)
    impostor = Ed25519Signer(b"\x01" * 32)
    world.issue(impostor.did, "arithmetic", NOW - timedelta(days=1), NOW + timedelta(days=9))
    for victim in world.names:
        world.log(impostor, REGISTERED_KIND, victim, {"name": "careful-arithmetic-agent"})
    # a hand-written log: the store's once-per-agent rule would refuse the impostor's entries
    store = LogStore(engine, "log-discovery", once_per_subject=(), projections=views(world))
    append_in_batches(store, world.entries)
    seen = {row[0]: row[1] for c in CAPABILITIES for row in paged(store, c, "careful", NOW)}
    assert seen and impostor.did not in seen
    assert all(name == world.names[did] for did, name in seen.items())
