"""The hostile-code corpus (tests/hostile_code.py) where strangers' code really runs: a
requester's python checks at settlement and again in the audit, and an agent's answers to the
python exam. A whole collaboration runs in process (tests/audit/conftest.py: real onboarding,
market, conversation, settlement and audit over a SQLite home with its keys); the requester's
spec adds every hostile program as a python check beside a benign one.

Each hostile check fails (but the one that spins past its CPU limit, which is inconclusive and
counts for the team), the benign one passes, and afterwards: the loopback listener heard
nothing, the home holds no new file and the same keys, no process of the run survives, and no
signed entry holds a key or a word the code chose. With bubblewrap gone, the settlement waits
and says why, the audit is INCOMPLETE naming the checks it could not re-run, and the python
exam will not start; nothing ran unboxed.
"""

from __future__ import annotations

import io
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from accord.api.audit_cli import print_report
from accord.audit.checks import audit_task
from accord.audit.html import render_html
from accord.coordinator.service import run_awarded_task
from accord.identity.challenges.reference import solve_python
from accord.identity.errors import SandboxUnavailable
from accord.market.errors import SettlementWaits
from accord.market.precheck import Precheck
from accord.market.settlement import SETTLEMENT_COMPUTED, opener, settle_task
from accord.market.tasks import TASK_DELIVERED
from tests.audit.conftest import REQUESTER_KEY, World, onboard_agents, open_world, sealed_auction
from tests.hostile_code import BENIGN, Listener, Target, home_files, hostile_programs, survivors
from tests.specs import invoice_spec_with

BENIGN_ID = "benign-python"
TIMED_OUT = "spin past the CPU limit"


def _check_id(number: int) -> str:
    return f"hostile-{number:02d}"


@pytest.fixture(scope="module")
def listener() -> Iterator[Listener]:
    with Listener() as started:
        yield started


@pytest.fixture(scope="module")
def marker() -> str:
    return f"accord-hostile-{secrets.token_hex(8)}"


@pytest.fixture(scope="module")
def delivered(
    tmp_path_factory: pytest.TempPathFactory, listener: Listener, marker: str
) -> tuple[World, dict[str, str]]:
    """A world whose task, checked by the whole corpus, is delivered but not settled."""
    home = tmp_path_factory.mktemp("hostile-home")
    world = open_world(home)
    onboard_agents(world)
    programs = hostile_programs(Target(home, listener.port, marker))
    names = {_check_id(n): name for n, name in enumerate(programs, start=1)}
    checks: list[dict[str, Any]] = [
        {
            "id": check_id,
            "weight": 1,
            "kind": "python",
            "reads": ["lines-sum"],
            "code": programs[name],
            "cpu_seconds": 1,
            "memory_mib": 128,
        }
        for check_id, name in names.items()
    ]
    checks.append(
        {"id": BENIGN_ID, "weight": 1, "kind": "python", "reads": ["lines-sum"], "code": BENIGN}
    )
    task = world.market.post(
        world.requester, invoice_spec_with(*checks), requester_key=REQUESTER_KEY
    )
    world.task_id = task.task_id
    sealed_auction(world)
    run_awarded_task(world.context, world.task_id)
    world.clock.advance(1)
    return world, names


def _no_bwrap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH with no bwrap on it
    monkeypatch.delenv("ACCORD_SANDBOX", raising=False)


def _log_text(world: World) -> str:
    store = world.ledger.store
    return "\n".join(s.data.decode() for s in store.entries(0, store.size()))


