"""A rejected review decided by a panel of independent agents (`accord.market.disputes`), in
the in-process world of `tests.audit.conftest`: the requester's bond, the draw from a block
hash, panelists committing then revealing their own signed votes, one that stays silent
replaced, the majority deciding, the loser's stake paying the coherent panelists, and the
audit replaying the draw, the votes and the money."""

from __future__ import annotations

import copy
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

import accord.market.disputes as disputes
from accord.ledger.events import Event
from accord.market.disputes import log_events, panel_relevant_events, team_of
from accord.market.errors import SettlementWaits, TaskError, WorkError
from accord.market.panel import (
    COMMIT_WINDOW_S,
    PANEL_DRAWN,
    panel_pay,
    pool_at,
)
from accord.market.payouts import amount_paid, dispute_fee
from accord.market.settlement import SETTLEMENT_COMPUTED, logged_settlement, settle_task
from accord.market.tasks import spec_from_request
from accord.market.work import ReviewCheck
from tests.audit.conftest import REQUESTER_KEY, rebuild_log, with_body
from tests.market.panelists import jurors, mine, reveal, vote
from tests.market.test_check_io import (
    REVIEW,
    audit,
    delivered_world,
    finish,
    logged_checks,
)
from tests.specs import invoice_request, invoice_spec_with


def test_a_requester_that_rejects_correct_work_loses_its_bond_to_the_coherent_panelists(
    tmp_path: Path,
) -> None:
    world = delivered_world(tmp_path / "home", invoice_spec_with(REVIEW))
    market, task_id = world.market, world.task_id
    task = market.task(task_id)
    assert task.price is not None
    reason = "the total is not the invoice's"

    # too few independent agents: no panel could decide it, so the rejection is refused
    with pytest.raises(TaskError, match="no evaluator"):
        market.review(world.requester, task_id, "looks-right", "reject", reason)
    panelists = jurors(world, 4)
    # the pool read from the kinds it needs (and each agent's latest entry) is the whole log's
    whole, some = log_events(world.ledger), panel_relevant_events(world.ledger)
    assert len(some) < len(whole)
    pools = [
        pool_at(
            events,
            operator=world.ledger.operator.did,
            requester=task.requester,
            team=team_of(task, None),
            capabilities=("extraction",),
            before=world.ledger.store.size(),
            at=world.clock(),
        )
        for events in (whole, some)
    ]
    assert pools[0] == pools[1] and set(pools[0]) == set(panelists)

    # the price leaves no room for the fee: the requester bonds it from its own account
    fee = dispute_fee(task.price)
    spare = task.spec.budget - task.price
    assert spare >= fee  # the invoice task's two bidders leave room; bonding is tested below
    index = market.review(world.requester, task_id, "looks-right", "reject", reason)
    after = logged_review_body(world, index)["after_block"]
    assert after == world.escrow_chain.block_number()

    world.clock.advance(3600)  # the review window closes
    with pytest.raises(SettlementWaits, match=f"block {after + 1}"):
        settle_task(market, world.onboarding, task_id)
    mine(world)  # the chain moves on
    with pytest.raises(SettlementWaits, match="is voting"):
        settle_task(market, world.onboarding, task_id)
    [drawn] = market.ledger.store.find(kind=PANEL_DRAWN, subject=task_id, limit=5)
    check = next(c for c in task.spec.requester_checks if c.check_id == "looks-right")
    assert isinstance(check, ReviewCheck)
    panel = market.panels.draw(task, check)
    seats = panel.panel.seats
    assert len(seats) == 3 and set(seats) < set(panelists)
    [reserve] = panel.panel.reserves
    # a second settler that looked before the first logged its draw (settlers draw before
    # they take the write lock) logs no second panel, and reads the first one's
    calls: list[int] = []

    def first_look_finds_none(*args: Any) -> Any:
        calls.append(1)
        return None if len(calls) == 1 else real_current(*args)

    real_current = disputes.current_panel
    with pytest.MonkeyPatch.context() as racing:
        racing.setattr(disputes, "current_panel", first_look_finds_none)
        again = market.panels.draw(task, check)
    assert again.panel.seats == seats
    assert len(market.ledger.store.find(kind=PANEL_DRAWN, subject=task_id, limit=5)) == 1

    # a stranger holds no seat; two seats vote for the team, one stays silent
    with pytest.raises(TaskError, match="holds no seat"):
        vote(world, panelists[reserve], task_id, "team")
    first, second, silent = seats
    votes = {did: vote(world, panelists[did], task_id, "team") for did in (first, second)}
    with pytest.raises(TaskError, match="revealed once every seat"):
        reveal(world, panelists[first], task_id, *votes[first])
    world.clock.advance(COMMIT_WINDOW_S)
    with pytest.raises(SettlementWaits, match="is voting"):
        settle_task(market, world.onboarding, task_id)  # the silent seat is replaced
    votes[reserve] = vote(world, panelists[reserve], task_id, "requester")
    for did, (verdict, salt) in votes.items():
        reveal(world, panelists[did], task_id, verdict, salt)

    outcome = settle_task(market, world.onboarding, task_id)
    finish(world)
    review = logged_checks(world)["looks-right"]
    assert review["passed"] is True
    dispute = review["record"]["dispute"]
    assert dispute["winner"] == "team"
    assert dispute["panel"]["seats"] == [first, second, reserve]
    assert dispute["panel"]["replaced"] == {silent: reserve}
    assert sorted(dispute["panel"]["coherent"]) == sorted([first, second])
    body = logged_settlement(market, task_id)
    assert body is not None
    shares = panel_pay(fee, [first, second, reserve], [first, second])
    assert body["panel_payouts"] == {did: str(w) for did, w in sorted(shares.items())}
    # the team is paid in full and gets the incoherent seat's share of the bond
    assert outcome.amount == task.price + (fee - sum(shares.values()))
    assert outcome.refund == task.spec.budget - task.price - fee
    assert body["held"][first] == str(shares[first])  # no payout account bound: held
    report = audit(world)
    assert report.ok, [s.to_json() for s in report.steps]
    assert drawn.index == dispute["panel"]["drawn"]

    # the operator re-draws the panel its own way (the reserve seated first) and re-signs
    def redraw(index: int, event: Event) -> Event:
        if index != drawn.index:
            return event
        return with_body(
            event, {**event.body, "seats": [reserve, first, second], "reserves": [silent]}
        )

    store, anchors = rebuild_log(world, tmp_path / "redrawn.db", redraw)
    forged = audit(world, store, anchors)
    assert not forged.ok and forged.first_failure is not None
    assert "not the one the rule draws" in forged.first_failure.detail

    # or passes the panel by: the settlement says the operator's judge decided it alone
    [computed] = market.ledger.store.find(kind=SETTLEMENT_COMPUTED, subject=task_id, limit=1)

    def judge_alone(index: int, event: Event) -> Event:
        if index != computed.index:
            return event
        body = copy.deepcopy(dict(event.body))
        for check in body["checks"]:
            if check["id"] == "looks-right":
                check["record"]["dispute"] = {"model": "m", "exchange": "0" * 64, "winner": "team"}
        body.pop("panel_payouts")
        return with_body(event, body)

    store, anchors = rebuild_log(world, tmp_path / "alone.db", judge_alone)
    forged = audit(world, store, anchors)
    assert not forged.ok and forged.first_failure is not None
    assert "panelists' pay recomputes" in forged.first_failure.detail


