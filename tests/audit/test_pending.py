"""Step 2 of a task still in progress: entries the chain does not anchor yet are PENDING, not a
failure (the service anchors its tail within ACCORD_ANCHOR_INTERVAL); once the task is over,
an entry it touched that is not anchored fails step 2 as before."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from accord.api.audit_cli import print_report
from accord.audit.checks import AuditReport, audit_task
from accord.audit.html import render_html
from accord.ledger.events import make_entry
from accord.market.escrow import address_of
from tests.audit.conftest import OPERATOR_KEY, World, build_world, copy_db, open_copy, sql


def audit(world: World) -> AuditReport:
    return audit_task(
        world.ledger.store,
        world.task_id,
        anchors=world.anchors,
        escrow=world.escrow_chain,
        outputs=world.market.sealed_bytes,
    )


def comment(world: World) -> int:
    """The requester remarks on the task: one more entry the task touched; its index."""
    requester = world.requester
    index, _ = world.ledger.append(
        requester, "task.comment", subject=world.task_id, body={"text": "how is it going?"}
    )
    return index


def test_an_in_progress_task_with_nothing_anchored_yet_is_pending(tmp_path: Path) -> None:
    """Signed checkpoints name the operator (one is served at `GET /checkpoint`), but none
    is anchored yet."""
    world = build_world(tmp_path / "home", until="awarded")
    world.ledger.checkpoint()
    assert world.anchors.latest_size(world.ledger.log_id) == 0
    report = audit(world)
    assert report.verdict == "PENDING", report.to_json()
    assert report.first_failure is None and not report.ok
    step = report.steps[1]
    assert (step.status, step.entry) == ("pending", 0)
    assert (
        "nothing of this log is anchored on chain yet" in step.detail and "awarded" in step.detail
    )
    statuses = {s.number: s.status for s in report.steps}
    assert statuses == {
        1: "pass",
        2: "pending",
        3: "pass",
        4: "pass",
        5: "pending",
        6: "pending",
        7: "pending",
    }, report.to_json()
    assert "the task is awarded: this step checks it once it is running" in report.steps[4].detail
    assert report.to_json()["failed_step"] is None


def test_an_in_progress_task_s_unanchored_tail_is_pending_until_anchored(tmp_path: Path) -> None:
    world = build_world(tmp_path / "home", until="delivered")
    assert world.ledger.anchorer is not None
    world.ledger.anchorer.anchor_latest()
    anchored = world.ledger.store.size()
    last = comment(world)
    report = audit(world)
    assert report.verdict == "PENDING", report.to_json()
    step = report.steps[1]
    assert (step.status, step.entry) == ("pending", anchored)
    assert f"from {anchored} on (up to {last}) are not anchored yet" in step.detail
    assert "delivered" in step.detail
    assert [s.status for s in report.steps] == ["pass", "pending", "pass", "pass", "pass"] + [
        "pending"
    ] * 2
    page = render_html(report, world.ledger.store)
    assert 'class="verdict pending"' in page and "FAIL" not in page
    world.ledger.anchorer.anchor_latest()
    anchored_now = audit(world)
    assert anchored_now.steps[1].status == "pass" and anchored_now.verdict == "PENDING"


def test_a_settled_task_s_unanchored_entry_still_fails(tmp_path: Path) -> None:
    """A task that is over has nothing left to wait for: what it touched must be anchored."""
    world = build_world(tmp_path / "home")
    store = open_copy(world, copy_db(world, tmp_path / "tail.db"))
    size = store.size()
    last = store.last_seq(world.requester.did) or 0
    store.append(
        make_entry(
            world.requester,
            kind="task.comment",
            seq=last + 1,
            at=world.clock(),
            subject=world.task_id,
            body={"text": "thanks"},
        )
    )
    report = audit_task(
        store,
        world.task_id,
        anchors=world.anchors,
        escrow=world.escrow_chain,
        outputs=world.market.sealed_bytes,
    )
    assert report.verdict == "FAIL"
    failure = report.first_failure
    assert failure is not None and (failure.number, failure.entry) == (2, size)


def test_an_in_progress_task_whose_escrow_was_paid_out_unlogged_fails_step_7(
    tmp_path: Path,
) -> None:
    """PENDING is no hiding place: an operator who pays the escrow out on chain without
    logging the settlement leaves the task "delivered" in the log, and step 7 says so."""
    world = build_world(tmp_path / "home", until="delivered")
    assert world.ledger.anchorer is not None
    world.ledger.anchorer.anchor_latest()
    honest = audit(world)
    assert honest.verdict == "PENDING"
    assert "1 deposit of the budget; nothing paid out yet" in honest.steps[6].detail
    task = world.market.task(world.task_id)
    assert task.price is not None
    world.escrow.pay_out(world.task_id, [address_of(OPERATOR_KEY)], [task.price])
    report = audit(world)
    assert report.verdict == "FAIL"
    failure = report.first_failure
    assert failure is not None and failure.number == 7
    assert "the chain paid out the escrow, but the log holds no settlement" in failure.detail


def test_accord_audit_prints_pending_for_a_task_in_progress(tmp_path: Path) -> None:
    world = build_world(tmp_path / "home", until="delivered")
    world.ledger.checkpoint()  # signed, not anchored yet
    console = Console(record=True, width=200)
    print_report(audit(world), console)
    text = console.export_text()
    assert "PENDING: the task is in progress; step 2, 6, 7 waits" in text
    assert "FAIL" not in text


def test_a_task_in_progress_on_a_log_never_checkpointed_is_pending(tmp_path: Path) -> None:
    """A fresh service: no checkpoint names the operator yet, nothing is anchored."""
    world = build_world(tmp_path / "home", until="awarded")
    assert world.ledger.store.latest_checkpoint() is None
    report = audit(world)
    assert report.verdict == "PENDING", report.to_json()
    assert report.steps[0].status == "pending"
    assert "no signed checkpoint yet to name its operator" in report.steps[0].detail
    assert [s.status for s in report.steps[1:]] == ["not-run"] * 6


def test_checkpoints_gone_from_a_log_the_chain_anchors_fail_step_1(tmp_path: Path) -> None:
    """The operator deleting its checkpoints is no way to PENDING: the chain anchors the log."""
    world = build_world(tmp_path / "home", until="awarded")
    assert world.ledger.anchorer is not None
    world.ledger.anchorer.anchor_latest()
    path = copy_db(world, tmp_path / "no-checkpoints.db")
    sql(path, "DELETE FROM ledger_checkpoints")
    store = open_copy(world, path)
    assert store.latest_checkpoint() is None
    report = audit_task(
        store, world.task_id, anchors=world.anchors, escrow=world.escrow_chain, outputs=None
    )
    assert report.verdict == "FAIL"
    failure = report.first_failure
    assert failure is not None and failure.number == 1
    assert "no signed checkpoint, but the chain anchors" in failure.detail
