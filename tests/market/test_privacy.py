"""`accord.market.privacy`: who reads a task's work, and when."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from accord.market.privacy import WorkReaders, paid_parts
from accord.market.tasks import Task, spec_from_request
from tests.specs import invoice_request, invoice_spec_with

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
        assert READERS.readable_parts(work, who, paid=None) == every
        assert READERS.readable_parts(work, who, paid=frozenset()) == every
        assert READERS.may_see_files(work, who)


def test_the_requester_reads_what_it_reviews_then_what_it_paid_for() -> None:
    work = task(REVIEW)
    assert READERS.readable_parts(work, REQUESTER, paid=None) == {"invoice-fields"}
    assert READERS.readable_parts(work, REQUESTER, paid={"tax", "nonsense"}) == {"tax"}
    assert READERS.readable_parts(work, REQUESTER, paid=frozenset()) == frozenset()
    assert READERS.readable_parts(task(), REQUESTER, paid=None) == frozenset()
    assert READERS.may_see_files(work, REQUESTER)


PRODUCERS = {
    "lines-sum": MEMBER,
    "tax": MEMBER,
    "invoice-fields": LEADER,
    "invoice-dates": LEADER,
}


def settlement(amount: int, passed: dict[str, bool], payouts: dict[str, int]) -> dict[str, Any]:
    return {
        "amount": str(amount),
        "checks": [{"id": c, "passed": p, "detail": ""} for c, p in passed.items()],
        "payouts": {did: str(wei) for did, wei in payouts.items()},
    }


def test_a_part_is_paid_for_when_a_passed_check_reads_it() -> None:
    work = task()  # INVOICE_CHECKS: sum-right, tax-right, total-right, due-date, ...
    verdicts = {c.check_id: False for c in work.spec.requester_checks}
    verdicts["sum-right"] = True
    paid = paid_parts(work, settlement(10, verdicts, {MEMBER: 8, LEADER: 2}), PRODUCERS)
    # tax's checks failed (tax-right, totals-agree), though its producer was paid for lines-sum
    assert paid == {"lines-sum"}


def test_nothing_is_paid_for_when_nothing_is_paid() -> None:
    work = task()
    verdicts = {c.check_id: True for c in work.spec.requester_checks}
    assert paid_parts(work, settlement(0, verdicts, {MEMBER: 0, LEADER: 0}), PRODUCERS) == set()
    assert paid_parts(work, {"amount": "x"}, PRODUCERS) == set()
    assert paid_parts(work, {}, PRODUCERS) == set()


def test_a_part_no_check_failed_is_paid_for_when_its_producer_is_paid() -> None:
    only_sum = {"id": "sum", "weight": 1, "kind": "expect", "part": "lines-sum", "path": "$"}
    spec = spec_from_request(invoice_request(checks=[{**only_sum, "equals": "2585.50"}]), {})
    work = Task("task-2", REQUESTER, spec, datetime.now(UTC), "settled", True, LEADER)
    paid = paid_parts(work, settlement(10, {"sum": True}, {MEMBER: 8, LEADER: 0}), PRODUCERS)
    assert paid == {"lines-sum", "tax"}  # tax: MEMBER's, paid, unchecked; LEADER was paid 0


def test_a_stranger_reads_nothing() -> None:
    work = task(REVIEW)
    assert READERS.readable_parts(work, STRANGER, paid={"tax"}) is None
    assert not READERS.may_see_files(work, STRANGER)


def test_where_the_settlement_values_parts_only_a_passed_requesters_check_opens_a_part() -> None:
    """A settlement that values parts (`part_values`) gives every delivered part a share of
    the assembly check (it reads them all): that share is the leader's integration, not
    payment for the part's work, so only a requester's check that reads the part and passed
    opens it."""
    work = task()
    verdicts = {c.check_id: False for c in work.spec.requester_checks}
    verdicts["sum-right"] = True
    body = settlement(10, verdicts, {MEMBER: 8, LEADER: 2})
    body["part_values"] = {"lines-sum": "3/5", "tax": "0/1", "_plan": "1/5", "bogus": "1/5"}
    assert paid_parts(work, body, PRODUCERS) == {"lines-sum"}
    body["part_values"] = {"lines-sum": "3/5", "invoice-dates": "1/10"}  # an assembly share
    assert paid_parts(work, body, PRODUCERS) == {"lines-sum"}
    body["part_values"] = {"lines-sum": "not a fraction"}
    assert paid_parts(work, body, PRODUCERS) == set()
