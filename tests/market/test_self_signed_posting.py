"""The pure rules behind a requester that holds its own keys (`accord.market.service`,
`accord.market.tasks`): a logged spec reads back as the request that made it, so the service can
check a requester's own `task.posted`; only the task's own deposit opens bidding; the
escrow account is a checksummed address. The flows over HTTP and a real chain are in
tests/api/test_outside_requester.py."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from accord.market.errors import TaskError
from accord.market.escrow import open_calldata, task_id_hash
from accord.market.escrow.port import EscrowDeposit
from accord.market.money import Wei
from accord.market.service import deposit_mismatch, escrow_account, escrow_deadline
from accord.market.tasks import Task, request_of, spec_from_request
from tests.specs import invoice_request

ACCOUNT = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"


@pytest.mark.parametrize("checks", [None, []])
def test_a_logged_spec_reads_back_as_the_request_that_made_it(checks: list[object] | None) -> None:
    request = invoice_request(review="2h", rule="first-score")
    if checks is not None:
        request["checks"] = checks
    spec = spec_from_request(request, {})
    again = spec_from_request(request_of(spec.to_json()), {})
    assert again.to_json() == spec.to_json()


def test_what_is_not_a_logged_spec_is_refused() -> None:
    with pytest.raises(TaskError, match="not a task spec"):
        request_of({"title": "no terms"})
    with pytest.raises(TaskError, match="no task spec"):
        request_of(["a list"])


def task() -> Task:
    spec = spec_from_request(invoice_request(), {})
    return Task("task-1", "did:key:z", spec, datetime(2026, 3, 1, 12, tzinfo=UTC), "posted")


def test_only_the_tasks_own_deposit_opens_it() -> None:
    posted = task()
    deadline = escrow_deadline(posted)
    assert deadline == int(posted.escrow_deadline.timestamp())
    own = EscrowDeposit(ACCOUNT, posted.spec.budget, deadline, open=True)
    assert deposit_mismatch(posted, ACCOUNT, own) is None
    assert deposit_mismatch(posted, ACCOUNT.lower(), own) is None  # addresses by value
    stranger = EscrowDeposit("0x" + "22" * 20, posted.spec.budget, deadline, open=True)
    assert "0x" + "22" * 20 in str(deposit_mismatch(posted, ACCOUNT, stranger))
    short = EscrowDeposit(ACCOUNT, Wei(posted.spec.budget - 1), deadline, open=True)
    assert "not the budget" in str(deposit_mismatch(posted, ACCOUNT, short))
    late = EscrowDeposit(ACCOUNT, posted.spec.budget, deadline + 1, open=True)
    assert "deadline" in str(deposit_mismatch(posted, ACCOUNT, late))
    closed = EscrowDeposit(ACCOUNT, posted.spec.budget, deadline, open=False)
    assert "no longer open" in str(deposit_mismatch(posted, ACCOUNT, closed))


def test_the_escrow_account_is_a_checksummed_address() -> None:
    assert escrow_account(ACCOUNT.lower()) == ACCOUNT
    for bad in ("0x1234", "0x" + "00" * 20, ACCOUNT.replace("C8", "c8"), 42, None):
        with pytest.raises(TaskError, match="not an Ethereum address"):
            escrow_account(bad)


def test_the_open_calldata_is_the_selector_and_the_two_words() -> None:
    data = open_calldata("task-1", 1_800_000_000)
    assert data[:4].hex() == "1f91eb71" and len(data) == 68  # the selector of open(bytes32,uint64)
    assert data[4:36] == task_id_hash("task-1")
    assert int.from_bytes(data[36:68], "big") == 1_800_000_000
    with pytest.raises(ValueError):
        open_calldata("task-1", 2**64)
