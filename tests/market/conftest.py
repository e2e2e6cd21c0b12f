"""A `Market` over a real SQLite ledger, real onboarding and the in-memory escrow chain, with
one controllable clock shared by the ledger, the exams and the market."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from accord.identity.agents import AgentRecord
from accord.identity.onboarding import Onboarding, open_onboarding
from accord.ledger.chain import DEVNET_OPERATOR_KEY
from accord.ledger.service import Ledger
from accord.ledger.settings import Settings
from accord.ledger.signing import Ed25519Signer
from accord.ledger.wiring import open_ledger
from accord.market.escrow import EscrowActions, MemoryEscrowChain, MemoryEscrowJournal, address_of
from accord.market.service import Market
from accord.market.wiring import DEVNET_REQUESTER_KEY, ChainEscrow
from tests.clocks import Clock

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
OPERATOR_KEY = DEVNET_OPERATOR_KEY
REQUESTER_KEY = DEVNET_REQUESTER_KEY
REQUESTER_ADDRESS = address_of(REQUESTER_KEY)


@pytest.fixture
def clock() -> Clock:
    return Clock(START)


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.from_env({"ACCORD_HOME": str(tmp_path / "home")})


@pytest.fixture
def ledger(settings: Settings, clock: Clock) -> Ledger:
    ledger = open_ledger(settings)
    ledger.clock = clock  # before onboarding: its ExamService takes the ledger's clock
    return ledger


@pytest.fixture
def onboarding(settings: Settings, ledger: Ledger) -> Onboarding:
    return open_onboarding(settings, ledger)


@pytest.fixture
def escrow_chain() -> MemoryEscrowChain:
    return MemoryEscrowChain(address_of(OPERATOR_KEY))


@pytest.fixture
def escrow_actions(escrow_chain: MemoryEscrowChain) -> EscrowActions:
    return EscrowActions(escrow_chain, MemoryEscrowJournal(), receipt_timeout=0)


@pytest.fixture
def escrow(escrow_chain: MemoryEscrowChain, escrow_actions: EscrowActions) -> ChainEscrow:
    return ChainEscrow(escrow_chain, escrow_actions, OPERATOR_KEY)


@pytest.fixture
def market(ledger: Ledger, onboarding: Onboarding, escrow: ChainEscrow, clock: Clock) -> Market:
    return Market(ledger, onboarding, escrow, clock=clock)


@pytest.fixture
def requester(onboarding: Onboarding, clock: Clock) -> Ed25519Signer:
    """A registered agent (no credentials) who posts tasks."""
    record = onboarding.registry.new_agent("requester", now=clock())
    return onboarding.registry.signer(record)


Bidder = tuple[AgentRecord, Ed25519Signer]


@pytest.fixture
def make_bidder(onboarding: Onboarding, clock: Clock) -> Callable[..., Bidder]:
    """`make_bidder(name)`: a reference agent onboarded in arithmetic (5 items), so eligible;
    `make_bidder(name, onboard=False)`: a fresh agent with no credentials."""

    def make(name: str, *, onboard: bool = True) -> Bidder:
        record = onboarding.registry.new_agent(name, now=clock())
        if onboard:
            [outcome] = onboarding.onboard(record, ["arithmetic"], item_count=5)
            assert outcome.exam.passed and outcome.credential_id is not None
        return record, onboarding.registry.signer(record)

    return make
