"""The market service end to end without a devnet: a real SQLite ledger, real onboarding, the
in-memory escrow chain and a clock the tests move (tests/market/conftest.py)."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta
from fractions import Fraction

import pytest

from accord.identity.challenges import REGISTRY
from accord.identity.onboarding import Onboarding, open_onboarding
from accord.ledger.errors import ChainUnavailableError
from accord.ledger.events import Entry
from accord.ledger.service import Ledger
from accord.ledger.settings import Settings
from accord.ledger.signing import Ed25519Signer
from accord.ledger.wiring import open_ledger
from accord.market import sealed
from accord.market.auction import RESERVE_SCORE, quality, score
from accord.market.award import AdmittedCommitment, AdmittedReveal, replay_award
from accord.market.errors import AuctionError, BidRejected, EscrowError, TransitionError
from accord.market.escrow import EscrowActions, EscrowState, MemoryEscrowChain
from accord.market.money import Wei
from accord.market.reputation import reputation
from accord.market.service import Market
from accord.market.tasks import (
    BID_COMMITTED,
    BID_REVEALED,
    ESCROW_OPENED,
    ESCROW_REFUNDED,
    TASK_AWARDED,
    TASK_EXPIRED,
    TASK_POSTED,
    PaymentRule,
    Task,
    TaskSpec,
)
from accord.market.wiring import ChainEscrow
from accord.market.work import ExpectCheck, Part
from tests.market.conftest import REQUESTER_ADDRESS, REQUESTER_KEY, Bidder, Clock

BUDGET = Wei(1_000)
SALT_A = bytes(range(16))
SALT_B = bytes(range(16, 48))
SALT_C = bytes(range(48, 80))

MakeBidder = Callable[..., Bidder]


def spec(
    budget: int = BUDGET, rule: PaymentRule = "second-score", capability: str = "arithmetic"
) -> TaskSpec:
    example, expected = REGISTRY[capability].example()
    return TaskSpec(
        title="Add some numbers",
        description="Sum every line.",
        parts=(Part("sum", capability, example),),
        checks=(ExpectCheck("right", 1, ("sum",), "$", "equals", expected),),
        budget=Wei(budget),
        bidding=timedelta(seconds=30),
        reveal=timedelta(seconds=30),
        delivery=timedelta(minutes=10),
        rule=rule,
    )


def post(market: Market, requester: Ed25519Signer, **options: object) -> Task:
    return market.post(requester, spec(**options), requester_key=REQUESTER_KEY)  # type: ignore[arg-type]


def to_reveal(clock: Clock, task: Task) -> None:
    clock.set(task.bidding_ends + timedelta(seconds=1))


def to_award(clock: Clock, task: Task) -> None:
    clock.set(task.reveal_ends)


def entries_of(ledger: Ledger, task_id: str) -> list[Entry]:
    return [Entry.from_bytes(s.data) for s in ledger.store.find(subject=task_id, limit=1000)]


def rejected(ledger: Ledger, reason: str | None, action: Callable[[], object]) -> BidRejected:
    """Run `action`, which must be refused with `reason` (any, if None) and leave the ledger
    as it was."""
    size = ledger.store.size()
    with pytest.raises(BidRejected) as caught:
        action()
    assert reason is None or caught.value.reason == reason, caught.value
    assert ledger.store.size() == size
    return caught.value


# -- posting -------------------------------------------------------------------------------


def test_post_escrows_the_budget_and_opens_bidding(
    market: Market, ledger: Ledger, requester: Ed25519Signer, escrow_chain: MemoryEscrowChain
) -> None:
    task = post(market, requester)
    assert task.state == "bidding" and task.escrowed and task.requester == requester.did
    assert market.state(task) == "bidding"
    record = escrow_chain.escrow(task.task_id)
    assert record is not None and record.state == EscrowState.OPEN
    assert record.deposit == BUDGET and record.requester == REQUESTER_ADDRESS
    assert escrow_chain.balance() == BUDGET
    assert record.deadline == int(task.escrow_deadline.timestamp())
    posted, opened = entries_of(ledger, task.task_id)
    for entry in (posted, opened):
        entry.verify()
    assert (posted.event.kind, posted.event.actor) == (TASK_POSTED, requester.did)
    assert posted.event.body["escrow_from"] == REQUESTER_ADDRESS
    assert (opened.event.kind, opened.event.actor) == (ESCROW_OPENED, ledger.operator.did)
    assert opened.event.body["deposit"] == str(BUDGET)
    assert [t.task_id for t in market.tasks()] == [task.task_id]
    assert market.task(task.task_id) == task


def open_tasks_for(market: Market, did: str) -> list[Task]:
    """The calls for bids `did` sees: the tasks taking bids whose every capability it holds."""
    return [
        task
        for task in market.iter_tasks(state="bidding")
        if market.eligible(did, task.spec.capabilities)
    ]


def test_eligible_agents_see_the_call_for_bids(
    market: Market, requester: Ed25519Signer, make_bidder: MakeBidder, clock: Clock
) -> None:
    alice, _ = make_bidder("alice")
    stranger, _ = make_bidder("stranger", onboard=False)
    task = post(market, requester)
    assert [t.task_id for t in open_tasks_for(market, alice.did)] == [task.task_id]
    assert open_tasks_for(market, stranger.did) == []
    assert market.exam_score(alice.did, ["arithmetic"]) == 1
    assert market.exam_score(stranger.did, ["arithmetic"]) == 0
    to_reveal(clock, task)
    assert market.state(task) == "revealing"
    assert open_tasks_for(market, alice.did) == []


# -- threads of one process -----------------------------------------------------------------


def test_threads_of_one_process_bid_at_once_and_each_bid_is_admitted_once(
    market: Market,
    ledger: Ledger,
    requester: Ed25519Signer,
    make_bidder: MakeBidder,
    clock: Clock,
) -> None:
    """A service admits bids from many threads at once (they take no process-wide lock): each
    bidder's commitment and reveal, sent by three threads together, is logged once, the other
    two are refused as second bids, and every thread's view of the book stays whole."""
    bidders = [make_bidder(f"bidder-{n}")[1] for n in range(6)]
    task = post(market, requester)
    tid = task.task_id
    salts = {b.did: bytes([n]) * 32 for n, b in enumerate(bidders)}
    copies = 3

    def race(send: Callable[[Ed25519Signer], int]) -> dict[str, list[int | str]]:
        barrier = threading.Barrier(len(bidders) * copies)

        def one(bidder: Ed25519Signer) -> tuple[str, int | str]:
            barrier.wait(timeout=30)
            try:
                return bidder.did, send(bidder)
            except BidRejected as exc:
                return bidder.did, exc.reason

        jobs = [b for b in bidders for _ in range(copies)]
        with ThreadPoolExecutor(len(jobs)) as pool:
            answers: dict[str, list[int | str]] = {}
            for did, answer in pool.map(one, jobs):
                answers.setdefault(did, []).append(answer)
        return answers

    committed = race(lambda b: market.commit(sealed.commit_bid(b, tid, 100, salts[b.did])))
    to_reveal(clock, task)
    revealed = race(lambda b: market.reveal(sealed.reveal_bid(b, tid, 100, salts[b.did])))
    for answers in (*committed.values(), *revealed.values()):
        admitted = [a for a in answers if isinstance(a, int)]
        assert len(admitted) == 1 and answers.count("second-bid") == copies - 1, answers
    kinds = [e.event.kind for e in entries_of(ledger, tid)]
    assert kinds.count(BID_COMMITTED) == kinds.count(BID_REVEALED) == len(bidders)
    assert {c.commitment.bidder for c in market.commitments(tid)} == set(salts)
    assert {r.reveal.bidder for r in market.reveals(tid)} == set(salts)


