"""`accord task award --wait`: before it sleeps it says how long and until when (on stderr,
so `--json` stays one document), sleeps once for the whole time left, and does not wait for
a window already closed. On a clock the test moves; the run against a devnet is in
tests/api/test_market_cli.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from accord.api.market_cli import wait_for_reveals
from accord.ledger.wiring import WAKE_MARGIN_S
from tests.clocks import Clock

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def _task(reveal_ends: datetime) -> Any:
    return SimpleNamespace(task_id="task-1", reveal_ends=reveal_ends)


def test_it_says_how_long_it_waits_then_sleeps_once(capsys: pytest.CaptureFixture[str]) -> None:
    clock = Clock(START)
    naps: list[float] = []

    def sleep(seconds: float) -> None:
        naps.append(seconds)
        clock.advance(seconds)

    wait_for_reveals(_task(START + timedelta(seconds=85)), clock, sleep)
    captured = capsys.readouterr()
    said = " ".join(captured.err.split())
    assert captured.out == ""
    assert said == (
        "note: waiting 1 min 25 s for the reveal window of task-1 to close "
        "(at 2030-01-01 12:01:25 UTC), then awarding it"
    )
    assert naps == [85 + WAKE_MARGIN_S]
    assert clock() >= START + timedelta(seconds=85)


def test_a_closed_window_is_not_waited_for(capsys: pytest.CaptureFixture[str]) -> None:
    def sleep(seconds: float) -> None:
        raise AssertionError(f"slept {seconds} s")

    wait_for_reveals(_task(START), Clock(START), sleep)
    wait_for_reveals(_task(START - timedelta(hours=1)), Clock(START), sleep)
    assert capsys.readouterr().err == ""
