"""Reference bidding strategies for the reference agents: pure functions of cost and budget.

Under the second-score rule bidding one's true cost is a weakly dominant strategy (see
`accord.market.auction`), so the true cost is what a rational agent bids there;
`cost_plus_margin` is the simple rule a demo agent uses, and what makes sense under the
first-score rule. It returns None when the bid would exceed the budget: such a bid is refused,
so the agent does not bid.
"""

from __future__ import annotations

import math
from fractions import Fraction

from accord.market.errors import AmountError
from accord.market.money import Wei


def _check_wei(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise AmountError(f"{name} must be a whole, non-negative number of wei, not {value!r}")


def cost_plus_margin(cost: Wei, margin: Fraction, budget: Wei) -> Wei | None:
    """`cost · (1 + margin)`, rounded up to whole wei, or None when that exceeds `budget`.

    Rounding up keeps the margin at least the one asked for. Raises AmountError for a cost or
    budget that is not whole non-negative wei, or a margin that is not a Fraction ≥ 0.
    """
    _check_wei("the cost", cost)
    _check_wei("the budget", budget)
    if not isinstance(margin, Fraction) or margin < 0:
        raise AmountError(f"the margin must be a Fraction ≥ 0, not {margin!r}")
    price = math.ceil(cost * (1 + margin))
    return Wei(price) if price <= budget else None
