"""The requester's own work, end to end over anvil and a real HTTP server on 127.0.0.1.

The requester uploads the invoice, posts the spec that names it, credentialed agents bid sealed
through the API, the winner's team does the parts, the requester fetches the deliverable over
HTTP once the settlement is computed (the log, public, holds only commitments to the work), the
team is paid through the escrow contract, and the audit passes against the chain, with or
without the sealed outputs. A copy of the log in which one part's output is changed (sealed
anew, every entry re-signed by its own key, the copy anchored anew) fails the audit at the
settlement step.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from accord.api.app import create_app
from accord.api.routes.deps import ApiConfig
from accord.audit.checks import audit_task
from accord.audit.forgery import change_output, forge_copy
from accord.identity.http_auth import AccordAuth
from accord.ledger.chain import AnchorChain
from accord.ledger.database import make_engine
from accord.ledger.devnet import find_free_port
from accord.ledger.sealing import seal
from accord.ledger.settings import Settings
from accord.ledger.signing import Signer
from accord.ledger.store import LogStore
from accord.ledger.wiring import devnet_for
from accord.market.money import Wei
from accord.market.sealed import commit_bid, reveal_bid
from accord.market.wiring import MarketContext, open_market
from tests.clocks import advance_clock_file
from tests.serving import serve
from tests.specs import INVOICE_PATH, invoice_request

pytestmark = pytest.mark.devnet

AGENTS = (
    ("ada", ("arithmetic", "extraction")),
    ("linus", ("arithmetic", "extraction")),
    ("grace", ("extraction", "python")),
    ("hopper", ("arithmetic",)),
)
PRICES = {"ada": Wei(12 * 10**16), "linus": Wei(10 * 10**16)}


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[str, MarketContext, dict[str, Signer]]]:
    settings = Settings.from_env(
        {
            "ACCORD_HOME": str(tmp_path / "home"),
            "ACCORD_DEVNET_PORT": str(find_free_port()),
            "ACCORD_TEST_CLOCK": str(tmp_path / "clock"),  # windows close when the test says
            "ACCORD_ALLOW_TEST_CLOCK": "1",
        }
    )
    devnet = devnet_for(settings)
    devnet.up()
    try:
        context = open_market(settings)
        registry = context.onboarding.registry
        signers: dict[str, Signer] = {}
        for name, capabilities in AGENTS:
            record = registry.new_agent(name, now=datetime.now(UTC), runtime="reference")
            outcomes = context.onboarding.onboard(record, list(capabilities), item_count=5)
            assert all(o.credential_id is not None for o in outcomes)
            signers[name] = registry.signer(record)
        requester = registry.new_agent("req", now=datetime.now(UTC))
        context.onboarding.register(requester)
        signers["req"] = registry.signer(requester)
        signers["operator"] = context.market.ledger.operator
        app = create_app(settings, config=ApiConfig(rate=1000.0, burst=10_000.0), context=context)
        with serve(app) as url:
            yield url, context, signers
    finally:
        devnet.down()


def _call(url: str, signer: Signer | None, method: str, path: str, **kwargs: Any) -> httpx.Response:
    auth = AccordAuth(signer) if signer is not None else None
    with httpx.Client(base_url=url, auth=auth, timeout=60) as client:
        return client.request(method, path, **kwargs)


def anchors_of(context: MarketContext) -> AnchorChain:
    """The service's anchor registry, as an outside auditor reaches it."""
    anchorer = context.market.ledger.anchorer
    assert anchorer is not None
    return anchorer.chain


def _advance(tmp_path: Path, seconds: float) -> None:
    """Move the service's clock (ACCORD_TEST_CLOCK) on: a window closes without waiting."""
    advance_clock_file(tmp_path / "clock", seconds)


