"""`settle_task` over a real delivered task (SQLite ledger, in-memory anchor and escrow chains):
Shapley shares paid through the escrow, the rest to the requester, every v(S) logged;
idempotent; a crash between any two steps of settle-and-pay, then a restart, pays each payee
exactly once."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from fractions import Fraction
from math import factorial
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

import accord.coordinator.service
from accord.audit.checks import audit_task
from accord.coordinator.service import run_awarded_task
from accord.identity.agents import AgentRecord
from accord.identity.onboarding import open_onboarding
from accord.ledger.anchoring import Anchorer
from accord.ledger.database import make_engine
from accord.ledger.errors import ChainUnavailableError
from accord.ledger.events import Entry, Event
from accord.ledger.service import Ledger
from accord.ledger.store import LogStore
from accord.ledger.wiring import operator_signer
from accord.market.errors import EscrowError, SettlementError
from accord.market.escrow import EscrowActions, address_of
from accord.market.service import Market
from accord.market.settlement import (
    SETTLEMENT_COMPUTED,
    SETTLEMENT_RELEASED,
    delivery_body,
    logged_settlement,
    opener,
    paid_out,
    recompute_settlement,
    service_check_environment,
    settle_task,
)
from accord.market.tasks import TASK_SETTLED, spec_from_request
from accord.market.wiring import ChainEscrow, MarketContext
from accord.market.work import REQUESTER_KINDS
from tests.audit.conftest import (
    OPERATOR_KEY,
    REQUESTER_KEY,
    World,
    build_world,
    onboard_agents,
    open_world,
    rebuild_log,
    sealed_auction,
    with_body,
)
from tests.specs import INVOICE_CHECKS, invoice_request

REQUESTER_ADDRESS = address_of(REQUESTER_KEY)


class Crash(Exception):
    """The process dies here."""


@pytest.fixture
def delivered(tmp_path: Path) -> World:
    return build_world(tmp_path / "home", until="delivered")


def restart(world: World) -> World:
    """A new process over the same database, chains and escrow journal: reconcile the escrow
    journal, recover the market, as `open_market` does."""
    settings = world.settings
    store = LogStore(make_engine(settings.db_url), world.ledger.log_id)
    operator = operator_signer(settings)
    anchorer = Anchorer(
        store,
        world.anchors,
        operator,
        world.clock,
        every_entries=10**9,
        every_seconds=1e12,
        receipt_timeout=0,
    )
    ledger = Ledger(store, operator, world.clock, anchorer)
    onboarding = open_onboarding(settings, ledger)
    actions = EscrowActions(world.escrow_chain, world.journal, receipt_timeout=0)
    actions.reconcile()
    escrow = ChainEscrow(world.escrow_chain, actions, OPERATOR_KEY)
    market = Market(ledger, onboarding, escrow, clock=world.clock)
    market.recover()
    context = MarketContext(settings, onboarding, market, escrow)
    return dataclasses.replace(
        world, ledger=ledger, onboarding=onboarding, escrow=escrow, market=market, context=context
    )


def logged(world: World, kind: str) -> list[dict[str, Any]]:
    found = world.ledger.store.find(kind=kind, subject=world.task_id, limit=1000)
    return [dict(Entry.from_bytes(s.data).event.body) for s in found]


def assert_paid_exactly_once(world: World) -> dict[str, Any]:
    """One computation, one on-chain settlement equal to it, credits to match, one
    `task.settled`; and the whole collaboration audits."""
    [body] = logged(world, SETTLEMENT_COMPUTED)
    assert len(logged(world, TASK_SETTLED)) == 1
    events = world.escrow_chain.events(world.task_id)
    settled = [e for e in events if e.name == "Settled"]
    assert len(settled) == 1
    assert not [e for e in events if e.name == "Refunded"]
    expected = sorted((address.lower(), int(wei)) for address, wei in paid_out(body))
    paid = sorted(
        (a.lower(), int(w)) for a, w in zip(settled[0].payees, settled[0].amounts, strict=True)
    )
    assert paid == expected
    for player, amount in body["payouts"].items():
        if int(amount) > 0 and player in body["payees"]:
            assert world.escrow_chain.credit(body["payees"][player]) == int(amount)
    budget = world.market.task(world.task_id).spec.budget
    assert world.escrow_chain.credit(REQUESTER_ADDRESS) == budget - int(body["amount"])
    assert settled[0].amount == budget - int(body["amount"])
    assert world.market.task(world.task_id).state == "settled"
    again = settle_task(world.market, world.onboarding, world.task_id)
    assert again.already
    assert world.escrow_chain.events(world.task_id) == events
    assert world.ledger.anchorer is not None
    world.ledger.anchorer.anchor_latest()
    report = audit_task(
        world.ledger.store, world.task_id, anchors=world.anchors, escrow=world.escrow_chain
    )
    assert report.ok, [s.to_json() for s in report.steps]
    return body


# -- paying by Shapley value -----------------------------------------------------------------


def brute_force_shapley(players: list[str], v: Callable[[frozenset[str]], Fraction]) -> dict:
    """The textbook definition: the average marginal contribution over all orders."""
    totals = dict.fromkeys(players, Fraction(0))
    for order in itertools.permutations(players):
        before: frozenset[str] = frozenset()
        for player in order:
            totals[player] += v(before | {player}) - v(before)
            before = before | {player}
    return {p: t / factorial(len(players)) for p, t in totals.items()}


def test_settle_pays_each_contributor_its_shapley_share(delivered: World) -> None:
    world = delivered
    task = world.market.task(world.task_id)
    outcome = settle_task(world.market, world.onboarding, world.task_id)
    assert not outcome.already and outcome.tx_hash
    body = assert_paid_exactly_once(world)

    # v(S) logged for every coalition of the delivered parts, each as the checks value it
    env = service_check_environment(world.market, task, None)
    delivered = delivery_body(world.market, world.task_id)
    open_value = opener(world.market.sealed_bytes, required=True)
    _, valuation, _ = recompute_settlement(task, delivered, env, open_value)
    players = sorted(valuation.players)
    assert len(players) >= 3 and body["players"] == players
    logged_v = {frozenset(i["coalition"]): Fraction(i["value"]) for i in body["evaluated"]}
    every = {
        frozenset(c) for r in range(len(players) + 1) for c in itertools.combinations(players, r)
    }
    assert set(logged_v) | {frozenset()} == every
    for coalition, value in logged_v.items():
        assert value == valuation.value(coalition)

    # the parts' Shapley values, each producer's sum of them, and the price split in
    # proportion to those sums, exactly
    part_values = brute_force_shapley(players, valuation.value)
    assert {p: Fraction(v) for p, v in body["part_values"].items()} == part_values
    assert body["producers"] == dict(valuation.producers)
    values: dict[str, Fraction] = {}
    for part, value in part_values.items():
        producer = valuation.producers[part]
        values[producer] = values.get(producer, Fraction(0)) + value
    assert {p: Fraction(v) for p, v in body["values"].items()} == values
    assert outcome.amount == task.price and int(body["amount"]) == task.price
    assert sum(outcome.payouts.values()) == task.price
    total = sum(values.values())
    for producer in valuation.contributors:
        share = Fraction(task.price) * values[producer] / total
        assert abs(outcome.payouts[producer] - share) < 1
        assert body["payees"][producer] == world.onboarding.payout_address(producer, 31337)
    assert outcome.refund == task.spec.budget - task.price


def test_an_output_the_service_no_longer_holds_is_not_paid_on(delivered: World) -> None:
    """A sealed output lost from the blob store: the checks cannot run on it, so nothing is
    computed, logged or paid, and the escrow stays open; once the bytes are back (a restore),
    the same settlement goes through."""
    world = delivered
    body = delivery_body(world.market, world.task_id)
    commitment = body["deliverable"]["contributions"][0]["output_sha256"]
    kept = world.market.sealed_bytes(commitment)
    assert kept is not None
    with world.market.blobs.engine.begin() as connection:
        connection.execute(text("DELETE FROM market_blobs WHERE sha256 = :c"), {"c": commitment})
    size = world.ledger.store.size()
    with pytest.raises(SettlementError, match=f"sealed output {commitment} is not held"):
        settle_task(world.market, world.onboarding, world.task_id)
    assert (
        world.ledger.store.size() == size and logged_settlement(world.market, world.task_id) is None
    )
    deposit = world.escrow.deposit_of(world.task_id)
    assert deposit is not None and deposit[1], "the escrow stays open"
    with world.market.blobs.engine.begin() as connection:
        connection.execute(
            text("INSERT INTO market_blobs (sha256, size, data) VALUES (:c, :n, :d)"),
            {"c": commitment, "n": len(kept), "d": kept},
        )
    assert settle_task(world.market, world.onboarding, world.task_id).amount > 0


def test_settle_is_idempotent(delivered: World) -> None:
    world = delivered
    first = settle_task(world.market, world.onboarding, world.task_id)
    credits = {a: world.escrow_chain.credit(a) for a in first.payees.values()}
    second = settle_task(world.market, world.onboarding, world.task_id)
    assert second.already and not first.already
    assert second.payouts == first.payouts and second.amount == first.amount
    assert {a: world.escrow_chain.credit(a) for a in first.payees.values()} == credits
    assert_paid_exactly_once(world)


def test_payees_withdraw_their_credit(delivered: World) -> None:
    world = delivered
    outcome = settle_task(world.market, world.onboarding, world.task_id)
    for player, payout in outcome.payouts.items():
        key = world.onboarding.payout_key(world.onboarding.registry.get(player))
        before = world.escrow_chain.balance()
        world.escrow.withdraw(key)
        assert world.escrow_chain.balance() == before - payout
        assert world.escrow_chain.credit(address_of(key)) == 0


# -- crashes between the steps of settle-and-pay ---------------------------------------------


def crash_after_logging(world: World, monkeypatch: pytest.MonkeyPatch) -> type[BaseException]:
    """`settlement.computed` is logged; the process dies before anchoring it."""

    def die() -> None:
        raise Crash("after logging the settlement")

    monkeypatch.setattr(world.ledger.anchorer, "anchor_latest", die)
    return Crash


def crash_after_anchoring(world: World, monkeypatch: pytest.MonkeyPatch) -> type[BaseException]:
    anchorer = world.ledger.anchorer
    assert anchorer is not None
    real = anchorer.anchor_latest

    def anchor_then_die() -> None:
        real()
        raise Crash("after anchoring")

    monkeypatch.setattr(anchorer, "anchor_latest", anchor_then_die)
    return Crash


def crash_after_journalling(world: World, monkeypatch: pytest.MonkeyPatch) -> type[BaseException]:
    """The settle transaction is signed and journalled as pending, never sent."""

    def die(record: object) -> None:
        raise Crash("after journalling the escrow transaction")

    monkeypatch.setattr(world.escrow.actions, "send", die)
    return Crash


def crash_after_broadcast_unmined(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> type[BaseException]:
    """Broadcast, the reply lost, not mined yet (the node mines after the restart)."""
    world.escrow_chain.auto_mine = False
    world.escrow_chain.lose_broadcast_replies = 1
    return ChainUnavailableError


def crash_after_broadcast_mined(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> type[BaseException]:
    """Broadcast and mined, but the reply (and so the receipt) never came back."""
    world.escrow_chain.lose_broadcast_replies = 1
    return ChainUnavailableError


def crash_while_pending(world: World, monkeypatch: pytest.MonkeyPatch) -> type[BaseException]:
    """Sent, no receipt before the timeout: the settle raises, the record stays pending."""
    world.escrow_chain.auto_mine = False
    return EscrowError


def crash_before_task_settled(world: World, monkeypatch: pytest.MonkeyPatch) -> type[BaseException]:
    """The chain settled and the journal knows it; the process dies before `task.settled`."""
    real = world.ledger.append

    def append(signer: Any, kind: str, **kwargs: Any) -> Any:
        if kind == TASK_SETTLED:
            raise Crash("before logging task.settled")
        return real(signer, kind, **kwargs)

    monkeypatch.setattr(world.ledger, "append", append)
    return Crash


CRASHES = [
    crash_after_logging,
    crash_after_anchoring,
    crash_after_journalling,
    crash_after_broadcast_unmined,
    crash_after_broadcast_mined,
    crash_while_pending,
    crash_before_task_settled,
]

#: Settled events on chain when the process died: the restart must neither repeat nor miss.
ON_CHAIN_BEFORE_RESTART = {
    "crash_after_logging": 0,
    "crash_after_anchoring": 0,
    "crash_after_journalling": 0,
    "crash_after_broadcast_unmined": 0,
    "crash_after_broadcast_mined": 1,
    "crash_while_pending": 0,
    "crash_before_task_settled": 1,
}


@pytest.mark.parametrize("crash", CRASHES, ids=lambda c: c.__name__.removeprefix("crash_"))
def test_a_crash_anywhere_then_a_restart_pays_everyone_exactly_once(
    delivered: World, crash: Callable[..., type[BaseException]], monkeypatch: pytest.MonkeyPatch
) -> None:
    world = delivered
    raised = crash(world, monkeypatch)
    with pytest.raises(raised):  # no other settler: nothing to wait for (race_wait_s=0)
        settle_task(world.market, world.onboarding, world.task_id, race_wait_s=0)
    monkeypatch.undo()
    assert len(logged(world, SETTLEMENT_COMPUTED)) == 1
    assert not logged(world, TASK_SETTLED)
    settled_on_chain = [e for e in world.escrow_chain.events(world.task_id) if e.name == "Settled"]
    assert len(settled_on_chain) == ON_CHAIN_BEFORE_RESTART[crash.__name__]
    world.escrow_chain.auto_mine = True  # the node is back and mining
    world.clock.advance(5)
    restarted = restart(world)
    outcome = settle_task(restarted.market, restarted.onboarding, restarted.task_id)
    assert not outcome.already
    body = assert_paid_exactly_once(restarted)
    assert {p: str(w) for p, w in outcome.payouts.items()} == body["payouts"]


def test_a_transaction_still_unmined_after_a_restart_is_not_sent_twice(delivered: World) -> None:
    world = delivered
    world.escrow_chain.auto_mine = False
    # Nothing mines and no other settler pays, so the refusal needs no wait (race_wait_s=0).
    with pytest.raises(EscrowError):
        settle_task(world.market, world.onboarding, world.task_id, race_wait_s=0)
    restarted = restart(world)  # reconciles: the same bytes again, still not mined
    with pytest.raises(EscrowError, match="not mined yet"):
        settle_task(restarted.market, restarted.onboarding, restarted.task_id, race_wait_s=0)
    assert not [e for e in world.escrow_chain.events(world.task_id) if e.name == "Settled"]
    world.escrow_chain.mine()
    world.escrow_chain.auto_mine = True
    again = restart(restarted)
    settle_task(again.market, again.onboarding, again.task_id)
    assert_paid_exactly_once(again)
    records = [r for r in world.journal.records(world.task_id) if r.intent.kind == "settle"]
    assert len(records) == 1


# -- refusals and options --------------------------------------------------------------------


def test_a_contributor_without_a_payout_binding_is_held_and_the_others_are_paid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41, item 5: a contributor that bound no payout account does not stop the
    settlement. Everyone else is paid; its payout is paid to the escrow itself, which holds it
    under the task (credited to nobody, not the requester's); once it binds an account,
    settling again releases it there, once. The audit passes at each stage."""
    world = build_world(tmp_path / "home", until="awarded")
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
    escrow_address = world.escrow.escrow_address()
    before = world.escrow_chain.balance()

    outcome = settle_task(world.market, world.onboarding, world.task_id)
    owed = outcome.payouts[unbound]
    assert owed > 0 and unbound not in outcome.payees and outcome.held == {unbound: owed}
    body = assert_paid_exactly_once(world)
    assert body["held"] == {unbound: str(owed)} and body["holder"] == escrow_address
    assert world.escrow_chain.held(world.task_id) == owed
    assert world.escrow_chain.credit(escrow_address) == 0
    assert world.escrow_chain.balance() == before  # nothing left the escrow
    for player, address in outcome.payees.items():
        assert world.escrow_chain.credit(address) == outcome.payouts[player]

    # once it binds an account, settling again releases the held payout to it, once
    assert settle_task(world.market, world.onboarding, world.task_id).held == {unbound: owed}
    address = onboarding.bind_payout(onboarding.registry.get(unbound), world.escrow.chain_id())
    again = settle_task(world.market, world.onboarding, world.task_id)
    assert again.already and again.held == {}
    assert world.escrow_chain.credit(address) == owed
    assert world.escrow_chain.held(world.task_id) == 0
    [released] = logged(world, SETTLEMENT_RELEASED)
    assert released == {
        "task_id": world.task_id,
        "agent": unbound,
        "address": address,
        "amount": str(owed),
        "tx_hash": released["tx_hash"],
    }
    settle_task(world.market, world.onboarding, world.task_id)
    assert len(logged(world, SETTLEMENT_RELEASED)) == 1
    assert world.escrow_chain.credit(address) == owed
    assert [e.name for e in world.escrow_chain.events(world.task_id)].count("Released") == 1
    assert world.ledger.anchorer is not None
    world.ledger.anchorer.anchor_latest()
    report = audit_task(
        world.ledger.store, world.task_id, anchors=world.anchors, escrow=world.escrow_chain
    )
    assert report.ok, [s.to_json() for s in report.steps]
    assert "1 released to the address each bound" in report.steps[6].detail
    on_chain = report.to_json()["facts"]["on_chain"]
    [fact] = [p for p in on_chain["payouts"] if p["agent"] == unbound]
    assert fact == {"agent": unbound, "address": escrow_address, "wei": str(owed), "held": True}
    assert "Released" in {t["event"] for t in on_chain["escrow"]["transactions"]}

    # a log whose release names another address than the owner bound fails step 7 there
    thief = address_of("0x" + "11" * 32)

    def rewrite(index: int, event: Event) -> Event:
        if event.kind != SETTLEMENT_RELEASED:
            return event
        return with_body(event, {**event.body, "address": thief})

    store, anchors = rebuild_log(world, tmp_path / "forged.db", rewrite)
    forged = audit_task(store, world.task_id, anchors=anchors, escrow=world.escrow_chain)
    assert forged.first_failure is not None and forged.first_failure.number == 7
    assert f"held payout went to {thief}, not {address}" in forged.steps[6].detail


