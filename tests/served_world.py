"""A real accord service for tests that drive agents over HTTP: uvicorn on 127.0.0.1 in a
thread, over an in-memory world (a SQLite ledger anchored on a `MemoryAnchorChain`, escrow on a
`MemoryEscrowChain`), its clock the real time moved on by the test (`RunningClock`). A hosted
requester (`req`) and a hosted agent credentialed in both capabilities (`ada`) live in its home.

    with open_world(tmp_path, allow_private=True) as world:
        world["url"], world["context"], world["clock"].advance(3600) ...
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from accord.api.app import create_app
from accord.api.routes.deps import ApiConfig
from accord.ledger.anchoring import Anchorer
from accord.ledger.chain import DEVNET_OPERATOR_KEY, MemoryAnchorChain
from accord.ledger.service import Ledger
from accord.ledger.settings import Settings
from accord.ledger.wiring import open_store, operator_signer
from accord.market.escrow import EscrowActions, MemoryEscrowChain, MemoryEscrowJournal, address_of
from accord.market.service import Market
from accord.market.wiring import ChainEscrow, MarketContext
from tests.clocks import RunningClock
from tests.serving import serve

CAPABILITIES = ["arithmetic", "extraction"]


def real_clock() -> datetime:
    return datetime.now(UTC)


@contextmanager
def open_world(tmp_path: Path, *, allow_private: bool) -> Iterator[dict[str, Any]]:
    environ = {"ACCORD_HOME": str(tmp_path / "home")}
    if allow_private:
        environ["ACCORD_ALLOW_PRIVATE_AGENTS"] = "1"
    settings = Settings.from_env(environ)
    assert settings.allow_private_agents is allow_private
    store = open_store(settings)
    operator = operator_signer(settings)
    anchors = MemoryAnchorChain()
    clock = RunningClock()  # the test closes the windows by advancing it
    anchorer = Anchorer(
        store,
        anchors,
        operator,
        clock,
        every_entries=10**9,
        every_seconds=1e12,
        receipt_timeout=0,
    )
    ledger = Ledger(store, operator, clock, anchorer)
    from accord.identity.onboarding import open_onboarding

    onboarding = open_onboarding(settings, ledger)
    escrow_chain = MemoryEscrowChain(address_of(DEVNET_OPERATOR_KEY))
    actions = EscrowActions(escrow_chain, MemoryEscrowJournal(), receipt_timeout=0)
    escrow = ChainEscrow(escrow_chain, actions, DEVNET_OPERATOR_KEY)
    market = Market(ledger, onboarding, escrow)
    context = MarketContext(settings, onboarding, market, escrow)
    registry = onboarding.registry
    requester = registry.new_agent("req", now=real_clock())
    onboarding.register(requester)
    ada = registry.new_agent("ada", now=real_clock())
    outcomes = onboarding.onboard(ada, CAPABILITIES, item_count=5)
    assert all(o.exam.passed for o in outcomes)
    app = create_app(
        settings,
        config=ApiConfig(rate=1000.0, burst=10_000.0),
        context=context,
        anchors=anchors,
        escrow_chain=escrow_chain,
    )
    with serve(app) as url:
        yield {
            "url": url,
            "context": context,
            "anchors": anchors,
            "escrow_chain": escrow_chain,
            "req": registry.signer(requester),
            "ada": registry.signer(ada),
            "tmp": tmp_path,
            "clock": clock,
        }
