"""A settlement that cannot pay one contributor pays everyone else, on a real anvil (issue 41,
item 5): the contributor that bound no payout account has its payout held by TaskEscrow under
the task, nobody else's credit; once it binds one, settling again releases it there, once; the
task audits against the chain at each stage.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from accord.audit.checks import audit_task
from accord.coordinator.service import run_awarded_task
from accord.identity.agents import AgentRecord
from accord.ledger.devnet import find_free_port
from accord.ledger.events import Entry
from accord.ledger.settings import Settings
from accord.ledger.wiring import devnet_for
from accord.market.settlement import SETTLEMENT_RELEASED, logged_settlement, settle_task
from tests.audit.conftest import World, onboard_agents, post_task, sealed_auction
from tests.integration.anvil_world import anvil_settings, open_anvil_world


@pytest.fixture
def settings(tmp_path: Path) -> Iterator[Settings]:
    """Settings of a fresh home whose managed devnet is always stopped afterwards."""
    settings = anvil_settings(tmp_path / "home", find_free_port())
    yield settings
    devnet_for(settings).down()


def audited(world: World) -> str:
    """The escrow step's summary of a passing audit against the chain."""
    assert world.ledger.anchorer is not None
    world.ledger.anchorer.anchor_latest()
    report = audit_task(
        world.ledger.store, world.task_id, anchors=world.anchors, escrow=world.escrow_chain
    )
    assert report.ok, [s.to_json() for s in report.steps]
    return report.steps[6].detail


def delivered_with_one_unbound(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> tuple[World, str]:
    """A delivered task on anvil whose team's first contributor to bind a payout account did
    not (its binding skipped while the team ran): the world and that contributor's DID."""
    world = open_anvil_world(settings)
    onboard_agents(world)
    post_task(world)
    sealed_auction(world)
    onboarding = world.onboarding
    real = onboarding.bind_payout
    skipped: list[str] = []

    def bind_payout(agent: AgentRecord, chain_id: int) -> str:
        if not skipped:
            skipped.append(agent.did)
            return ""
        return real(agent, chain_id)

    monkeypatch.setattr(onboarding, "bind_payout", bind_payout)
    run_awarded_task(world.context, world.task_id)
    monkeypatch.undo()
    [unbound] = skipped
    world.clock.advance(1)
    return world, unbound


@pytest.mark.devnet
def test_an_unbound_contributors_payout_is_held_on_chain_and_released_once_it_binds(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    world, unbound = delivered_with_one_unbound(settings, monkeypatch)
    onboarding = world.onboarding
    escrow = world.escrow
    credits_before = {
        did: escrow.credit(address)
        for did in world.signers()
        if (address := onboarding.payout_address(did, escrow.chain_id())) is not None
    }

    outcome = settle_task(world.market, onboarding, world.task_id)
    owed = outcome.payouts[unbound]
    assert owed > 0 and unbound not in outcome.payees
    assert escrow.deposit_of(world.task_id) == (world.market.task(world.task_id).spec.budget, False)
    assert escrow.chain.held(world.task_id) == owed
    for did, address in outcome.payees.items():
        assert escrow.credit(address) == credits_before.get(did, 0) + outcome.payouts[did]
    body = logged_settlement(world.market, world.task_id)
    assert body is not None and body["held"] == {unbound: str(owed)}
    assert "1 payouts held in the escrow" in audited(world)
    assert "1 still held" in audited(world)

    address = onboarding.bind_payout(onboarding.registry.get(unbound), escrow.chain_id())
    assert settle_task(world.market, onboarding, world.task_id).already
    assert escrow.chain.held(world.task_id) == 0
    assert escrow.credit(address) == owed
    settle_task(world.market, onboarding, world.task_id)  # nothing left to release
    assert escrow.credit(address) == owed
    released = world.ledger.store.find(kind=SETTLEMENT_RELEASED, subject=world.task_id, limit=9)
    assert len(released) == 1
    assert "1 released to the address each bound" in audited(world)


class Crash(Exception):
    """The service stopping between a release on chain and its entry in the log."""


@pytest.mark.devnet
def test_a_release_made_before_a_crash_is_not_made_again_after_the_owner_binds_elsewhere(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    world, unbound = delivered_with_one_unbound(settings, monkeypatch)
    onboarding = world.onboarding
    escrow = world.escrow
    owed = settle_task(world.market, onboarding, world.task_id).payouts[unbound]
    first = onboarding.bind_payout(onboarding.registry.get(unbound), escrow.chain_id())

    ledger = world.market.ledger
    real_append = ledger.append

    def append(*args: object, **kwargs: object) -> object:
        if args[1] == SETTLEMENT_RELEASED:
            raise Crash
        return real_append(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ledger, "append", append)
    with pytest.raises(Crash):
        settle_task(world.market, onboarding, world.task_id)
    monkeypatch.undo()
    assert escrow.credit(first) == owed

    elsewhere = "0x" + "ab" * 20  # the owner bound another address since
    monkeypatch.setattr(onboarding, "payout_address", lambda did, chain_id: elsewhere)
    settle_task(world.market, onboarding, world.task_id)
    assert escrow.credit(elsewhere) == 0 and escrow.credit(first) == owed
    assert escrow.chain.held(world.task_id) == 0
    [released] = world.ledger.store.find(kind=SETTLEMENT_RELEASED, subject=world.task_id)
    # logged with the address it went to
    assert Entry.from_bytes(released.data).event.body["address"] == first
    monkeypatch.undo()
    assert "1 released to the address each bound" in audited(world)
