"""EIP-1559 fees under a ceiling, and the bump a replacement needs (pure).

maxFeePerGas = min(2 * baseFee + tip, ceiling); the tip is the node's eth_maxPriorityFeePerGas
or a configured default. A transaction replaced at the same nonce raises both its maxFee and its
tip by at least 12.5 % (the rule geth and anvil enforce), within the ceiling. Amounts are
integers of wei per gas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from accord.ledger.errors import FeesAboveCeilingError

DEFAULT_MAX_FEE_GWEI = 500
WEI_PER_GWEI = 10**9
#: A replacement must raise both fees by at least 12.5 % (geth's and anvil's rule).
BUMP_NUMERATOR = 9
BUMP_DENOMINATOR = 8


@dataclass(frozen=True)
class Fees:
    """EIP-1559 fees of one transaction, wei per gas."""

    max_fee: int
    tip: int


@dataclass(frozen=True)
class FeeMarket:
    """What blocks cost now: the latest base fee and the tip the node suggests (wei per gas)."""

    base_fee: int
    tip: int


@dataclass(frozen=True)
class FeePolicy:
    """The fee rules from the configuration.

    ceiling: the highest maxFeePerGas accord signs (ACCORD_MAX_FEE_GWEI), wei per gas.
    default_tip: the tip when the node does not suggest one (ACCORD_PRIORITY_FEE_GWEI), or
    None to always ask the node.
    """

    ceiling: int = DEFAULT_MAX_FEE_GWEI * WEI_PER_GWEI
    default_tip: int | None = None

    def __post_init__(self) -> None:
        if self.ceiling <= 0:
            raise ValueError(f"the fee ceiling must be positive, got {self.ceiling}")
        if self.default_tip is not None and not 0 <= self.default_tip <= self.ceiling:
            raise ValueError(f"the default tip must be in 0..ceiling, got {self.default_tip}")


def fees_for(market: FeeMarket, policy: FeePolicy) -> Fees:
    """maxFeePerGas = min(2 * baseFee + tip, ceiling) (pure).

    Raises FeesAboveCeilingError when even baseFee + tip is above the ceiling: a transaction
    signed under it could not be mined now.
    """
    needed = market.base_fee + market.tip
    if needed > policy.ceiling:
        raise FeesAboveCeilingError(needed, policy.ceiling, "a transaction")
    return Fees(min(2 * market.base_fee + market.tip, policy.ceiling), market.tip)


def _bump(value: int) -> int:
    return math.ceil(value * BUMP_NUMERATOR / BUMP_DENOMINATOR)


def bumped_fees(old: Fees, market: FeeMarket, policy: FeePolicy) -> Fees:
    """Fees for a replacement at the same nonce: at least 12.5 % above `old` on both maxFee and
    tip, and at least what the market asks now, within the ceiling (pure).

    Raises FeesAboveCeilingError when the ceiling leaves no room for a valid replacement.
    """
    floor = Fees(_bump(old.max_fee), max(_bump(old.tip), 1))
    fresh_tip = max(floor.tip, market.tip)
    wanted = max(floor.max_fee, 2 * market.base_fee + fresh_tip)
    max_fee = min(wanted, policy.ceiling)
    if max_fee < floor.max_fee or max_fee < market.base_fee + fresh_tip:
        raise FeesAboveCeilingError(
            max(floor.max_fee, market.base_fee + fresh_tip), policy.ceiling, "replacing it"
        )
    return Fees(max_fee, min(fresh_tip, max_fee))


def below_market(fees: Fees, market: FeeMarket) -> bool:
    """Whether a transaction with `fees` would not be picked now (pure)."""
    return fees.max_fee < market.base_fee + market.tip or fees.tip < market.tip
