"""Reputation (market.reputation): a Bayesian average, monotone, lowered by forfeits."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from market.errors import ReputationError
from market.reputation import reputation

qualities = st.fractions(min_value=0, max_value=1, max_denominator=100)
histories = st.lists(qualities, max_size=20)
priors = st.fractions(min_value=0, max_value=1, max_denominator=10)
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
        reputation(*args)  # type: ignore[arg-type]