# -- every rejection, through the service ----------------------------------------------------


def test_every_commit_rejection_has_its_reason_and_logs_nothing(
    market: Market,
    ledger: Ledger,
    requester: Ed25519Signer,
    make_bidder: MakeBidder,
    clock: Clock,
) -> None:
    _, alice = make_bidder("alice")
    _, stranger = make_bidder("stranger", onboard=False)
    task = post(market, requester)
    other = post(market, requester)
    tid = task.task_id

    # not eligible: no credential
    rejected(
        ledger, "not-eligible", lambda: market.commit(sealed.commit_bid(stranger, tid, 1, SALT_A))
    )
    # unknown task
    rejected(
        ledger,
        "wrong-task",
        lambda: market.commit(sealed.commit_bid(alice, "task-nosuch", 1, SALT_A)),
    )
    assert "task-nosuch" not in market._bidding  # nothing kept for an id nobody posted
    # replay from another task: the signature binds the task id, so an edited copy fails
    mine = sealed.commit_bid(alice, other.task_id, 100, SALT_A)
    rejected(ledger, "bad-signature", lambda: market.commit(replace(mine, task_id=tid)))
    # someone else's commitment under another DID
    rejected(ledger, "bad-signature", lambda: market.commit(replace(mine, bidder=stranger.did)))

    market.commit(sealed.commit_bid(alice, tid, 100, SALT_A))
    # second bid, even with another price
    rejected(ledger, "second-bid", lambda: market.commit(sealed.commit_bid(alice, tid, 90, SALT_B)))
    # replaying the very same commitment is a second bid too
    rejected(
        ledger, "second-bid", lambda: market.commit(sealed.commit_bid(alice, tid, 100, SALT_A))
    )

    # late: at the end of the bidding window (half-open) and after it
    _, bob = make_bidder("bob")
    clock.set(task.bidding_ends)
    rejected(ledger, "late", lambda: market.commit(sealed.commit_bid(bob, tid, 100, SALT_B)))
    to_award(clock, task)
    rejected(ledger, "late", lambda: market.commit(sealed.commit_bid(bob, tid, 100, SALT_B)))
    assert [view.bidder for view in market.bids(tid)] == [alice.did]


