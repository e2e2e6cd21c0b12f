"""Reputation: a Bayesian average of the quality an agent delivered, recomputable by anyone.

    reputation = (prior_mean · prior_weight + Σ delivered quality) / (prior_weight + n + forfeits)

Each delivered quality is the evaluator's score of a settled task, a `Fraction` in [0, 1]. A
commitment that was never revealed (a forfeit) counts as one delivery of quality 0: it adds to
the denominator and nothing to the sum, so it always pulls reputation towards 0. With no
history the result is the prior mean; each delivery moves it towards the observed average,
and the prior weight says how many deliveries the prior is worth.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

from market.errors import ReputationError

DEFAULT_PRIOR_MEAN = Fraction(1, 2)
DEFAULT_PRIOR_WEIGHT = 2


def _check_unit(name: str, value: object) -> Fraction:
    if not isinstance(value, Fraction) or not 0 <= value <= 1:
        raise ReputationError(f"{name} must be a Fraction in [0, 1], not {value!r}")
    return value


def _check_count(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ReputationError(f"{name} must be a whole number ≥ {minimum}, not {value!r}")
    return value


def reputation(
    deliveries: Iterable[Fraction],
    prior_mean: Fraction = DEFAULT_PRIOR_MEAN,
    prior_weight: int = DEFAULT_PRIOR_WEIGHT,
    forfeits: int = 0,
) -> Fraction:
    """The Bayesian average of `deliveries`, with `forfeits` counted as deliveries of quality 0.

    The result is a `Fraction` in [0, 1]. Raises ReputationError for a delivery or prior mean
    that is not a Fraction in [0, 1], a prior weight below 1, or a negative forfeit count.
    """
    _check_unit("the prior mean", prior_mean)
    _check_count("the prior weight", prior_weight, 1)
    _check_count("the forfeit count", forfeits, 0)
    total = prior_mean * prior_weight
    count = prior_weight + forfeits
    for delivered in deliveries:
        total += _check_unit("a delivered quality", delivered)
        count += 1
    return total / count
