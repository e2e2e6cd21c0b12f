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
from eth_account import Account

import accord.market.disputes as disputes
from accord.api.app import create_app
from accord.api.routes.deps import ApiConfig
from accord.client import AccordClient, ApiError
from accord.identity.payout import bind_payout_address
from accord.identity.payout_accounts import PAYOUT_BOUND_KIND
from accord.kit.leader import AnswerError, answer_dispute
from accord.kit.wallet import Wallet
from accord.ledger.events import Event
from accord.market.disputes import DISPUTE_ANSWERED, log_events, panel_relevant_events, team_of
from accord.market.errors import SettlementWaits, TaskError, WorkError
from accord.market.escrow import EscrowRefusedError, address_of, refund_intent
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
from tests.market.panelists import jurors, mine, reveal, signed, vote
from tests.market.test_check_io import (
    REVIEW,
    audit,
    delivered_world,
    finish,
    logged_checks,
)
from tests.serving import serve
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


# -- the team's answer: a bond of its own ------------------------------------------------

TEAM_KEY = "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6"


def bind_team_account(world, signer) -> None:  # type: ignore[no-untyped-def]
    """`signer` logs a payout binding of TEAM_KEY's account (signed by both keys) for another
    chain than the escrow's: it shows the member holds the account its answers bond from,
    while its pay still goes to the payout account it bound on the escrow's chain."""
    binding = bind_payout_address(signer, Account.from_key(TEAM_KEY), 1, "team", world.clock())
    world.ledger.append_entries(
        [signed(world, signer, PAYOUT_BOUND_KIND, signer.did, {"binding": binding})]
    )


def answer_entry(world, signer, amount: int, account: str, check: str = "looks-right"):  # type: ignore[no-untyped-def]
    body = {"task_id": world.task_id, "check": check, "account": account, "amount": str(amount)}
    return signed(world, signer, DISPUTE_ANSWERED, world.task_id, body)