def test_every_reveal_rejection_has_its_reason_and_logs_nothing(
    market: Market,
    ledger: Ledger,
    requester: Ed25519Signer,
    make_bidder: MakeBidder,
    clock: Clock,
) -> None:
    _, alice = make_bidder("alice")
    _, bob = make_bidder("bob")
    _, carol = make_bidder("carol")
    task = post(market, requester)
    other = post(market, requester)
    tid = task.task_id
    market.commit(sealed.commit_bid(alice, tid, 400, SALT_A))
    market.commit(sealed.commit_bid(bob, tid, 1_001, SALT_B))  # above the budget, still sealed
    market.commit(sealed.commit_bid(alice, other.task_id, 400, SALT_A))

    # early: the reveal window opens when bidding closes
    rejected(ledger, "early", lambda: market.reveal(sealed.reveal_bid(alice, tid, 400, SALT_A)))

    to_reveal(clock, task)
    # unknown task
    rejected(
        ledger, "wrong-task", lambda: market.reveal(sealed.reveal_bid(alice, "task-x", 400, SALT_A))
    )
    # a reveal with no commitment
    rejected(
        ledger,
        "unknown-commitment",
        lambda: market.reveal(sealed.reveal_bid(carol, tid, 400, SALT_C)),
    )
    # does not open the commitment: another price, another salt
    rejected(ledger, "mismatch", lambda: market.reveal(sealed.reveal_bid(alice, tid, 399, SALT_A)))
    rejected(ledger, "mismatch", lambda: market.reveal(sealed.reveal_bid(alice, tid, 400, SALT_B)))
    # a reveal of the other task replayed here: the signature binds the task id
    replayed = replace(sealed.reveal_bid(alice, other.task_id, 400, SALT_A), task_id=tid)
    rejected(ledger, "bad-signature", lambda: market.reveal(replayed))
    # over the budget
    rejected(
        ledger, "over-budget", lambda: market.reveal(sealed.reveal_bid(bob, tid, 1_001, SALT_B))
    )

    market.reveal(sealed.reveal_bid(alice, tid, 400, SALT_A))
    rejected(
        ledger, "second-bid", lambda: market.reveal(sealed.reveal_bid(alice, tid, 400, SALT_A))
    )

    # late: the reveal window is over (half-open)
    to_award(clock, other)
    rejected(
        ledger,
        "late",
        lambda: market.reveal(sealed.reveal_bid(alice, other.task_id, 400, SALT_A)),
    )
    assert [(v.bidder, v.price) for v in market.bids(tid)] == [(alice.did, 400), (bob.did, None)]