def test_a_lone_bidders_review_is_disputed_through_the_requesters_bond(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One bidder: the second-score price is the whole budget, so nothing is left in the
    escrow for a dispute's fee. The requester bonds it from its own account with its
    rejection (`TaskEscrow.bond`); the panel finds for the requester, so the check fails,
    the team's pay bears the coherent panelists' shares and the rest of the bond goes back."""
    monkeypatch.setattr("tests.audit.conftest.COSTS", {"ada": "0.12eth"})
    world = delivered_world(tmp_path / "home", invoice_spec_with(REVIEW))
    market, task_id = world.market, world.task_id
    task = market.task(task_id)
    assert task.price == task.spec.budget
    panelists = jurors(world, 3)
    reason = "the fields are wrong"
    with pytest.raises(TaskError, match="bond the rest"):
        market.review(world.requester, task_id, "looks-right", "reject", reason)
    fee = dispute_fee(task.price)
    market.review(world.requester, task_id, "looks-right", "reject", reason, bond_key=REQUESTER_KEY)
    assert world.escrow_chain.bonded(task_id) == fee

    world.clock.advance(3600)
    mine(world)
    with pytest.raises(SettlementWaits, match="is voting"):
        settle_task(market, world.onboarding, task_id)
    check = next(c for c in task.spec.requester_checks if c.check_id == "looks-right")
    assert isinstance(check, ReviewCheck)
    seats = market.panels.draw(task, check).panel.seats
    verdicts = dict(zip(seats, ("requester", "requester", "team"), strict=True))
    salts = {did: vote(world, panelists[did], task_id, v) for did, v in verdicts.items()}
    for did, (verdict, salt) in salts.items():
        reveal(world, panelists[did], task_id, verdict, salt)

    outcome = settle_task(market, world.onboarding, task_id)
    finish(world)
    review = logged_checks(world)["looks-right"]
    assert review["passed"] is False and review["record"]["dispute"]["winner"] == "requester"
    body = logged_settlement(market, task_id)
    assert body is not None and body["bonded"] == str(fee)
    shares = panel_pay(fee, seats, seats[:2])
    owed = sum(shares.values())
    earned = amount_paid(task.price, Fraction(body["paid_share"]))
    assert outcome.amount == earned - min(owed, earned)
    assert outcome.refund == task.spec.budget + fee - outcome.amount - owed
    report = audit(world)
    assert report.ok, [s.to_json() for s in report.steps]
    assert "bonds" in report.steps[6].detail


def logged_review_body(world, index: int) -> dict:  # type: ignore[no-untyped-def]
    from accord.ledger.events import Entry

    return dict(Entry.from_bytes(world.ledger.store.entry(index).data).event.body)


def test_a_review_only_task_is_taken_where_a_panel_could_decide_its_rejection(
    tmp_path: Path,
) -> None:
    """With no judge, a spec whose only say is a review is refused at posting unless a panel
    could be drawn now for the skills the review reads (`Market.require_checkable`)."""
    world = delivered_world(tmp_path / "home", invoice_spec_with(REVIEW))
    requester = world.requester.did
    review_only = spec_from_request(
        invoice_request(checks=[{"id": "ok", "kind": "review", "reads": ["invoice-fields"]}]), {}
    )
    with pytest.raises(WorkError, match="ACCORD_JUDGE_URL"):
        world.market.require_checkable(review_only, requester)
    jurors(world, 4)
    world.market.require_checkable(review_only, requester)  # a panel could decide it now
