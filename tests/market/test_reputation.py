"""Reputation (market.reputation): a Bayesian average, monotone, lowered by forfeits; track
records per capability, each task weighed by its requester's standing (what it paid agents
outside its circle before), repeated pairs weighing less and less, circles counting for
nothing, fresh requesters lifting nothing, the failing streak, and the revocation rule."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accord.market.errors import ReputationError
from accord.market.reputation import (
    FAILING_STREAK,
    PAIR_DECAY,
    REVOCATION_MIN_PARTS,
    STANDING_WEI,
    Forfeit,
    PartScore,
    Payment,
    SettledWork,
    TrackRecords,
    Unit,
    check_revocation,
    circles,
    fold_track_records,
    forfeits,
    payments,
    reputation,
    reputations_from_events,
    revocation_due,
    revocation_evidence,
    settled_parts,
    settled_work,
    settled_works,
    track_records_from_events,
)


def unit_fractions(max_denominator: int) -> st.SearchStrategy[Fraction]:
    """Rationals in [0, 1] with denominators up to `max_denominator`, as a/b of two integers;
    hypothesis's st.fractions draws the same values several times slower, which was most of
    these properties' time."""
    return st.builds(
        lambda a, b: Fraction(min(a, b), max(a, b)),
        st.integers(0, max_denominator),
        st.integers(1, max_denominator),
    )


qualities = unit_fractions(100)
histories = st.lists(qualities, max_size=20)
priors = unit_fractions(10)
weights = st.integers(min_value=1, max_value=10)


def test_prior_with_no_history() -> None:
    assert reputation([]) == Fraction(1, 2)
    assert reputation([], prior_mean=Fraction(9, 10), prior_weight=5) == Fraction(9, 10)


def test_worked_example() -> None:
    # (1/2 * 2 + 1 + 1/2) / (2 + 2) = 5/8; one forfeit: 5/2 / 5 = 1/2
    assert reputation([Fraction(1), Fraction(1, 2)]) == Fraction(5, 8)
    assert reputation([Fraction(1), Fraction(1, 2)], forfeits=1) == Fraction(1, 2)


def test_a_forfeit_counts_as_a_delivery_of_quality_zero() -> None:
    history = [Fraction(3, 4), Fraction(1, 3)]
    assert reputation(history, forfeits=2) == reputation([*history, Fraction(0), Fraction(0)])


@settings(max_examples=200, deadline=None)
@given(history=histories, prior=priors, weight=weights, forfeits=st.integers(0, 5))
def test_in_unit_interval_and_order_independent(
    history: list[Fraction], prior: Fraction, weight: int, forfeits: int
) -> None:
    value = reputation(history, prior, weight, forfeits)
    assert 0 <= value <= 1
    assert reputation(list(reversed(history)), prior, weight, forfeits) == value


@settings(max_examples=200, deadline=None)
@given(
    history=histories,
    prior=priors,
    weight=weights,
    index=st.integers(min_value=0),
    better=qualities,
)
def test_monotone_in_delivered_quality(
    history: list[Fraction], prior: Fraction, weight: int, index: int, better: Fraction
) -> None:
    if not history:
        history = [Fraction(0)]
    k = index % len(history)
    improved = [*history[:k], max(history[k], better), *history[k + 1 :]]
    before = reputation(history, prior, weight)
    after = reputation(improved, prior, weight)
    assert after >= before
    if improved[k] > history[k]:
        assert after > before


@settings(max_examples=200, deadline=None)
@given(history=histories, prior=priors, weight=weights, forfeits=st.integers(0, 5))
def test_forfeits_lower_reputation(
    history: list[Fraction], prior: Fraction, weight: int, forfeits: int
) -> None:
    before = reputation(history, prior, weight, forfeits)
    after = reputation(history, prior, weight, forfeits + 1)
    assert after <= before
    if before > 0:
        assert after < before