def test_the_requesters_work_done_delivered_paid_and_audited(
    service: tuple[str, MarketContext, dict[str, Signer]], tmp_path: Path
) -> None:
    url, context, signers = service
    req = signers["req"]

    # the requester stores its invoice, then posts the spec that names it by hash
    stored = _call(url, req, "POST", "/files", content=INVOICE_PATH.read_bytes())
    assert stored.status_code == 201, stored.text
    digest = stored.json()["sha256"]
    request = invoice_request(bidding="1h", reveal="1h")
    for part in request["parts"]:
        if part["capability"] == "extraction":
            part["input"]["document"] = {"$file": digest}
    posted = _call(url, req, "POST", "/tasks", json=request)
    assert posted.status_code == 201, posted.text
    task = posted.json()
    task_id = task["task_id"]
    assert task["state"] == "bidding" and task["spec"]["files"][digest]["size"] > 0

    # sealed bids through the API, then the award
    salts = {name: secrets.token_bytes(32) for name in PRICES}
    for name, price in PRICES.items():
        commitment = commit_bid(signers[name], task_id, price, salts[name]).to_json()
        sent = _call(url, signers[name], "POST", f"/tasks/{task_id}/commitments", json=commitment)
        assert sent.status_code == 201, sent.text
    _advance(tmp_path, 3600)  # the bidding window closes
    for name, price in PRICES.items():
        reveal = reveal_bid(signers[name], task_id, price, salts[name]).to_json()
        sent = _call(url, signers[name], "POST", f"/tasks/{task_id}/reveals", json=reveal)
        assert sent.status_code == 201, sent.text
    _advance(tmp_path, 3600)  # and the reveal window
    awarded = _call(url, req, "POST", f"/tasks/{task_id}/award")
    assert awarded.status_code == 200, awarded.text
    winner = awarded.json()["winner"]

    # the team does the parts; members see the invoice's text, the log keeps its hash
    ran = _call(url, signers["operator"], "POST", f"/tasks/{task_id}/run")
    assert ran.status_code == 200, ran.text
    delivered = _call(url, req, "GET", f"/tasks/{task_id}/deliverable")
    assert delivered.status_code == 200, delivered.text
    result = delivered.json()
    # Before the settlement is computed the requester judges nothing (no review check), so it
    # sees the plan, the producers and the commitments, not the work it has not paid for.
    assert all("output" not in entry for entry in result["parts"])
    assert sorted(result["withheld"]) == sorted(e["part"] for e in result["parts"])
    assert result["missing"] == [] and result["leader"] == winner
    assert result["openings"] == {}
    # the contract holder reads its team's work
    leaders = {s.did: s for s in signers.values()}
    own = _call(url, leaders[winner], "GET", f"/tasks/{task_id}/deliverable").json()
    assert own["withheld"] == [] and all("output" in e for e in own["parts"])
    file = _call(url, req, "GET", f"/tasks/{task_id}/files/{digest}")
    assert file.status_code == 200 and file.text == INVOICE_PATH.read_text()
    assert _call(url, None, "GET", f"/tasks/{task_id}/deliverable").status_code == 401

    # the checks run, the team is paid on chain, the leader too
    settled = _call(url, req, "POST", f"/tasks/{task_id}/settle")
    assert settled.status_code == 200, settled.text
    payouts = {did: int(w) for did, w in settled.json()["payouts"].items()}
    price = int(awarded.json()["price"])
    assert sum(payouts.values()) == int(settled.json()["amount"]) == price
    assert 0 < payouts[winner] < price
    paid_for = _call(url, req, "GET", f"/tasks/{task_id}/deliverable").json()
    assert all(check["passed"] for check in paid_for["checks"]), paid_for["checks"]
    outputs = {entry["part"]: entry["output"] for entry in paid_for["parts"]}
    assert outputs["lines-sum"] == "2585.50"
    assert outputs["invoice-fields"]["total"] == "3128.46"
    assert outputs["invoice-dates"] == {"issue_date": "2026-10-14", "due_date": "2026-11-13"}
    assert set(paid_for["plan"]["assignments"]) == set(outputs)

    # nothing the public log holds, read unsigned, carries an output in the clear
    pages = []
    while not pages or pages[-1]["entries"]:
        start = pages[-1]["entries"][-1]["index"] + 1 if pages else 0
        page = _call(url, None, "GET", "/ledger/entries", params={"from": start, "limit": 1000})
        assert page.status_code == 200, page.text
        pages.append(page.json())
    # (the requester's own spec, in `task.posted`, may state what it expects: that is its own;
    # exams are public by design and hold fresh random items, whose dates or sums may equal the
    # invoice's by chance: they are not this task's work)
    logged = json.dumps(
        [
            e
            for page in pages
            for e in page["entries"]
            if e["event"]["kind"] != "task.posted"
            and not e["event"]["kind"].startswith(("exam.", "credential."))
        ]
    )
    for part, output in outputs.items():
        assert json.dumps(output, sort_keys=True) not in logged, part
    for value in ("2585.50", "3128.46", "2026-10-14", "2026-11-13"):  # the invoice's own
        assert json.dumps(value) not in logged, value
    commitments = {e["part"]: e["output_sha256"] for e in paid_for["parts"]}
    assert all(c in logged for c in commitments.values())

    assert context.market.ledger.anchorer is not None
    context.market.ledger.anchorer.anchor_latest()
    report = _call(url, None, "GET", f"/tasks/{task_id}/audit").json()
    assert report["verdict"] == "PASS", report
    assert report["facts"]["outputs"]["opened"] is True

    # an outside auditor with the log and the chain only: commitments and signed verdicts
    ledger = context.market.ledger
    outside = audit_task(
        ledger.store, task_id, anchors=anchors_of(context), escrow=context.escrow.chain
    )
    assert outside.verdict == "PASS" and outside.facts["outputs"]["opened"] is False
    # handed the sealed outputs the requester received, it re-runs every check
    handed = {c: text.encode() for c, text in paid_for["openings"].items()}
    rerun = audit_task(
        ledger.store,
        task_id,
        anchors=anchors_of(context),
        escrow=context.escrow.chain,
        outputs=handed.get,
    )
    assert rerun.verdict == "PASS" and rerun.facts["outputs"]["opened"] is True

    # a forged copy: one output changed everywhere (sealed anew), re-signed, re-anchored
    keys: dict[str, Signer] = {s.did: s for s in signers.values()}
    copy = LogStore(make_engine(f"sqlite:///{tmp_path / 'copy.db'}"), ledger.log_id)
    forged_output = seal("2585.00")
    anchors = forge_copy(
        ledger.store,
        copy,
        keys,
        lambda _, event: change_output(event.body, "lines-sum", forged_output.commitment),
        ledger.operator,
        ledger.clock,
    )
    forged = audit_task(
        copy,
        task_id,
        anchors=anchors,
        escrow=context.escrow.chain,
        outputs={**handed, forged_output.commitment: forged_output.data}.get,
    )
    failure = forged.first_failure
    assert failure is not None and failure.number == 6, forged.to_json()
    assert "sum-right" in failure.detail


