"""The fee settings: ACCORD_MAX_FEE_GWEI, ACCORD_PRIORITY_FEE_GWEI, ACCORD_REPLACE_AFTER."""

from __future__ import annotations

import pytest

from accord.ledger.fees import DEFAULT_MAX_FEE_GWEI, FeePolicy
from accord.ledger.settings import Settings

GWEI = 10**9


def test_defaults_ask_the_node_for_the_tip_under_a_500_gwei_ceiling() -> None:
    settings = Settings.from_env({})
    assert settings.fee_policy == FeePolicy(ceiling=DEFAULT_MAX_FEE_GWEI * GWEI, default_tip=None)
    assert settings.replace_after_seconds == 120.0


def test_gwei_are_read_exactly_into_integer_wei() -> None:
    settings = Settings.from_env(
        {
            "ACCORD_MAX_FEE_GWEI": "1.000000001",
            "ACCORD_PRIORITY_FEE_GWEI": "0",
            "ACCORD_REPLACE_AFTER": "0",
        }
    )
    assert settings.fee_policy == FeePolicy(ceiling=GWEI + 1, default_tip=0)
    assert isinstance(settings.max_fee_wei, int) and settings.replace_after_seconds == 0.0


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"ACCORD_MAX_FEE_GWEI": "lots"}, "ACCORD_MAX_FEE_GWEI must be a number of gwei"),
        ({"ACCORD_MAX_FEE_GWEI": "0"}, "ACCORD_MAX_FEE_GWEI must be positive"),
        ({"ACCORD_MAX_FEE_GWEI": "-3"}, "ACCORD_MAX_FEE_GWEI must be positive"),
        ({"ACCORD_MAX_FEE_GWEI": "nan"}, "must be a finite number of gwei"),
        ({"ACCORD_MAX_FEE_GWEI": "0.0000000001"}, "more than 9 decimals"),
        ({"ACCORD_MAX_FEE_GWEI": "1e40"}, "beyond any fee"),
        ({"ACCORD_PRIORITY_FEE_GWEI": "-1"}, "ACCORD_PRIORITY_FEE_GWEI must be 0 or more"),
        (
            {"ACCORD_MAX_FEE_GWEI": "2", "ACCORD_PRIORITY_FEE_GWEI": "3"},
            "must not be above ACCORD_MAX_FEE_GWEI",
        ),
        ({"ACCORD_REPLACE_AFTER": "-1"}, "ACCORD_REPLACE_AFTER must be at least 0"),
        ({"ACCORD_REPLACE_AFTER": "soon"}, "ACCORD_REPLACE_AFTER must be a number of seconds"),
        ({"ACCORD_REPLACE_AFTER": "inf"}, "finite number of seconds"),
    ],
)
def test_bad_fee_settings_name_the_variable(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Settings.from_env(env)
