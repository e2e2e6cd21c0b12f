"""`accord.market.lifecycle`: the service awards, expires, refunds and settles by itself once a
task's window closes, once, and says what it did."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import accord.market.settlement as settlement
from accord.api.app import create_app
from accord.api.routes.deps import ApiConfig
from accord.coordinator.service import run_awarded_task
from accord.ledger.events import Entry, make_entry
from accord.market.early import accepted_in_full
from accord.market.errors import TaskError, TransitionError
from accord.market.escrow import address_of
from accord.market.lifecycle import LEADER_SILENCE, Due, LifecycleWorker, due, run_due
from accord.market.service import UNFUNDED_REASON
from accord.market.tasks import TASK_CLOSED, TASK_POSTED, Task, TaskEvent, TaskSpec, replay
from tests.audit.conftest import (
    REQUESTER_KEY,
    World,
    onboard_agents,
    open_world,
    post_task,
    sealed_auction,
)
from tests.specs import invoice_spec, invoice_spec_with

REVIEW = {"id": "looks-right", "weight": 1, "kind": "review", "part": "invoice-fields"}

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SPEC = invoice_spec()


def task(state: str, *, posted: datetime = NOW, delivered: datetime | None = None) -> Task:
    return Task("t", "did:key:zReq", SPEC, posted, state, True, delivered_at=delivered)  # type: ignore[arg-type]


# -- the rule --------------------------------------------------------------------------------


def test_nothing_is_due_while_a_window_is_open() -> None:
    assert due([task("bidding")], NOW) == []
    assert due([task("bidding")], NOW + SPEC.bidding) == []  # revealing, not yet over
    delivered = task("delivered", delivered=NOW)
    assert due([delivered], NOW + SPEC.review - timedelta(seconds=1)) == []


def test_each_closed_window_has_its_action() -> None:
    after_reveal = NOW + SPEC.bidding + SPEC.reveal
    assert due([task("bidding")], after_reveal) == [Due("t", "award")]
    assert due([task("expired"), task("posted")], NOW) == [Due("t", "recover")] * 2
    delivered = task("delivered", delivered=NOW)
    assert due([delivered], NOW + SPEC.review) == [Due("t", "settle")]
    assert due([task("posted")], NOW + SPEC.bidding) == [Due("t", "close")]  # never funded
    for state in ("settled", "refunded", "cancelled", "closed"):
        assert due([task(state, delivered=NOW)], NOW + timedelta(days=30)) == [], state
    deadline = task("running").delivery_deadline
    for state in ("awarded", "running"):  # won, and not delivered in time
        assert due([task(state)], deadline - timedelta(seconds=1)) == [], state
        assert due([task(state)], deadline) == [Due("t", "expire")], state


def test_a_task_whose_leader_is_silent_ends_early() -> None:
    """Awarded or running, its leader silent for `LEADER_SILENCE` before the deadline: due
    early; a task whose leader's last word is not known (a hosted team) waits for the
    deadline."""
    for state in ("awarded", "running"):
        heard = {"t": NOW + SPEC.bidding + SPEC.reveal}
        quiet = heard["t"] + LEADER_SILENCE
        assert due([task(state)], quiet - timedelta(seconds=1), heard) == [], state
        assert due([task(state)], quiet, heard) == [Due("t", "silent")], state
        assert due([task(state)], quiet) == [], state


# -- one round over a real market ------------------------------------------------------------


def test_a_round_awards_once_the_reveal_window_closes(tmp_path: Path) -> None:
    world = open_world(tmp_path / "home")
    onboard_agents(world)
    post_task(world)
    task_now = world.market.task(world.task_id)
    world.clock.set(task_now.bidding_ends)
    assert run_due(world.context) == []  # revealing: nothing yet
    world.clock.set(task_now.reveal_ends)
    [done] = run_due(world.context)
    # nobody bid: the task expires and the whole deposit goes back to the requester
    assert (done.due.action, done.outcome, done.detail) == (
        "award",
        "done",
        "expired: no valid bid",
    )
    assert world.market.task(world.task_id).state == "refunded"
    assert world.escrow_chain.credit(address_of(REQUESTER_KEY)) == (task_now.spec.budget)
    assert run_due(world.context) == []  # done once


def _delivered(world: World, spec: TaskSpec | None = None) -> Task:
    """The world's task posted (with `spec`, else the invoice task), won and delivered, every
    agent paid to an account it bound."""
    onboard_agents(world)
    if spec is None:
        post_task(world)
    else:
        task = world.market.post(world.requester, spec, requester_key=REQUESTER_KEY)
        world.task_id = task.task_id
    sealed_auction(world)
    run_awarded_task(world.context, world.task_id)
    for record in world.agents.values():
        world.onboarding.bind_payout(record, world.escrow.chain_id())
    delivered = world.market.task(world.task_id)
    assert delivered.state == "delivered" and delivered.review_ends is not None
    return delivered


def test_a_round_settles_once_the_review_window_closes(tmp_path: Path) -> None:
    world = open_world(tmp_path / "home")
    delivered = _delivered(world, invoice_spec_with(REVIEW))
    # once in its window, its python checks are previewed (none is inconclusive): the
    # settlement then waits for the requester's review
    [previewed] = run_due(world.context)
    assert (previewed.due, previewed.outcome) == (Due(world.task_id, "settle"), "waits")
    assert "looks-right waits" in previewed.detail
    assert world.market.previewed(world.task_id) == {}
    assert run_due(world.context) == []  # the requester has not said its word yet
    world.clock.set(delivered.review_ends)
    [done] = run_due(world.context)
    assert (done.due, done.outcome) == (Due(world.task_id, "settle"), "done")
    assert world.market.task(world.task_id).state == "settled"
    assert run_due(world.context) == []


def test_a_task_whose_checks_take_long_holds_back_no_other_settlement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two tasks fall due in one round, the slow one first: the other is settled while the
    slow one's checks still run (here they wait until the test has seen the other settled;
    one after another, the round would never get there)."""
    world = open_world(tmp_path / "home")
    onboard_agents(world)
    delivered: list[str] = []
    for _ in range(2):
        post_task(world)
        sealed_auction(world)
        run_awarded_task(world.context, world.task_id)
        delivered.append(world.task_id)
    for record in world.agents.values():
        world.onboarding.bind_payout(record, world.escrow.chain_id())
    slow, quick = delivered
    release = threading.Event()
    real = settlement._compute

    def compute(market: Any, onboarding: Any, task: Any, judge: Any) -> Any:
        if task.task_id == slow:
            assert release.wait(120), "the quick task was never settled beside the slow one"
        return real(market, onboarding, task, judge)

    monkeypatch.setattr(settlement, "_compute", compute)
    ends = [world.market.task(t).review_ends for t in delivered]
    world.clock.set(max(e for e in ends if e is not None))
    results: list[Any] = []
    round_ = threading.Thread(target=lambda: results.extend(run_due(world.context)))
    round_.start()
    deadline = time.monotonic() + 120
    while world.market.task(quick).state != "settled" and time.monotonic() < deadline:
        time.sleep(0.05)
    settled_first = world.market.task(quick).state == "settled"
    release.set()
    round_.join(timeout=300)
    assert settled_first, "the quick task waited behind the slow one's checks"
    assert sorted((d.due.task_id, d.outcome) for d in results) == sorted(
        [(slow, "done"), (quick, "done")]
    )


