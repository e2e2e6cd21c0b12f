"""Amounts above what a chain account holds and windows beyond the market's limits are refused
before anything is logged (422 over HTTP); a posted task whose escrow never opened can be
cancelled by its requester."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from accord.identity.http_auth import AccordAuth
from accord.market.errors import BidRejected, LimitError, TaskError, TransitionError
from accord.market.money import MAX_WEI, Wei, parse_amount, wei
from accord.market.sealed import commit_bid
from accord.market.tasks import TASK_CANCELLED, TASK_POSTED, TaskSpec, parse_window
from accord.market.work import Part
from tests.api.test_app import World, assert_problem, build_world, post_task

HUGE = [str(10**80), str(2**256), str(2**256 - 1), str(MAX_WEI + 1), "1" + "0" * 200]


@pytest.fixture
def world(tmp_path: Path) -> World:
    return build_world(tmp_path / "home", bidders=("ada",))


@pytest.mark.parametrize("text", HUGE)
def test_amounts_beyond_any_account_are_a_limit_error(text: str) -> None:
    with pytest.raises(LimitError):
        parse_amount(text)


def test_the_largest_amount_is_accepted() -> None:
    assert parse_amount(str(MAX_WEI)) == MAX_WEI
    with pytest.raises(LimitError):
        wei(MAX_WEI + 1)


@pytest.mark.parametrize("text", ["9999999999999999999d", "31d", "2592001", "9" * 5000])
def test_windows_beyond_the_limit_are_refused(text: str) -> None:
    with pytest.raises((LimitError, TaskError)):
        parse_window(text, "bidding")
    with pytest.raises(LimitError):
        parse_window("9999999999999999999d", "bidding")


def test_the_longest_window_is_accepted() -> None:
    assert parse_window("30d", "bidding") == timedelta(days=30)


@pytest.mark.parametrize(
    "fields",
    [{"budget": text} for text in HUGE[:4]] + [{"bidding": "9999999999999999999d"}],
)
def test_posting_beyond_the_limits_is_422_and_logs_nothing(
    world: World, fields: dict[str, str]
) -> None:
    client = TestClient(world.app())
    store = world.context.market.ledger.store
    before = store.size()
    body = {
        "title": "Check the figures",
        "parts": [{"id": "sum", "capability": "arithmetic", "input": FIGURES}],
        "budget": "0.5eth",
        "bidding": "30s",
        "reveal": "30s",
        **fields,
    }
    response = client.post("/tasks", json=body, auth=AccordAuth(world.signers["req"]))
    assert_problem(response, 422)
    assert store.size() == before
    assert store.find(kind=TASK_POSTED) == []


FIGURES = {"kind": "figures", "figures": ["1.50", "2.25"], "operation": "sum"}


def _posted_never_funded(world: World) -> str:
    """A `task.posted` whose deposit never happened (the process died between the two)."""
    spec = TaskSpec(
        title="Unfunded",
        description="",
        parts=(Part("sum", "arithmetic", FIGURES),),
        budget=parse_amount("0.1eth"),
        bidding=timedelta(seconds=30),
        reveal=timedelta(seconds=30),
        delivery=timedelta(minutes=10),
    )
    ledger = world.context.market.ledger
    ledger.append(
        world.signers["req"],
        TASK_POSTED,
        subject="task-unfunded",
        body={"task_id": "task-unfunded", "spec": spec.to_json(), "escrow_from": "0x" + "11" * 20},
    )
    return "task-unfunded"


def test_the_requester_cancels_a_posted_task_whose_escrow_never_opened(world: World) -> None:
    market = world.context.market
    task_id = _posted_never_funded(world)
    assert market.recover() == []  # nothing on chain: it stays posted, fundable or cancellable
    with pytest.raises(TaskError, match="only its requester"):
        market.cancel(world.signers["ada"], task_id)
    task = market.cancel(world.signers["req"], task_id)
    assert task.state == "cancelled"
    assert [s.index for s in market.ledger.store.find(kind=TASK_CANCELLED)] != []
    with pytest.raises(TransitionError):
        market.cancel(world.signers["req"], task_id)
    # a bid on it is a bid refusal (it once met "unknown task state": a copied list of states)
    with pytest.raises(BidRejected, match=r"^late: .*it is cancelled"):
        market.commit(commit_bid(world.signers["ada"], task_id, Wei(1), bytes(16)))


def test_an_escrowed_task_cannot_be_cancelled(world: World) -> None:
    client = TestClient(world.app())
    task = post_task(client, world.signers["req"])
    with pytest.raises(TransitionError):
        world.context.market.cancel(world.signers["req"], task["task_id"])
