"""A whole, real collaboration in process (no anvil): a SQLite ledger anchored on a
`MemoryAnchorChain`, real onboarding of reference agents, a `Market` whose escrow is a
`MemoryEscrowChain` behind `EscrowActions`, one controllable clock; then post, sealed bids,
award, the team conversation (with a nested sub-team), settlement and the final anchor.

`build_world(home, until=...)` stops where a test needs it; `rebuild_log` is the powerful
operator rewriting history: a fresh log holding the same entries with some events changed and
re-signed, anchored on a fresh chain, so that only the semantic checks can catch it.
"""

from __future__ import annotations

import copy
import re
import secrets
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

import pytest

from accord.coordinator.service import run_awarded_task
from accord.identity.agents import AgentRecord
from accord.identity.onboarding import Onboarding, open_onboarding
from accord.ledger.anchoring import Anchorer
from accord.ledger.chain import DEVNET_OPERATOR_KEY, MemoryAnchorChain
from accord.ledger.checkpoint import take_checkpoint
from accord.ledger.database import make_engine
from accord.ledger.events import Entry, Event, sign_event
from accord.ledger.service import Ledger
from accord.ledger.settings import Settings
from accord.ledger.signing import Ed25519Signer, Signer, load_or_create_keyfile
from accord.ledger.store import LogStore
from accord.ledger.wiring import open_store, operator_signer
from accord.market.escrow import EscrowActions, MemoryEscrowChain, MemoryEscrowJournal, address_of
from accord.market.money import Wei, parse_amount
from accord.market.sealed import commit_bid, reveal_bid
from accord.market.service import Market
from accord.market.settlement import settle_task
from accord.market.strategies import cost_plus_margin
from accord.market.wiring import DEVNET_REQUESTER_KEY, ChainEscrow, MarketContext
from tests.clocks import Clock
from tests.specs import invoice_spec

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
OPERATOR_KEY = DEVNET_OPERATOR_KEY
REQUESTER_KEY = DEVNET_REQUESTER_KEY

#: The demo's reference agents (mallory, who answers at random, adds nothing here).
AGENTS = (
    ("ada", ("arithmetic", "extraction")),
    ("linus", ("arithmetic", "extraction")),
    ("grace", ("extraction", "python")),
    ("hopper", ("arithmetic",)),
)
COSTS = {"ada": "0.12eth", "linus": "0.10eth"}
MARGIN = Fraction(1, 5)

Stage = Literal["awarded", "delivered", "settled"]


@dataclass
class World:
    settings: Settings
    clock: Clock
    ledger: Ledger
    anchors: MemoryAnchorChain
    onboarding: Onboarding
    escrow_chain: MemoryEscrowChain
    journal: MemoryEscrowJournal
    escrow: ChainEscrow
    market: Market
    context: MarketContext
    agents: dict[str, AgentRecord]
    requester: Ed25519Signer
    task_id: str = ""
    bid_prices: dict[str, Wei] = field(default_factory=dict)
    before_settlement: MemoryEscrowChain | None = None

    @property
    def db_path(self) -> Path:
        return Path(self.settings.db_url.removeprefix("sqlite:///"))

    def signer(self, name_or_did: str) -> Signer:
        if name_or_did == self.ledger.operator.did:
            return self.ledger.operator
        registry = self.onboarding.registry
        return registry.signer(registry.get(name_or_did))

    def signers(self) -> dict[str, Signer]:
        """Every key the fixture holds, by DID: the operator's and each agent's."""
        out: dict[str, Signer] = {self.ledger.operator.did: self.ledger.operator}
        for record in self.agents.values():
            out[record.did] = self.onboarding.registry.signer(record)
        return out