def test_a_spec_with_no_review_check_settles_as_soon_as_it_is_delivered(tmp_path: Path) -> None:
    world = open_world(tmp_path / "home")
    delivered = _delivered(world)  # the invoice task's checks are all machine checks
    [done] = run_due(world.context)  # its review window has not ended
    assert world.clock() < delivered.review_ends  # type: ignore[operator]
    assert (done.due, done.outcome) == (Due(world.task_id, "settle"), "done")
    assert world.market.task(world.task_id).state == "settled"


def test_accepting_every_review_early_settles_at_once(tmp_path: Path) -> None:
    world = open_world(tmp_path / "home")
    delivered = _delivered(world, invoice_spec_with(REVIEW, {**REVIEW, "id": "looks-right-2"}))
    world.market.review(world.requester, world.task_id, "looks-right", "accept")
    [previewed] = run_due(world.context)  # its python checks previewed once in its window
    assert previewed.outcome == "waits" and "looks-right-2 waits" in previewed.detail
    assert run_due(world.context) == []  # one review is still to come
    world.market.review(world.requester, world.task_id, "looks-right-2", "accept")
    [done] = run_due(world.context)
    assert world.clock() < delivered.review_ends  # type: ignore[operator]
    assert (done.due, done.outcome) == (Due(world.task_id, "settle"), "done")
    assert world.market.task(world.task_id).state == "settled"


