"""The hostile operator's corpus (tests/audit/hostile.py) through `accord audit` and through
`ledger verify`: every edit of a column the store indexes, and every deleted row, fails both,
at the step that names it and at the entry that was edited."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from accord.audit.checks import audit_task
from accord.identity.credentials import REVOCATION_EVENT_KIND
from accord.ledger.store import LogStore
from accord.ledger.verify import verify_log
from accord.market.tasks import BID_COMMITTED
from tests.audit.conftest import (
    World,
    copy_db,
    onboard_agents,
    open_copy,
    open_world,
    post_task,
    sealed_auction,
    sql,
)
from tests.audit.hostile import COLUMNS, HostileCase, hostile_cases
from tests.ledger.warm_lab import Scratch

# Signatures that verified once are not checked again (tests/ledger/warm_lab.py).
pytestmark = pytest.mark.usefixtures("remembered_signatures")


@pytest.fixture(scope="module")
def cases(world: World) -> list[HostileCase]:
    return hostile_cases(world)


@pytest.fixture(scope="module")
def copy(world: World, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scratch]:
    """A copy of the world's log that each case resets to the world's content before its
    edit, through one engine that stays connected (tests/ledger/warm_lab.py)."""
    scratch = Scratch.of_file(world.db_path, tmp_path_factory.mktemp("hostile") / "copy.db")
    yield scratch
    scratch.close()


def edited(world: World, copy: Scratch, case: HostileCase) -> LogStore:
    """The world's log with `case`'s edit, opened afresh."""
    copy.reset()
    case.edit(copy.path)
    return LogStore(copy.engine, world.ledger.log_id)


def test_each_case_starts_from_the_worlds_log(
    world: World, cases: list[HostileCase], copy: Scratch
) -> None:
    honest = copy_db(world, copy.path.with_name("honest.db"))
    with closing(sqlite3.connect(honest)) as db:
        assert copy.pristine_dump() == list(db.iterdump())
    edited(world, copy, cases[-1])
    assert copy.dump() != copy.pristine_dump()
    copy.reset()
    assert copy.dump() == copy.pristine_dump()
    store = LogStore(copy.engine, world.ledger.log_id)
    assert verify_log(store, world.ledger.operator.did, world.anchors).ok


def test_the_corpus_covers_every_kind_the_audit_reads(cases: list[HostileCase]) -> None:
    kinds = {case.name.split(":")[0] for case in cases}
    assert {
        "task.posted",
        "bid.committed",
        "bid.revealed",
        "task.awarded",
        "conversation.opened",
        "conversation.message",
        "task.delivered",
        "settlement.computed",
        "credential.issued",
        "exam.committed",
        "exam.answered",
        "exam.graded",
        "payout.bound",
    } <= kinds
    assert len(cases) == len(kinds) * (len(COLUMNS) + 1)


def test_every_hostile_edit_fails_the_audit_at_its_step_and_entry(
    world: World, cases: list[HostileCase], copy: Scratch
) -> None:
    wrong = []
    for case in cases:
        report = audit_task(
            edited(world, copy, case),
            world.task_id,
            anchors=world.anchors,
            escrow=world.escrow_chain,
        )
        failure = report.first_failure
        found = None if failure is None else (failure.number, failure.entry)
        if found != (case.audit_step, case.index):
            wrong.append((case.name, found, failure and failure.detail))
    assert not wrong


def test_every_hostile_edit_fails_ledger_verify_at_its_step_and_entry(
    world: World, cases: list[HostileCase], copy: Scratch
) -> None:
    operator = world.ledger.operator.did
    wrong = []
    for case in cases:
        report = verify_log(edited(world, copy, case), operator, world.anchors)
        failure = report.first_failure
        found = None if failure is None else (failure.number, failure.entry)
        if found != (case.verify_step, case.index):
            wrong.append((case.name, found, failure and failure.detail))
    assert not wrong


def test_a_revocation_relabelled_as_a_note_fails_step_1_at_the_revocation(
    tmp_path: Path,
) -> None:
    """The finding: the operator admits a bid on a revoked credential (step 3 catches it), then
    sets the revocation row's kind column to `note.added`. The signed bytes say otherwise."""
    world = open_world(tmp_path / "home")
    onboard_agents(world)
    linus = world.agents["linus"]
    credential = next(
        c for c in world.onboarding.credentials_of(linus.did) if c["capability"] == "arithmetic"
    )
    revoked_at = world.onboarding.revoke(credential["id"], "exam leaked")
    world.clock.advance(1)
    post_task(world)
    sealed_auction(world, bypass={"linus": True})
    assert world.ledger.anchorer is not None
    world.ledger.anchorer.anchor_latest()
    store = world.ledger.store
    assert [s.index for s in store.find(kind=REVOCATION_EVENT_KIND)] == [revoked_at]
    bid = next(s.index for s in store.find(kind=BID_COMMITTED) if linus.did.encode() in s.data)
    audit = audit_task(store, world.task_id, anchors=world.anchors, escrow=world.escrow_chain)
    assert audit.first_failure is not None
    assert (audit.first_failure.number, audit.first_failure.entry) == (3, bid)

    path = copy_db(world, tmp_path / "relabelled.db")
    sql(path, "UPDATE ledger_entries SET kind = 'note.added' WHERE idx = ?", (revoked_at,))
    report = audit_task(
        open_copy(world, path), world.task_id, anchors=world.anchors, escrow=world.escrow_chain
    )
    assert report.first_failure is not None
    assert (report.first_failure.number, report.first_failure.entry) == (1, revoked_at)
    assert "kind" in report.first_failure.detail
    assert REVOCATION_EVENT_KIND in report.first_failure.detail
