"""Opening a ledger without a chain loads no chain client: the commands that need no chain
(`accord agent …`, `credential …`, `task show`) do not pay for importing web3 and
eth_account, about a second of every such `accord` run. And `wait_until` (what
`accord task award --wait` waits with) sleeps for the whole time left, never in a busy loop,
on a clock the tests move."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from accord.ledger.wiring import WAKE_MARGIN_S, wait_until
from tests.clocks import Clock

OPEN_WITHOUT_A_CHAIN = """
import sys
from accord.ledger.wiring import open_ledger
from accord.ledger.settings import Settings
ledger = open_ledger(Settings.from_env({"ACCORD_HOME": sys.argv[1]}))
assert ledger.anchorer is None
print(sorted(m for m in ("web3", "eth_account", "accord.ledger.anchoring") if m in sys.modules))
"""


def test_a_ledger_opened_without_a_chain_imports_no_chain_client(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", OPEN_WITHOUT_A_CHAIN, str(tmp_path / "home")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_wait_until_sleeps_once_for_the_whole_time_left() -> None:
    clock = Clock(datetime(2030, 1, 1, tzinfo=UTC))
    naps: list[float] = []

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        clock.advance(seconds)

    slept = wait_until(clock.now + timedelta(seconds=90), clock, sleep)
    assert naps == [90 + WAKE_MARGIN_S] and slept == naps[0]
    assert wait_until(clock.now - timedelta(seconds=1), clock, sleep) == 0  # already past
    assert len(naps) == 1


def test_wait_until_sleeps_again_when_it_wakes_too_early() -> None:
    clock = Clock(datetime(2030, 1, 1, tzinfo=UTC))
    naps: list[float] = []

    def sleep(seconds: float) -> None:  # the clock was set back by 30 s during the first nap
        naps.append(seconds)
        clock.advance(seconds - 30 if len(naps) == 1 else seconds)

    wait_until(clock.now + timedelta(seconds=60), clock, sleep)
    assert naps == [pytest.approx(60 + WAKE_MARGIN_S), pytest.approx(30)]


def test_the_test_clock_runs_ahead_by_its_file_and_never_goes_back(tmp_path: Path) -> None:
    from accord.ledger.settings import Settings
    from accord.ledger.wiring import OffsetClock, clock_of, utc_now

    assert clock_of(Settings.from_env({"ACCORD_HOME": str(tmp_path)})) is utc_now
    path = tmp_path / "clock"
    settings = Settings.from_env(
        {
            "ACCORD_HOME": str(tmp_path),
            "ACCORD_TEST_CLOCK": str(path),
            "ACCORD_ALLOW_TEST_CLOCK": "1",
        }
    )
    clock = clock_of(settings)
    assert isinstance(clock, OffsetClock) and clock.path == path
    before = datetime.now(UTC)
    assert before <= clock() <= datetime.now(UTC)  # no file yet: the real time
    path.write_text("3600")
    assert clock() >= before + timedelta(hours=1)
    path.write_text("60")  # an offset smaller than one read before is ignored
    assert clock() >= before + timedelta(hours=1)
    for bad in ("soon", "nan", "inf", ""):
        path.write_text(bad)
        assert clock() >= before + timedelta(hours=1)


@pytest.mark.parametrize("allow", [None, "", "0", "no"])
def test_a_test_clock_outside_a_test_is_refused(tmp_path: Path, allow: str | None) -> None:
    """ACCORD_TEST_CLOCK alone (a service started with a stray variable) is refused: whoever
    writes its file would move the market's clock. ACCORD_ALLOW_TEST_CLOCK=1 says it is a
    test (tests/conftest.py sets it for every test and the processes they start)."""
    from accord.ledger.settings import Settings

    env = {"ACCORD_HOME": str(tmp_path), "ACCORD_TEST_CLOCK": str(tmp_path / "clock")}
    if allow is not None:
        env["ACCORD_ALLOW_TEST_CLOCK"] = allow
    with pytest.raises(ValueError, match=r"ACCORD_TEST_CLOCK .* is for tests only"):
        Settings.from_env(env)


def test_the_command_refuses_a_test_clock_outside_a_test(tmp_path: Path) -> None:
    """`accord` itself: exit 2 and the variable named, before anything is opened."""
    env = {key: value for key, value in os.environ.items() if key != "ACCORD_ALLOW_TEST_CLOCK"}
    env.update(ACCORD_HOME=str(tmp_path / "home"), ACCORD_TEST_CLOCK=str(tmp_path / "clock"))
    result = subprocess.run(
        [sys.executable, "-m", "accord.api.cli", "task", "list"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "ACCORD_TEST_CLOCK" in result.stderr and "tests only" in result.stderr
    assert not (tmp_path / "home").exists()