def test_a_revoked_credential_makes_an_agent_not_eligible(
    market: Market,
    ledger: Ledger,
    onboarding: Onboarding,
    requester: Ed25519Signer,
    make_bidder: MakeBidder,
) -> None:
    record, alice = make_bidder("alice")
    task = post(market, requester)
    assert market.eligible(alice.did, ["arithmetic"])
    [credential] = onboarding.credentials_of(alice.did)
    onboarding.revoke(credential["id"], "caught cheating")
    assert not market.eligible(alice.did, ["arithmetic"])
    assert market.exam_score(alice.did, ["arithmetic"]) == 0
    assert open_tasks_for(market, record.did) == []
    rejected(
        ledger,
        "not-eligible",
        lambda: market.commit(sealed.commit_bid(alice, task.task_id, 10, SALT_A)),
    )


def test_a_requester_may_not_bid_on_its_own_task(
    market: Market, ledger: Ledger, clock: Clock, make_bidder: MakeBidder
) -> None:
    """A credentialed agent that posts a task cannot win it: it would be paid, and rated, for
    its own work. The auction's replay refuses such a bid too, should one be logged."""
    _, alice = make_bidder("alice")
    task = post(market, alice)
    rejected(
        ledger,
        "own-task",
        lambda: market.commit(sealed.commit_bid(alice, task.task_id, 10, SALT_A)),
    )
    logged = AdmittedCommitment(7, sealed.commit_bid(alice, task.task_id, 10, SALT_A), Fraction(1))
    with pytest.raises(BidRejected, match="requester's own bid"):
        replay_award(task, [logged], [], {alice.did: Fraction(0)})


def test_a_credential_for_another_capability_does_not_count(
    market: Market, ledger: Ledger, requester: Ed25519Signer, make_bidder: MakeBidder
) -> None:
    _, alice = make_bidder("alice")
    task = post(market, requester, capability="extraction")
    rejected(
        ledger,
        "not-eligible",
        lambda: market.commit(sealed.commit_bid(alice, task.task_id, 10, SALT_A)),
    )


def test_a_50_identity_sybil_swarm_without_credentials_cannot_bid(
    market: Market,
    ledger: Ledger,
    onboarding: Onboarding,
    requester: Ed25519Signer,
    clock: Clock,
) -> None:
    task = post(market, requester)
    size = ledger.store.size()
    reasons = []
    for n in range(50):
        record = onboarding.registry.new_agent(f"sybil-{n}", now=clock())
        signer = onboarding.registry.signer(record)
        with pytest.raises(BidRejected) as caught:
            market.commit(sealed.commit_bid(signer, task.task_id, 1, bytes([n]) * 16))
        reasons.append(caught.value.reason)
    assert reasons == ["not-eligible"] * 50
    assert ledger.store.size() == size
    assert market.bids(task.task_id) == []


# -- sealed until revealed -------------------------------------------------------------------


def test_no_bid_amount_is_stored_or_shown_before_the_reveal(
    market: Market,
    ledger: Ledger,
    requester: Ed25519Signer,
    make_bidder: MakeBidder,
    clock: Clock,
) -> None:
    _, alice = make_bidder("alice")
    task = post(market, requester)
    price = Wei(777)
    commitment = sealed.commit_bid(alice, task.task_id, price, SALT_A)
    index = market.commit(commitment)
    [view] = market.bids(task.task_id)
    assert (view.bidder, view.committed_index, view.revealed, view.price) == (
        alice.did,
        index,
        False,
        None,
    )
    assert view.commitment == commitment.digest.hex()
    assert view.to_json()["price"] is None
    committed = ledger.store.entry(index)
    event = Entry.from_bytes(committed.data).event
    assert event.kind == BID_COMMITTED and event.actor == ledger.operator.did
    assert set(event.body) == {"commitment", "exam_score"}
    assert set(event.body["commitment"]) == {"task", "bidder", "commitment", "signature"}
    # no value of the body is the price (a substring test failed whenever the body's random
    # hex happened to hold "777")
    assert not {str(price), int(price)} & set(_scalars(event.body))

    to_reveal(clock, task)
    market.reveal(sealed.reveal_bid(alice, task.task_id, price, SALT_A))
    [view] = market.bids(task.task_id)
    assert (view.revealed, view.price) == (True, price)