def _delivered(
    url: str, signers: dict[str, Signer], tmp_path: Path, request: dict[str, Any]
) -> tuple[str, str]:
    """Post `request` as the requester, bid, award and run it through the API: (id, winner)."""
    posted = _call(url, signers["req"], "POST", "/tasks", json=request)
    assert posted.status_code == 201, posted.text
    task_id = posted.json()["task_id"]
    salts = {name: secrets.token_bytes(32) for name in PRICES}
    for name, price in PRICES.items():
        commitment = commit_bid(signers[name], task_id, price, salts[name]).to_json()
        sent = _call(url, signers[name], "POST", f"/tasks/{task_id}/commitments", json=commitment)
        assert sent.status_code == 201, sent.text
    _advance(tmp_path, 3600)
    for name, price in PRICES.items():
        reveal = reveal_bid(signers[name], task_id, price, salts[name]).to_json()
        sent = _call(url, signers[name], "POST", f"/tasks/{task_id}/reveals", json=reveal)
        assert sent.status_code == 201, sent.text
    _advance(tmp_path, 3600)
    awarded = _call(url, signers["req"], "POST", f"/tasks/{task_id}/award")
    assert awarded.status_code == 200, awarded.text
    ran = _call(url, signers["operator"], "POST", f"/tasks/{task_id}/run")
    assert ran.status_code == 200, ran.text
    return task_id, str(awarded.json()["winner"])


def _expect(check_id: str, part: str, path: str, value: str) -> dict[str, Any]:
    return {
        "id": check_id,
        "weight": 1,
        "kind": "expect",
        "part": part,
        "path": path,
        "equals": value,
    }


