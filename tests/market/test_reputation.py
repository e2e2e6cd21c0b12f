"""Reputation (market.reputation): a Bayesian average, monotone, lowered by forfeits; track
records per capability, repeated pairs weighing less and less, circles counting for nothing,
and the revocation rule."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accord.market.errors import ReputationError
from accord.market.reputation import (
    PAIR_DECAY,
    REVOCATION_MIN_PARTS,
    Forfeit,
    PartScore,
    SettledWork,
    Unit,
    check_revocation,
    circles,
    fold_track_records,
    forfeits,
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
ONE = Fraction(1)


def work(index: int, requester: str, *parts: tuple[str, str, Fraction | None]) -> SettledWork:
    scored = tuple(PartScore(f"p{k}", c, did, s) for k, (did, c, s) in enumerate(parts))
    return SettledWork(index, f"task-{index}", requester, scored)


def test_the_kth_task_between_a_requester_and_an_agent_weighs_half_the_one_before() -> None:
    records = fold_track_records([work(i, R, (A, "arithmetic", ONE)) for i in range(4)], [])
    units = records.units[A, "arithmetic"]
    assert [u.k for u in units] == [1, 2, 3, 4]
    assert [records.weight(A, u) for u in units] == [
        1,
        Fraction(1, 2),
        Fraction(1, 4),
        Fraction(1, 8),
    ]
    # (1/2 * 2 + 15/8) / (2 + 15/8) = 23/31; one task of another requester moves it as the first did
    assert records.reputation(A, "arithmetic") == Fraction(23, 31)
    assert Fraction(1, 2) == PAIR_DECAY


def test_a_requester_never_weighs_more_than_two_tasks_for_one_agent() -> None:
    many = fold_track_records([work(i, R, (A, "arithmetic", ONE)) for i in range(60)], [])
    two = fold_track_records(
        [work(0, R, (A, "arithmetic", ONE)), work(1, S, (A, "arithmetic", ONE))], []
    )
    assert many.record(A, "arithmetic").weight < 2 == two.record(A, "arithmetic").weight
    assert many.reputation(A, "arithmetic") < two.reputation(A, "arithmetic")


def test_work_within_a_circle_counts_for_nothing_and_failures_outside_it_in_full() -> None:
    """a pays b, b pays c, c pays a: one circle, each worker back at the prior; the work an
    outsider r asked of b still counts, its failures as fully as its passes."""
    ring = [work(0, A, (B, "x", ONE)), work(1, B, (C, "x", ONE)), work(2, C, (A, "x", ONE))]
    records = fold_track_records([*ring, work(3, R, (B, "x", Fraction(0)))], [])
    assert records.circle(A) == records.circle(B) == frozenset({A, B, C})
    assert records.circle(R) == frozenset({R})
    assert records.reputation(A, "x") == records.reputation(C, "x") == Fraction(1, 2)
    assert records.reputation(B, "x") == Fraction(1, 3)  # (1 + 0) / (2 + 1)
    assert records.record(B, "x").parts == 1  # the independent part only
    open_ring = fold_track_records(ring[:2], [])  # before c paid a, nothing came back
    assert open_ring.reputation(B, "x") == open_ring.reputation(C, "x") == Fraction(2, 3)


def test_units_are_per_capability_and_parts_average_within_a_task() -> None:
    records = fold_track_records(
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
    assert records.reputation(A, "arithmetic") == Fraction(7, 12)  # (1 + 3/4) / 3
    assert records.reputation(A, "extraction") == Fraction(3, 8)  # (1 + 1/2) / (3 + 1)
    assert records.reputation(A, "python") == Fraction(1, 3)
    assert (B, "arithmetic") not in records.units and (R, B) in records.pairs
    assert records.reputation_for(A, ["arithmetic", "python"]) == Fraction(11, 24)
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
    forfeits with their task's capabilities from its posting, and nothing at or after `before`."""
    from accord.ledger.events import Event
    from accord.ledger.signing import Ed25519Signer
    from accord.market.tasks import TASK_AWARDED, TASK_EXPIRED, TASK_POSTED, TASK_SETTLED
    from tests.specs import invoice_spec

    operator = Ed25519Signer(b"\x01" * 32).did
    spec = invoice_spec()

    def event(kind: str, subject: str, body: dict[str, object]) -> Event:
        return Event(kind, operator, 0, "2026-03-01T12:00:00.000Z", subject, body)

    settled = work(3, R, (A, "arithmetic", ONE))
    events = [
        (0, event(TASK_POSTED, "task-a", {"spec": spec.to_json()})),
        (1, event(TASK_POSTED, "task-b", {"spec": "not a spec"})),
        (2, event(TASK_AWARDED, "task-a", {"forfeited": [B]})),
        (3, event(TASK_SETTLED, "task-3", {"track_record": settled.to_json()})),
        (4, event(TASK_EXPIRED, "task-b", {"forfeited": [C]})),
        (5, event(TASK_EXPIRED, "task-a", {"forfeited": "not a list"})),
        (6, event(TASK_SETTLED, "task-6", {"quality": {}})),  # from before track records
    ]
    assert settled_works(reversed(events)) == [settled]
    assert forfeits(events) == [Forfeit(2, B, spec.capabilities), Forfeit(4, C, ())]
    assert forfeits(events, before=4) == [Forfeit(2, B, spec.capabilities)]
    records = track_records_from_events(events)
    assert records == fold_track_records([settled], forfeits(events))
    assert records.reputation(A, "arithmetic") == Fraction(2, 3)  # (1 + 1) / (2 + 1)
    reputations = reputations_from_events(events, [A, A, B], ["arithmetic"], before=3)
    assert reputations == {A: Fraction(1, 2), B: records.reputation_for(B, ["arithmetic"])}