def _scalars(value: object) -> list[object]:
    """Every scalar in a JSON value, at any depth."""
    if isinstance(value, dict):
        return [s for item in value.values() for s in _scalars(item)]
    if isinstance(value, list):
        return [s for item in value for s in _scalars(item)]
    return [value]


# -- the award -------------------------------------------------------------------------------


def test_award_waits_for_the_windows(
    market: Market, requester: Ed25519Signer, make_bidder: MakeBidder, clock: Clock
) -> None:
    _, alice = make_bidder("alice")
    task = post(market, requester)
    market.commit(sealed.commit_bid(alice, task.task_id, 100, SALT_A))
    with pytest.raises(AuctionError):
        market.award(task.task_id)
    to_reveal(clock, task)
    market.reveal(sealed.reveal_bid(alice, task.task_id, 100, SALT_A))
    with pytest.raises(AuctionError):
        market.award(task.task_id)
    to_award(clock, task)
    assert market.award(task.task_id).winner is not None


def test_second_score_award_pays_the_runner_up_threshold(
    market: Market,
    ledger: Ledger,
    requester: Ed25519Signer,
    make_bidder: MakeBidder,
    clock: Clock,
) -> None:
    _, alice = make_bidder("alice")
    _, bob = make_bidder("bob")
    task = post(market, requester)
    tid = task.task_id
    market.commit(sealed.commit_bid(alice, tid, 300, SALT_A))
    market.commit(sealed.commit_bid(bob, tid, 500, SALT_B))
    to_reveal(clock, task)
    market.reveal(sealed.reveal_bid(bob, tid, 500, SALT_B))
    market.reveal(sealed.reveal_bid(alice, tid, 300, SALT_A))
    to_award(clock, task)
    outcome = market.award(tid)

    assert outcome.winner is not None and outcome.runner_up is not None
    assert (outcome.winner.bidder, outcome.runner_up.bidder) == (alice.did, bob.did)
    # quality = 1/2 · reputation (the prior 1/2) + 1/2 · exam score (5/5) = 3/4 for both
    weights = task.spec.weights
    assert outcome.winner.reputation == Fraction(1, 2) and outcome.winner.exam_score == 1
    assert quality(outcome.winner, weights) == Fraction(3, 4)
    runner_up_score = score(outcome.runner_up, weights, BUDGET)
    threshold = BUDGET * (quality(outcome.winner, weights) - runner_up_score)
    expected = min(BUDGET, max(300, math.floor(threshold)))
    assert outcome.price == expected == 500

    awarded = market.task(tid)
    assert (awarded.state, awarded.winner, awarded.price) == ("awarded", alice.did, 500)
    assert market.state(awarded) == "awarded"
    event = entries_of(ledger, tid)[-1].event
    assert event.kind == TASK_AWARDED and event.actor == ledger.operator.did
    assert event.body["winner"] == alice.did and event.body["price"] == "500"
    assert event.body["forfeited"] == []
    assert [row["bidder"] for row in event.body["ranking"]] == [alice.did, bob.did]

    with pytest.raises(TransitionError):
        market.award(tid)
    # what the log holds replays to the same outcome
    assert market.replay_auction(market.task(tid))[0] == outcome


def test_first_score_award_pays_the_winners_bid(
    market: Market, requester: Ed25519Signer, make_bidder: MakeBidder, clock: Clock
) -> None:
    _, alice = make_bidder("alice")
    _, bob = make_bidder("bob")
    task = post(market, requester, rule="first-score")
    tid = task.task_id
    market.commit(sealed.commit_bid(alice, tid, 300, SALT_A))
    market.commit(sealed.commit_bid(bob, tid, 500, SALT_B))
    to_reveal(clock, task)
    market.reveal(sealed.reveal_bid(alice, tid, 300, SALT_A))
    market.reveal(sealed.reveal_bid(bob, tid, 500, SALT_B))
    to_award(clock, task)
    outcome = market.award(tid)
    assert outcome.rule == "first-score"
    assert outcome.winner is not None and outcome.winner.bidder == alice.did
    assert outcome.price == 300


