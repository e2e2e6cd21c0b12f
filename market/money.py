"""Money as integers of wei: never floats.

`Wei` is a distinct integer type; `parse_amount("0.5eth")` reads what people type;
`format_eth` writes an amount exactly, `display_eth` for a person to read at a glance.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NewType

from accord.market.errors import AmountError, LimitError

Wei = NewType("Wei", int)

MAX_WEI = 2**128 - 1
"""The largest amount accord accepts: more than any account on an EVM chain can hold (all the
ether ever issued is under 2**87 wei), and far inside the escrow's uint256 arithmetic, so a
budget, price or payout above it is refused as input before anything is logged or sent."""

WEI_PER_ETH = 10**18
WEI_PER_GWEI = 10**9
_UNIT_DECIMALS = {"eth": 18, "ether": 18, "gwei": 9, "wei": 0}
_MAX_AMOUNT_TEXT = 100
_AMOUNT = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def wei(value: int) -> Wei:
    """`value` as Wei; raises AmountError for a negative number or a non-integer, LimitError
    above MAX_WEI."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise AmountError(f"an amount in wei must be a whole number, not {value!r}")
    if value < 0:
        raise AmountError(f"an amount cannot be negative: {value}")
    if value > MAX_WEI:
        raise LimitError(
            f"{value} wei is more than any chain account holds (at most {MAX_WEI} wei)", MAX_WEI
        )
    return Wei(value)


def parse_amount(text: str) -> Wei:
    """Read `0.5eth`, `12 gwei`, `1000wei` or a bare integer of wei.

    Raises AmountError for anything else, or a fraction of a wei; LimitError above MAX_WEI.
    """
    if len(text) > _MAX_AMOUNT_TEXT:
        raise LimitError(f"the amount {text[:20]!r}… is too long to be one", MAX_WEI)
    match = _AMOUNT.match(text)
    if match is None:
        raise AmountError(f"{text!r} is not an amount: write e.g. 0.5eth, 20gwei or 1000wei")
    number, unit = match.group(1), match.group(2).lower() or "wei"
    if unit not in _UNIT_DECIMALS:
        raise AmountError(f"unknown unit {unit!r} in {text!r} (use eth, gwei or wei)")
    decimals = _UNIT_DECIMALS[unit]
    whole, _, fraction = number.partition(".")
    fraction = fraction.rstrip("0")
    if len(fraction) > decimals:
        raise AmountError(f"{text!r} is not a whole number of wei")
    return wei(int(whole) * 10**decimals + int(fraction.ljust(decimals, "0") or "0"))


def format_eth(amount: int) -> str:
    """`500000000000000000` → `0.5 ETH` (exact, no float)."""
    whole, fraction = divmod(amount, WEI_PER_ETH)
    if fraction == 0:
        return f"{whole} ETH"
    return f"{whole}.{str(fraction).rjust(18, '0').rstrip('0')} ETH"


SHOWN_DECIMALS = 6
"""The decimals of ETH `display_eth` shows; exact amounts stay in wei (`--json`, the log)."""
_SHOWN_UNIT = 10 ** (18 - SHOWN_DECIMALS)


def display_eth(amount: int) -> str:
    """An amount for a person to read, from integers alone (no float).

    `250000000000000000` → `0.25 ETH`: trailing zeros trimmed, exact when six decimals hold it;
    `66666666666666667` → `≈0.066667 ETH`: rounded half up to six decimals, marked `≈`;
    below 0.000001 ETH, exact in wei: `1000 wei`.
    """
    if amount % _SHOWN_UNIT == 0:
        return format_eth(amount)
    if amount < _SHOWN_UNIT:
        return f"{amount} wei"
    units, rest = divmod(amount, _SHOWN_UNIT)
    return "≈" + format_eth((units + (2 * rest >= _SHOWN_UNIT)) * _SHOWN_UNIT)


WEI_IN_TEXT = re.compile(
    r"(?<![0-9A-Za-z_.])([0-9]+) wei\b|(?<![0-9A-Za-z_.])([0-9]{13,})(?![0-9A-Za-z_.])"
)
"""An amount of wei inside a sentence: a number followed by `wei`, or a bare whole number of
13 digits or more (0.00001 ETH and up: no count, index or size in a message is that long)."""


def with_amounts(text: str, show: Callable[[int], str] = display_eth) -> str:
    """`text` with each amount of wei in it (`WEI_IN_TEXT`) written by `show`:
    `price 600000000000000000 wei exceeds …` → `price 0.6 ETH exceeds …`."""

    def replace(match: re.Match[str]) -> str:
        return show(int(match.group(1) or match.group(2)))

    return WEI_IN_TEXT.sub(replace, text)
