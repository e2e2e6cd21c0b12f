"""The anchor timer: a quiet log (nothing appended to look whether an anchor is due) is
anchored within ACCORD_ANCHOR_INTERVAL, once, whichever processes run a timer.

The market's clock is a test clock: nothing is anchored until the test moves it past the
interval, and then the tests wait for the timer by counting its rounds (a slow machine only
takes longer), never by racing the wall clock."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from accord.ledger.anchoring import Anchorer
from accord.ledger.chain import MemoryAnchorChain
from accord.ledger.database import make_engine
from accord.ledger.service import MAX_ANCHOR_TICK_S, AnchorTimer, Ledger, anchor_tick
from accord.ledger.signing import Ed25519Signer
from accord.ledger.store import LogStore
from tests.clocks import Clock

START = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
INTERVAL = 60.0
TICK = 0.05
MAX_ROUNDS = 4000
"""A generous bound on the timer's rounds (minutes on a loaded machine) before a test gives up."""


def open_ledger(path: Path, chain: MemoryAnchorChain, clock: Clock) -> Ledger:
    """A ledger over the SQLite log at `path` (a process of its own would open the same)."""
    store = LogStore(make_engine(f"sqlite:///{path}"), "test-log")
    operator = Ed25519Signer(bytes(range(32)))
    anchorer = Anchorer(
        store, chain, operator, clock, every_entries=1000, every_seconds=INTERVAL, receipt_timeout=0
    )
    return Ledger(store, operator, clock, anchorer)


def wait_until(condition: object, timers: list[AnchorTimer]) -> None:
    """Wait for `condition()` (callable), bounded by the timers' rounds, not by time."""
    assert callable(condition)
    while not condition():
        assert all(t.rounds < MAX_ROUNDS for t in timers), "the timer never anchored"
        time.sleep(TICK)


def test_a_quiet_log_is_anchored_on_time(tmp_path: Path) -> None:
    chain = MemoryAnchorChain()
    clock = Clock(START)
    ledger = open_ledger(tmp_path / "log.db", chain, clock)
    operator = ledger.operator
    for n in range(3):
        ledger.append(operator, "note.added", body={"n": n})
    assert chain.latest_size("test-log") == 0  # not due at append: nothing more is appended
    timer = AnchorTimer(lambda: ledger, TICK)
    timer.start()
    try:
        rounds = timer.rounds
        wait_until(lambda: timer.rounds >= rounds + 5, [timer])
        assert chain.latest_size("test-log") == 0  # the interval has not passed
        clock.advance(INTERVAL)
        wait_until(lambda: chain.latest_size("test-log") == 3, [timer])
    finally:
        timer.stop()
    assert chain.root_at("test-log", 3) == ledger.store.root(3)


def test_the_tick_counts_ahead_so_the_anchor_lands_within_the_interval(tmp_path: Path) -> None:
    """Looked at once a tick, the tail is anchored when the interval ends within the next
    tick: at most the interval after the last anchor, never a tick later."""
    chain = MemoryAnchorChain()
    clock = Clock(START)
    ledger = open_ledger(tmp_path / "log.db", chain, clock)
    ledger.append(ledger.operator, "note.added")
    timer = AnchorTimer(lambda: ledger, 1.0)
    clock.advance(INTERVAL - 2)
    assert timer.run_once() is None
    clock.advance(1.5)  # half a tick before the interval ends
    outcome = timer.run_once()
    assert outcome is not None and outcome.status == "confirmed" and outcome.size == 1
    assert timer.run_once() is None  # nothing new to anchor


def test_timers_of_several_processes_anchor_the_tail_once(tmp_path: Path) -> None:
    """Two services over one log and one chain, each with its timer: the tail is anchored by
    one transaction, and the journal holds one record for it."""
    chain = MemoryAnchorChain()
    clock = Clock(START)
    first = open_ledger(tmp_path / "log.db", chain, clock)
    second = open_ledger(tmp_path / "log.db", chain, clock)
    for n in range(4):
        first.append(first.operator, "note.added", body={"n": n})
    timers = [AnchorTimer(lambda: first, TICK), AnchorTimer(lambda: second, TICK)]
    for timer in timers:
        timer.start()
    try:
        clock.advance(INTERVAL)
        wait_until(lambda: chain.latest_size("test-log") == 4, timers)
        least = min(t.rounds for t in timers)
        wait_until(lambda: min(t.rounds for t in timers) >= least + 5, timers)
    finally:
        for timer in timers:
            timer.stop()
    assert [a.size for a in chain.anchors("test-log")] == [4]
    assert [r.size for r in first.anchor_journal.records()] == [4]


def test_the_tick_follows_the_interval() -> None:
    assert anchor_tick(60) == MAX_ANCHOR_TICK_S
    assert anchor_tick(8) == 2
    assert anchor_tick(0.01) == 0.05
    with pytest.raises(ValueError, match="positive"):
        AnchorTimer(lambda: None, 0)  # type: ignore[arg-type,return-value]