def test_without_the_box_the_settlement_waits_and_says_why(
    delivered: tuple[World, dict[str, str]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    world, _ = delivered
    size = world.ledger.store.size()
    _no_bwrap(monkeypatch, tmp_path)
    with pytest.raises(SettlementWaits, match=r"bubblewrap \(bwrap\) is not installed"):
        settle_task(world.market, world.onboarding, world.task_id)
    assert world.ledger.store.size() == size, "a settlement that waits logs nothing"
    assert world.market.task(world.task_id).state != "settled"


def test_at_settlement_every_hostile_check_fails_and_touches_nothing(
    delivered: tuple[World, dict[str, str]], listener: Listener, marker: str
) -> None:
    world, names = delivered
    home = world.settings.home
    files, keys = home_files(home), _keys(home)
    # the check that runs out of time is inconclusive: its requester may contest it until
    # the review window ends, so the settlement waits for that
    with pytest.raises(SettlementWaits, match=r"inconclusive: its requester may contest"):
        settle_task(world.market, world.onboarding, world.task_id)
    named = world.market.previewed(world.task_id) or {}
    assert [names[c] for c in named] == [TIMED_OUT]
    ends = world.market.task(world.task_id).review_ends
    assert ends is not None
    world.clock.set(ends)
    settle_task(world.market, world.onboarding, world.task_id)
    computed = next(
        e.event.body
        for e in _entries(world)
        if e.event.kind == SETTLEMENT_COMPUTED and e.event.subject == world.task_id
    )
    results = {r["id"]: r for r in computed["checks"]}
    passed_hostile = [names[c] for c in names if results[c]["passed"]]
    # Running out of time is the requester's code failing to decide, never the team's work:
    # inconclusive, counted for the team. Every other hostile program fails.
    assert passed_hostile == [TIMED_OUT], passed_hostile
    inconclusive = [names[c] for c in names if results[c].get("inconclusive")]
    assert inconclusive == [TIMED_OUT]
    assert results[BENIGN_ID]["passed"], results[BENIGN_ID]
    assert {results[c]["record"]["sandbox"] for c in [*names, BENIGN_ID]} == {"bwrap"}
    assert listener.received == []
    assert home_files(home) - files <= {"accord.db"} and _keys(home) == keys
    assert survivors(marker) == []
    # the spec's code is public and names the marker; the verdicts must not carry it
    said = json.dumps(computed)
    assert "LEAK" not in said and marker not in said
    assert not [seed for seed in _seeds(home) if seed in _log_text(world)], "a key was logged"


def test_the_teams_verdicts_before_delivery_are_the_settlements(
    delivered: tuple[World, dict[str, str]], listener: Listener, marker: str
) -> None:
    """The leader's precheck (`accord.market.precheck`) on the delivered outputs gives every
    python check of the corpus, hostile and benign, the verdict the settlement logged."""
    world, names = delivered
    computed = next(
        e.event.body
        for e in _entries(world)
        if e.event.kind == SETTLEMENT_COMPUTED and e.event.subject == world.task_id
    )
    logged = {r["id"]: (r["passed"], r.get("inconclusive", False)) for r in computed["checks"]}
    body = next(
        e.event.body
        for e in _entries(world)
        if e.event.kind == TASK_DELIVERED and e.event.subject == world.task_id
    )
    open_value = opener(world.market.sealed_bytes, required=True)
    contributions = body["deliverable"]["contributions"]
    outputs = {c["part"]: open_value(c["output_sha256"]) for c in contributions}
    task = world.market.task(world.task_id)
    precheck = Precheck(task.task_id, task.posted_at, task.spec.requester_checks)
    verdicts = precheck.verdicts(outputs)
    ours = {k: (r.passed, r.inconclusive) for k, r in verdicts.items()}
    assert {*names, BENIGN_ID} <= set(ours)  # the invoice's own machine checks beside them
    assert ours == {k: logged[k] for k in ours}
    assert listener.received == [] and survivors(marker) == []


def test_the_audit_re_runs_them_in_the_box_to_the_same_verdicts(
    delivered: tuple[World, dict[str, str]], listener: Listener, marker: str
) -> None:
    world, _ = delivered
    assert world.ledger.anchorer is not None
    world.ledger.anchorer.anchor_latest()
    report = audit_task(
        world.ledger.store,
        world.task_id,
        anchors=world.anchors,
        escrow=world.escrow_chain,
        outputs=world.market.sealed_bytes,
    )
    assert report.verdict == "PASS", report.to_json()
    assert report.facts["outputs"] == {"opened": True, "checks_held_to_log": []}
    assert listener.received == [] and survivors(marker) == []


def test_an_auditor_without_the_box_gets_incomplete_naming_the_checks(
    delivered: tuple[World, dict[str, str]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    world, names = delivered
    _no_bwrap(monkeypatch, tmp_path)
    report = audit_task(
        world.ledger.store,
        world.task_id,
        anchors=world.anchors,
        escrow=world.escrow_chain,
        outputs=world.market.sealed_bytes,
    )
    assert report.verdict == "INCOMPLETE", report.to_json()
    step = next(s for s in report.steps if s.number == 6)
    assert step.status == "unchecked"
    assert BENIGN_ID in step.detail and all(c in step.detail for c in names)
    assert "bubblewrap" in step.detail
    assert all(s.status == "pass" for s in report.steps if s.number != 6)
    assert report.to_json()["verdict"] == "INCOMPLETE" and not report.ok
    shown = Console(file=io.StringIO(), width=400, color_system=None)
    print_report(report, shown)
    text = shown.file.getvalue()  # type: ignore[attr-defined]
    assert "INCOMPLETE: step 6 could not be re-run here" in text and "PASS" not in text
    assert ">INCOMPLETE</span>" in render_html(report)


def test_in_the_python_exam_every_hostile_answer_earns_nothing(
    delivered: tuple[World, dict[str, str]],
    listener: Listener,
    marker: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    world, _ = delivered
    exams = world.onboarding.exams
    agent = world.agents["ada"]
    signer = world.signer("ada")
    home = world.settings.home
    programs = hostile_programs(Target(home, listener.port, marker))
    files, keys = home_files(home), _keys(home)

    with monkeypatch.context() as without:
        _no_bwrap(without, tmp_path)
        with pytest.raises(SandboxUnavailable, match="the python exam is unavailable here"):
            exams.start(agent.did, "python", len(programs) + 1)

    session = exams.start(agent.did, "python", len(programs) + 1)
    items = list(session.items)
    benign_item, hostile_items = items[0], items[1:]
    answer = solve_python(benign_item["payload"])  # type: ignore[arg-type]
    exams.answer(signer, session.exam_id, str(benign_item["item_id"]), answer)
    for item, source in zip(hostile_items, programs.values(), strict=True):
        function = item["payload"]["function_name"]  # type: ignore[index]
        wrapped = f"{source}\ndef {function}(*args):\n    return check(None)\n"
        exams.answer(signer, session.exam_id, str(item["item_id"]), wrapped)
        world.clock.advance(1)
    with monkeypatch.context() as without:  # the box gone before grading: nothing is graded
        _no_bwrap(without, tmp_path)
        size = world.ledger.store.size()
        with pytest.raises(SandboxUnavailable, match="bubblewrap"):
            exams.grade(session.exam_id)
        assert world.ledger.store.size() == size
    result = exams.grade(session.exam_id)  # graded once the box is back

    assert [g.earned for g in result.grades] == [1] + [0] * len(hostile_items), result.grades
    graded = next(
        e.event.body
        for e in _entries(world)
        if e.event.kind == "exam.graded" and e.event.subject == session.exam_id
    )
    assert graded["sandbox"] == "bwrap"
    reasons = json.dumps(graded["grades"])
    assert "LEAK" not in reasons and marker not in reasons
    assert listener.received == []
    assert home_files(home) - files <= {"accord.db"} and _keys(home) == keys
    assert survivors(marker) == []
    assert not [seed for seed in _seeds(home) if seed in _log_text(world)]


# -- helpers ---------------------------------------------------------------------------------


def _entries(world: World) -> list[Any]:
    from accord.ledger.events import Entry

    store = world.ledger.store
    return [Entry.from_bytes(s.data) for s in store.entries(0, store.size())]


def _keys(home: Path) -> dict[str, bytes]:
    return {str(p.relative_to(home)): p.read_bytes() for p in sorted(home.rglob("keys/**/*.json"))}


def _seeds(home: Path) -> list[str]:
    """Every secret hex string the home's key files hold (64 hex digits or more)."""
    found = []
    for data in _keys(home).values():
        try:
            document = json.loads(data)
        except ValueError:
            continue
        found += [
            value
            for value in (document.values() if isinstance(document, dict) else [])
            if isinstance(value, str) and len(value) >= 64 and "did:" not in value
        ]
    return found