def rejected_and_answered(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A delivered task whose requester rejected correct work and whose team's winner answered
    with the dispute's fee from its own account (`TaskEscrow.answer`), the panel drawn."""
    world = delivered_world(tmp_path / "home", invoice_spec_with(REVIEW))
    market, task_id = world.market, world.task_id
    task = market.task(task_id)
    assert task.price is not None and task.winner is not None
    panelists = jurors(world, 3)
    fee = dispute_fee(task.price)
    leader = world.signer(task.winner)
    account = address_of(TEAM_KEY)
    with pytest.raises(TaskError, match="not rejected"):
        market.answer_dispute(answer_entry(world, leader, fee, account), answer_key=TEAM_KEY)
    market.review(world.requester, task_id, "looks-right", "reject", "wrong totals")

    # the requester, a stranger, too little, a bond the escrow does not hold: refused
    with pytest.raises(TaskError, match="not on the team"):
        market.answer_dispute(answer_entry(world, world.requester, fee, account))
    with pytest.raises(TaskError, match="at least the dispute's fee"):
        market.answer_dispute(answer_entry(world, leader, fee - 1, account))
    # an account the member never bound, though it holds the key: no member stakes another's
    with pytest.raises(TaskError, match="bound no"):
        market.answer_dispute(answer_entry(world, leader, fee, account), answer_key=TEAM_KEY)
    bind_team_account(world, leader)
    with pytest.raises(TaskError, match=r"send TaskEscrow\.answer first"):
        market.answer_dispute(answer_entry(world, leader, fee, account))
    with pytest.raises(TaskError, match="not the account"):
        market.answer_dispute(answer_entry(world, leader, fee, account), answer_key=REQUESTER_KEY)
    assert world.escrow_chain.answers(task_id) == 0

    # the leader's own account bonds the fee, then its answer is logged, once
    market.answer_dispute(answer_entry(world, leader, fee, account), answer_key=TEAM_KEY)
    assert world.escrow_chain.answered(task_id, account) == fee
    with pytest.raises(TaskError, match="answered the dispute over looks-right already"):
        market.answer_dispute(answer_entry(world, leader, fee, account), answer_key=TEAM_KEY)
    assert world.escrow_chain.answered(task_id, account) == fee  # nothing bonded twice

    world.clock.advance(3600)
    mine(world)
    with pytest.raises(SettlementWaits, match="is voting"):
        settle_task(market, world.onboarding, task_id)
    check = next(c for c in task.spec.requester_checks if c.check_id == "looks-right")
    assert isinstance(check, ReviewCheck)
    return world, panelists, market.panels.draw(task, check).panel.seats, fee, account


def decide(world, panelists, seats, verdicts) -> None:  # type: ignore[no-untyped-def]
    salts = {did: vote(world, panelists[did], world.task_id, v) for did, v in verdicts.items()}
    for did, (verdict, salt) in salts.items():
        reveal(world, panelists[did], world.task_id, verdict, salt)


def test_a_team_that_answers_and_wins_gets_its_bond_back_whole(tmp_path: Path) -> None:
    """The team answers the rejection with a bond of its own and the panel finds for it: the
    requester's stake pays the coherent panelists (the rest of it to the team, as when the
    team does not answer) and the team's answer goes back to its account whole."""
    world, panelists, seats, fee, account = rejected_and_answered(tmp_path)
    market, task_id = world.market, world.task_id
    task = market.task(task_id)
    assert task.price is not None
    decide(world, panelists, seats, dict(zip(seats, ("team", "team", "requester"), strict=True)))
    outcome = settle_task(market, world.onboarding, task_id)
    finish(world)
    review = logged_checks(world)["looks-right"]
    assert review["passed"] is True
    answer = review["record"]["dispute"]["answer"]
    assert (answer["account"], answer["amount"]) == (account, str(fee))
    body = logged_settlement(market, task_id)
    assert body is not None and body["answered"] == {account: str(fee)}
    assert "answers_taken" not in body
    shares = panel_pay(fee, seats, seats[:2])
    assert body["panel_payouts"] == {did: str(w) for did, w in sorted(shares.items())}
    assert outcome.amount == task.price + (fee - sum(shares.values()))
    assert outcome.refund == task.spec.budget - task.price - fee
    assert world.escrow_chain.credit(account) == fee  # the answer back whole
    assert world.escrow_chain.credit(address_of(REQUESTER_KEY)) == outcome.refund
    report = audit(world)
    assert report.ok, [s.to_json() for s in report.steps]
    assert "answers" in report.steps[6].detail

    # the team's signed answer claims twice what its account sent: the audit says so
    [answered] = market.ledger.store.find(kind=DISPUTE_ANSWERED, subject=task_id, limit=5)

    def doubled(index: int, event: Event) -> Event:
        if index != answered.index:
            return event
        return with_body(event, {**event.body, "amount": str(2 * fee)})

    store, anchors = rebuild_log(world, tmp_path / "doubled.db", doubled)
    forged = audit(world, store, anchors)
    assert not forged.ok and forged.first_failure is not None
    assert "answer to looks-right replays" in forged.first_failure.detail

    # the member's binding of the account gone (an answer staking money it never showed it
    # holds, which the service refuses): the audit does not take the logged answer either
    def unbound(index: int, event: Event) -> Event:
        binding = event.body.get("binding") or {}
        if event.kind != PAYOUT_BOUND_KIND or binding.get("statement", {}).get("chainId") != 1:
            return event
        return with_body(event, {"binding": {**binding, "addressSignature": ""}})

    store, anchors = rebuild_log(world, tmp_path / "unbound.db", unbound)
    forged = audit(world, store, anchors)
    assert not forged.ok and forged.first_failure is not None
    assert "answer to looks-right replays" in forged.first_failure.detail


def test_a_team_that_answers_and_loses_pays_the_panel_from_its_bond(tmp_path: Path) -> None:
    """The team answers and the panel finds for the requester: the check fails (the team is
    not paid for it), the coherent panelists are paid from the team's answer, not from its
    pay, the rest of the answer goes back to its account, and the requester's stake comes
    back whole. An audit of a settlement that hands the answer to the requester fails."""
    world, panelists, seats, fee, account = rejected_and_answered(tmp_path)
    market, task_id = world.market, world.task_id
    task = market.task(task_id)
    assert task.price is not None
    decide(
        world, panelists, seats, dict(zip(seats, ("requester", "requester", "team"), strict=True))
    )
    outcome = settle_task(market, world.onboarding, task_id)
    finish(world)
    review = logged_checks(world)["looks-right"]
    assert review["passed"] is False and review["record"]["dispute"]["answer"]
    body = logged_settlement(market, task_id)
    assert body is not None
    shares = panel_pay(fee, seats, seats[:2])
    owed = sum(shares.values())
    assert body["answers_taken"] == {account: str(owed)}
    earned = amount_paid(task.price, Fraction(body["paid_share"]))
    assert earned < task.price  # the failed check's share is not paid
    assert outcome.amount == earned  # the panel was paid from the answer, not the pay
    assert world.escrow_chain.credit(account) == fee - owed
    requester = world.escrow_chain.credit(address_of(REQUESTER_KEY))
    assert requester == outcome.refund == task.spec.budget - earned  # its fee back whole
    report = audit(world)
    assert report.ok, [s.to_json() for s in report.steps]

    # the operator logs the answer as the requester's: the recomputed panel pay disagrees
    [computed] = market.ledger.store.find(kind=SETTLEMENT_COMPUTED, subject=task_id, limit=1)

    def no_answer(index: int, event: Event) -> Event:
        if index != computed.index:
            return event
        changed = copy.deepcopy(dict(event.body))
        changed.pop("answers_taken")
        return with_body(event, changed)

    store, anchors = rebuild_log(world, tmp_path / "unanswered.db", no_answer)
    forged = audit(world, store, anchors)
    assert not forged.ok and forged.first_failure is not None
    assert "answers pay the panel" in forged.first_failure.detail


def test_a_kit_team_member_answers_over_http_from_its_own_wallet(tmp_path: Path) -> None:
    """A team member in its own process (`accord.kit.leader.answer_dispute`) against a real
    service on loopback: its wallet bonds from its own account, its own signed answer goes to
    `POST /tasks/{id}/disputes/answers`; asked again (a retry), nothing is bonded or logged
    twice; a stranger's signed answer is refused with the reason."""
    world = delivered_world(tmp_path / "home", invoice_spec_with(REVIEW))
    market, task_id = world.market, world.task_id
    task = market.task(task_id)
    assert task.price is not None and task.winner is not None
    jurors(world, 3)
    fee = dispute_fee(task.price)
    market.review(world.requester, task_id, "looks-right", "reject", "wrong totals")
    app = create_app(
        world.settings,
        config=ApiConfig(rate=1000.0, burst=10_000.0),
        context=world.context,
        anchors=world.anchors,
        escrow_chain=world.escrow_chain,
    )
    wallet = Wallet(TEAM_KEY, world.escrow_chain)
    bind_team_account(world, world.signer(task.winner))
    with (
        serve(app) as url,
        AccordClient(url, signer=world.signer(task.winner)) as leader,
        AccordClient(url, signer=world.requester) as stranger,
    ):
        answered = answer_dispute(leader, wallet, task_id, "looks-right", fee)
        assert answered["amount"] == str(fee) and answered["account"] == wallet.address
        assert answered["already"] is False
        again = answer_dispute(leader, wallet, task_id, "looks-right", fee)
        assert again == answered | {"already": True}  # the logged one, read back
        assert world.escrow_chain.answered(task_id, wallet.address) == fee
        logged = market.ledger.store.find(kind=DISPUTE_ANSWERED, subject=task_id, limit=5)
        assert len(logged) == 1
        # what the log shows the service would refuse is refused before anything is sent
        with pytest.raises(AnswerError, match="has not rejected other"):
            answer_dispute(leader, wallet, task_id, "other", fee)
        assert world.escrow_chain.answered(task_id, wallet.address) == fee
        own = Wallet("0x" + bytes(Account.create().key).hex(), world.escrow_chain)
        with pytest.raises(AnswerError, match="not on the team"):
            answer_dispute(stranger, own, task_id, "looks-right", fee)
        assert world.escrow_chain.answered(task_id, own.address) == 0
        with pytest.raises(AnswerError, match=f"bound no {own.address}"):
            answer_dispute(leader, own, task_id, "looks-right", fee)  # a member, unbound account
        assert world.escrow_chain.answered(task_id, own.address) == 0

        body = {"task_id": task_id, "check": "looks-right", "account": wallet.address}
        entry = stranger.entry(DISPUTE_ANSWERED, task_id, body | {"amount": str(fee)})
        with pytest.raises(ApiError, match="not on the team"):
            stranger.request("POST", f"/tasks/{task_id}/disputes/answers", json={"entry": entry})


def test_a_refunded_tasks_answer_is_reclaimed_by_its_account(tmp_path: Path) -> None:
    """The requester takes its refund after the escrow's deadline (the task was never
    settled): the team's answer is not the requester's; the member's wallet reclaims it into
    its own credit, once, and a settled task's answer cannot be reclaimed."""
    world, _, _, fee, account = rejected_and_answered(tmp_path)
    chain, task_id = world.escrow_chain, world.task_id
    wallet = Wallet(TEAM_KEY, chain)
    with pytest.raises(EscrowRefusedError, match="NothingToReclaim"):
        wallet.reclaim(task_id)  # still open: the settlement will pay it out
    record = chain.escrow(task_id)
    assert record is not None
    chain.advance_time(record.deadline - chain.timestamp + 1)
    chain.broadcast(chain.build_tx(REQUESTER_KEY, refund_intent(task_id)))  # mined at once
    assert chain.credit(address_of(REQUESTER_KEY)) == record.deposit  # not the answer
    assert chain.credit(account) == 0
    assert not wallet.reclaim(task_id).already
    assert chain.credit(account) == fee
    assert wallet.reclaim(task_id).already  # nothing twice
    assert chain.credit(account) == fee
