"""The money rules of a task's work, in wei: what a delivery is paid for the checks it passed,
how that pay is shared among the checks, and what a dispute costs (the rules
`accord.market.work`'s docstring states, beside the parts and checks they read).

    paid_share    the weight of the requester's checks that passed over the weight of all
    amount_paid   price * share, rounded down to the wei
    check_shares  each check's share of v(N): `CONTRACTOR_SHARE` for the plan and assembly
                  checks, the rest by weight
    dispute_fee   what one dispute costs the side that loses it (1/20 of the price, >= 1 wei)
    bond_owed     what a requester bonds before one more rejection is taken

Everything here is pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fractions import Fraction

from accord.market.errors import WorkError
from accord.market.work import REQUESTER_KINDS, Check

CONTRACTOR_SHARE = Fraction(1, 5)
"""The share of v(N) the contract holder's plan and assembly checks carry together."""

DISPUTE_FEE_DIVISOR = 20
"""A dispute's fee is 1/20 of the price (at least 1 wei)."""


def dispute_fee(price: int) -> int:
    """Pure: what one dispute costs the side that loses it, in wei."""
    return max(1, price // DISPUTE_FEE_DIVISOR)


def bond_owed(budget: int, price: int, rejected: int, bonded: int) -> int:
    """Pure: the wei a requester must bond from its own account before one more rejection
    is taken, when it has `rejected` review checks already and bonded `bonded` wei: the escrow
    must hold every dispute's fee beyond the price (0 when it does)."""
    return max(0, (rejected + 1) * dispute_fee(price) - (budget - price + bonded))


def paid_share(checks: Sequence[Check], passed: Mapping[str, bool]) -> Fraction:
    """Pure: the share of the price a delivery earns, the weight of the requester's checks
    that passed over the weight of all of them (plan and assembly checks count for nothing).
    0 for a rubric with no requester check."""
    requester = [c for c in checks if c.kind in REQUESTER_KINDS]
    weight = sum(c.weight for c in requester)
    if weight == 0:
        return Fraction(0)
    return Fraction(sum(c.weight for c in requester if passed.get(c.check_id)), weight)


def amount_paid(price: int, share: Fraction) -> int:
    """Pure: `price * share`, rounded down to the wei (what rounding leaves goes back to the
    requester). Raises WorkError for a share outside 0..1 or a negative price."""
    if price < 0 or not 0 <= share <= 1:
        raise WorkError(f"cannot pay {share} of {price} wei")
    scaled = price * share
    return scaled.numerator // scaled.denominator


def check_shares(checks: Sequence[Check]) -> dict[str, Fraction]:
    """Each check's share of v(N): the plan and assembly checks `CONTRACTOR_SHARE / 2` each,
    the requester's checks the rest in proportion to their weights. Sums to exactly 1."""
    requester = [c for c in checks if c.kind not in ("plan", "assembly")]
    contractor = [c for c in checks if c.kind in ("plan", "assembly")]
    total = sum(c.weight for c in requester)
    shares: dict[str, Fraction] = {}
    rest = Fraction(1) - (CONTRACTOR_SHARE if contractor else 0)
    for check in requester:
        shares[check.check_id] = rest * Fraction(check.weight, total)
    for check in contractor:
        shares[check.check_id] = CONTRACTOR_SHARE / len(contractor)
    return shares