def test_only_the_requesters_first_acceptances_settle_early() -> None:
    spec = invoice_spec_with(REVIEW)
    delivered = Task("t", "did:key:zReq", spec, NOW, "delivered", True, delivered_at=NOW)  # type: ignore[arg-type]

    def given(index: int, actor: str, verdict: str) -> TaskEvent:
        body = {"task_id": "t", "check": "looks-right", "verdict": verdict}
        return TaskEvent(index, "review.given", actor, NOW, body)

    assert not accepted_in_full(delivered, [])
    assert accepted_in_full(delivered, [given(1, "did:key:zReq", "accept")])
    assert not accepted_in_full(delivered, [given(1, "did:key:zTeam", "accept")])
    rejected_first = [given(2, "did:key:zReq", "accept"), given(1, "did:key:zReq", "reject")]
    assert not accepted_in_full(delivered, rejected_first)  # a dispute waits for the window
    assert accepted_in_full(task("delivered", delivered=NOW), [])  # no review check at all
    assert due([delivered], NOW, accepted=frozenset({"t"})) == [Due("t", "settle")]


def test_a_winner_that_does_not_deliver_forfeits_and_the_requester_is_refunded(
    tmp_path: Path,
) -> None:
    world = open_world(tmp_path / "home")
    onboard_agents(world)
    post_task(world)
    sealed_auction(world)
    awarded = world.market.task(world.task_id)
    assert awarded.state == "awarded" and awarded.winner is not None
    world.clock.set(awarded.delivery_deadline - timedelta(seconds=1))
    assert run_due(world.context) == []
    with pytest.raises(TaskError, match="may be delivered until"):
        world.market.expire_undelivered(world.task_id)
    world.clock.set(awarded.delivery_deadline)
    [done] = run_due(world.context)
    assert (done.due, done.outcome) == (Due(world.task_id, "expire"), "done")
    assert world.market.task(world.task_id).state == "refunded"
    assert world.escrow_chain.credit(address_of(REQUESTER_KEY)) == awarded.spec.budget
    # the winner's track record counts the task it did not deliver
    records = world.market.track_records()
    capabilities = awarded.spec.capabilities
    assert any(records.forfeits.get((awarded.winner, c)) for c in capabilities)
    assert run_due(world.context) == []  # done once
    with pytest.raises(TransitionError):
        world.market.expire_undelivered(world.task_id)


def test_the_service_runs_the_rounds_while_it_serves(tmp_path: Path) -> None:
    """`accord serve`'s worker: the test moves the market's clock past the reveal window and
    waits (without a deadline it could race) for the award the service makes by itself."""
    world = open_world(tmp_path / "home")
    onboard_agents(world)
    post_task(world)
    sealed_auction_without_award(world)
    config = ApiConfig(lifecycle_interval=0.05)
    app = create_app(world.settings, config=config, context=world.context)
    with TestClient(app) as client:
        worker = app.state.lifecycle
        assert isinstance(worker, LifecycleWorker)
        world.clock.set(world.market.task(world.task_id).reveal_ends)
        # bounded by rounds, not by time: a slow machine only takes longer
        while world.market.task(world.task_id).state != "awarded" and worker.rounds < 200:
            time.sleep(0.05)
        shown = client.get(f"/tasks/{world.task_id}").json()
        assert shown["state"] == "awarded" and shown["winner"] is not None
    assert worker.rounds >= 1


def sealed_auction_without_award(world: World) -> None:
    """`sealed_auction`'s bids, committed and revealed; the award left to the service."""
    award = world.market.award
    world.market.award = lambda task_id: None  # type: ignore[assignment,method-assign,return-value]
    try:
        sealed_auction(world)
    finally:
        world.market.award = award  # type: ignore[method-assign]


def test_the_interval_is_read_from_the_environment() -> None:
    assert ApiConfig.from_env({}).lifecycle_interval == 0  # an app made in a test runs none
    assert ApiConfig.from_env({"ACCORD_LIFECYCLE_INTERVAL": "2.5"}).lifecycle_interval == 2.5
    assert ApiConfig.from_env({"ACCORD_LIFECYCLE_INTERVAL": "0"}).lifecycle_interval == 0
    for bad in ("-1", "soon", "nan", "inf"):
        with pytest.raises(ValueError, match="ACCORD_LIFECYCLE_INTERVAL"):
            ApiConfig.from_env({"ACCORD_LIFECYCLE_INTERVAL": bad})


