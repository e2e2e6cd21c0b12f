"""The example agent in JavaScript (examples/node-agent/agent.js) against a real accord service.

The service runs with uvicorn in a thread on 127.0.0.1 over an in-memory world (SQLite ledger
anchored on a `MemoryAnchorChain`, escrow on a `MemoryEscrowChain`, a running clock the test
advances to close the bidding windows: nobody waits on the wall clock). The Node agent runs as
a separate process with its own key, over the plain HTTP API only: it registers by DID-auth
with its own `agent.registered` entry (custody "self"), passes its `arithmetic` exam with its
own `exam.answered` entries, binds its payout address with its `payout.bound` entry, and
serves `POST /run` and `POST /sign`.

Then it works as a team member: a hosted requester posts a task with an extraction part and an
arithmetic part, a hosted agent (ada) wins and leads; the leader does the extraction itself
(the first, synchronous assignment, which only ada can do) and gives the arithmetic part to
the least loaded member holding it, the Node agent, whose answer is in the deliverable and
whose report it signed itself at `/sign`, shown the sealed answer. The service's own code runs
the team (`run_awarded_task`, nothing patched). Settlement pays it at the payout address it
bound itself, and the audit passes and shows its custody. Last, what it refuses at `/sign` and
`/run`.

Skipped only when `node` is not installed.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from accord.audit.checks import audit_task
from accord.coordinator.conversation import CONVERSATION_MESSAGE
from accord.coordinator.service import run_awarded_task
from accord.identity.http_auth import AccordAuth
from accord.ledger.canonical import canonical_json
from accord.ledger.devnet import find_free_port
from accord.ledger.events import Entry, Event, format_time
from accord.ledger.sealing import seal
from accord.ledger.signing import kid_for
from accord.market.money import Wei
from accord.market.sealed import commit_bid, reveal_bid
from accord.market.settlement import settle_task
from accord.market.wiring import MarketContext
from tests.processes import JsonLines, stop_process
from tests.served_world import open_world
from tests.specs import INVOICE, field

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "examples" / "node-agent" / "agent.js"
NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(NODE is None, reason="node (Node.js 20+) is not installed")

# The task: an extraction part only the hosted leader holds, then an arithmetic part.
EXTRACTION_PART = {
    "id": "invoice-number",
    "capability": "extraction",
    "input": {
        "document": INVOICE,
        "fields": {"invoice_number": field("text", "the invoice's number")},
    },
}
ARITHMETIC_PART = {
    "id": "lines-sum",
    "capability": "arithmetic",
    "input": {"kind": "figures", "figures": ["1200.00", "845.50", "540.00"], "operation": "sum"},
}
TASK = {
    "title": "Number and sum an invoice",
    "description": "Extract the invoice's number and sum its line items.",
    "budget": "0.5eth",
    "bidding": "1h",
    "reveal": "1h",
    "delivery": "10m",
    "parts": [EXTRACTION_PART, ARITHMETIC_PART],
    "checks": [
        {
            "id": "sum-right",
            "weight": 1,
            "kind": "expect",
            "part": "lines-sum",
            "path": "$",
            "equals": "2585.50",
        }
    ],
}


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A service that allows private agents (the Node agent listens on loopback); the team
    runner reads the same setting from the environment. A hosted requester and a hosted agent
    (ada, arithmetic and extraction) live in its home."""
    monkeypatch.setenv("ACCORD_ALLOW_PRIVATE_AGENTS", "1")
    with open_world(tmp_path, allow_private=True) as opened:
        yield opened


@pytest.fixture
def node_agent(world: dict[str, Any]) -> Iterator[tuple[subprocess.Popen[str], JsonLines, int]]:
    assert NODE is not None
    port = find_free_port()
    argv = [
        NODE,
        str(AGENT),
        "--server",
        world["url"],
        "--key",
        str(world["tmp"] / "node-agent" / "key.json"),
        "--port",
        str(port),
        "--name",
        "node",
        "--capability",
        "arithmetic",
        "--items",
        "5",
    ]
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(world["tmp"])
    )
    try:
        yield process, JsonLines(process, "the Node agent"), port
    finally:
        stop_process(process)


def stored(context: MarketContext, **query: Any) -> list[Entry]:
    return [Entry.from_bytes(s.data) for s in context.market.ledger.store.find(**query)]