def test_a_lone_bidder_is_paid_the_budget_under_second_score(
    market: Market, requester: Ed25519Signer, make_bidder: MakeBidder, clock: Clock
) -> None:
    _, alice = make_bidder("alice")
    task = post(market, requester)
    market.commit(sealed.commit_bid(alice, task.task_id, 250, SALT_A))
    to_reveal(clock, task)
    market.reveal(sealed.reveal_bid(alice, task.task_id, 250, SALT_A))
    to_award(clock, task)
    outcome = market.award(task.task_id)
    assert outcome.winner is not None and outcome.runner_up is None
    threshold = BUDGET * (quality(outcome.winner, task.spec.weights) - RESERVE_SCORE)
    assert threshold > BUDGET
    assert outcome.price == BUDGET


def test_no_valid_bid_expires_the_task_and_refunds_the_requester(
    market: Market,
    ledger: Ledger,
    requester: Ed25519Signer,
    make_bidder: MakeBidder,
    clock: Clock,
    escrow_chain: MemoryEscrowChain,
) -> None:
    _, alice = make_bidder("alice")
    _, bob = make_bidder("bob")
    task = post(market, requester)
    tid = task.task_id
    market.commit(sealed.commit_bid(alice, tid, 100, SALT_A))  # never revealed
    market.commit(sealed.commit_bid(bob, tid, 2_000, SALT_B))  # revealed over budget: refused
    to_reveal(clock, task)
    with pytest.raises(BidRejected):
        market.reveal(sealed.reveal_bid(bob, tid, 2_000, SALT_B))
    to_award(clock, task)
    assert escrow_chain.credit(REQUESTER_ADDRESS) == 0
    outcome = market.award(tid)
    assert outcome.expired and outcome.winner is None and outcome.price == 0

    assert market.task(tid).state == "refunded"
    assert escrow_chain.credit(REQUESTER_ADDRESS) == BUDGET
    record = escrow_chain.escrow(tid)
    assert record is not None and record.state != EscrowState.OPEN
    kinds = [entry.event.kind for entry in entries_of(ledger, tid)]
    assert kinds[-2:] == [TASK_EXPIRED, ESCROW_REFUNDED]
    expired = entries_of(ledger, tid)[-2].event
    assert expired.body["forfeited"] == [alice.did, bob.did]
    with pytest.raises(TransitionError):
        market.award(tid)
    assert market.recover() == []  # nothing left to do, nothing refunded twice
    assert escrow_chain.credit(REQUESTER_ADDRESS) == BUDGET


def test_an_unrevealed_commitment_is_forfeited_and_costs_reputation(
    market: Market,
    ledger: Ledger,
    requester: Ed25519Signer,
    make_bidder: MakeBidder,
    clock: Clock,
) -> None:
    _, alice = make_bidder("alice")
    _, bob = make_bidder("bob")
    _, carol = make_bidder("carol")
    task = post(market, requester)
    tid = task.task_id
    for signer, price, salt in ((alice, 300, SALT_A), (bob, 500, SALT_B), (carol, 200, SALT_C)):
        market.commit(sealed.commit_bid(signer, tid, price, salt))
    to_reveal(clock, task)
    market.reveal(sealed.reveal_bid(alice, tid, 300, SALT_A))
    market.reveal(sealed.reveal_bid(bob, tid, 500, SALT_B))
    before = market.track_records().reputation(carol.did, "arithmetic")
    assert before == Fraction(1, 2)
    to_award(clock, task)
    outcome = market.award(tid)
    assert outcome.winner is not None and outcome.winner.bidder == alice.did
    assert [scored.bid.bidder for scored in outcome.ranking] == [alice.did, bob.did]
    body = entries_of(ledger, tid)[-1].event.body
    assert body["forfeited"] == [carol.did]
    after = market.track_records().reputation(carol.did, "arithmetic")
    assert after < before and after == reputation([], forfeits=1) == Fraction(1, 3)
    assert market.track_records().reputation(carol.did, "python") == Fraction(
        1, 2
    )  # a task needing it
    assert market.track_records().reputation(alice.did, "arithmetic") == Fraction(1, 2)


