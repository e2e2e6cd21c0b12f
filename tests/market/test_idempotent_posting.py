"""Posting with an idempotency key: a retried posting (the same requester, key and spec) gives
back the task the first one posted and deposits once, from this process or another one; the
key with another spec is refused and nothing is logged."""

from __future__ import annotations

from typing import Any

import pytest

from accord.ledger.errors import AlreadyLoggedError, ChainUnavailableError
from accord.ledger.service import Ledger
from accord.ledger.signing import Ed25519Signer
from accord.market.errors import IdempotencyConflict, TaskError
from accord.market.escrow import MemoryEscrowChain
from accord.market.money import Wei
from accord.market.service import Market, posted_task_id
from accord.market.tasks import TASK_POSTED, Task
from tests.market.conftest import REQUESTER_KEY
from tests.market.test_service import BUDGET, spec


def test_the_same_key_posts_once_and_answers_the_same_task(
    market: Market, ledger: Ledger, requester: Ed25519Signer, escrow_chain: MemoryEscrowChain
) -> None:
    first = market.post(requester, spec(), requester_key=REQUESTER_KEY, idempotency_key="k-1")
    size = ledger.store.size()
    again = market.post(requester, spec(), requester_key=REQUESTER_KEY, idempotency_key="k-1")
    assert again == first and first.state == "bidding"
    assert ledger.store.size() == size
    assert escrow_chain.balance() == BUDGET
    assert first.task_id == posted_task_id(requester.did, "k-1")


def test_another_spec_under_a_used_key_is_refused_and_logs_nothing(
    market: Market, ledger: Ledger, requester: Ed25519Signer
) -> None:
    first = market.post(requester, spec(), requester_key=REQUESTER_KEY, idempotency_key="k-2")
    size = ledger.store.size()
    with pytest.raises(IdempotencyConflict) as refused:
        market.post(
            requester, spec(budget=2_000), requester_key=REQUESTER_KEY, idempotency_key="k-2"
        )
    assert refused.value.task_id == first.task_id
    assert "use a new key" in str(refused.value)
    assert ledger.store.size() == size


def test_keys_are_per_requester(requester: Ed25519Signer) -> None:
    other = Ed25519Signer.generate()
    assert posted_task_id(requester.did, "k") != posted_task_id(other.did, "k")
    assert posted_task_id(requester.did, None) != posted_task_id(requester.did, None)


@pytest.mark.parametrize("key", ["", "x" * 201, "naïve", "tab\there"])
def test_a_malformed_key_is_refused(
    market: Market, ledger: Ledger, requester: Ed25519Signer, key: str
) -> None:
    size = ledger.store.size()
    with pytest.raises(TaskError, match="printable ASCII"):
        market.post(requester, spec(), requester_key=REQUESTER_KEY, idempotency_key=key)
    assert ledger.store.size() == size


def test_a_retry_after_a_lost_deposit_reply_finishes_the_escrow_without_paying_twice(
    market: Market, requester: Ed25519Signer, escrow_chain: MemoryEscrowChain
) -> None:
    escrow_chain.lose_broadcast_replies = 1  # the deposit is mined, its reply is lost
    with pytest.raises(ChainUnavailableError):
        market.post(requester, spec(), requester_key=REQUESTER_KEY, idempotency_key="k-3")
    retried = market.post(requester, spec(), requester_key=REQUESTER_KEY, idempotency_key="k-3")
    assert retried.state == "bidding" and retried.escrowed
    assert escrow_chain.balance() == BUDGET
    assert [e.name for e in escrow_chain.events(retried.task_id)] == ["Opened"]


def test_the_log_itself_refuses_a_second_posting_of_one_task(
    market: Market, ledger: Ledger, requester: Ed25519Signer
) -> None:
    """What makes the key safe across processes: a posting is logged with its task id as its
    once-key, so of two processes racing with one key, one append wins and the other finds its
    task."""
    task = market.post(requester, spec(), requester_key=REQUESTER_KEY, idempotency_key="k-4")
    with pytest.raises(AlreadyLoggedError):
        ledger.append(
            requester,
            TASK_POSTED,
            subject=task.task_id,
            body={"task_id": task.task_id, "spec": spec(budget=Wei(5)).to_json()},
            once_key=task.task_id,
        )


def test_losing_the_race_to_another_process_answers_its_task(
    market: Market,
    ledger: Ledger,
    requester: Ed25519Signer,
    escrow_chain: MemoryEscrowChain,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The other process appends between this one's look and its append: the append is
    refused by the log, and the posting answers the task the other process posted."""
    won = market.post(requester, spec(), requester_key=REQUESTER_KEY, idempotency_key="k-5")
    size = ledger.store.size()
    real_look = market._posted_again
    looks: list[object] = []

    def look(*args: Any) -> Task | None:
        looks.append(args)  # the first look happened before the other process appended
        return None if len(looks) == 1 else real_look(*args)

    monkeypatch.setattr(market, "_posted_again", look)
    lost = market.post(requester, spec(), requester_key=REQUESTER_KEY, idempotency_key="k-5")
    assert lost == won and len(looks) == 2
    assert ledger.store.size() == size
    assert escrow_chain.balance() == BUDGET
