"""The discovery view (`accord.market.discovery`) against a ranking of every agent done by hand, on
SQLite and PostgreSQL: names that share words with capabilities and needs, agents holding
several capabilities, revoked, expired and not-yet-valid credentials, agents credentialed
before they registered or never registered, reputations in each capability from settled
track records (repeated pairs, circles of requesters and agents) and forfeits. Every page,
followed to the end, equals the hand ranking; so does a view attached late (folding what a
view-less writer appended) and a view rebuilt from the log. On SQLite, a page's plan walks the
ranking index rather than sorting every holder."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from accord.identity.credential_views import CredentialView
from accord.identity.credentials import REVOCATION_EVENT_KIND
from accord.identity.registration import REGISTERED_KIND
from accord.identity.status import format_timestamp
from accord.ledger.database import make_engine
from accord.ledger.events import Entry, make_entry
from accord.ledger.signing import Ed25519Signer
from accord.ledger.store import LogStore
from accord.market.discovery import DiscoveryView, description, ranked_page, relevance
from accord.market.money import Wei
from accord.market.reputation import (
    Forfeit,
    PartScore,
    Payment,
    SettledWork,
    TrackRecords,
    fold_track_records,
    work_payments,
)
from accord.market.tasks import (
    SETTLEMENT_COMPUTED,
    TASK_AWARDED,
    TASK_POSTED,
    TASK_SETTLED,
    TaskSpec,
)
from accord.market.views import ReputationView, TaskView
from accord.market.work import Part
from tests.ledger.conftest import postgres_schema_url
from tests.view_rows import view_rows

NOW = datetime(2026, 6, 1, tzinfo=UTC)
WEEK = timedelta(days=7)
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
    works: list[SettledWork] = field(default_factory=list)
    forfeits: list[Forfeit] = field(default_factory=list)
    payments: list[Payment] = field(default_factory=list)
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

    def settle(
        self,
        requester: str,
        parts: list[tuple[str, str, Fraction | None]],
        paid: dict[str, int] | None = None,
    ) -> None:
        """A `settlement.computed` paying `paid` (wei by player), then the `task.settled`
        recording `parts` (producer, capability, score) for `requester`."""
        subject = f"task-{len(self.entries)}"
        self.log(
            self.operator,
            SETTLEMENT_COMPUTED,
            subject,
            {"payouts": {did: str(wei) for did, wei in (paid or {}).items()}},
        )
        scored = tuple(PartScore(f"p{k}", c, did, s) for k, (did, c, s) in enumerate(parts))
        work = SettledWork(len(self.entries), subject, requester, scored)
        self.works.append(work)
        self.payments += work_payments(work, {d: w for d, w in (paid or {}).items() if w})
        self.log(self.operator, TASK_SETTLED, subject, {"track_record": work.to_json()})

    def forfeit(self, requester: Ed25519Signer, dids: list[str], needs: list[str]) -> None:
        """A task needing `needs`, posted, then awarded with `dids` forfeited."""
        subject = f"task-{len(self.entries)}"
        parts = tuple(Part(f"p{k}", c, {}) for k, c in enumerate(needs))
        spec = TaskSpec("t", "", parts, Wei(1), timedelta(seconds=9), timedelta(seconds=9), WEEK)
        self.log(requester, TASK_POSTED, subject, {"task_id": subject, "spec": spec.to_json()})
        self.forfeits += [Forfeit(len(self.entries), did, spec.capabilities) for did in dids]
        self.log(self.operator, TASK_AWARDED, subject, {"forfeited": dids})

    def records(self) -> TrackRecords:
        return fold_track_records(self.works, self.forfeits, self.payments)

    def by_hand(self, capability: str, need: str, now: datetime) -> list[tuple[Any, ...]]:
        """Every registered holder of `capability` at `now`, ranked as discovery promises."""
        held: dict[str, set[str]] = {}
        for credential_id, (did, held_capability, start, end) in self.credentials.items():
            if credential_id not in self.revoked and start <= now < end:
                held.setdefault(did, set()).add(held_capability)
        ranked = []
        records = self.records()
        for did, name in self.names.items():
            if capability not in held.get(did, set()):
                continue
            capabilities = tuple(sorted(held[did]))
            text = description(name, capabilities)
            standing = records.reputation(did, capability)
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
    # requesters from outside and from among the agents, so that pairs repeat and circles close
    requesters = [Ed25519Signer(rng.randbytes(32)).did for _ in range(3)]
    busy = rng.sample(agents, 12)  # they work for one another, and for the outsiders
    requesters += [a.did for a in busy[:6]]
    for _ in range(40):
        requester = rng.choice(requesters)
        chosen = rng.sample([a for a in busy if a.did != requester], 2)
        parts = [
            (
                a.did,
                rng.choice(CAPABILITIES),
                rng.choice([None, *(Fraction(q, 4) for q in range(5))]),
            )
            for a in chosen
            for _ in range(rng.randint(1, 3))
        ]
        paid = {a.did: rng.choice([0, 10**16, 10**17, 10**18]) for a in chosen}
        world.settle(requester, parts, paid)
    for _ in range(3):
        needs = rng.sample(CAPABILITIES, rng.randint(1, 2))
        world.forfeit(agents[0], [a.did for a in rng.sample(agents, 5)], needs)
    return world


def views(world: World) -> list[Any]:
    return [
        TaskView(),
        CredentialView(world.operator.did),
        ReputationView(),
        DiscoveryView(world.operator.did),
    ]


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
    records = world.records()
    units = [(did, u) for (did, _), found in records.units.items() for u in found]
    assert any(records.weight(did, u) == 0 for did, u in units)  # a circle's own work
    assert any(u.k > 1 and records.weight(did, u) > 0 for did, u in units)  # a repeated pair
    assert any(records.forfeits.values())


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


def test_a_settlement_that_closes_a_circle_rewrites_every_member(engine: Engine) -> None:
    """a pays b, b pays c: each worker rises. Then c pays a, closing the circle a -> b -> c
    -> a. The last settlement names only a as producer, yet b's and c's rows fall back to the
    prior, as the fold of the log says: their work now stayed within their circle."""
    world = World(Ed25519Signer(b"\x07" * 32))
    a, b, c = (Ed25519Signer(bytes([k]) * 32) for k in (1, 2, 3))
    for agent, name in ((a, "a"), (b, "b"), (c, "c")):
        world.register(agent, name)
        world.issue(agent.did, "arithmetic", NOW - WEEK, NOW + WEEK)
    store = LogStore(engine, "log-discovery", projections=views(world))
    outsider = Ed25519Signer(b"\x09" * 32).did  # a and b paid it 0.1 ether: a standing of 1/2
    for requester in (a, b):
        world.settle(requester.did, [(outsider, "arithmetic", None)], {outsider: 10**17})
    world.settle(a.did, [(b.did, "arithmetic", Fraction(1))])  # a pays b
    world.settle(b.did, [(c.did, "arithmetic", Fraction(1))])  # b pays c
    append_in_batches(store, world.entries, size=1)
    ranked = {row[0]: row[3] for row in paged(store, "arithmetic", "", NOW)}
    assert ranked[b.did] == ranked[c.did] == Fraction(3, 5) and ranked[a.did] == Fraction(1, 2)
    done = len(world.entries)
    world.settle(c.did, [(a.did, "arithmetic", Fraction(1))])  # c pays a: the circle closes
    append_in_batches(store, world.entries[done:], size=1)
    assert paged(store, "arithmetic", "", NOW) == world.by_hand("arithmetic", "", NOW)
    assert {row[0]: row[3] for row in paged(store, "arithmetic", "", NOW)} == dict.fromkeys(
        (a.did, b.did, c.did), Fraction(1, 2)
    )


def test_a_circle_that_swallows_a_requesters_payments_rewrites_whom_it_hired(
    engine: Engine,
) -> None:
    """r pays b, then hires c: c rises by r's standing, earned by paying b. Then b pays r,
    closing the circle r <-> b: what r paid b came back, so r was fresh when it hired c, and
    c's row falls back to the prior, though c is neither in that settlement nor the circle."""
    world = World(Ed25519Signer(b"\x07" * 32))
    r, b, c = (Ed25519Signer(bytes([k]) * 32) for k in (1, 2, 3))
    for agent, name in ((r, "r"), (b, "b"), (c, "c")):
        world.register(agent, name)
        world.issue(agent.did, "arithmetic", NOW - WEEK, NOW + WEEK)
    store = LogStore(engine, "log-discovery", projections=views(world))
    world.settle(r.did, [(b.did, "arithmetic", None)], {b.did: 10**17})  # r pays b
    world.settle(r.did, [(c.did, "arithmetic", Fraction(1))], {c.did: 10**17})  # r pays c
    append_in_batches(store, world.entries, size=1)
    ranked = {row[0]: row[3] for row in paged(store, "arithmetic", "", NOW)}
    assert ranked[c.did] == Fraction(3, 5)  # (1 + 1/2) / (2 + 1/2)
    done = len(world.entries)
    world.settle(b.did, [(r.did, "arithmetic", None)], {r.did: 10**17})  # b pays r
    append_in_batches(store, world.entries[done:], size=1)
    assert paged(store, "arithmetic", "", NOW) == world.by_hand("arithmetic", "", NOW)
    assert {row[0]: row[3] for row in paged(store, "arithmetic", "", NOW)}[c.did] == Fraction(1, 2)