def test_replay_award_rechecks_the_logged_bids(
    market: Market, requester: Ed25519Signer, make_bidder: MakeBidder, clock: Clock
) -> None:
    _, alice = make_bidder("alice")
    _, bob = make_bidder("bob")
    task = post(market, requester)
    other = post(market, requester)
    tid = task.task_id
    market.commit(sealed.commit_bid(alice, tid, 300, SALT_A))
    market.commit(sealed.commit_bid(bob, tid, 500, SALT_B))
    to_reveal(clock, task)
    market.reveal(sealed.reveal_bid(alice, tid, 300, SALT_A))
    market.reveal(sealed.reveal_bid(bob, tid, 500, SALT_B))
    task = market.task(tid)
    commitments, reveals = market.commitments(tid), market.reveals(tid)
    reputations = {alice.did: Fraction(1, 2), bob.did: Fraction(1, 2)}
    honest, _ = replay_award(task, commitments, reveals, reputations)
    assert honest.winner is not None and honest.winner.bidder == alice.did

    def replay_with(
        commitment: sealed.Commitment | None = None, reveal: sealed.Reveal | None = None
    ) -> str:
        logged_c = list(commitments)
        logged_r = list(reveals)
        if commitment is not None:
            logged_c[0] = AdmittedCommitment(logged_c[0].index, commitment, logged_c[0].exam_score)
        if reveal is not None:
            logged_r[0] = AdmittedReveal(logged_r[0].index, reveal)
        with pytest.raises(BidRejected) as caught:
            replay_award(task, logged_c, logged_r, reputations)
        return caught.value.reason

    # a commitment rewritten to a lower price, validly signed: the reveal no longer opens it
    assert replay_with(sealed.commit_bid(alice, tid, 100, SALT_A)) == "mismatch"
    # a digest edited in place: its signature no longer holds
    tampered = replace(commitments[0].commitment, digest=b"\x00" * 32)
    assert replay_with(tampered) == "bad-signature"
    # a commitment from another task slipped into this one
    assert replay_with(sealed.commit_bid(alice, other.task_id, 300, SALT_A)) == "wrong-task"
    # a reveal from another task, and a reveal with an edited price
    assert replay_with(reveal=sealed.reveal_bid(alice, other.task_id, 300, SALT_A)) == (
        "wrong-task"
    )
    assert replay_with(reveal=replace(reveals[0].reveal, price=Wei(100))) == "bad-signature"
    # a reveal by someone who never committed
    _, carol = make_bidder("carol")
    assert replay_with(reveal=sealed.reveal_bid(carol, tid, 300, SALT_C)) == "unknown-commitment"


# -- a crash between the ledger and the chain -------------------------------------------------


def test_a_crash_between_posting_and_escrow_is_recovered_without_paying_twice(
    market: Market,
    ledger: Ledger,
    requester: Ed25519Signer,
    escrow_chain: MemoryEscrowChain,
    escrow_actions: EscrowActions,
) -> None:
    escrow_chain.lose_broadcast_replies = 1  # the deposit is mined, its reply is lost
    with pytest.raises(ChainUnavailableError):
        post(market, requester)
    [task] = market.tasks()
    assert task.state == "posted" and not task.escrowed
    assert escrow_chain.balance() == BUDGET  # the money did move
    kinds = [entry.event.kind for entry in entries_of(ledger, task.task_id)]
    assert kinds == [TASK_POSTED]

    [reconciled] = escrow_actions.reconcile()
    assert reconciled.status == "confirmed"
    assert market.recover() == [task.task_id]
    recovered = market.task(task.task_id)
    assert recovered.state == "bidding" and recovered.escrowed
    assert market.recover() == []
    assert market.escrow_task(task.task_id, requester_key=REQUESTER_KEY) == recovered
    assert escrow_chain.balance() == BUDGET
    assert [e.name for e in escrow_chain.events(task.task_id)] == ["Opened"]
    kinds = [entry.event.kind for entry in entries_of(ledger, task.task_id)]
    assert kinds == [TASK_POSTED, ESCROW_OPENED]


