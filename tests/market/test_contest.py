"""A contested inconclusive python check (`accord.market.disputes.decide_contest`), in the
in-process world of `tests.audit.conftest`: an inconclusive check holds an early settlement for
the review window and is named in `checks.previewed`; the requester may contest that check,
and only that one, with a rejection and its bond; the panel decides it as a rejected review of
the check's code; an uncontested one counts as passed; the audit replays the panel and fails a
settlement whose logged outcome is not the votes'."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from accord.kit.panel import boxed_check_evaluator
from accord.ledger.events import Event, format_time
from accord.ledger.signing import Ed25519Signer
from accord.market.check_io import check_world
from accord.market.checks import CheckResult
from accord.market.disputes import (
    WithheldPreviews,
    contest_check,
    contest_request,
    logged_in_window,
    withheld_previews,
)
from accord.market.early import settle_early
from accord.market.errors import SettlementWaits, TaskError
from accord.market.panel import PANEL_DRAWN, panel_pay
from accord.market.payouts import dispute_fee
from accord.market.settlement import SETTLEMENT_COMPUTED, logged_settlement, settle_task
from accord.market.tasks import CHECKS_PREVIEWED
from accord.market.work import PythonCheck, ReviewCheck
from tests.audit.conftest import rebuild_log, with_body
from tests.market.panelists import jurors, mine, reveal, vote
from tests.market.test_check_io import REVIEW, audit, delivered_world, finish, logged_checks
from tests.specs import invoice_spec_with

DICE = {
    "id": "dice",
    "weight": 1,
    "kind": "python",
    "part": "invoice-fields",
    "code": "import random\ndef check(outputs):\n    return random.random() < 2\n",
}
"""Draws entropy it did not seed: inconclusive on every machine."""
FINE = {
    "id": "fine",
    "weight": 1,
    "kind": "python",
    "part": "invoice-fields",
    "code": "def check(outputs):\n    return True\n",
}


def python_check(world: Any, check_id: str) -> PythonCheck:
    task = world.market.task(world.task_id)
    found = next(c for c in task.spec.requester_checks if c.check_id == check_id)
    assert isinstance(found, PythonCheck)
    return found


def test_a_contested_inconclusive_check_is_decided_by_the_panel_and_replayed(
    tmp_path: Path,
) -> None:
    world = delivered_world(tmp_path / "home", invoice_spec_with(DICE, FINE))
    market, task_id = world.market, world.task_id
    task = market.task(task_id)
    assert task.price is not None
    # nothing left to review: looked at early, as before
    assert task_id in settle_early(market, [task])
    with pytest.raises(SettlementWaits, match=r"dice of .* inconclusive.*contest"):
        settle_task(market, world.onboarding, task_id)
    previewed = market.previewed(task_id)
    assert previewed is not None and list(previewed) == ["dice"]
    assert "entropy" in previewed["dice"]
    assert logged_settlement(market, task_id) is None
    # held for the window: no longer settled early, and a settle asked for waits too
    assert task_id not in settle_early(market, [market.task(task_id)])
    with pytest.raises(SettlementWaits, match="until the review window ends"):
        settle_task(market, world.onboarding, task_id)
    assert len(market.ledger.store.find(kind=CHECKS_PREVIEWED, subject=task_id)) == 1

    reason = "a coin decides this check, not the invoice"
    panelists = jurors(world, 4)
    # only the check found inconclusive is contested, and only by a rejection
    with pytest.raises(TaskError, match="decides from the outputs"):
        market.review(world.requester, task_id, "fine", "reject", reason)
    with pytest.raises(TaskError, match="a review of it is a rejection"):
        market.review(world.requester, task_id, "dice", "accept")
    with pytest.raises(TaskError, match="needs a reason"):
        market.review(world.requester, task_id, "dice", "reject", " ")
    market.review(world.requester, task_id, "dice", "reject", reason)
    with pytest.raises(TaskError, match="already reviewed"):
        market.review(world.requester, task_id, "dice", "reject", reason)

    world.clock.advance(3600)  # the review window closes
    mine(world)
    with pytest.raises(SettlementWaits, match="is voting"):
        settle_task(market, world.onboarding, task_id)
    [drawn] = market.ledger.store.find(kind=PANEL_DRAWN, subject=task_id, limit=5)
    check = contest_check(python_check(world, "dice"))
    seats = market.panels.draw(task, check).panel.seats
    assert len(seats) == 3 and set(seats) < set(panelists)
    verdicts = dict(zip(seats, ("requester", "requester", "team"), strict=True))
    salts = {did: vote(world, panelists[did], task_id, v, "dice") for did, v in verdicts.items()}
    for did, (verdict, salt) in salts.items():
        reveal(world, panelists[did], task_id, verdict, salt, "dice")

    outcome = settle_task(market, world.onboarding, task_id)
    finish(world)
    dice = logged_checks(world)["dice"]
    assert dice["passed"] is False and dice["inconclusive"] is True
    assert dice["detail"].startswith("inconclusive, contested: the panel found for the requester")
    assert dice["record"]["dispute"]["winner"] == "requester"
    assert dice["record"]["dispute"]["panel"]["drawn"] == drawn.index
    assert logged_checks(world)["fine"]["passed"] is True
    body = logged_settlement(market, task_id)
    assert body is not None
    fee = dispute_fee(task.price)
    shares = panel_pay(fee, seats, seats[:2])
    assert body["panel_payouts"] == {did: str(w) for did, w in sorted(shares.items())}
    assert outcome.amount < task.price  # the contested check's weight is not paid
    report = audit(world)
    assert report.ok, [s.to_json() for s in report.steps]

    # the operator logs the contested check as passed (the team's side), its panel as it was
    [computed] = market.ledger.store.find(kind=SETTLEMENT_COMPUTED, subject=task_id, limit=1)

    def for_the_team(index: int, event: Event) -> Event:
        if index != computed.index:
            return event
        body = copy.deepcopy(dict(event.body))
        for logged in body["checks"]:
            if logged["id"] == "dice":
                logged["passed"] = True
        return with_body(event, body)

    store, anchors = rebuild_log(world, tmp_path / "forged.db", for_the_team)
    forged = audit(world, store, anchors)
    assert not forged.ok and forged.first_failure is not None
    assert "check dice recomputes to fail" in forged.first_failure.detail

    # or says it never named the check inconclusive: the contest was not the requester's to make
    [preview] = market.ledger.store.find(kind=CHECKS_PREVIEWED, subject=task_id, limit=1)

    def named_none(index: int, event: Event) -> Event:
        if index != preview.index:
            return event
        return with_body(event, {**event.body, "inconclusive": {}})

    store, anchors = rebuild_log(world, tmp_path / "unnamed.db", named_none)
    forged = audit(world, store, anchors)
    assert not forged.ok and forged.first_failure is not None
    assert "no `checks.previewed` before the contest" in forged.first_failure.detail


def test_an_uncontested_inconclusive_check_counts_as_passed_after_the_window(
    tmp_path: Path,
) -> None:
    """A task with a review still to give is previewed once in its window (its python checks
    alone), so the requester learns in time; nobody contests, and after the window the
    inconclusive check counts as passed, with no panel."""
    world = delivered_world(tmp_path / "home", invoice_spec_with(REVIEW, DICE))
    market, task_id = world.market, world.task_id
    assert task_id in settle_early(market, [market.task(task_id)])  # to be previewed
    with pytest.raises(SettlementWaits, match="inconclusive"):
        settle_task(market, world.onboarding, task_id)
    assert list(market.previewed(task_id) or {}) == ["dice"]
    market.review(world.requester, task_id, "looks-right", "accept")
    assert task_id not in settle_early(market, [market.task(task_id)])

    world.clock.advance(3600)
    settle_task(market, world.onboarding, task_id)
    finish(world)
    dice = logged_checks(world)["dice"]
    assert dice["passed"] is True and dice["inconclusive"] is True
    assert "dispute" not in (dice.get("record") or {})
    assert not market.ledger.store.find(kind=PANEL_DRAWN, subject=task_id, limit=5)
    report = audit(world)
    assert report.ok, [s.to_json() for s in report.steps]


def test_an_operator_that_withholds_the_preview_fails_the_audit(tmp_path: Path) -> None:
    """An operator colluding with the team never looks at the task in its review window, so
    logs no `checks.previewed`, and settles at the window's end: the inconclusive check counts
    as passed, and its requester never learned it could contest it. The audit FAILs naming
    the check; the honest flow, previewed in the window, PASSes."""
    world = delivered_world(tmp_path / "home", invoice_spec_with(REVIEW, DICE, FINE))
    market, task_id = world.market, world.task_id
    market.review(world.requester, task_id, "looks-right", "accept")
    world.clock.advance(3600)  # the window closes, nobody told the requester of the dice
    settle_task(market, world.onboarding, task_id)
    finish(world)
    assert market.previewed(task_id) is None
    dice = logged_checks(world)["dice"]
    assert dice["passed"] is True and dice["inconclusive"] is True
    report = audit(world)
    assert not report.ok and report.first_failure is not None
    detail = report.first_failure.detail
    assert "python checks dice were inconclusive and counted as passed" in detail, detail
    assert "denied its contest" in detail and "fine" not in detail.split(":")[0]

    # the rule, pure: a first preview after the window's end is too late; one in time that
    # names the check lets it be; one in time that names none leaves it unnamed
    task = market.task(task_id)
    assert task.review_ends is not None
    [computed] = market.ledger.store.find(kind=SETTLEMENT_COMPUTED, subject=task_id, limit=1)
    checks = {c: CheckResult.from_json(r) for c, r in logged_checks(world).items()}
    operator = market.ledger.operator.did

    def preview_at(moment: datetime, named: Mapping[str, str]) -> WithheldPreviews:
        body = {"task_id": task_id, "inconclusive": dict(named)}
        event = Event(CHECKS_PREVIEWED, operator, 0, format_time(moment), task_id, body)
        return withheld_previews(
            [(computed.index - 1, event)],
            operator=operator,
            task=task,
            checks=checks,
            settled=computed.index,
        )

    ends = task.review_ends
    assert preview_at(ends + timedelta(seconds=1), {"dice": "x"}).unpreviewed == ("dice",)
    assert preview_at(ends, {"dice": "x"}) == WithheldPreviews((), ())
    assert preview_at(ends - timedelta(seconds=1), {}) == WithheldPreviews((), ("dice",))


def test_a_preview_removed_or_emptied_is_found(tmp_path: Path) -> None:
    """The honest flow (previewed in the window, uncontested, settled at its end) PASSes;
    the same log with its preview taken out, and nothing else logged in the window, is
    INCOMPLETE (down or withheld, the log cannot tell), and with a preview that names no check
    (decided then, inconclusive at settlement: the check's flakiness or a withheld preview,
    which the log cannot tell apart) is INCOMPLETE, naming the check."""
    world = delivered_world(tmp_path / "home", invoice_spec_with(REVIEW, DICE, FINE))
    market, task_id = world.market, world.task_id
    with pytest.raises(SettlementWaits, match="inconclusive"):
        settle_task(market, world.onboarding, task_id)
    world.clock.advance(3600)
    settle_task(market, world.onboarding, task_id)
    finish(world)
    report = audit(world)
    assert report.ok, [s.to_json() for s in report.steps]
    [preview] = market.ledger.store.find(kind=CHECKS_PREVIEWED, subject=task_id, limit=1)

    store, anchors = rebuild_log(
        world, tmp_path / "taken.db", lambda i, e: None if i == preview.index else e
    )
    forged = audit(world, store, anchors)
    # Nothing else was logged in that window: a service down for all of it could not have
    # previewed, which the log cannot tell from one withholding (the test above, where the
    # requester's review shows the service up in the window, FAILs).
    assert forged.verdict == "INCOMPLETE", [s.to_json() for s in forged.steps]
    [away] = [s for s in forged.steps if s.status == "unchecked"]
    assert "python checks dice were inconclusive and counted as passed" in away.detail
    assert "the log took no entry at all in that window" in away.detail

    def named_none(index: int, event: Event) -> Event:
        if index != preview.index:
            return event
        return with_body(event, {**event.body, "inconclusive": {}})

    store, anchors = rebuild_log(world, tmp_path / "emptied.db", named_none)
    forged = audit(world, store, anchors)
    assert forged.verdict == "INCOMPLETE", [s.to_json() for s in forged.steps]
    [unchecked] = [s for s in forged.steps if s.status == "unchecked"]
    assert "python checks dice were inconclusive at settlement" in unchecked.detail


def test_a_task_whose_checks_decide_is_previewed_without_holding_it(tmp_path: Path) -> None:
    """Conclusive python checks: the preview names none, the task is not looked at early
    again, and no python check can be contested."""
    world = delivered_world(tmp_path / "home", invoice_spec_with(REVIEW, FINE))
    market, task_id = world.market, world.task_id
    with pytest.raises(SettlementWaits, match="looks-right"):  # its review, not a contest
        settle_task(market, world.onboarding, task_id)
    assert market.previewed(task_id) == {}
    assert task_id not in settle_early(market, [market.task(task_id)])
    with pytest.raises(TaskError, match="decides from the outputs"):
        market.review(world.requester, task_id, "fine", "reject", "no")
    market.review(world.requester, task_id, "looks-right", "accept")
    assert task_id in settle_early(market, [market.task(task_id)])  # accepted: settles early
    settle_task(market, world.onboarding, task_id)
    finish(world)
    report = audit(world)  # nothing inconclusive: no preview had to name anything
    assert report.ok, [s.to_json() for s in report.steps]


def test_the_contest_criterion_and_request_carry_the_check() -> None:
    check = PythonCheck("dice", 2, ("a", "b"), "def check(outputs):\n    return True\n", 3, 64)
    review = contest_check(check)
    assert isinstance(review, ReviewCheck)
    assert (review.check_id, review.weight, review.reads) == ("dice", 2, ("a", "b"))
    assert check.code in review.criterion and "3 s of CPU" in review.criterion


def test_a_panelist_reruns_a_contested_check_in_its_own_box() -> None:
    """The kit's panelist re-runs the check, in the world the service names, where it
    decides, and falls back to its own evaluation where it is inconclusive there too."""
    fallback_calls: list[str] = []

    def fallback(request: Mapping[str, Any]) -> str:
        fallback_calls.append(str(request.get("check")))
        return "team"

    evaluate = boxed_check_evaluator(fallback)
    task = _Task()

    def call(code: str) -> dict[str, Any]:
        request = contest_request(PythonCheck("c", 1, ("p",), code), task)  # type: ignore[arg-type]
        world = check_world(task.task_id, task.posted_at, "c")
        assert (request["python"]["at"], request["python"]["seed"]) == (world.at, world.seed)
        return {"check": "c", "parts": {"p": 41}} | request

    assert evaluate(call("def check(outputs):\n    return outputs['p'] == 42\n")) == "requester"
    assert evaluate(call("def check(outputs):\n    return outputs['p'] == 41\n")) == "team"
    assert fallback_calls == []
    dice = "import random\ndef check(outputs):\n    return random.random() < 0\n"
    assert evaluate(call(dice)) == "team" and fallback_calls == ["c"]
    assert evaluate({"check": "r", "parts": {}}) == "team" and fallback_calls == ["c", "r"]


class _Task:
    task_id = "task-1"
    posted_at = datetime(2026, 1, 1, tzinfo=UTC)


def test_the_service_was_up_in_a_window_when_it_logged_anything_then() -> None:
    """`logged_in_window`, pure: an entry after the delivery stamped inside the window, by
    anyone, shows the service up; the delivery itself, entries before it or outside the
    window do not."""
    start = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    end = start + timedelta(hours=1)
    actor = Ed25519Signer.generate().did

    def at(index: int, moment: datetime) -> tuple[int, Event]:
        return index, Event("x.y", actor, index, format_time(moment), "t", {})

    inside, outside = start + timedelta(minutes=5), end + timedelta(seconds=1)
    assert logged_in_window([at(8, inside)], after=7, start=start, end=end)
    assert logged_in_window([at(8, end)], after=7, start=start, end=end)
    assert not logged_in_window([at(7, inside)], after=7, start=start, end=end)  # the delivery
    assert not logged_in_window([at(8, outside)], after=7, start=start, end=end)
    assert not logged_in_window([], after=7, start=start, end=end)
