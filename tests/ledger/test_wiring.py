"""Opening a ledger without a chain loads no chain client: the commands that need no chain
(`accord agent …`, `credential …`, `task show`) do not pay for importing web3 and
eth_account, about a second of every such `accord` run. And `wait_until` (what
`accord task award --wait` waits with) sleeps for the whole time left, never in a busy loop,
on a clock the tests move."""

from __future__ import annotations

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
    settings = Settings.from_env({"ACCORD_HOME": str(tmp_path), "ACCORD_TEST_CLOCK": str(path)})
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