def test_re_escrowing_a_task_after_a_lost_reply_does_not_deposit_twice(
    market: Market,
    requester: Ed25519Signer,
    escrow_chain: MemoryEscrowChain,
) -> None:
    escrow_chain.lose_broadcast_replies = 1
    with pytest.raises(ChainUnavailableError):
        post(market, requester)
    [task] = market.tasks()
    escrowed = market.escrow_task(task.task_id, requester_key=REQUESTER_KEY)
    assert escrowed.state == "bidding"
    assert escrow_chain.balance() == BUDGET
    assert [e.name for e in escrow_chain.events(task.task_id)] == ["Opened"]
    assert market.recover() == []


def test_no_bid_on_a_task_whose_escrow_failed(
    market: Market,
    ledger: Ledger,
    requester: Ed25519Signer,
    make_bidder: MakeBidder,
    escrow_chain: MemoryEscrowChain,
) -> None:
    _, alice = make_bidder("alice")
    escrow_chain.available = False  # the chain away: nothing is posted that nobody can fund
    with pytest.raises(ChainUnavailableError):
        post(market, requester)
    escrow_chain.available = True
    assert market.tasks() == []
    escrow_chain.auto_mine = False  # the deposit is sent but not mined before the answer
    with pytest.raises(EscrowError, match="not mined yet"):
        post(market, requester)
    escrow_chain.auto_mine = True
    [task] = market.tasks()
    assert task.state == "posted"
    assert open_tasks_for(market, alice.did) == []
    rejected(
        ledger,
        None,
        lambda: market.commit(sealed.commit_bid(alice, task.task_id, 10, SALT_A)),
    )


def test_a_second_process_sees_the_first_ones_bids_revocations_and_lifecycle(
    market: Market,
    ledger: Ledger,
    onboarding: Onboarding,
    settings: Settings,
    escrow: ChainEscrow,
    requester: Ed25519Signer,
    make_bidder: MakeBidder,
    clock: Clock,
) -> None:
    """Another service process (its own engine, caches and bid books) over the same home:
    what it remembers of a task taking bids and of verified credentials never hides a bid,
    a revocation or a task's end logged by the first one."""
    other_ledger = open_ledger(settings)
    other_ledger.clock = clock
    other = Market(other_ledger, open_onboarding(settings, other_ledger), escrow, clock=clock)
    _, alice = make_bidder("alice")
    _, bob = make_bidder("bob")
    task = post(market, requester)
    other.commit(sealed.commit_bid(bob, task.task_id, 300, SALT_A))  # other remembers the task
    market.commit(sealed.commit_bid(alice, task.task_id, 400, SALT_A))
    # alice's bid, admitted here, is in the other's book; a second one is refused there
    assert [c.commitment.bidder for c in other.commitments(task.task_id)] == [bob.did, alice.did]
    rejected(
        other_ledger,
        "second-bid",
        lambda: other.commit(sealed.commit_bid(alice, task.task_id, 350, SALT_A)),
    )
    # a revocation here: the other process refuses carol's bid at once (the credential rows
    # are read on every bid), though it verified her credential a moment ago
    _, carol = make_bidder("carol")
    second = post(market, requester)
    assert other.eligible(carol.did, ["arithmetic"])
    [credential] = onboarding.credentials_of(carol.did)
    onboarding.revoke(credential["id"], "caught cheating")
    rejected(
        other_ledger,
        "not-eligible",
        lambda: other.commit(sealed.commit_bid(carol, second.task_id, 300, SALT_A)),
    )
    # the task's end logged here (no reveal came: it expires) ends it for the other process
    # too: bob's reveal, which it would have admitted before, is refused there
    to_award(clock, task)
    assert market.award(task.task_id).winner is None
    to_reveal(clock, task)  # back in the reveal window: only the task's state now refuses
    rejected(
        other_ledger,
        None,
        lambda: other.reveal(sealed.reveal_bid(bob, task.task_id, 300, SALT_A)),
    )
    assert other.task(task.task_id).state == "refunded"
