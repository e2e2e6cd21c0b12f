"""The audit fixtures' whole collaboration, on a real anvil managed by accord itself.

`build_anvil_world(home, port, db_url=None, until=...)` opens everything the way the CLI does
(settings → `connect_chain` → `open_ledger` → `open_market`, the devnet started under `home`),
with one controllable clock starting now (anvil's blocks carry real timestamps), then runs the
steps of tests/audit/conftest.py: onboarding, posting (the budget escrowed on chain), sealed
bids, award, the team's work, and settlement when asked.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from accord.coordinator.service import run_awarded_task
from accord.identity.onboarding import open_onboarding
from accord.ledger.settings import Settings
from accord.ledger.signing import load_or_create_keyfile
from accord.ledger.wiring import connect_chain, open_ledger
from accord.market.settlement import settle_task
from accord.market.wiring import open_market
from tests.audit.conftest import Clock, World, onboard_agents, post_task, sealed_auction


def anvil_settings(home: Path, port: int, db_url: str | None = None) -> Settings:
    env = {
        "ACCORD_HOME": str(home),
        "ACCORD_DEVNET_PORT": str(port),
        "ACCORD_ANCHOR_EVERY": "1000000",
        "ACCORD_ANCHOR_INTERVAL": "1000000",
    }
    if db_url is not None:
        env["ACCORD_DB_URL"] = db_url
    return Settings.from_env(env)


def settings_env(settings: Settings) -> dict[str, str]:
    """The environment that names the same settings to a child process."""
    return {
        "ACCORD_HOME": str(settings.home),
        "ACCORD_DEVNET_PORT": str(settings.devnet_port),
        "ACCORD_DB_URL": settings.db_url,
        "ACCORD_ANCHOR_EVERY": "1000000",
        "ACCORD_ANCHOR_INTERVAL": "1000000",
    }


def open_anvil_world(settings: Settings, clock: Clock | None = None) -> World:
    """Everything opened as the CLI opens it (starting the devnet), on one clock."""
    clock = clock or Clock(datetime.now(UTC).replace(microsecond=0))
    ledger = open_ledger(settings, connect_chain(settings))
    ledger.clock = clock
    assert ledger.anchorer is not None
    ledger.anchorer.clock = clock
    onboarding = open_onboarding(settings, ledger)
    context = open_market(settings, ledger, onboarding)
    context.market.clock = clock
    escrow = context.escrow
    requester = load_or_create_keyfile(settings.keys_dir / "requester.json")
    chains: Any = (ledger.anchorer.chain, escrow.chain, escrow.actions.journal)
    return World(
        settings,
        clock,
        ledger,
        chains[0],
        onboarding,
        chains[1],
        chains[2],
        escrow,
        context.market,
        context,
        {},
        requester,
    )


def build_anvil_world(settings: Settings, *, until: str = "settled") -> World:
    world = open_anvil_world(settings)
    onboard_agents(world)
    post_task(world)
    sealed_auction(world)
    run_awarded_task(world.context, world.task_id)
    world.clock.advance(1)
    if until == "delivered":
        return world
    settle_task(world.market, world.onboarding, world.task_id)
    return world