def open_world(
    home: Path, clock: Clock | None = None, env: Mapping[str, str] | None = None
) -> World:
    """The market's components over `home` (fresh or a copy), nothing done yet; `env` adds
    settings (ACCORD_DB_URL for PostgreSQL)."""
    clock = clock or Clock(START)
    settings = Settings.from_env({"ACCORD_HOME": str(home), **(env or {})})
    store = open_store(settings)
    operator = operator_signer(settings)
    anchors = MemoryAnchorChain()
    anchorer = Anchorer(
        store, anchors, operator, clock, every_entries=10**9, every_seconds=1e12, receipt_timeout=0
    )
    ledger = Ledger(store, operator, clock, anchorer)
    onboarding = open_onboarding(settings, ledger)
    escrow_chain = MemoryEscrowChain(address_of(OPERATOR_KEY))
    journal = MemoryEscrowJournal()
    actions = EscrowActions(escrow_chain, journal, receipt_timeout=0)
    escrow = ChainEscrow(escrow_chain, actions, OPERATOR_KEY)
    market = Market(ledger, onboarding, escrow, clock=clock)
    context = MarketContext(settings, onboarding, market, escrow)
    requester = load_or_create_keyfile(settings.keys_dir / "requester.json")
    return World(
        settings,
        clock,
        ledger,
        anchors,
        onboarding,
        escrow_chain,
        journal,
        escrow,
        market,
        context,
        {},
        requester,
    )


def onboard_agents(world: World) -> None:
    for name, capabilities in AGENTS:
        record = world.onboarding.registry.new_agent(name, now=world.clock(), runtime="reference")
        outcomes = world.onboarding.onboard(record, list(capabilities), item_count=5)
        assert all(o.credential_id is not None for o in outcomes), name
        world.agents[name] = record
        world.clock.advance(1)


def post_task(world: World) -> str:
    spec = invoice_spec()
    task = world.market.post(world.requester, spec, requester_key=REQUESTER_KEY)
    world.task_id = task.task_id
    return task.task_id


def sealed_auction(world: World, *, bypass: Mapping[str, bool] | None = None) -> None:
    """Commit, reveal (the clock past each window) and award. Bidders named in `bypass` are
    logged directly by the operator, skipping the market's admission checks."""
    task = world.market.task(world.task_id)
    salts: dict[str, bytes] = {}
    for name, cost in COSTS.items():
        price = cost_plus_margin(parse_amount(cost), MARGIN, task.spec.budget)
        assert price is not None
        signer = world.signer(name)
        salt = secrets.token_bytes(32)
        commitment = commit_bid(signer, task.task_id, price, salt)
        if bypass and bypass.get(name):
            exam_score = world.market.exam_score(signer.did, ("arithmetic",))
            world.ledger.append(
                world.ledger.operator,
                "bid.committed",
                subject=task.task_id,
                body={"commitment": commitment.to_json(), "exam_score": str(exam_score)},
            )
        else:
            world.market.commit(commitment)
        salts[name] = salt
        world.bid_prices[name] = price
        world.clock.advance(1)
    world.clock.set(task.bidding_ends)
    for name, salt in salts.items():
        world.market.reveal(
            reveal_bid(world.signer(name), task.task_id, world.bid_prices[name], salt)
        )
        world.clock.advance(1)
    world.clock.set(task.reveal_ends)
    world.market.award(task.task_id)
    world.clock.advance(1)


def build_world(home: Path, *, until: Stage = "settled") -> World:
    world = open_world(home)
    onboard_agents(world)
    post_task(world)
    sealed_auction(world)
    if until == "awarded":
        return world
    run_awarded_task(world.context, world.task_id)
    world.clock.advance(1)
    if until == "delivered":
        return world
    world.before_settlement = copy.deepcopy(world.escrow_chain)
    settle_task(world.market, world.onboarding, world.task_id)
    world.clock.advance(1)
    assert world.ledger.anchorer is not None
    world.ledger.anchorer.anchor_latest()
    return world


# -- copies and rewrites ---------------------------------------------------------------------


