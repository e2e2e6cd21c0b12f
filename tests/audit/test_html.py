"""`accord audit TASK --html`: the static report of the honest collaboration shows its
deliverable, each check's result, the contract holder's share and the payouts, all escaped."""

from __future__ import annotations

import copy
import dataclasses
import re
from dataclasses import dataclass
from fractions import Fraction
from html import escape
from pathlib import Path

import pytest

from accord.audit.checks import AuditReport, audit_task
from accord.audit.html import render_html
from accord.audit.html_kit import percent
from accord.market.money import format_eth
from accord.market.settlement import settle_task
from tests.audit.conftest import World, assert_deliverable_section, build_world

HOSTILE = '<script>alert("owned")</script>'


@dataclass
class Audited:
    world: World
    delivered: AuditReport
    delivered_page: str
    settled: AuditReport
    names: dict[str, str]
    payouts: dict[str, int]


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Audited:
    world = build_world(tmp_path_factory.mktemp("html") / "home", until="delivered")
    store = world.ledger.store
    assert world.ledger.anchorer is not None
    world.ledger.anchorer.anchor_latest()  # the audit reads the operator from a checkpoint
    delivered = audit_task(store, world.task_id, anchors=world.anchors, escrow=world.escrow_chain)
    delivered_page = render_html(delivered, store)
    # Every member, the contract holder included, binds a payout address before settlement.
    for record in world.agents.values():
        world.onboarding.bind_payout(record, world.escrow.chain_id())
    settlement = settle_task(world.market, world.onboarding, world.task_id)
    world.clock.advance(1)
    world.ledger.anchorer.anchor_latest()
    settled = audit_task(store, world.task_id, anchors=world.anchors, escrow=world.escrow_chain)
    assert settled.ok, settled.first_failure
    names = {record.did: name for name, record in world.agents.items()}
    payouts = {did: int(w) for did, w in settlement.payouts.items()}
    return Audited(world, delivered, delivered_page, settled, names, payouts)


def _section(page: str, element_id: str) -> str:
    start = page.index(f'id="{element_id}"')
    return page[start : page.index("<h2>", start)]


def test_the_payouts_of_a_settled_task_appear(audited: Audited) -> None:
    page = render_html(audited.settled, audited.world.ledger.store)
    payouts = _section(page, "payouts")
    assert "No payouts" not in payouts
    assert sum(1 for wei in audited.payouts.values() if wei) >= 2
    for did, wei in audited.payouts.items():
        assert f'data-did="{did}"' in payouts
        assert f">{audited.names[did]}<" in payouts
        assert f">{format_eth(wei)}<" in payouts


def test_wei_are_shown_exactly_not_through_a_float(audited: Audited) -> None:
    page = render_html(audited.settled, audited.world.ledger.store)
    odd = [wei for wei in audited.payouts.values() if wei % 10**12]
    assert odd, "the honest split has a payout that a float would round"
    for wei in odd:
        assert format_eth(wei) in page
        assert f"{wei / 10**18:.6f} ETH" not in page
    assert f"price {format_eth(int(audited.settled.facts['price']))} of a" in page


def test_the_deliverable_shows_each_part_with_its_producer_and_output(audited: Audited) -> None:
    page = render_html(audited.settled, audited.world.ledger.store)
    section = _section(page, "deliverable")
    deliverable = audited.settled.facts["deliverable"]
    assert deliverable["sha256"] in section
    assert f">{audited.names[deliverable['leader']]}<" in section
    assert_deliverable_section(section, deliverable, audited.names)


def test_each_check_result_and_the_contractor_rule(audited: Audited) -> None:
    page = render_html(audited.settled, audited.world.ledger.store)
    section = _section(page, "check-results")
    assert "the contract holder's plan and assembly checks carry 1/5 of the value" in section
    checks = audited.settled.facts["checks"]
    assert checks and all(c["passed"] for c in checks)
    rows = re.findall(r'<tr class="check" data-check="([^"]+)" data-passed="(\w+)">', section)
    assert rows == [(c["id"], "pass") for c in checks]
    for check in checks:
        assert percent(check["share"]) in section
        assert escape(check["detail"], quote=True) in section
    assert sum(Fraction(c["share"]) for c in checks) == 1


def test_a_delivered_task_not_yet_settled(audited: Audited) -> None:
    page = audited.delivered_page
    assert audited.delivered.facts["deliverable"] is not None
    assert 'class="part"' in _section(page, "deliverable")
    assert "has not been settled" in _section(page, "check-results")
    assert "has not been settled: no payouts" in _section(page, "payouts")


def test_a_malicious_output_is_escaped(audited: Audited) -> None:
    report = copy.deepcopy(audited.settled)
    parts = report.facts["deliverable"]["parts"]
    parts[0]["output"] = {"note": HOSTILE, HOSTILE: [HOSTILE] * 40}
    parts[1]["output"] = HOSTILE
    parts[1]["producer"] = HOSTILE
    report.facts["deliverable"]["plan"] = {"assignments": {HOSTILE: HOSTILE}}
    report.facts["checks"][0]["detail"] = HOSTILE
    report.facts["checks"][1]["record"] = {"model": HOSTILE, "prompt": HOSTILE, "answer": HOSTILE}
    report.facts["checks"][2]["record"] = {"entry": 3, "verdict": HOSTILE}
    # what a stranger names: the task's title, a team's title, a speaker, a step's detail
    report.facts["title"] = HOSTILE
    report.facts["conversations"][0]["title"] = HOSTILE
    report.facts["timeline"][0]["speaker"] = HOSTILE
    report.steps[0] = dataclasses.replace(report.steps[0], detail=HOSTILE)
    page = render_html(report, audited.world.ledger.store)
    assert "<script" not in page
    assert escape(HOSTILE) in page
    assert "<details><summary>" in _section(page, "deliverable")  # the long output is folded


def test_without_the_log_the_report_says_where_the_payouts_are(audited: Audited) -> None:
    page = render_html(audited.settled)
    assert "rendered without it" in _section(page, "payouts")
    assert "carry 1/5 of the value" in page  # from the checks' own shares


def test_the_report_can_be_written_and_read_back(audited: Audited, tmp_path: Path) -> None:
    path = tmp_path / "accord.audit.html"
    path.write_text(render_html(audited.settled, audited.world.ledger.store))
    assert 'id="verdict">PASS<' in path.read_text()


def test_the_checklist_shows_amounts_in_eth_with_the_wei_on_hover(audited: Audited) -> None:
    page = render_html(audited.settled, audited.world.ledger.store)
    checklist = page[page.index("<h2>Checklist") : page.index("<h2>Deliverable")]
    price = int(audited.settled.facts["price"])
    assert f'<span class="amount" title="{price} wei">{format_eth(price)}</span>' in checklist
    shown = re.sub(r'title="[^"]*"', "", checklist)  # the exact wei are kept for hovering
    assert not re.search(r"[0-9]{13,}|[0-9] wei", shown), shown