class _AnswersWrong:
    """The agent's adapter, except that the first `count` parts any agent works on are
    answered wrong but in the right shape (its output schema accepts it), by whoever works on
    them: the leader's precheck gives such a part to someone else once, who answers it wrong
    too, and the last attempt is delivered, so the checks reading it fail. `wrong` collects
    the parts."""

    def __init__(self, inner: Any, wrong: list[str], did: str, count: int) -> None:
        self.inner, self.wrong, self.did, self.count = inner, wrong, did, count

    def run(self, task: Any) -> Any:
        answer = self.inner.run(task)
        part = str(task.item.get("item_id", task.sub_id))
        if part not in self.wrong and len(self.wrong) < self.count:
            self.wrong.append(part)
        if part in self.wrong:
            return {key: "0" for key in answer} if isinstance(answer, dict) else "1"
        return answer


def _delivered_with_wrong_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int, spec: Any = None
) -> tuple[World, list[str]]:
    wrong: list[str] = []
    real = accord.coordinator.service.adapter_for

    def adapter_for(record: AgentRecord, timeout: float, **options: Any) -> Any:
        return _AnswersWrong(real(record, timeout, **options), wrong, record.did, count)

    monkeypatch.setattr(accord.coordinator.service, "adapter_for", adapter_for)
    if spec is None:
        world = build_world(tmp_path / "home", until="delivered")
    else:
        world = open_world(tmp_path / "home")
        onboard_agents(world)
        task = world.market.post(world.requester, spec, requester_key=REQUESTER_KEY)
        world.task_id = task.task_id
        sealed_auction(world)
        run_awarded_task(world.context, world.task_id)
        world.clock.advance(1)
    monkeypatch.undo()
    return world, wrong