@settings(max_examples=100, deadline=None)
@given(history=st.lists(qualities, min_size=1, max_size=20), prior=priors, weight=weights)
def test_tends_to_the_observed_average(
    history: list[Fraction], prior: Fraction, weight: int
) -> None:
    observed = sum(history, Fraction(0)) / len(history)
    value = reputation(history, prior, weight)
    assert min(prior, observed) <= value <= max(prior, observed)
    # many repetitions of the same history pull it closer to the observed average
    assert abs(reputation(history * 10, prior, weight) - observed) <= abs(value - observed)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (([Fraction(3, 2)],), "a delivered quality"),
        (([0.5],), "a delivered quality"),
        (([Fraction(-1, 2)],), "a delivered quality"),
        (([], Fraction(2)), "the prior mean"),
        (([], Fraction(1, 2), 0), "the prior weight"),
        (([], Fraction(1, 2), True), "the prior weight"),
        (([], Fraction(1, 2), 2, -1), "the forfeit count"),
    ],
)
def test_out_of_range_inputs_refused(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(ReputationError, match=message):
        reputation(*args)


# -- track records: units, pairs, circles (market.reputation) ---------------------------------

R, S, A, B, C = "did:req:r", "did:req:s", "did:agent:a", "did:agent:b", "did:agent:c"
PAID = "did:agent:paid"
"""An agent the requesters of these tests paid before (outside every circle here)."""
ONE = Fraction(1)


def work(index: int, requester: str, *parts: tuple[str, str, Fraction | None]) -> SettledWork:
    scored = tuple(PartScore(f"p{k}", c, did, s) for k, (did, c, s) in enumerate(parts))
    return SettledWork(index, f"task-{index}", requester, scored)


def fold(
    works: list[SettledWork], forfeited: list[Forfeit] | None = None, paid: int = STANDING_WEI
) -> TrackRecords:
    """The track records of `works` and `forfeited`, every requester of them having paid `paid`
    wei to an independent agent before (at index -1): a standing of 1/2 with the default."""
    requesters = sorted({w.requester for w in works})
    return fold_track_records(
        works, forfeited or [], [Payment(-1, r, PAID, paid) for r in requesters if paid]
    )


def test_the_kth_task_between_a_requester_and_an_agent_weighs_half_the_one_before() -> None:
    records = fold([work(i, R, (A, "arithmetic", ONE)) for i in range(4)])
    units = records.units[A, "arithmetic"]
    assert [u.k for u in units] == [1, 2, 3, 4]
    assert [records.standing(R, u.index) for u in units] == [Fraction(1, 2)] * 4
    assert [records.weight(A, u) for u in units] == [
        Fraction(1, 2),
        Fraction(1, 4),
        Fraction(1, 8),
        Fraction(1, 16),
    ]
    # (1/2 * 2 + 15/16) / (2 + 15/16) = 31/47
    assert records.reputation(A, "arithmetic") == Fraction(31, 47)
    assert Fraction(1, 2) == PAIR_DECAY


def test_a_requester_never_weighs_more_than_two_tasks_for_one_agent() -> None:
    many = fold([work(i, R, (A, "arithmetic", ONE)) for i in range(60)], paid=10**30)
    two = fold([work(0, R, (A, "arithmetic", ONE)), work(1, S, (A, "arithmetic", ONE))])
    assert many.record(A, "arithmetic").weight < 2
    assert two.record(A, "arithmetic").weight == 1  # two tasks at a standing of 1/2
    assert many.reputation(A, "arithmetic") < 1


def test_work_within_a_circle_counts_for_nothing_and_failures_outside_it_in_full() -> None:
    """a pays b, b pays c, c pays a: one circle, each worker back at the prior; the work an
    outsider r asked of b still counts, its failures as fully as its passes."""
    ring = [work(0, A, (B, "x", ONE)), work(1, B, (C, "x", ONE)), work(2, C, (A, "x", ONE))]
    records = fold([*ring, work(3, R, (B, "x", Fraction(0)))])
    assert records.circle(A) == records.circle(B) == frozenset({A, B, C})
    assert records.circle(R) == frozenset({R})
    assert records.reputation(A, "x") == records.reputation(C, "x") == Fraction(1, 2)
    assert records.reputation(B, "x") == Fraction(2, 5)  # (1 + 0) / (2 + 1/2)
    assert records.record(B, "x").parts == 1  # the independent part only
    open_ring = fold(ring[:2])  # before c paid a, nothing came back
    assert open_ring.reputation(B, "x") == open_ring.reputation(C, "x") == Fraction(3, 5)


def test_units_are_per_capability_and_parts_average_within_a_task() -> None:
    records = fold(
        [
            work(
                5,
                R,
                (A, "arithmetic", ONE),
                (A, "arithmetic", Fraction(1, 2)),
                (A, "extraction", Fraction(1, 2)),
                (B, "arithmetic", None),  # no check of the requester read it: no evidence
            )
        ],
        [Forfeit(9, A, ("extraction", "python"))],
    )
    assert records.units[A, "arithmetic"] == (Unit(5, R, 1, 2, Fraction(3, 2)),)
    assert records.reputation(A, "arithmetic") == Fraction(11, 20)  # (1 + 3/8) / (2 + 1/2)
    assert records.reputation(A, "extraction") == Fraction(5, 14)  # (1 + 1/4) / (2 + 1/2 + 1)
    assert records.reputation(A, "python") == Fraction(1, 3)
    assert (B, "arithmetic") not in records.units and (R, B) in records.pairs
    assert records.reputation_for(A, ["arithmetic", "python"]) == Fraction(53, 120)
    assert records.capabilities_of(A) == ["arithmetic", "extraction", "python"]


def test_settled_parts_score_each_part_by_the_requester_checks_reading_it() -> None:
    parts = [("sum", "arithmetic"), ("tax", "arithmetic"), ("fields", "extraction"), ("x", "y")]
    checks = [("sum-right", 3, ("sum",)), ("agree", 1, ("sum", "fields")), ("f", 2, ("fields",))]
    passed = {"sum-right": True, "agree": False, "f": True}
    producers = {"sum": A, "tax": B, "fields": A, "_plan": C}
    assert settled_parts(parts, checks, producers, passed) == (
        PartScore("sum", "arithmetic", A, Fraction(3, 4)),
        PartScore("tax", "arithmetic", B, None),
        PartScore("fields", "extraction", A, Fraction(2, 3)),
    )


def test_a_track_record_round_trips_through_its_logged_form() -> None:
    logged = work(7, R, (A, "arithmetic", Fraction(2, 3)), (B, "extraction", None))
    assert settled_work(7, "task-7", {"track_record": logged.to_json()}) == logged
    assert settled_work(7, "task-7", {"quality": {}}) is None  # a log from before
    bad = logged.to_json()
    bad["parts"][0]["score"] = "3/2"
    assert settled_work(7, "task-7", {"track_record": bad}) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), max_size=30))
