"""Winner determination and payment (market.auction) and the reference strategies.

The bulk checks use a seeded `random.Random`, not hypothesis: ten thousand auctions run in a
second or two that way, and a failure names its seed and instance index.
"""

from __future__ import annotations

import random
from fractions import Fraction

import pytest

from accord.market.auction import (
    RESERVE_SCORE,
    AuctionOutcome,
    PaymentRule,
    RevealedBid,
    ScoredBid,
    ScoringWeights,
    clear_auction,
    ranking_key,
    score,
)
from accord.market.errors import AmountError, AuctionError, InvalidBidError
from accord.market.money import Wei
from accord.market.strategies import cost_plus_margin

WEIGHTS = ScoringWeights(reputation=Fraction(1, 2), exam=Fraction(1, 2))


def bid(
    bidder: str,
    price: int,
    *,
    reputation: Fraction = Fraction(1, 2),
    exam: Fraction = Fraction(1, 2),
    index: int = 0,
) -> RevealedBid:
    return RevealedBid(bidder, Wei(price), reputation, exam, index)


# -- random instances ------------------------------------------------------------------------


def random_budget(rng: random.Random) -> Wei:
    return Wei(rng.choice([1, 7, 100, 1000, 10**6, 10**18, rng.randint(1, 10**20)]))


def random_weights(rng: random.Random) -> ScoringWeights:
    return ScoringWeights(Fraction(rng.randint(0, 4), 4), Fraction(rng.randint(0, 4), 4))


def random_unit(rng: random.Random) -> Fraction:
    # small denominators make equal qualities (and so ties) common
    denominator = rng.choice([1, 2, 4, 10, 1000])
    return Fraction(rng.randint(0, denominator), denominator)


