"""`Home`'s typed reads over a settled task (SQLite ledger, in-memory anchor and escrow
chains): pages of tasks by state, capability and requester; one task and its state; the
deliverable as a `Deliverable`; the audit as an `AuditReport`."""

from __future__ import annotations

import pytest

import accord
from accord import Home
from accord.audit.checks import AuditReport
from accord.ledger.errors import QueryError
from accord.market.checks import CheckResult
from accord.market.deliverable import Deliverable
from accord.market.errors import SettlementError, TaskError
from accord.market.tasks import Task
from tests.audit.conftest import World, build_world
from tests.specs import invoice_spec, single_part_spec


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    """One settled invoice task (posted by the fixture's requester), then two more posted
    through `Home.post` by the agent hopper, still taking bids."""
    world = build_world(tmp_path_factory.mktemp("home") / "home", until="settled")
    home = Home(world.context)
    home.post(invoice_spec(), requester="hopper")
    home.post(single_part_spec("arithmetic"), requester="hopper")
    return world


@pytest.fixture
def home(world: World) -> Home:
    return Home(world.context)


def test_tasks_are_pages_of_typed_tasks_oldest_first(home: Home, world: World) -> None:
    first = home.tasks(limit=2)
    assert isinstance(first, accord.TaskPage)
    assert all(isinstance(task, Task) for task in first.tasks)
    assert first.tasks[0].task_id == world.task_id
    assert first.next_cursor is not None
    rest = home.tasks(limit=2, cursor=first.next_cursor)
    assert len(rest.tasks) == 1 and rest.next_cursor is None
    everything = [t.task_id for t in home.tasks().tasks]
    assert everything == [t.task_id for t in (*first.tasks, *rest.tasks)]


def test_tasks_filter_by_state_capability_and_requester(home: Home, world: World) -> None:
    hopper = world.agents["hopper"]
    [settled] = home.tasks(state="settled").tasks
    assert settled.task_id == world.task_id
    bidding = home.tasks(state="bidding").tasks
    assert [t.requester for t in bidding] == [hopper.did, hopper.did]
    assert [t.task_id for t in home.tasks(requester="hopper").tasks] == [t.task_id for t in bidding]
    assert home.tasks(requester=hopper).tasks == home.tasks(requester=hopper.did).tasks
    assert [t.task_id for t in home.tasks(requester=world.requester.did).tasks] == [world.task_id]
    assert len(home.tasks(capability="extraction").tasks) == 2  # the two invoices
    assert home.tasks(capability="python").tasks == ()


def test_a_bad_filter_is_a_query_error_naming_it(home: Home) -> None:
    with pytest.raises(QueryError) as caught:
        home.tasks(state="finished")
    assert caught.value.parameter == "state"
    with pytest.raises(QueryError) as caught:
        home.tasks(limit=0)
    assert caught.value.parameter == "limit"


def test_one_task_and_its_state_now(home: Home, world: World) -> None:
    task = home.task(world.task_id)
    assert isinstance(task, Task) and task.spec.title
    assert home.state(task) == home.state(world.task_id) == "settled"
    [posted] = home.tasks(requester="hopper", limit=1).tasks
    assert posted.state == "bidding" and home.state(posted) == "bidding"
    with pytest.raises(TaskError):
        home.task("no-such-task")


def test_the_deliverable_is_typed_and_agrees_with_its_json(home: Home, world: World) -> None:
    deliverable = home.deliverable(world.task_id)
    assert isinstance(deliverable, Deliverable)
    view = home.result(world.task_id)
    assert deliverable.task_id == world.task_id and deliverable.sha256 == view["sha256"]
    assert deliverable.state == "settled" and deliverable.withheld == ()
    assert [p.part_id for p in deliverable.parts] == [p["part"] for p in view["parts"]]
    for part, shown in zip(deliverable.parts, view["parts"], strict=True):
        assert part.shown and part.output == shown["output"]
        assert part.producer == shown["producer"] and part.producer.startswith("did:")
    assert deliverable.checks is not None
    assert all(isinstance(check, CheckResult) for check in deliverable.checks)
    assert {c.check_id for c in deliverable.checks} == {c["id"] for c in view["checks"]}
    assert deliverable.payouts is not None
    assert {p: str(w) for p, w in deliverable.payouts.items()} == view["payouts"]
    assert all(type(w) is int for w in deliverable.payouts.values())


def test_a_deliverable_not_yet_delivered_is_a_task_error(home: Home) -> None:
    [newest] = home.tasks(requester="hopper", limit=1).tasks
    with pytest.raises(TaskError, match="not been delivered"):
        home.deliverable(newest.task_id)


def test_a_view_of_another_shape_is_a_settlement_error(home: Home, world: World) -> None:
    view = home.result(world.task_id)
    with pytest.raises(SettlementError, match="does not parse"):
        Deliverable.from_view({**view, "payouts": {"did:key:z": "lots"}})
    with pytest.raises(SettlementError, match="does not parse"):
        Deliverable.from_view({k: v for k, v in view.items() if k != "parts"})


def test_the_audit_is_a_report_over_the_homes_own_chains(home: Home, world: World) -> None:
    report = home.audit(world.task_id)
    assert isinstance(report, AuditReport)
    assert report.ok, [step.to_json() for step in report.steps]


def test_the_typed_values_are_exported() -> None:
    for name in ("Task", "TaskPage", "Deliverable", "DeliveredPart", "AuditReport"):
        assert name in accord.__all__
        assert getattr(accord, name).__module__.split(".")[:2] in (
            ["accord", "market"],
            ["accord", "audit"],
        )
