"""Parts that feed one another, end to end through the hosted runner (issue 44, item 7): "sum
the lines, then compute VAT on the sum" is one task. The leader gives `vat` out only once
`net` is reported, with `net`'s output in its input; the checks pass, the settlement values
`vat`'s check only for coalitions that made `net` too, and the audit replays it all."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

from accord.audit.checks import audit_task
from accord.coordinator.conversation import CONVERSATION_MESSAGE
from accord.coordinator.service import run_awarded_task
from accord.ledger.events import Entry
from accord.market.settlement import logged_settlement, part_inputs, settle_task
from accord.market.tasks import spec_from_request
from tests.audit.conftest import REQUESTER_KEY, onboard_agents, open_world, sealed_auction
from tests.market.test_part_inputs import vat_request


def messages(world: Any) -> list[tuple[int, dict[str, Any]]]:
    found = world.ledger.store.find(kind=CONVERSATION_MESSAGE, limit=10_000)
    return [(e.index, dict(Entry.from_bytes(e.data).event.body["message"])) for e in found]


def test_net_then_vat_on_it_is_one_task_run_in_order_settled_and_audited(tmp_path: Path) -> None:
    world = open_world(tmp_path / "home")
    onboard_agents(world)
    spec = spec_from_request(vat_request(), {})
    world.task_id = world.market.post(world.requester, spec, requester_key=REQUESTER_KEY).task_id
    sealed_auction(world)
    run_awarded_task(world.context, world.task_id)
    world.clock.advance(1)

    logged = messages(world)
    reported = next(
        i
        for i, m in logged
        if m["kind"] == "report" and any(c["part"] == "net" for c in m["result"]["contributions"])
    )
    assigned_vat = [
        i
        for i, m in logged
        if m["kind"] in ("assign_sync", "assign_async")
        and any(
            "vat" in (t["task"]["sub_id"], t["task"]["item"].get("item_id"))
            for t in m.get("assignments") or [{"task": m.get("task", {})}]
        )
    ]
    assert assigned_vat and min(assigned_vat) > reported, (reported, assigned_vat)

    # A panel on `vat` is given vat's input as it was made: net's delivered output in place.
    task = world.market.task(world.task_id)
    given = part_inputs(world.market, task, ["vat"])
    assert given["vat"]["input"]["figures"] == ["163.69", "0.2"], given

    settle_task(world.market, world.onboarding, world.task_id)
    body = logged_settlement(world.market, world.task_id)
    assert body is not None
    verdicts = {c["id"]: c["passed"] for c in body["checks"]}
    assert verdicts["net-right"] is True and verdicts["vat-right"] is True, body["checks"]
    assert int(body["amount"]) > 0
    values = {part: Fraction(v) for part, v in body["part_values"].items()}
    # `vat`'s check counts only with `net` made: its share is split between the two, so
    # `net` is worth its own check's share and half of `vat`'s.
    assert values["net"] - values["_assembly"] == Fraction(1, 5) + Fraction(3, 10), values
    assert values["vat"] - values["_assembly"] == Fraction(3, 10), values
    assert world.ledger.anchorer is not None
    world.ledger.anchorer.anchor_latest()

    report = audit_task(
        world.ledger.store,
        world.task_id,
        anchors=world.anchors,
        escrow=world.escrow_chain,
        outputs=world.market.sealed_bytes,
    )
    assert report.ok, [s.to_json() for s in report.steps]