def test_circles_are_the_nodes_each_reaching_the_other(edges: list[tuple[int, int]]) -> None:
    pairs = [(f"n{a}", f"n{b}") for a, b in edges]
    found = circles(pairs)
    nodes = {n for pair in pairs for n in pair}

    def reach(start: str) -> set[str]:
        seen, todo = {start}, [start]
        while todo:
            node = todo.pop()
            for source, target in pairs:
                if source == node and target not in seen:
                    seen.add(target)
                    todo.append(target)
        return seen

    reaches = {n: reach(n) for n in nodes}
    for node in nodes:
        assert found[node] == frozenset(
            m for m in nodes if m in reaches[node] and node in reaches[m]
        )


# -- revocation -------------------------------------------------------------------------------


def failing(count: int, score: Fraction, requester: str = R) -> list[SettledWork]:
    return [work(i, requester, (A, "arithmetic", score)) for i in range(count)]


def test_a_revocation_is_due_below_the_threshold_over_enough_independent_parts() -> None:
    threshold = Fraction(4, 5)
    nine = fold_track_records(failing(REVOCATION_MIN_PARTS - 1, Fraction(0)), [])
    assert not revocation_due(nine.record(A, "arithmetic"), threshold)  # too few parts yet
    ten = fold_track_records(failing(REVOCATION_MIN_PARTS, Fraction(3, 4)), [])
    record = ten.record(A, "arithmetic")
    assert record.parts == 10 and record.pass_rate == Fraction(3, 4)
    assert revocation_due(record, threshold)
    assert not revocation_due(record, Fraction(3, 4))  # at the threshold is a pass
    evidence = revocation_evidence(A, record, threshold, "task-9", 9)
    check_revocation(evidence, ten, threshold)
    with pytest.raises(ReputationError, match="the log gives"):
        check_revocation({**evidence, "parts": 11}, ten, threshold)
    with pytest.raises(ReputationError, match="not below"):
        early = revocation_evidence(A, nine.record(A, "arithmetic"), threshold, "task-8", 8)
        check_revocation(early, nine, threshold)
    with pytest.raises(ReputationError, match="no rule"):
        check_revocation({**evidence, "rule": "mine"}, ten, threshold)


def test_a_circle_cannot_revoke_nor_shield_its_members() -> None:
    """Parts done for a requester in the agent's circle are not independent: they neither
    count towards the minimum nor dilute the outsiders' failures."""
    ring = [work(100 + i, B, (A, "arithmetic", Fraction(0))) for i in range(12)]
    ring.append(work(200, A, (B, "arithmetic", ONE)))  # b and a pay each other
    records = fold_track_records(ring, [])
    assert records.record(A, "arithmetic").parts == 0
    assert not revocation_due(records.record(A, "arithmetic"), Fraction(4, 5))