def test_a_half_done_deliverable_is_paid_for_the_weight_it_passed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world, wrong = _delivered_with_wrong_answers(tmp_path, monkeypatch, 1)
    assert len(wrong) == 1
    task = world.market.task(world.task_id)
    outcome = settle_task(world.market, world.onboarding, world.task_id)
    body = assert_paid_exactly_once(world)
    checks = {c["id"]: c for c in body["checks"]}
    requester = [c for c in task.spec.rubric if c.kind in REQUESTER_KINDS]
    passed = sum(c.weight for c in requester if checks[c.check_id]["passed"])
    share = Fraction(passed, sum(c.weight for c in requester))
    assert 0 < share < 1 and Fraction(body["paid_share"]) == share
    assert task.price is not None
    assert outcome.amount == (task.price * share).numerator // (task.price * share).denominator
    assert sum(outcome.payouts.values()) == outcome.amount < task.price
    assert outcome.refund == task.spec.budget - outcome.amount
    [settled] = logged(world, TASK_SETTLED)
    [computed] = logged(world, SETTLEMENT_COMPUTED)
    producer = next(
        p["producer"] for p in settled["track_record"]["parts"] if p["part"] == wrong[0]
    )
    assert Fraction(settled["quality"][producer]) < 1, (producer, computed["checks"])