def copy_db(world: World, destination: Path) -> Path:
    """A consistent copy of the world's SQLite log (sqlite3 backup: WAL included)."""
    source = sqlite3.connect(world.db_path)
    target = sqlite3.connect(destination)
    with target:
        source.backup(target)
    source.close()
    target.close()
    return destination


def open_copy(world: World, path: Path) -> LogStore:
    return LogStore(make_engine(f"sqlite:///{path}"), world.ledger.log_id)


def sql(path: Path, statement: str, params: tuple[Any, ...] = ()) -> None:
    connection = sqlite3.connect(path)
    with connection:
        connection.execute(statement, params)
    connection.close()


def entries_of(store: LogStore) -> list[Entry]:
    return [Entry.from_bytes(stored.data) for stored in store.entries(0, store.size())]


Rewrite = Callable[[int, Event], Event | None]
"""Given (index, event): the event to log instead (None drops the entry)."""


def rebuild_log(
    world: World, path: Path, rewrite: Rewrite, *, extra: Iterator[Event] | None = None
) -> tuple[LogStore, MemoryAnchorChain]:
    """A powerful operator rewriting history: a fresh log at `path` (same log id) with every
    entry of the world's log, events changed by `rewrite` re-signed with the key of their
    actor (every key is held here); each actor's later seqs are renumbered (and re-signed)
    where a moved event would make them not grow. The result is checkpointed and anchored on
    a fresh MemoryAnchorChain, so signatures (1) and anchors (2) hold."""
    keys = world.signers()
    last_seq: dict[str, int] = {}
    rebuilt: list[Entry] = []
    for index, entry in enumerate(entries_of(world.ledger.store)):
        event = rewrite(index, entry.event)
        if event is None:
            continue
        seq = event.seq
        if seq <= last_seq.get(event.actor, -1):
            seq = last_seq[event.actor] + 1
        if seq != event.seq:
            event = Event(event.kind, event.actor, seq, event.at, event.subject, event.body)
        last_seq[event.actor] = seq
        if event == entry.event and event.body == entry.event.body:
            rebuilt.append(entry)
        else:
            rebuilt.append(sign_event(keys[event.actor], event))
    store = LogStore(make_engine(f"sqlite:///{path}"), world.ledger.log_id)
    store.append_batch(rebuilt)
    chain = MemoryAnchorChain()
    operator = world.ledger.operator
    Anchorer(store, chain, operator, world.clock, receipt_timeout=0).anchor_latest()
    take_checkpoint(store, operator, world.clock())
    return store, chain


def with_body(event: Event, body: Mapping[str, Any]) -> Event:
    return Event(event.kind, event.actor, event.seq, event.at, event.subject, dict(body))


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    """The honest collaboration, built once per module: treat it as read-only."""
    return build_world(tmp_path_factory.mktemp("world") / "home")


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    return tmp_path


def assert_deliverable_section(
    section: str, deliverable: Mapping[str, Any], names: Mapping[str, str]
) -> None:
    """The deliverable section of an audit page (the explorer's or `audit --html`) shows each
    part, in order, with its capability, producer, planned member and the commitment to its
    output: the page is public, the output is not."""
    rows = re.findall(r'<tr class="part" data-part="([^"]+)">(.*?)</tr>', section, re.S)
    assert [r[0] for r in rows] == [p["part"] for p in deliverable["parts"]]
    for (_, row), part in zip(rows, deliverable["parts"], strict=True):
        assert part["capability"] in row
        producer = re.search(r'class="producer"><span class="agent" title="([^"]+)">(\w+)<', row)
        assert producer is not None
        assert producer.groups() == (part["producer"], names[part["producer"]])
        planned = deliverable["plan"]["assignments"][part["part"]]
        assert f'title="{planned}">{names[planned]}<' in row
        assert "output" not in part
        assert "sealed until paid" in row and part["output_sha256"][:16] in row
    assert 'id="deliverable-plan"' in section
