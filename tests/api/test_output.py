"""The shared formatting of `accord.api.output`: counts that agree with their number, and amounts a
person reads at a glance (the exact wei stay in `--json`)."""

from __future__ import annotations

import pytest

from accord.api.output import amount, amounts, duration, plural


@pytest.mark.parametrize(
    ("count", "expected"),
    [(0, "0 agents"), (1, "1 agent"), (2, "2 agents"), (21, "21 agents")],
)
def test_a_count_agrees_with_its_number(count: int, expected: str) -> None:
    assert plural(count, "agent") == expected


def test_an_irregular_plural_is_given() -> None:
    assert plural(1, "entry", "entries") == "1 entry"
    assert plural(3, "entry", "entries") == "3 entries"


def test_amounts_read_as_eth_with_trimmed_zeros() -> None:
    assert amount(250_000_000_000_000_000) == "0.25 ETH"
    assert amount(66_666_666_666_666_667) == "≈0.066667 ETH"
    assert amounts("price 600000000000000000 wei exceeds the budget (500000000000000000 wei)") == (
        "price 0.6 ETH exceeds the budget (0.5 ETH)"
    )


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0 s"),
        (0.2, "1 s"),
        (45, "45 s"),
        (85, "1 min 25 s"),
        (120, "2 min"),
        (7380, "2 h 3 min"),
        (3600, "1 h"),
        (86400 + 7200, "1 day 2 h"),
        (2 * 86400, "2 days"),
    ],
)
def test_a_wait_reads_in_the_largest_units_rounded_up(seconds: float, shown: str) -> None:
    assert duration(seconds) == shown