def random_price(rng: random.Random, budget: int) -> int:
    return rng.choice([0, budget, budget // 2, budget // 3, rng.randint(0, budget)])


def random_bids(rng: random.Random, budget: int, count: int) -> list[RevealedBid]:
    indices = rng.sample(range(count * 3), count)
    names = rng.sample(range(1000), count)
    return [
        RevealedBid(
            f"did:example:{names[k]}",
            Wei(random_price(rng, budget)),
            random_unit(rng),
            random_unit(rng),
            indices[k],
        )
        for k in range(count)
    ]


# -- the brute-force reference, written independently and naively -------------------------------


def brute_force_winner(
    bids: list[RevealedBid], budget: int, weights: ScoringWeights
) -> RevealedBid | None:
    best = None
    best_score = None
    for candidate in bids:
        quality = weights.reputation * candidate.reputation + weights.exam * candidate.exam_score
        candidate_score = quality - Fraction(candidate.price, budget)
        if best is None or best_score is None:
            better = True
        elif candidate_score != best_score:
            better = candidate_score > best_score
        elif candidate.price != best.price:
            better = candidate.price < best.price
        elif candidate.committed_at_index != best.committed_at_index:
            better = candidate.committed_at_index < best.committed_at_index
        else:
            better = candidate.bidder < best.bidder
        if better:
            best, best_score = candidate, candidate_score
    return best


def test_winner_equals_brute_force_over_10000_random_auctions() -> None:
    rng = random.Random(20240401)
    checked = 0
    for instance in range(10_000):
        budget = random_budget(rng)
        weights = random_weights(rng)
        bids = random_bids(rng, budget, rng.randint(0, 8))
        rule: PaymentRule = rng.choice(["second-score", "first-score"])
        outcome = clear_auction(bids, budget=budget, weights=weights, rule=rule)
        expected = brute_force_winner(bids, budget, weights)
        assert outcome.winner == expected, f"instance {instance}"
        assert len(outcome.ranking) == len(bids)
        if expected is None:
            assert outcome.price == 0 and outcome.expired
            continue
        checked += 1
        # the payment always lies between the winner's own bid and the budget
        assert expected.price <= outcome.price <= budget, f"instance {instance}"
        if rule == "first-score":
            assert outcome.price == expected.price
            continue
        # second score: at `price` the winner still matches the runner-up; one wei more loses
        others = [b for b in bids if b is not expected]
        runner_up = max((score(b, weights, budget) for b in others), default=RESERVE_SCORE)
        winner_quality = score(expected, weights, budget) + Fraction(expected.price, budget)
        assert winner_quality - Fraction(outcome.price, budget) >= runner_up
        if outcome.price < budget:
            assert winner_quality - Fraction(outcome.price + 1, budget) < runner_up
        if others:
            assert outcome.runner_up is not None
            assert score(outcome.runner_up, weights, budget) == runner_up
        else:
            assert outcome.runner_up is None and outcome.price == budget
    assert checked > 8_000


# -- truthfulness under the second-score rule -------------------------------------------------


def utility(outcome: AuctionOutcome, bidder: str, cost: int) -> int:
    if outcome.winner is None or outcome.winner.bidder != bidder:
        return 0
    return outcome.price - cost


def rebid(
    me: RevealedBid, price: int, others: list[RevealedBid], budget: Wei, weights: ScoringWeights
) -> AuctionOutcome:
    """Clear the auction with `me` bidding `price` instead, second score."""
    mine = RevealedBid(me.bidder, Wei(price), me.reputation, me.exam_score, me.committed_at_index)
    return clear_auction([mine, *others], budget=budget, weights=weights, rule="second-score")


def deviations(cost: int, budget: int) -> set[int]:
    grid = {0, budget, cost - 1, cost + 1}
    for percent in (1, 10, 50):
        grid.add(cost * (100 + percent) // 100)
        grid.add(cost * (100 - percent) // 100)
    return {price for price in grid if 0 <= price <= budget and price != cost}


def test_second_score_truthful_bidding_is_dominant() -> None:
    """No deviation on the grid earns a bidder more than bidding its true cost, whatever the
    others bid. Exact: the price is the floor of the threshold, which no integer bid beats, so
    there is no rounding slack to allow."""
    rng = random.Random(77)
    comparisons = 0
    for instance in range(4_000):
        budget = random_budget(rng)
        weights = random_weights(rng)
        bids = random_bids(rng, budget, rng.randint(1, 5))
        # bidder 0 has a true cost; the others bid anything (dominance holds against any bids)
        me = bids[0]
        cost = random_price(rng, budget)
        others = bids[1:]

        truthful_utility = utility(rebid(me, cost, others, budget, weights), me.bidder, cost)
        assert truthful_utility >= 0, f"instance {instance}"
        for price in deviations(cost, budget):
            deviating = utility(rebid(me, price, others, budget, weights), me.bidder, cost)
            assert deviating <= truthful_utility, (instance, cost, price)
            comparisons += 1
    assert comparisons > 20_000


def test_a_cost_above_the_budget_gains_nothing_by_bidding() -> None:
    """Truthful play there is not bidding (utility 0); any admissible bid that wins is paid at
    most the budget, below the cost."""
    rng = random.Random(5)
    for _ in range(500):
        budget = random_budget(rng)
        cost = budget + rng.randint(1, budget)
        assert truthful(Wei(cost), budget) is None
        others = random_bids(rng, budget, rng.randint(0, 3))
        for price in {0, budget, budget // 2}:
            mine = bid("did:example:me", price, index=99)
            outcome = clear_auction([mine, *others], budget=budget, weights=WEIGHTS)
            assert utility(outcome, "did:example:me", cost) <= 0


def test_first_score_is_not_truthful() -> None:
    """A sanity check that the truthfulness test can fail: under first score a winner bidding
    its cost earns nothing, and shading up earns more."""
    cost, budget = 100, 1000
    me = bid("did:example:a", cost, index=0)
    rival = bid("did:example:b", 500, index=1)
    honest = clear_auction([me, rival], budget=Wei(budget), weights=WEIGHTS, rule="first-score")
    shaded = clear_auction(
        [bid("did:example:a", 400, index=0), rival],
        budget=Wei(budget),
        weights=WEIGHTS,
        rule="first-score",
    )
    assert utility(honest, "did:example:a", cost) == 0
    assert utility(shaded, "did:example:a", cost) == 300


# -- named cases ------------------------------------------------------------------------------


def test_second_score_price_worked_example() -> None:
    # a: quality 9/10, bids 300 of 1000 -> score 3/5; b: quality 1/2, bids 200 -> score 3/10
    weights = ScoringWeights(reputation=Fraction(1), exam=Fraction(0))
    a = bid("did:example:a", 300, reputation=Fraction(9, 10), index=0)
    b = bid("did:example:b", 200, reputation=Fraction(1, 2), index=1)
    outcome = clear_auction([b, a], budget=Wei(1000), weights=weights)
    assert outcome.winner == a and outcome.runner_up == b
    # 1000 * (9/10 - 3/10) = 600: at 600 a's score equals b's
    assert outcome.price == 600
    assert [s.bid for s in outcome.ranking] == [a, b]
    assert [s.score for s in outcome.ranking] == [Fraction(3, 5), Fraction(3, 10)]


def test_second_score_price_rounds_down_to_whole_wei() -> None:
    weights = ScoringWeights(reputation=Fraction(1), exam=Fraction(0))
    a = bid("did:example:a", 0, reputation=Fraction(1, 3), index=0)
    b = bid("did:example:b", 10, reputation=Fraction(0), index=1)
    # threshold 10 * (1/3 - (-1)) = 40/3 = 13.33 -> 13 wei
    outcome = clear_auction([a, b], budget=Wei(10), weights=weights)
    assert outcome.winner == a and outcome.price == 10  # capped at the budget
    c = bid("did:example:c", 5, reputation=Fraction(0), index=1)
    # threshold 10 * (1/3 - (-1/2)) = 25/3 = 8.33 -> 8 wei
    assert clear_auction([a, c], budget=Wei(10), weights=weights).price == 8


def test_second_score_price_capped_at_the_budget() -> None:
    weights = ScoringWeights(reputation=Fraction(1), exam=Fraction(0))
    strong = bid("did:example:a", 900, reputation=Fraction(1), index=0)
    weak = bid("did:example:b", 1000, reputation=Fraction(0), index=1)
    outcome = clear_auction([strong, weak], budget=Wei(1000), weights=weights)
    assert outcome.winner == strong and outcome.price == 1000


def test_equal_scores_pay_the_own_bid() -> None:
    a = bid("did:example:a", 100, index=0)
    b = bid("did:example:b", 100, index=1)
    outcome = clear_auction([b, a], budget=Wei(1000), weights=WEIGHTS)
    assert outcome.winner == a and outcome.runner_up == b and outcome.price == 100


def test_ties_higher_score_then_lower_price_then_earlier_commitment_then_did() -> None:
    weights = ScoringWeights(reputation=Fraction(1), exam=Fraction(0))
    budget = Wei(10)
    # equal scores (1/2 - 1/10 == 3/5 - 2/10) but different prices: the lower price wins
    cheap = bid("did:example:z", 1, reputation=Fraction(1, 2), index=9)
    dear = bid("did:example:a", 2, reputation=Fraction(3, 5), index=0)
    assert score(cheap, weights, budget) == score(dear, weights, budget)
    assert clear_auction([dear, cheap], budget=budget, weights=weights).winner == cheap
    # equal score and price: the earlier commitment wins
    early = bid("did:example:z", 1, index=3)
    late = bid("did:example:a", 1, index=4)
    assert clear_auction([late, early], budget=budget, weights=weights).winner == early
    # the DID comes last: clear_auction refuses two bids with one commitment index, so it only
    # decides in the sort key itself
    same_a = ScoredBid(bid("did:example:a", 1, index=3), Fraction(1), Fraction(0))
    same_b = ScoredBid(bid("did:example:b", 1, index=3), Fraction(1), Fraction(0))
    assert sorted([same_b, same_a], key=ranking_key) == [same_a, same_b]


def test_ranking_is_independent_of_input_order() -> None:
    rng = random.Random(3)
    for _ in range(200):
        budget = random_budget(rng)
        bids = random_bids(rng, budget, 6)
        first = clear_auction(bids, budget=budget, weights=WEIGHTS)
        rng.shuffle(bids)
        assert clear_auction(bids, budget=budget, weights=WEIGHTS) == first


@pytest.mark.parametrize("price", [0, 1, 500, 1000])
def test_lone_bidder_is_paid_the_budget_under_second_score(price: int) -> None:
    alone = bid("did:example:a", price)
    outcome = clear_auction([alone], budget=Wei(1000), weights=WEIGHTS)
    assert outcome.winner == alone and outcome.runner_up is None
    assert outcome.price == 1000


def test_lone_bidder_is_paid_its_bid_under_first_score() -> None:
    alone = bid("did:example:a", 123)
    outcome = clear_auction([alone], budget=Wei(1000), weights=WEIGHTS, rule="first-score")
    assert outcome.winner == alone and outcome.price == 123


@pytest.mark.parametrize("rule", ["second-score", "first-score"])
def test_no_bids_no_winner_the_task_expires(rule: PaymentRule) -> None:
    outcome = clear_auction([], budget=Wei(1000), weights=WEIGHTS, rule=rule)
    assert outcome.winner is None and outcome.runner_up is None
    assert outcome.price == 0 and outcome.ranking == () and outcome.expired


def test_over_budget_bid_refused() -> None:
    with pytest.raises(InvalidBidError, match="over-budget: bid of did:example:b") as info:
        clear_auction(
            [bid("did:example:a", 10), bid("did:example:b", 1001, index=1)],
            budget=Wei(1000),
            weights=WEIGHTS,
        )
    assert info.value.reason == "over-budget" and info.value.bidder == "did:example:b"
    assert isinstance(info.value, AuctionError)


def test_second_bid_and_shared_commitment_index_refused() -> None:
    with pytest.raises(InvalidBidError, match="second-bid") as info:
        clear_auction(
            [bid("did:example:a", 10, index=0), bid("did:example:a", 20, index=1)],
            budget=Wei(1000),
            weights=WEIGHTS,
        )
    assert info.value.reason == "second-bid"
    with pytest.raises(InvalidBidError, match="commitment index 0") as info:
        clear_auction(
            [bid("did:example:a", 10, index=0), bid("did:example:b", 20, index=0)],
            budget=Wei(1000),
            weights=WEIGHTS,
        )
    assert info.value.reason == "malformed"


@pytest.mark.parametrize(
    "make",
    [
        lambda: RevealedBid("did:example:a", Wei(-1), Fraction(0), Fraction(0), 0),
        lambda: RevealedBid("did:example:a", 1.5, Fraction(0), Fraction(0), 0),  # type: ignore[arg-type]
        lambda: RevealedBid("did:example:a", True, Fraction(0), Fraction(0), 0),  # type: ignore[arg-type]
        lambda: RevealedBid("did:example:a", Wei(1), 0.5, Fraction(0), 0),  # type: ignore[arg-type]
        lambda: RevealedBid("did:example:a", Wei(1), Fraction(3, 2), Fraction(0), 0),
        lambda: RevealedBid("did:example:a", Wei(1), Fraction(0), Fraction(-1, 2), 0),
        lambda: RevealedBid("did:example:a", Wei(1), Fraction(0), Fraction(0), -1),
        lambda: RevealedBid("", Wei(1), Fraction(0), Fraction(0), 0),
    ],
)
def test_malformed_bids_refused(make: object) -> None:
    with pytest.raises(InvalidBidError, match="malformed") as info:
        make()  # type: ignore[operator]
    assert info.value.reason == "malformed"


def test_bad_weights_budget_and_rule_refused() -> None:
    with pytest.raises(AuctionError, match="weight reputation"):
        ScoringWeights(Fraction(-1), Fraction(1))
    with pytest.raises(AuctionError, match="weight exam"):
        ScoringWeights(Fraction(1), 0.5)  # type: ignore[arg-type]
    with pytest.raises(AuctionError, match="budget"):
        clear_auction([], budget=Wei(0), weights=WEIGHTS)
    with pytest.raises(AuctionError, match="unknown payment rule"):
        clear_auction([], budget=Wei(1), weights=WEIGHTS, rule="vickrey")  # type: ignore[arg-type]


# -- reference strategies ---------------------------------------------------------------------


def test_cost_plus_margin_rounds_up_and_respects_the_budget() -> None:
    assert cost_plus_margin(Wei(100), Fraction(1, 10), Wei(1000)) == 110
    assert cost_plus_margin(Wei(101), Fraction(1, 10), Wei(1000)) == 112  # 111.1 -> 112
    assert cost_plus_margin(Wei(0), Fraction(1, 2), Wei(1000)) == 0
    assert cost_plus_margin(Wei(1000), Fraction(0), Wei(1000)) == 1000
    assert cost_plus_margin(Wei(1000), Fraction(1, 1000), Wei(1000)) is None
    with pytest.raises(AmountError):
        cost_plus_margin(Wei(1), Fraction(-1, 2), Wei(10))
    with pytest.raises(AmountError):
        cost_plus_margin(Wei(-1), Fraction(1, 2), Wei(10))


def truthful(cost: Wei, budget: Wei) -> Wei | None:
    """Truthful play, the strategy the tests above measure others against: bid the true cost,
    or not at all when it exceeds the budget."""
    return cost if cost <= budget else None


def test_truthful_bids_the_cost() -> None:
    assert truthful(Wei(5), Wei(10)) == 5
    assert truthful(Wei(10), Wei(10)) == 10
    assert truthful(Wei(11), Wei(10)) is None
