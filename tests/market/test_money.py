"""Amounts are whole wei, parsed exactly from what people type."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accord.market.errors import AmountError
from accord.market.money import (
    WEI_PER_ETH,
    display_eth,
    format_eth,
    parse_amount,
    wei,
    with_amounts,
)


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


@pytest.mark.parametrize(
    ("amount", "shown"),
    [
        (0, "0 ETH"),
        (WEI_PER_ETH // 4, "0.25 ETH"),
        (3 * WEI_PER_ETH, "3 ETH"),
        (10**12, "0.000001 ETH"),
        (66_666_666_666_666_667, "≈0.066667 ETH"),
        (133_333_333_333_333_333, "≈0.133333 ETH"),
        (999_999_999_999_999_999, "≈1 ETH"),
        (1000, "1000 wei"),
        (10**12 - 1, "999999999999 wei"),
    ],
)
def test_display_eth_is_short_and_says_when_it_rounds(amount: int, shown: str) -> None:
    assert display_eth(amount) == shown


@given(st.integers(min_value=0, max_value=10**30))
def test_display_eth_is_exact_or_within_half_a_shown_digit(amount: int) -> None:
    shown = display_eth(amount)
    if shown.endswith(" wei"):
        assert int(shown.removesuffix(" wei")) == amount < 10**12
    elif shown.startswith("≈"):
        near = parse_amount(shown.removeprefix("≈").replace(" ETH", "eth"))
        assert near != amount and 2 * abs(near - amount) <= 10**12
    else:
        assert shown == format_eth(amount)


def test_amounts_in_a_sentence_are_shown_in_eth() -> None:
    detail = (
        "deposit 500000000000000000 wei = 133333333333333333 paid to 2 payees + "
        "366666666666666667 back to the requester (entry 12, 1000 wei)"
    )
    assert with_amounts(detail) == (
        "deposit 0.5 ETH = ≈0.133333 ETH paid to 2 payees + ≈0.366667 ETH back to the "
        "requester (entry 12, 1000 wei)"
    )


def test_numbers_inside_hashes_and_decimals_are_left_alone() -> None:
    for text in ("0x12345678901234567890", "1234567890123456abc", "3.1234567890123456", "x1 wei"):
        assert with_amounts(text) == text