# -- the fold over the log's verified events ----------------------------------------------------


def test_track_records_fold_from_verified_events_alone() -> None:
    """The reputation the auction scored by is a pure fold of the log's events: settled work,
    what it paid (`settlement.computed`, dated by its `task.settled`), forfeits with their
    task's capabilities from its posting, and nothing at or after `before`."""
    from accord.ledger.events import Event
    from accord.ledger.signing import Ed25519Signer
    from accord.market.tasks import (
        SETTLEMENT_COMPUTED,
        TASK_AWARDED,
        TASK_EXPIRED,
        TASK_POSTED,
        TASK_SETTLED,
    )
    from tests.specs import invoice_spec

    operator = Ed25519Signer(b"\x01" * 32).did
    spec = invoice_spec()

    def event(kind: str, subject: str, body: dict[str, object]) -> Event:
        return Event(kind, operator, 0, "2026-03-01T12:00:00.000Z", subject, body)

    settled = work(3, R, (A, "arithmetic", ONE))
    again = work(9, R, (A, "arithmetic", ONE))
    paid = {A: str(STANDING_WEI), R: "5", B: "0"}  # the requester and nothing paid left out
    events = [
        (0, event(TASK_POSTED, "task-a", {"spec": spec.to_json()})),
        (1, event(TASK_POSTED, "task-b", {"spec": "not a spec"})),
        (2, event(SETTLEMENT_COMPUTED, "task-3", {"payouts": paid})),
        (3, event(TASK_SETTLED, "task-3", {"track_record": settled.to_json()})),
        (4, event(TASK_EXPIRED, "task-b", {"forfeited": [C]})),
        (5, event(TASK_EXPIRED, "task-a", {"forfeited": "not a list"})),
        (6, event(TASK_SETTLED, "task-6", {"quality": {}})),  # from before track records
        (7, event(TASK_AWARDED, "task-a", {"forfeited": [B]})),
        (8, event(SETTLEMENT_COMPUTED, "task-9", {"payouts": {A: "not wei"}})),
        (9, event(TASK_SETTLED, "task-9", {"track_record": again.to_json()})),
    ]
    assert settled_works(reversed(events)) == [settled, again]
    assert payments(events) == [Payment(3, R, A, STANDING_WEI)]
    assert payments(events, before=3) == []
    assert forfeits(events) == [Forfeit(7, B, spec.capabilities), Forfeit(4, C, ())]
    assert forfeits(events, before=7) == [Forfeit(4, C, ())]
    records = track_records_from_events(events)
    assert records == fold_track_records([settled, again], forfeits(events), payments(events))
    # a fresh requester's first task weighs nothing; once it paid an independent agent 0.1
    # ether its next one weighs 1/2 of PAIR_DECAY: (1 + 1/4) / (2 + 1/4)
    assert records.standing(R, 3) == 0 and records.standing(R, 9) == Fraction(1, 2)
    assert records.reputation(A, "arithmetic") == Fraction(5, 9)
    reputations = reputations_from_events(events, [A, A, B], ["arithmetic"], before=9)
    assert reputations == {A: Fraction(1, 2), B: Fraction(1, 3)}  # b forfeited at 7


# -- standing: fresh identities lift nothing ----------------------------------------------------


def lift(records: TrackRecords, agent: str = A) -> Fraction:
    return records.reputation(agent, "x") - Fraction(1, 2)