def test_node_agent_registers_passes_its_exam_and_works_in_a_team(
    world: dict[str, Any], node_agent: tuple[subprocess.Popen[str], JsonLines, int]
) -> None:
    process, lines, port = node_agent
    context: MarketContext = world["context"]
    onboarding = context.onboarding
    try:
        registered = lines.wait_for("registered", 60)
        credential = lines.wait_for("credential", 60)
        payout = lines.wait_for("payout", 30)
        ready = lines.wait_for("ready", 30)
    except AssertionError:
        process.kill()
        assert process.stderr is not None
        raise AssertionError(process.stderr.read()) from None
    did = registered["did"]
    assert ready["endpoint"] == f"http://127.0.0.1:{port}/run"

    # Registered by DID-auth: an http agent at its endpoint, no key of it in the service's
    # home, and its agent.registered entry is signed by its own DID, declaring custody "self".
    record = onboarding.registry.get(did)
    assert record.runtime == "http" and record.endpoint == ready["endpoint"]
    assert not onboarding.registry.key_path(record.name).exists()
    [entry] = stored(context, kind="agent.registered", actor=did)
    entry.verify()
    assert entry.kid == kid_for(did) and entry.event.subject == did
    assert entry.event.body["custody"] == "self" and entry.event.body["name"] == "node"
    assert onboarding.registration_index(record) is not None

    # It passed its exam with answers it signed itself, and holds a credential that verifies.
    assert credential["capability"] == "arithmetic" and credential["passed"]
    answers = stored(context, kind="exam.answered", actor=did)
    assert len(answers) == 5
    for answer in answers:
        answer.verify()
    [held] = [c for c in onboarding.credentials_of(did) if c["capability"] == "arithmetic"]
    verified = onboarding.verify(held["document"], holder_did=did, capability="arithmetic")
    assert verified.id == credential["credential_id"] and verified.subject == did
    assert verified.issuer == context.market.ledger.operator.did
    assert context.market.eligible(did, ["arithmetic"])

    # It bound its own payout address (its payout.bound entry, signed by both of its keys).
    chain_id = context.market.escrow.chain_id()
    assert onboarding.payout_address(did, chain_id) == payout["address"]
    [bound] = stored(context, kind="payout.bound", actor=did)
    bound.verify()

    # A hosted requester posts; ada bids and wins (the service's clock closes the windows).
    requester, ada = world["req"], world["ada"]
    with httpx.Client(base_url=world["url"], timeout=30) as http:
        posted = http.post("/tasks", json=TASK, auth=AccordAuth(requester))
        assert posted.status_code == 201, posted.text
        task_id = posted.json()["task_id"]
        salt, price = secrets.token_bytes(32), Wei(2 * 10**17)
        committed = http.post(
            f"/tasks/{task_id}/commitments",
            json=commit_bid(ada, task_id, price, salt).to_json(),
            auth=AccordAuth(ada),
        )
        assert committed.status_code == 201, committed.text
        world["clock"].advance(3600)  # the bidding window closes
        revealed = http.post(
            f"/tasks/{task_id}/reveals",
            json=reveal_bid(ada, task_id, price, salt).to_json(),
            auth=AccordAuth(ada),
        )
        assert revealed.status_code == 201, revealed.text
        world["clock"].advance(3600)  # and the reveal window
        awarded = http.post(f"/tasks/{task_id}/award", auth=AccordAuth(requester))
        assert awarded.status_code == 200, awarded.text
        assert awarded.json()["winner"] == ada.did

    # ada's team reaches the Node agent at its endpoint; it signs its own report at /sign.
    conversation = run_awarded_task(context, task_id)
    assert conversation.deliverable is not None
    [mine] = [c for c in conversation.deliverable.contributions if c.agent == did]
    assert mine.part == "lines-sum"
    sealed = context.market.sealed_bytes(mine.output_sha256)
    assert sealed is not None and json.loads(sealed)["value"] == "2585.50"
    assert lines.wait_for("ran", 10)["item_id"] == "lines-sum"
    lines.wait_for("signed", 10)
    reports = stored(context, kind=CONVERSATION_MESSAGE, actor=did)
    assert reports
    for report in reports:
        report.verify()  # signed by the Node agent's own key
        assert report.kid == kid_for(did)
        assert report.event.body["message"]["kind"] == "report"
    contributions = [c for r in reports for c in r.event.body["message"]["result"]["contributions"]]
    assert [c["output_sha256"] for c in contributions] == [mine.output_sha256]

    # Settlement pays it at the address it bound; the audit passes and shows its custody.
    settled = settle_task(context.market, onboarding, task_id)
    assert settled.payouts.get(did, 0) > 0
    assert context.market.ledger.anchorer is not None
    context.market.ledger.anchorer.anchor_latest()
    audit = audit_task(
        context.market.ledger.store,
        task_id,
        anchors=world["anchors"],
        escrow=world["escrow_chain"],
        outputs=context.market.sealed_bytes,
    )
    assert audit.ok, audit.to_json()
    assert audit.to_json()["facts"]["custody"][did] == "self"

    # What it refuses: a report naming an answer it did not give, or one it is not shown;
    # an item it cannot solve (422) and a malformed request (400) at /run.
    forged = seal("2585.51")
    body = {
        "conversation": "conv-forged",
        "turn": 1,
        "message": {
            "kind": "report",
            "speaker": did,
            "next_state": "conclusion",
            "next_speaker": did,
            "result": {
                "sub_id": mine.sub_id,
                "ok": True,
                "contributions": [{**mine.to_json(), "output_sha256": forged.commitment}],
                "error": None,
            },
        },
    }
    event = Event(CONVERSATION_MESSAGE, did, 999, format_time(datetime.now(UTC)), "c", body)
    text = canonical_json(event.to_json()).decode()
    base = f"http://127.0.0.1:{port}"
    for openings in ({}, {forged.commitment: forged.data.decode()}):
        refused = httpx.post(f"{base}/sign", json={"event": text, "openings": openings})
        assert refused.status_code == 403, (openings, refused.text)
    item = {"item_id": "x", "capability": "extraction", "payload": {}}
    assert httpx.post(f"{base}/run", json={"item": item}).status_code == 422
    assert httpx.post(f"{base}/run", json={"items": []}).status_code == 400
    assert process.poll() is None, "the Node agent stopped early"
