"""`verify_log`, the numbered checklist of ledger/verify.py, on both backends.

The log: 125 entries from five actors; anchored through `Anchorer` on a `MemoryAnchorChain` at
sizes 40 and 100, a further (unanchored) checkpoint at 120.

* clean: steps 1-6 pass; offline (no chain) steps 5 and 6 are skipped and the verdict is PASS;
* a checkpoint signed by another key, or by the operator for another log, fails step 4;
* a chain holding another root for a size fails step 5 at the first entry after the last anchor
  that still matches (the chain holds roots only: the change lies between the two); a chain
  lacking an anchor the log recorded as confirmed, or a chain that does not answer, fail step 5;
* the log cut below an anchored size: cut cleanly (entries, nodes, checkpoints, head) fails
  step 5 at the first missing entry; cut leaving its tree nodes fails step 3 there; entries
  deleted under a head that still counts them fails step 3 there;
* the JSON report: verdict, failed_step, failed_entry, one object per step.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import delete, update

from accord.ledger import merkle, tiles
from accord.ledger.anchor_journal import LedgerAnchor
from accord.ledger.anchoring import Anchorer
from accord.ledger.chain import MemoryAnchorChain
from accord.ledger.checkpoint import Checkpoint, sign_checkpoint, take_checkpoint
from accord.ledger.database import (
    LedgerCheckpoint,
    LedgerEntry,
    LedgerHead,
    LedgerTile,
    make_engine,
)
from accord.ledger.events import Entry, Event, format_time, sign_event
from accord.ledger.signing import Ed25519Signer
from accord.ledger.store import LogStore
from accord.ledger.verify import STEP_TITLES, VerificationReport, verify_log
from tests.ledger.conftest import LOG_ID, START, EntryMaker, append_signed, signer_from

ANCHORED = (40, 100)
CHECKPOINTED = (40, 100, 120)
SIZE = 125


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


@dataclass
class Log:
    store: LogStore
    chain: MemoryAnchorChain
    operator: Ed25519Signer
    maker: EntryMaker
    open_store: Callable[..., LogStore]

    def reopened(self) -> LogStore:
        """A new LogStore on the same database, as a separate `ledger verify` would open."""
        return self.open_store()


@pytest.fixture
def log(
    store: LogStore,
    maker: EntryMaker,
    operator: Ed25519Signer,
    open_store: Callable[..., LogStore],
) -> Log:
    chain = MemoryAnchorChain()
    anchorer = Anchorer(store, chain, operator, Clock(), receipt_timeout=0.05)
    append_signed(store, maker, 40, batch=7)
    assert anchorer.anchor_latest().status == "confirmed"
    append_signed(store, maker, 60, batch=4)
    assert anchorer.anchor_latest().status == "confirmed"
    append_signed(store, maker, 20, batch=3)
    anchorer.checkpoint()
    append_signed(store, maker, 5)
    assert [a.size for a in chain.anchors(LOG_ID)] == list(ANCHORED)
    assert [c.size for c in store.checkpoints()] == list(CHECKPOINTED)
    assert store.size() == SIZE
    return Log(store, chain, operator, maker, open_store)


def statuses(report: VerificationReport) -> dict[int, str]:
    return {step.number: step.status for step in report.steps}


def assert_fails(report: VerificationReport, step: int, entry: int | None) -> None:
    failure = report.first_failure
    assert failure is not None, report.to_json()
    assert (failure.number, failure.entry) == (step, entry), report.to_json()
    assert not report.ok
    for number, status in statuses(report).items():
        if number < step:
            assert status == "pass", report.to_json()
        elif number > step:
            assert status in ("not-run", "skipped"), report.to_json()


# -- a clean log ------------------------------------------------------------------------------


def test_clean_log_passes_every_step(log: Log) -> None:
    progress: list[tuple[int, int]] = []
    report = verify_log(
        log.store, log.operator.did, log.chain, lambda done, total: progress.append((done, total))
    )
    assert report.ok, report.to_json()
    assert [step.number for step in report.steps] == [1, 2, 3, 4, 5, 6]
    assert all(step.status == "pass" for step in report.steps)
    assert all(step.entry is None for step in report.steps)
    assert (report.log_id, report.size) == (LOG_ID, SIZE)
    assert report.first_failure is None
    assert progress[-1] == (SIZE, SIZE)


def test_clean_log_offline_skips_the_chain_steps(log: Log) -> None:
    report = verify_log(log.store, log.operator.did, None)
    assert report.ok
    assert statuses(report) == {
        1: "pass",
        2: "pass",
        3: "pass",
        4: "pass",
        5: "skipped",
        6: "skipped",
    }
    assert report.to_json()["verdict"] == "PASS"


def test_empty_log_passes(store: LogStore, operator: Ed25519Signer) -> None:
    report = verify_log(store, operator.did, MemoryAnchorChain())
    assert report.ok and report.size == 0


# -- step 4: checkpoints ----------------------------------------------------------------------


def test_checkpoint_signed_by_another_key_fails_step_4(log: Log) -> None:
    take_checkpoint(log.store, signer_from("intruder"), START)  # a checkpoint at 125
    assert_fails(verify_log(log.store, log.operator.did, log.chain), 4, None)
    assert_fails(verify_log(log.store, log.operator.did, None), 4, None)


def test_verifying_against_another_operator_fails_step_4(log: Log) -> None:
    report = verify_log(log.store, signer_from("someone else").did, log.chain)
    assert_fails(report, 4, None)
    assert "checkpoint 40" in report.steps[3].detail


def test_checkpoint_of_another_log_fails_step_4(log: Log) -> None:
    size = log.store.size()
    checkpoint = Checkpoint("another-log", size, log.store.root(size), format_time(START))
    signed = sign_checkpoint(log.operator, checkpoint)
    log.store.save_checkpoint(size, checkpoint.root, checkpoint.at, signed.data)
    report = verify_log(log.store, log.operator.did, log.chain)
    assert_fails(report, 4, None)
    assert "another-log" in report.steps[3].detail


# -- step 5: the chain ------------------------------------------------------------------------


def test_chain_holding_another_root_fails_step_5(log: Log) -> None:
    bogus = bytes(range(32))
    log.chain.broadcast(log.chain.build_anchor_tx(LOG_ID, 110, bogus))
    assert log.chain.root_at(LOG_ID, 110) == bogus
    report = verify_log(log.store, log.operator.did, log.chain)
    # the anchor at 100 still matches: the change lies in entries 100..109, named from 100
    assert_fails(report, 5, 100)
    assert "size 110" in report.steps[4].detail and "from 100 to 109" in report.steps[4].detail
    # offline, the log itself is fine
    assert verify_log(log.store, log.operator.did, None).ok


def test_chain_anchoring_another_root_first_fails_step_5(
    store: LogStore, maker: EntryMaker, operator: Ed25519Signer
) -> None:
    chain = MemoryAnchorChain()
    append_signed(store, maker, 30)
    chain.broadcast(chain.build_anchor_tx(LOG_ID, 10, b"\x42" * 32))  # someone else's root
    Anchorer(store, chain, operator, Clock(), receipt_timeout=0.05).anchor_latest()
    assert [a.size for a in chain.anchors(LOG_ID)] == [10, 30]
    assert_fails(verify_log(store, operator.did, chain), 5, 0)  # no earlier anchor: 0..9


def test_chain_lacking_a_recorded_anchor_fails_step_5(log: Log) -> None:
    report = verify_log(log.store, log.operator.did, MemoryAnchorChain())
    assert_fails(report, 5, None)
    assert "size 40" in report.steps[4].detail


def test_chain_that_does_not_answer_fails_step_5(log: Log) -> None:
    log.chain.available = False
    report = verify_log(log.store, log.operator.did, log.chain)
    assert_fails(report, 5, None)
    assert "cannot read the chain" in report.steps[4].detail


# -- truncation below an anchored size --------------------------------------------------------


def _cut(store: LogStore, size: int, *, entries: bool, head: bool, tree: bool) -> None:
    """Delete what lies beyond `size`: the entries, the head's count, checkpoints/anchors, and
    rewrite the tiles as a log of `size` entries has them."""
    entry_t = LedgerEntry.__table__  # type: ignore[attr-defined]
    tile_t = LedgerTile.__table__  # type: ignore[attr-defined]
    head_t = LedgerHead.__table__  # type: ignore[attr-defined]
    checkpoint_t = LedgerCheckpoint.__table__  # type: ignore[attr-defined]
    anchor_t = LedgerAnchor.__table__  # type: ignore[attr-defined]
    levels = [[merkle.leaf_hash(stored.data) for stored in store.entries(0, size)]]
    while len(levels[-1]) > 1:
        below = levels[-1]
        levels.append(
            [merkle.node_hash(below[i], below[i + 1]) for i in range(0, len(below) - 1, 2)]
        )
    kept = [{"id": key, "hashes": row} for key, row in tiles.expected_rows(levels)]
    with store.engine.begin() as connection:
        if entries:
            connection.execute(delete(entry_t).where(entry_t.c.idx >= size))
        if head:
            connection.execute(update(head_t).values(size=size))
        if tree:
            connection.execute(delete(tile_t))
            connection.execute(tile_t.insert(), kept)
            connection.execute(delete(checkpoint_t).where(checkpoint_t.c.size > size))
            connection.execute(delete(anchor_t).where(anchor_t.c.size > size))


@pytest.mark.parametrize("size", [30, 70])
def test_log_cut_cleanly_below_an_anchor_fails_step_5(log: Log, size: int) -> None:
    _cut(log.store, size, entries=True, head=True, tree=True)
    cut = log.reopened()
    # what is left is a perfectly good log of `size` entries ...
    assert verify_log(cut, log.operator.did, None).ok
    # ... that the chain proves was longer
    report = verify_log(cut, log.operator.did, log.chain)
    assert_fails(report, 5, size)
    assert f"anchors size {ANCHORED[0] if size < ANCHORED[0] else ANCHORED[1]}" in (
        report.steps[4].detail
    )


def test_log_cut_under_a_head_that_still_counts_fails_step_3(log: Log) -> None:
    _cut(log.store, 30, entries=True, head=False, tree=False)
    cut = log.reopened()
    assert_fails(verify_log(cut, log.operator.did, log.chain), 3, 30)


def test_log_cut_leaving_its_tree_nodes_fails_step_3_at_the_cut(log: Log) -> None:
    _cut(log.store, 30, entries=True, head=True, tree=False)
    cut = log.reopened()
    assert_fails(verify_log(cut, log.operator.did, log.chain), 3, 30)


# -- the report -------------------------------------------------------------------------------


def _check_shape(document: dict[str, object]) -> None:
    assert set(document) == {"log_id", "size", "verdict", "steps", "failed_step", "failed_entry"}
    assert json.loads(json.dumps(document)) == document
    steps = document["steps"]
    assert isinstance(steps, list)
    assert [step["step"] for step in steps] == [1, 2, 3, 4, 5, 6]
    for step in steps:
        assert set(step) == {"step", "title", "status", "detail", "entry"}
        assert step["title"] == STEP_TITLES[step["step"]]
        assert step["status"] in ("pass", "fail", "skipped", "not-run")
        assert isinstance(step["detail"], str) and step["detail"]


def test_report_json_of_a_pass(log: Log) -> None:
    document = verify_log(log.store, log.operator.did, log.chain).to_json()
    _check_shape(document)
    assert document["verdict"] == "PASS"
    assert (document["failed_step"], document["failed_entry"]) == (None, None)
    assert (document["log_id"], document["size"]) == (LOG_ID, SIZE)
    offline = verify_log(log.store, log.operator.did, None).to_json()
    _check_shape(offline)
    assert [step["status"] for step in offline["steps"]][4:] == ["skipped", "skipped"]


def test_report_json_of_a_failure(log: Log) -> None:
    log.chain.broadcast(log.chain.build_anchor_tx(LOG_ID, 110, b"\x07" * 32))
    document = verify_log(log.store, log.operator.did, log.chain).to_json()
    _check_shape(document)
    assert document["verdict"] == "FAIL"
    assert (document["failed_step"], document["failed_entry"]) == (5, 100)
    assert [step["status"] for step in document["steps"]] == [
        "pass",
        "pass",
        "pass",
        "pass",
        "fail",
        "not-run",
    ]
    failed = document["steps"][4]
    assert failed["entry"] == 100 and "110" in failed["detail"]

    # offline failure: the chain steps are skipped, not "not-run"
    take_checkpoint(log.store, signer_from("intruder"), START)
    offline = verify_log(log.store, log.operator.did, None).to_json()
    _check_shape(offline)
    assert (offline["verdict"], offline["failed_step"], offline["failed_entry"]) == (
        "FAIL",
        4,
        None,
    )
    assert [step["status"] for step in offline["steps"]] == [
        "pass",
        "pass",
        "pass",
        "fail",
        "skipped",
        "skipped",
    ]


def test_a_long_log_is_checked_in_worker_processes_with_the_same_verdicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above PARALLEL_MIN_ENTRIES step 1 runs in a process pool: verdicts stay the same. The
    threshold and the chunk are lowered (20,000 and 4,000 in the product), so that a log of
    3,500 entries takes the pool's path in seven chunks; the pool counts what it was given."""
    import os
    import sqlite3
    from concurrent.futures import Future, ProcessPoolExecutor
    from datetime import UTC, datetime
    from typing import Any

    from accord.ledger import verify as verify_module
    from accord.ledger.database import make_engine
    from accord.ledger.events import make_entry
    from accord.ledger.store import LogStore

    submitted: list[int] = []

    class CountingPool(ProcessPoolExecutor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
            submitted.append(len(args[0]))
            return super().submit(fn, *args, **kwargs)

    monkeypatch.setattr(verify_module, "PARALLEL_MIN_ENTRIES", 2_000)
    monkeypatch.setattr(verify_module, "_CHUNK", 500)
    monkeypatch.setattr(verify_module, "ProcessPoolExecutor", CountingPool)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # a pool on a one-core machine too

    path = tmp_path / "long.db"
    store = LogStore(make_engine(f"sqlite:///{path}"), "long")
    signers = [Ed25519Signer.generate() for _ in range(3)]
    at = datetime(2026, 11, 29, tzinfo=UTC)
    size = verify_module.PARALLEL_MIN_ENTRIES + 1_500
    batch = []
    for index in range(size):
        signer = signers[index % 3]
        batch.append(make_entry(signer, kind="note.added", seq=index // 3 + 1, at=at))
        if len(batch) == 5_000:
            store.append_batch(batch)
            batch = []
    store.append_batch(batch)
    operator = Ed25519Signer.generate()
    assert verify_log(store, operator.did, None).ok
    assert submitted == [500] * 7

    target = size - 1_000  # in the last chunks, checked by a worker
    with sqlite3.connect(path) as db:
        (data,) = db.execute("SELECT data FROM ledger_entries WHERE idx = ?", (target,)).fetchone()
        changed = bytes(data).replace(b'"note.added"', b'"note.addex"')
        db.execute("UPDATE ledger_entries SET data = ? WHERE idx = ?", (changed, target))
    reopened = LogStore(make_engine(f"sqlite:///{path}"), "long")
    failure = verify_log(reopened, operator.did, None).first_failure
    assert failure is not None and (failure.number, failure.entry) == (1, target)
    assert len(submitted) > 7  # the second verification went through the pool too


def test_a_resigned_and_rebuilt_log_is_named_from_the_last_matching_anchor(
    log: Log, tmp_path: Path
) -> None:
    """A hostile operator changes entry 70, re-signs it with its actor's key and rebuilds the
    tree and checkpoints: steps 1-4 hold; the anchor at 40 still matches, the one at 100 does
    not, so step 5 names the span 40..99 from its first entry, not the last anchored entry."""
    keys = {signer.did: signer for signer in log.maker.signers}
    rebuilt = LogStore(make_engine(f"sqlite:///{tmp_path / 'rebuilt.db'}"), LOG_ID)
    entries = [Entry.from_bytes(s.data) for s in log.store.entries(0, log.store.size())]
    event = entries[70].event
    changed = Event(
        event.kind, event.actor, event.seq, event.at, event.subject, {**event.body, "n": -1}
    )
    entries[70] = sign_event(keys[event.actor], changed)
    done = 0
    for size in CHECKPOINTED:
        rebuilt.append_batch(entries[done:size])
        take_checkpoint(rebuilt, log.operator, START + timedelta(seconds=size))
        done = size
    rebuilt.append_batch(entries[done:])
    report = verify_log(rebuilt, log.operator.did, log.chain)
    assert_fails(report, 5, 40)
    assert "from 40 to 99" in report.steps[4].detail