@pytest.mark.parametrize(
    ("need", "index", "sorts"),
    [
        ("careful arithmetic agent", "ix_view_discovery_by_length", 1),  # base and other words
        ("arithmetic agent", "ix_view_discovery_by_length", 0),  # base words only
        ("zzz", "ix_view_discovery_by_reputation", 1),  # other words only
        ("", "ix_view_discovery_by_reputation", 0),
    ],
)
def test_a_page_walks_the_ranking_index_on_sqlite(
    tmp_path: Path, need: str, index: str, sorts: int
) -> None:
    """SQLite's plan of a page: the holders sharing no other word of the need come from a
    range of the ranking index, in its order (no sort of every holder); only the holders
    matched through the word table, when the need has such words, are sorted."""
    engine = make_engine(f"sqlite:///{tmp_path / 'log.db'}")
    world = random_world(1)
    store = LogStore(engine, "log-discovery", projections=views(world))
    append_in_batches(store, world.entries)
    statements: list[tuple[str, Any]] = []

    def keep(_c: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        statements.append((statement, parameters))

    with engine.connect() as connection:
        event.listen(connection, "before_cursor_execute", keep)
        ranked_page(connection, "arithmetic", need, NOW, offset=0, size=3)
        event.remove(connection, "before_cursor_execute", keep)
        statement, parameters = next(s for s in statements if "UNION ALL" in s[0])
        plan = [
            row[3]
            for row in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
        ]
    engine.dispose()
    assert any(f"USING INDEX {index} (capability=?)" in step for step in plan), plan
    assert sum("TEMP B-TREE" in step for step in plan) == sorts, plan
