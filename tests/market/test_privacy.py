"""`accord.market.privacy`: who reads a task's work, and when."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from accord.market.privacy import WorkReaders
from accord.market.tasks import Task
from tests.specs import invoice_spec_with

OPERATOR, REQUESTER, LEADER, MEMBER, STRANGER = (
    "did:key:zOperator",
    "did:key:zRequester",
    "did:key:zLeader",
    "did:key:zMember",
    "did:key:zStranger",
)
REVIEW = {"id": "looks-right", "weight": 1, "kind": "review", "part": "invoice-fields"}


def task(*checks: dict[str, Any]) -> Task:
    spec = invoice_spec_with(*checks)
    return Task("task-1", REQUESTER, spec, datetime.now(UTC), "delivered", True, LEADER)


READERS = WorkReaders(OPERATOR, {LEADER, MEMBER})


def test_those_at_work_read_every_output_from_the_start() -> None:
    work = task()
    every = {p.part_id for p in work.spec.parts}
    for who in (OPERATOR, LEADER, MEMBER):
        assert READERS.readable_parts(work, who, computed=False) == every
        assert READERS.may_see_files(work, who)


def test_the_requester_reads_what_it_reviews_then_everything_once_computed() -> None:
    work = task(REVIEW)
    assert READERS.readable_parts(work, REQUESTER, computed=False) == {"invoice-fields"}
    assert READERS.readable_parts(work, REQUESTER, computed=True) == {
        p.part_id for p in work.spec.parts
    }
    assert READERS.readable_parts(task(), REQUESTER, computed=False) == frozenset()
    assert READERS.may_see_files(work, REQUESTER)


def test_a_stranger_reads_nothing() -> None:
    work = task(REVIEW)
    assert READERS.readable_parts(work, STRANGER, computed=True) is None
    assert not READERS.may_see_files(work, STRANGER)
