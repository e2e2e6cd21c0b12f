"""Amounts are whole wei, parsed exactly from what people type."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from market.errors import AmountError
from market.money import WEI_PER_ETH, format_eth, parse_amount, wei


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.5eth", WEI_PER_ETH // 2),
        ("0.5 ETH", WEI_PER_ETH // 2),
        ("1ether", WEI_PER_ETH),
        ("12gwei", 12 * 10**9),
        ("1000wei", 1000),
        ("1000", 1000),
        ("0.000000000000000001eth", 1),
    ],
)
def test_parse_amount(text: str, expected: int) -> None:
    assert parse_amount(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("0.5", "whole number of wei"),
        ("1.5wei", "whole number of wei"),
        ("0.0000000000000000001eth", "whole number of wei"),
        ("-1eth", "not an amount"),
        ("1e18", "not an amount"),
        ("5 dollars", "unknown unit"),
        ("", "not an amount"),
    ],
)
def test_bad_amounts_say_what_to_write(text: str, message: str) -> None:
    with pytest.raises(AmountError, match=message):
        parse_amount(text)


def test_wei_refuses_floats_bools_and_negatives() -> None:
    for bad in (1.0, True, -1, "5"):
        with pytest.raises(AmountError):
            wei(bad)  # type: ignore[arg-type]


@given(st.integers(min_value=0, max_value=10**30))
def test_format_eth_round_trips(amount: int) -> None:
    assert parse_amount(format_eth(amount).replace(" ETH", "eth")) == amount