# -- a posting nobody funds ends with its bidding window ---------------------------------------


def _unfunded_posting(world: World) -> str:
    """A requester holding its own key posts (`post_signed`) and never deposits."""
    spec = invoice_spec()
    market = world.market
    task_id, body = market.prepare_post(
        world.requester.did, spec, address_of(REQUESTER_KEY), "never-funded"
    )
    entry = make_entry(
        world.requester,
        kind=TASK_POSTED,
        seq=world.ledger.next_seq(world.requester.did),
        at=world.clock(),
        subject=task_id,
        body=body,
    )
    assert market.post_signed(entry, spec, idempotency_key="never-funded").state == "posted"
    return task_id


def test_an_unfunded_posting_closes_when_its_bidding_window_ends(tmp_path: Path) -> None:
    world = open_world(tmp_path / "home")
    task_id = _unfunded_posting(world)
    posted = world.market.task(task_id)
    world.clock.set(posted.bidding_ends - timedelta(seconds=1))
    assert [d.due.action for d in run_due(world.context)] == []  # it may still be funded
    with pytest.raises(TaskError, match="may be funded until"):
        world.market.close_unfunded(task_id)
    world.clock.set(posted.bidding_ends)
    [done] = run_due(world.context)
    assert (done.due, done.outcome) == (Due(task_id, "close"), "done")
    closed = world.market.task(task_id)
    assert closed.state == "closed"
    # a signed lifecycle event of the operator's, with the reason
    [stored] = world.ledger.store.find(kind=TASK_CLOSED, subject=task_id, limit=5)
    event = Entry.from_bytes(stored.data).event
    assert event.actor == world.ledger.operator.did
    assert event.body["reason"] == UNFUNDED_REASON
    # it leaves the rounds: not listed as posted, nothing due for it, a second close refused
    assert task_id not in {t.task_id for t in world.market.iter_tasks(state="posted")}
    world.clock.advance(3600)
    assert run_due(world.context) == []
    with pytest.raises(TransitionError):
        world.market.close_unfunded(task_id)


def test_a_deposit_seen_at_the_close_opens_the_escrow_and_goes_back(tmp_path: Path) -> None:
    """The requester's own deposit lands just before the window closes: it is not lost, the
    auction finds no bid and the whole deposit is refunded."""
    world = open_world(tmp_path / "home")
    task_id = _unfunded_posting(world)
    posted = world.market.task(task_id)
    world.escrow.open(task_id, posted.escrow_deadline, posted.spec.budget, REQUESTER_KEY)
    world.clock.set(posted.bidding_ends)
    ended = world.market.close_unfunded(task_id)
    assert ended.escrowed and ended.state == "bidding"
    assert not world.ledger.store.find(kind=TASK_CLOSED, subject=task_id, limit=5)
    world.clock.set(posted.reveal_ends)
    [done] = run_due(world.context)
    assert (done.due.action, done.detail) == ("award", "expired: no valid bid")
    assert world.market.task(task_id).state == "refunded"


def test_the_close_replays_only_after_the_window_and_only_for_a_posted_task() -> None:
    requester = "did:key:zReq"
    posted = TaskEvent(0, TASK_POSTED, requester, NOW, {"task_id": "t", "spec": SPEC.to_json()})

    def closed_at(at: datetime, index: int = 1) -> TaskEvent:
        return TaskEvent(index, TASK_CLOSED, "did:key:zOperator", at, {"task_id": "t"})

    assert replay([posted, closed_at(NOW + SPEC.bidding)]).state == "closed"
    with pytest.raises(TaskError, match="before its bidding window ended"):
        replay([posted, closed_at(NOW + SPEC.bidding - timedelta(seconds=1))])
    opened = TaskEvent(1, "escrow.opened", "did:key:zOperator", NOW, {"task_id": "t"})
    # a close that lost the race to the deposit changes nothing
    assert replay([posted, opened, closed_at(NOW + SPEC.bidding, 2)]).state == "bidding"
    # a deposit logged after the close goes back to its requester (the lifecycle refunds it)
    late = TaskEvent(2, "escrow.opened", "did:key:zOperator", NOW + SPEC.bidding, {})
    after = replay([posted, closed_at(NOW + SPEC.bidding), late])
    assert (after.state, after.escrowed) == ("expired", True)
