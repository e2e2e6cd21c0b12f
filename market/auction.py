"""Winner determination and payment for a sealed-bid scoring auction: pure, exact, replayable.

A bid is scored as

    quality = w_r · reputation + w_e · exam_score
    score   = quality - price / budget

with every term an exact `Fraction` (reputation and exam score in [0, 1], weights ≥ 0, price
and budget integers of wei). The best score wins. Ties are broken, in order, by the higher
score, the lower price, the earlier commitment (its index in the log), then the bidder DID in
code-point order; so the ranking is a total order and the same bids always clear the same way.

Payment rules (`PaymentRule`):

- ``"second-score"`` (the default in the design): the winner is paid the highest price at which
  it would still have matched the runner-up's score, ``B · (quality_w - score_runner_up)``,
  rounded **down** to whole wei, capped at the budget. Rounding down is exact for integer bids:
  the winner's own bid is an integer no greater than that threshold, so the floor is never below
  it, and the result is the largest integer bid that still wins on score. Because the price
  does not depend on the winner's own bid while it wins, bidding one's true cost is a weakly
  dominant strategy (a threshold mechanism, like Vickrey's second price), with no rounding
  slack.
- ``"first-score"``: the winner is paid its own bid.

The reserve (what a lone bidder is measured against) is the score of the worst admissible bid,
one of zero quality asking the whole budget: ``RESERVE_SCORE = 0 - B/B = -1``. Every admissible
bid scores at least that, so a **lone bidder wins and, under the second-score rule, is paid the
budget** (``B · (quality + 1) ≥ B``, capped at ``B``); under the first-score rule it is paid its
bid. With no bid at all there is no winner: the task expires and its escrow is refunded.

`clear_auction` refuses (raises `InvalidBidError`) a bid above the budget, a bidder that bids
twice, and two bids claiming one commitment index: those are refused at reveal by
`accord.market.sealed`, and an auction that still sees one fails closed rather than guessing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal, get_args

from accord.market.errors import AuctionError, InvalidBidError
from accord.market.money import Wei

PaymentRule = Literal["second-score", "first-score"]
PAYMENT_RULES: tuple[PaymentRule, ...] = get_args(PaymentRule)

RESERVE_SCORE = Fraction(-1)
"""Score of the "no bid" alternative: zero quality at the full budget, 0 - B/B."""

_ZERO = Fraction(0)
_ONE = Fraction(1)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_unit_fraction(value: object) -> bool:
    return isinstance(value, Fraction) and _ZERO <= value <= _ONE


@dataclass(frozen=True)
class ScoringWeights:
    """The task's weights: quality = reputation · `reputation` + exam score · `exam`.

    Raises AuctionError unless both are `Fraction`s ≥ 0.
    """

    reputation: Fraction
    exam: Fraction

    def __post_init__(self) -> None:
        for name in ("reputation", "exam"):
            value = getattr(self, name)
            if not isinstance(value, Fraction) or value < 0:
                raise AuctionError(f"weight {name} must be a Fraction ≥ 0, not {value!r}")


@dataclass(frozen=True)
class RevealedBid:
    """One bid after a valid reveal, with what the scoring rule needs about its bidder.

    Raises InvalidBidError (reason ``malformed``) for a non-string bidder, a price that is not
    a whole non-negative number of wei, a reputation or exam score that is not a `Fraction` in
    [0, 1], or a negative commitment index.
    """

    bidder: str
    price: Wei
    reputation: Fraction
    exam_score: Fraction
    committed_at_index: int

    def __post_init__(self) -> None:
        bidder = self.bidder if isinstance(self.bidder, str) else repr(self.bidder)
        if not isinstance(self.bidder, str) or not self.bidder:
            raise InvalidBidError(bidder, "malformed", "the bidder must be a DID")
        if not _is_int(self.price) or self.price < 0:
            raise InvalidBidError(bidder, "malformed", f"price {self.price!r} is not wei")
        if not _is_unit_fraction(self.reputation):
            raise InvalidBidError(
                bidder, "malformed", f"reputation {self.reputation!r} is not a Fraction in [0, 1]"
            )
        if not _is_unit_fraction(self.exam_score):
            raise InvalidBidError(
                bidder, "malformed", f"exam score {self.exam_score!r} is not a Fraction in [0, 1]"
            )
        if not _is_int(self.committed_at_index) or self.committed_at_index < 0:
            raise InvalidBidError(
                bidder, "malformed", f"commitment index {self.committed_at_index!r} is not ≥ 0"
            )


@dataclass(frozen=True)
class ScoredBid:
    """A bid with its exact quality and score."""

    bid: RevealedBid
    quality: Fraction
    score: Fraction


@dataclass(frozen=True)
class AuctionOutcome:
    """The result of clearing one auction.

    `ranking` holds every bid, best first. `winner` is None when there was no bid (the task
    expires; `price` is then 0). `runner_up` is the second in the ranking, None for a lone
    bidder, whose payment is set against `RESERVE_SCORE` instead. `price` is what the winner is
    paid, always between its own bid and the budget.
    """

    rule: PaymentRule
    budget: Wei
    ranking: tuple[ScoredBid, ...]
    winner: RevealedBid | None
    runner_up: RevealedBid | None
    price: Wei

    @property
    def expired(self) -> bool:
        """True when nobody bid: the task expires and the escrow is refunded."""
        return self.winner is None


def quality(bid: RevealedBid, weights: ScoringWeights) -> Fraction:
    """w_r · reputation + w_e · exam_score, exactly."""
    return weights.reputation * bid.reputation + weights.exam * bid.exam_score


def score(bid: RevealedBid, weights: ScoringWeights, budget: Wei) -> Fraction:
    """quality - price / budget, exactly. Raises AuctionError for a budget below 1 wei."""
    _check_budget(budget)
    return quality(bid, weights) - Fraction(bid.price, budget)


def ranking_key(scored: ScoredBid) -> tuple[Fraction, int, int, str]:
    """Sort key, best first: higher score, lower price, earlier commitment, bidder DID."""
    bid = scored.bid
    return (-scored.score, bid.price, bid.committed_at_index, bid.bidder)


def rank_bids(
    bids: Iterable[RevealedBid], *, budget: Wei, weights: ScoringWeights
) -> tuple[ScoredBid, ...]:
    """Every bid scored and ordered best first.

    Raises InvalidBidError for a bid above the budget (``over-budget``), a bidder bidding twice
    (``second-bid``) or two bids with one commitment index (``malformed``); AuctionError for a
    budget below 1 wei.
    """
    _check_budget(budget)
    bidders: set[str] = set()
    indices: set[int] = set()
    scored: list[ScoredBid] = []
    for bid in bids:
        if not isinstance(bid, RevealedBid):
            raise AuctionError(f"not a RevealedBid: {bid!r}")
        # (1): a bid above the budget is never admissible
        if bid.price > budget:
            raise InvalidBidError(
                bid.bidder, "over-budget", f"price {bid.price} wei exceeds the budget {budget} wei"
            )
        # (2): one bid per bidder
        if bid.bidder in bidders:
            raise InvalidBidError(bid.bidder, "second-bid", "the bidder has already bid")
        # (3): commitment indices are positions in the log, so they are unique
        if bid.committed_at_index in indices:
            raise InvalidBidError(
                bid.bidder,
                "malformed",
                f"commitment index {bid.committed_at_index} is claimed by another bid",
            )
        bidders.add(bid.bidder)
        indices.add(bid.committed_at_index)
        bid_quality = quality(bid, weights)
        scored.append(ScoredBid(bid, bid_quality, bid_quality - Fraction(bid.price, budget)))
    return tuple(sorted(scored, key=ranking_key))


def second_score_price(winner: ScoredBid, runner_up_score: Fraction, budget: Wei) -> Wei:
    """The price at which `winner` would score `runner_up_score`, in whole wei.

    ``min(budget, max(own bid, floor(budget · (quality - runner_up_score))))``: the floor of the
    exact threshold, never below the winner's own bid, never above the budget.
    """
    _check_budget(budget)
    threshold = budget * (winner.quality - runner_up_score)
    return Wei(min(budget, max(winner.bid.price, math.floor(threshold))))


def clear_auction(
    bids: Iterable[RevealedBid],
    *,
    budget: Wei,
    weights: ScoringWeights,
    rule: PaymentRule = "second-score",
) -> AuctionOutcome:
    """Rank the bids, pick the winner and its price by `rule` (see the module docstring).

    Raises InvalidBidError for an inadmissible bid (over the budget, a second bid from one
    bidder, a repeated commitment index), AuctionError for an unknown rule or a budget below
    1 wei.
    """
    if rule not in PAYMENT_RULES:
        raise AuctionError(f"unknown payment rule {rule!r} (use one of {PAYMENT_RULES})")
    ranking = rank_bids(bids, budget=budget, weights=weights)
    match ranking:
        case ():
            return AuctionOutcome(rule, budget, ranking, None, None, Wei(0))
        case (best,):
            runner_up, runner_up_score = None, RESERVE_SCORE
        case (best, second, *_):
            runner_up, runner_up_score = second.bid, second.score
    match rule:
        case "second-score":
            price = second_score_price(best, runner_up_score, budget)
        case "first-score":
            price = best.bid.price
    return AuctionOutcome(rule, budget, ranking, best.bid, runner_up, price)


def _check_budget(budget: Wei) -> None:
    if not _is_int(budget) or budget < 1:
        raise AuctionError(f"the budget must be a whole number of wei ≥ 1, not {budget!r}")


def price_reason(outcome: AuctionOutcome) -> str:
    """Why the winner is paid what it is paid, in a sentence (the CLI and the explorer)."""
    if outcome.winner is None:
        return "no valid bid: the task expires and its escrow is refunded"
    if outcome.rule == "first-score":
        return "the first-score rule pays the winner its own bid"
    if outcome.runner_up is None:
        return (
            "one bidder: under the second-score rule a lone bidder is measured against the "
            "reserve (a zero-quality bid asking the whole budget), so it is paid the budget"
        )
    return (
        "the second-score rule pays the highest price at which the winner's score still "
        "matches the runner-up's"
    )