def test_a_deliverable_that_passes_none_of_the_requesters_checks_pays_nobody(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every part answered with garbage in the right shape: the plan and the assembly pass,
    the requester's checks all fail, and the whole deposit goes back to the requester."""
    checks = [c for c in INVOICE_CHECKS if c["kind"] != "schema"]  # garbage keeps the shape
    spec = spec_from_request(invoice_request(checks=checks), {})
    world, wrong = _delivered_with_wrong_answers(tmp_path, monkeypatch, 10**6, spec)
    assert len(wrong) >= len(spec.parts)
    outcome = settle_task(world.market, world.onboarding, world.task_id)
    [body] = logged(world, SETTLEMENT_COMPUTED)
    results = {c["id"]: c["passed"] for c in body["checks"]}
    assert results == {c.check_id: c.kind in ("plan", "assembly") for c in spec_rubric(world)}
    assert body["paid_share"] == "0/1" and outcome.amount == 0
    assert set(outcome.payouts.values()) == {0}
    assert outcome.refund == spec.budget
    assert world.escrow_chain.credit(REQUESTER_ADDRESS) == spec.budget
    assert world.ledger.anchorer is not None
    world.ledger.anchorer.anchor_latest()
    report = audit_task(
        world.ledger.store, world.task_id, anchors=world.anchors, escrow=world.escrow_chain
    )
    assert report.ok, report.to_json()


def spec_rubric(world: World) -> tuple[Any, ...]:
    return tuple(world.market.task(world.task_id).spec.rubric)


# -- a log written before the store refused repeated lifecycle events -------------------------


def test_a_log_holding_repeated_settlements_still_replays_and_fails_the_audit(
    tmp_path: Path,
) -> None:
    """Today's code, racing, logged `settlement.computed` and `task.settled` twice: the task
    replays (the first kept, the repeats named), settling answers the logged outcome, and the
    audit fails at step 6 on the first repeat."""
    from accord.ledger.errors import AlreadyLoggedError
    from accord.ledger.events import make_entry
    from accord.market.settlement import SETTLEMENT_COMPUTED

    world = build_world(tmp_path / "home", until="settled")
    store = world.ledger.store
    legacy = LogStore(make_engine(world.settings.db_url), store.log_id, once_per_subject=())
    operator = world.ledger.operator
    repeats = []
    for kind in (SETTLEMENT_COMPUTED, TASK_SETTLED):
        body = Entry.from_bytes(store.find(kind=kind, subject=world.task_id)[0].data).event.body
        seq = world.ledger.next_seq(operator.did)
        entry = make_entry(
            operator, kind=kind, seq=seq, at=world.clock(), subject=world.task_id, body=body
        )
        repeats.append(legacy.append(entry))
    assert world.ledger.anchorer is not None
    world.ledger.anchorer.anchor_latest()

    reopened = restart(world)
    task = reopened.market.task(world.task_id)
    assert task.state == "settled" and task.duplicates == (repeats[1],)
    assert [t.task_id for t in reopened.market.tasks()] == [world.task_id]
    outcome = settle_task(reopened.market, reopened.onboarding, world.task_id)
    assert outcome.already
    with pytest.raises(AlreadyLoggedError):
        reopened.ledger.append(operator, TASK_SETTLED, subject=world.task_id, body={})

    report = audit_task(
        reopened.ledger.store,
        world.task_id,
        anchors=world.anchors,
        escrow=world.escrow_chain,
    )
    failure = report.first_failure
    assert failure is not None
    assert (failure.number, failure.entry) == (6, repeats[0])
    assert "logged more than once" in failure.detail