def test_five_fresh_requesters_lift_an_agent_less_than_one_established_task() -> None:
    """The done-when (K = 5): before, K throwaway requesters lifted an agent to
    (1 + 1.5K) / (2 + 1.5K), 0.89; now their tasks weigh nothing, while one passing task of a
    requester that had paid an independent agent 1 ether (a standing of 10/11) lifts it."""
    fresh = [work(i, f"did:req:fresh{i}", (A, "x", ONE)) for i in range(5)]
    sybils = fold_track_records(fresh, [])
    established = fold_track_records(
        [work(10, R, (A, "x", ONE))], [], [Payment(1, R, PAID, 10**18)]
    )
    assert lift(sybils) == 0
    assert established.standing(R, 10) == Fraction(10, 11)
    assert lift(established) == Fraction(5, 32)  # (1 + 10/11) / (2 + 10/11) - 1/2
    assert lift(sybils) < lift(established)


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 12),
    st.integers(1, 10**20),
    st.lists(st.tuples(st.integers(0, 3), qualities), max_size=6),
)
def test_fresh_requesters_together_lift_less_than_one_established_task(
    k: int, paid: int, history: list[tuple[int, Fraction]]
) -> None:
    """Whatever the agent's record so far (tasks of established requesters), K fresh
    requesters each posting it a passing task lift it by less than one passing task of a
    requester that paid independents before: the sum of the fresh lifts is 0, the established
    task's above it."""
    base = [work(i, f"did:req:known{n}", (A, "x", q)) for i, (n, q) in enumerate(history)]
    known = [Payment(-1, f"did:req:known{n}", PAID, STANDING_WEI) for n in range(4)]
    before = fold_track_records(base, [], known)
    fresh = [work(100 + i, f"did:req:fresh{i}", (A, "x", ONE)) for i in range(k)]
    with_fresh = fold_track_records([*base, *fresh], [], known)
    one = [work(100, R, (A, "x", ONE))]
    with_one = fold_track_records([*base, *one], [], [*known, Payment(-1, R, PAID, paid)])
    fresh_lift = with_fresh.reputation(A, "x") - before.reputation(A, "x")
    assert fresh_lift == 0 < with_one.reputation(A, "x") - before.reputation(A, "x")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 10**19)), max_size=12))
def test_standing_is_in_zero_one_and_grows_with_what_was_paid(
    paid: list[tuple[int, int]],
) -> None:
    """standing = paid / (paid + STANDING_WEI): 0 before any payment, never 1, never falling."""
    records = fold_track_records(
        [], [], [Payment(i, R, f"did:agent:{n}", wei) for i, (n, wei) in enumerate(paid)]
    )
    standings = [records.standing(R, i) for i in range(len(paid) + 1)]
    assert standings[0] == 0 and all(0 <= s < 1 for s in standings)
    assert standings == sorted(standings)
    total = sum(wei for _, wei in paid)
    assert standings[-1] == Fraction(total, total + STANDING_WEI)


def test_paying_ones_own_circle_earns_no_standing() -> None:
    """r and b pay each other: the wei r paid b came back, so r stays fresh for a."""
    works = [work(1, R, (B, "x", ONE)), work(2, B, (R, "x", ONE)), work(3, R, (A, "x", ONE))]
    records = fold_track_records(works, [], [Payment(1, R, B, 10**18), Payment(2, B, R, 10**18)])
    assert records.circle(R) == frozenset({R, B})
    assert records.standing(R, 3) == 0 and lift(records) == 0
    outside = fold_track_records(works[::2], [], [Payment(1, R, B, 10**18)])
    assert outside.standing(R, 3) == Fraction(10, 11)


# -- the failing streak ---------------------------------------------------------------------------


def test_an_agent_whose_last_three_independent_parts_failed_is_failing() -> None:
    failed = [work(i, R, (A, "x", Fraction(0))) for i in range(FAILING_STREAK)]
    assert fold(failed).failing(A, "x")
    assert not fold(failed[:-1]).failing(A, "x")  # two are not yet a streak
    assert not fold(failed).failing(A, "y")  # per capability
    passed_last = fold([*failed, work(9, S, (A, "x", Fraction(1, 3)))])
    assert not passed_last.failing(A, "x")  # any part scored above 0 ends the streak
    one_task = fold([work(1, R, *[(A, "x", Fraction(0))] * FAILING_STREAK)])
    assert one_task.failing(A, "x")  # three parts of one task failing count too
    mixed = fold([*failed[:2], work(5, R, (A, "x", Fraction(0)), (A, "x", ONE))])
    assert not mixed.failing(A, "x")  # in which order inside a task is not recorded
    # a part failing lowers its producer's record through its mean score
    assert fold(failed).reputation(A, "x") < Fraction(1, 2)


def test_failures_inside_the_agents_circle_do_not_make_it_failing() -> None:
    """b and a pay each other: b's tasks failing a are the circle's own business, and they
    neither start nor end a streak of outsiders' failures."""
    circle = [work(1, B, (A, "x", Fraction(0))), work(2, A, (B, "x", ONE))]
    inside = [work(3 + i, B, (A, "x", Fraction(0))) for i in range(FAILING_STREAK)]
    assert not fold([*circle, *inside]).failing(A, "x")
    outside = [work(10 + i, R, (A, "x", Fraction(0))) for i in range(FAILING_STREAK)]
    passing_inside = work(20, B, (A, "x", ONE))
    assert fold([*circle, *outside, passing_inside]).failing(A, "x")
