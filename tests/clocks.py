"""A clock for tests that only moves when told to: what the ledger, the exams and the market
read as `clock()` when a test decides what time it is."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path


class Clock:
    """A clock that only moves when told to; it starts at `now` (default: the real time,
    whole seconds, for tests whose signatures use the real time too)."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = datetime.now(UTC).replace(microsecond=0) if now is None else now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def set(self, moment: datetime) -> None:
        """Move to `moment`, or stay where it is when that is earlier: time never goes back."""
        self.now = max(self.now, moment)


class RunningClock:
    """The real time, moved on by `advance`: for a service that runs in real time (a real
    HTTP server, an agent process) whose windows a test closes by advancing, not sleeping."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def __call__(self) -> datetime:
        return datetime.now(UTC) + self.offset

    def advance(self, seconds: float) -> None:
        self.offset += timedelta(seconds=seconds)


def advance_clock_file(path: Path, seconds: float) -> None:
    """Move a test clock file (ACCORD_TEST_CLOCK, read by `accord.ledger.wiring.OffsetClock`) on by
    `seconds`: the market's windows close without anyone waiting for them."""
    before = float(path.read_text()) if path.exists() else 0.0
    path.write_text(repr(before + seconds))