def test_the_requester_reads_only_the_outputs_its_settlement_pays_for(
    service: tuple[str, MarketContext, dict[str, Signer]], tmp_path: Path
) -> None:
    """A check that fails correct work refunds the requester and keeps that work sealed from
    it, for good; the parts a passed check reads are its own once the settlement is computed."""
    url, _, signers = service
    req = signers["req"]
    everyone = {s.did: s for s in signers.values()}

    # every check is wrong about correct work: nothing is paid, nothing is read
    wrong = [
        _expect("sum", "lines-sum", "$", "1.00"),
        _expect("tax", "tax", "$", "2.00"),
        _expect("total", "invoice-fields", "$.total", "3.00"),
        _expect("due", "invoice-dates", "$.due_date", "1999-01-01"),
    ]
    task_id, winner = _delivered(
        url, signers, tmp_path, invoice_request(checks=wrong, bidding="1h", reveal="1h")
    )
    settled = _call(url, req, "POST", f"/tasks/{task_id}/settle")
    assert settled.status_code == 200, settled.text
    assert int(settled.json()["amount"]) == 0
    unpaid = _call(url, req, "GET", f"/tasks/{task_id}/deliverable")
    assert unpaid.status_code == 200, unpaid.text
    view = unpaid.json()
    assert view["state"] == "settled" and view["checks"] is not None
    assert all("output" not in entry for entry in view["parts"]), view["parts"]
    assert sorted(view["withheld"]) == sorted(e["part"] for e in view["parts"])
    assert view["openings"] == {}
    assert all(entry["output_sha256"] for entry in view["parts"])  # the commitments stay
    # the contract holder still reads its team's work
    own = _call(url, everyone[winner], "GET", f"/tasks/{task_id}/deliverable").json()
    assert own["withheld"] == []

    # two checks pass, two fail (wrong about correct work): the requester reads the two parts
    # the passed checks read, and the other two stay sealed
    half = [
        _expect("sum", "lines-sum", "$", "2585.50"),
        _expect("tax", "tax", "$", "2.00"),
        _expect("total", "invoice-fields", "$.total", "3128.46"),
        _expect("due", "invoice-dates", "$.due_date", "1999-01-01"),
    ]
    task_id, _ = _delivered(
        url, signers, tmp_path, invoice_request(checks=half, bidding="1h", reveal="1h")
    )
    settled = _call(url, req, "POST", f"/tasks/{task_id}/settle")
    assert settled.status_code == 200, settled.text
    assert int(settled.json()["amount"]) > 0
    view = _call(url, req, "GET", f"/tasks/{task_id}/deliverable").json()
    shown = {entry["part"]: entry["output"] for entry in view["parts"] if "output" in entry}
    assert shown == {"lines-sum": "2585.50", "invoice-fields": shown["invoice-fields"]}
    assert shown["invoice-fields"]["total"] == "3128.46"
    assert sorted(view["withheld"]) == ["invoice-dates", "tax"]
    assert len(view["openings"]) == 2


def test_a_posting_whose_deposit_would_fail_says_how_to_fund_it_and_logs_nothing(
    service: tuple[str, MarketContext, dict[str, Signer]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, context, signers = service
    req = signers["req"]
    empty = "0x" + secrets.token_hex(32)  # an account with no ether on the devnet
    monkeypatch.setenv("ACCORD_REQUESTER_ETH_KEY", empty)
    address = context.escrow.requester_address(empty)
    logged = context.market.ledger.store.size()
    request = invoice_request(budget="0.25eth")
    refused = _call(url, req, "POST", "/tasks", json=request)
    assert refused.status_code == 402, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    problem = refused.json()
    assert problem["type"].endswith("deposit-refused")
    detail = problem["detail"]
    assert address in detail and str(25 * 10**16) in detail and "send" in detail
    assert str(context.escrow.chain_id()) in detail
    # nothing was logged: no task.posted left that nobody funds
    assert context.market.ledger.store.size() == logged
    assert list(context.market.iter_tasks(requester=req.did)) == []
    # funded, the same posting goes through
    context.fund_gas(address, Wei(10**18))
    posted = _call(url, req, "POST", "/tasks", json=request)
    assert posted.status_code == 201, posted.text
    assert posted.json()["state"] == "bidding"
