"""A remote agent in another process on 127.0.0.1 onboards, bids and works through the API only.

The service runs with uvicorn in a thread over an in-memory world (SQLite ledger anchored on a
`MemoryAnchorChain`, escrow on a `MemoryEscrowChain`, the real clock). `accord agent run` (the
kit) runs as a separate process with its own key: it registers, sits its exams and binds a payout
address with entries it signs itself, serves `POST /run`, and commits and reveals a bid. A local
agent wins; the team it leads reaches the remote member at its endpoint, the remote signs its
own report, and its answers are in the deliverable; settlement and the audit pass.

The remote agent listens on 127.0.0.1, so the service must allow private agents
(ACCORD_ALLOW_PRIVATE_AGENTS=1); without that its registration is refused with 422.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from accord.audit.checks import audit_task
from accord.coordinator.conversation import CONVERSATION_MESSAGE
from accord.coordinator.service import run_awarded_task
from accord.identity.challenges import REGISTRY
from accord.identity.http_auth import AccordAuth
from accord.identity.http_signatures import CALL_TAG, sign_request
from accord.identity.runtimes import HttpRuntime
from accord.ledger.canonical import canonical_json
from accord.ledger.devnet import find_free_port
from accord.ledger.events import Event, format_time, make_entry
from accord.ledger.sealing import seal
from accord.ledger.signing import Ed25519Signer
from accord.market.lifecycle import Done, Due, run_due
from accord.market.money import Wei
from accord.market.sealed import commit_bid, reveal_bid
from accord.market.settlement import settle_task
from accord.market.wiring import MarketContext
from tests.processes import JsonLines, stop_process
from tests.served_world import CAPABILITIES, open_world, real_clock
from tests.specs import invoice_request

ROOT = Path(__file__).resolve().parents[2]
JSON = "application/json"


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A service that allows private agents (the remote agent is on loopback); the team
    runner reads the same setting from the environment."""
    monkeypatch.setenv("ACCORD_ALLOW_PRIVATE_AGENTS", "1")
    with open_world(tmp_path, allow_private=True) as opened:
        yield opened


@pytest.fixture
def public_only_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A service with the default setting: agents only at public addresses."""
    monkeypatch.delenv("ACCORD_ALLOW_PRIVATE_AGENTS", raising=False)
    with open_world(tmp_path, allow_private=False) as opened:
        yield opened


def remote_agent_argv(world: dict[str, Any], port: int) -> list[str]:
    """`accord agent run`: the kit agent, its keys in a folder of its own."""
    return [
        sys.executable,
        "-m",
        "accord.api.cli",
        "agent",
        "run",
        "--allow-private",
        "--poll",
        "0.2",
        "--server",
        world["url"],
        "--key",
        str(world["tmp"] / "remote-agent" / "key.json"),
        "--port",
        str(port),
        "--name",
        "remote",
        "--items",
        "5",
        "--price",
        "0.3eth",
        *[arg for capability in CAPABILITIES for arg in ("--capability", capability)],
    ]


@pytest.fixture
def remote(world: dict[str, Any]) -> Iterator[tuple[subprocess.Popen[str], JsonLines, int]]:
    with launch_remote(world) as launched:
        yield launched


@contextmanager
def launch_remote(
    world: dict[str, Any], *extra: str
) -> Iterator[tuple[subprocess.Popen[str], JsonLines, int]]:
    port = find_free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [*remote_agent_argv(world, port), *extra],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(world["tmp"]),
    )
    try:
        yield process, JsonLines(process, "the agent"), port
    finally:
        stop_process(process)


def test_remote_agent_onboards_bids_and_works_through_the_api(
    world: dict[str, Any], remote: tuple[subprocess.Popen[str], JsonLines, int]
) -> None:
    process, lines, port = remote
    context: MarketContext = world["context"]
    onboarding = context.onboarding
    registered = lines.wait_for("registered", 60)
    did = registered["did"]
    for _ in CAPABILITIES:
        credential = lines.wait_for("credential", 60)
        assert credential["passed"] and credential["credential_id"]
    payout = lines.wait_for("payout", 30)
    lines.wait_for("ready", 30)

    # The service holds no key for it: an http agent at its endpoint, with its own entries.
    record = onboarding.registry.get(did)
    assert record.runtime == "http" and record.endpoint == f"http://127.0.0.1:{port}/run"
    assert not onboarding.registry.key_path(record.name).exists()
    assert onboarding.registration_index(record) is not None
    assert context.market.eligible(did, CAPABILITIES)
    chain_id = context.market.escrow.chain_id()
    assert onboarding.payout_address(did, chain_id) == payout["address"]
    store = context.market.ledger.store
    own = store.find(actor=did, limit=100)
    assert {"agent.registered", "exam.answered", "payout.bound"} <= {
        json.loads(s.data)["event"]["kind"] for s in own
    }

    with httpx.Client(base_url=world["url"], timeout=30) as http:
        # An entry signed by someone else than the caller is refused.
        forged = make_entry(
            world["ada"], kind="payout.bound", seq=99, at=real_clock(), subject=did, body={}
        )
        refused = http.post(
            f"/agents/{did}/payout",
            json={"entry": forged.to_json()},
            auth=AccordAuth(world["ada"]),
        )
        assert refused.status_code == 403, refused.text

        posted = http.post(
            "/tasks",
            json=invoice_request(bidding="1h", reveal="1h", delivery="10m"),
            auth=AccordAuth(world["req"]),
        )
        assert posted.status_code == 201, posted.text
        task = posted.json()
        task_id = task["task_id"]
        ada: Ed25519Signer = world["ada"]
        salt = secrets.token_bytes(32)
        price = Wei(2 * 10**17)
        committed = http.post(
            f"/tasks/{task_id}/commitments",
            json=commit_bid(ada, task_id, price, salt).to_json(),
            auth=AccordAuth(ada),
        )
        assert committed.status_code == 201, committed.text
        assert lines.wait_for("committed", 60)["task_id"] == task_id
        world["clock"].advance(3600)  # the bidding window closes
        revealed = http.post(
            f"/tasks/{task_id}/reveals",
            json=reveal_bid(ada, task_id, price, salt).to_json(),
            auth=AccordAuth(ada),
        )
        assert revealed.status_code == 201, revealed.text
        remote_reveal = lines.wait_for("revealed", 60)
        assert remote_reveal["task_id"] == task_id
        bids = {b["bidder"]: b for b in http.get(f"/tasks/{task_id}/bids").json()}
        assert bids[did]["revealed"] and bids[did]["price"] == str(3 * 10**17)
        world["clock"].advance(3600)  # and the reveal window
        awarded = http.post(f"/tasks/{task_id}/award", auth=AccordAuth(world["req"]))
        assert awarded.status_code == 200, awarded.text
        assert awarded.json()["winner"] == ada.did

    # The winner's team reaches the remote member over HTTP; it signs its own report.
    registry = onboarding.registry
    original = registry.signer

    def signer_of(agent: Any) -> Any:
        if registry.key_path(agent.name).exists():
            return original(agent)
        return onboarding.member_signer(agent)

    registry.signer = signer_of  # type: ignore[method-assign]
    try:
        conversation = run_awarded_task(context, task_id)
    finally:
        registry.signer = original  # type: ignore[method-assign]
    assert conversation.deliverable is not None
    by_remote = [c for c in conversation.deliverable.contributions if c.agent == did]
    assert by_remote, conversation.deliverable
    reports = [
        json.loads(s.data)["event"]
        for s in store.find(actor=did, kind="conversation.message", limit=100)
    ]
    assert reports and all(r["body"]["message"]["kind"] == "report" for r in reports)

    settled = settle_task(context.market, onboarding, task_id)
    assert settled.payouts.get(did, 0) > 0
    assert context.market.ledger.anchorer is not None
    context.market.ledger.anchorer.anchor_latest()
    report = audit_task(
        store,
        task_id,
        anchors=world["anchors"],
        escrow=world["escrow_chain"],
        outputs=context.market.sealed_bytes,
    )
    assert report.ok, report.to_json()
    # the remote agent declared that it keeps its own key; the agents this home made, not
    custody = report.to_json()["facts"]["custody"]
    assert custody[did] == "self"
    assert all(held == "hosted" for actor, held in custody.items() if actor != did)

    # It signs a report only when the sealed answers beside it open to what it answered: a
    # report naming an answer it is not shown, or another answer than its own, is refused.
    [mine] = by_remote[:1]
    answer = json.loads(
        context.market.sealed_bytes(mine.output_sha256) or b"{}"  # what it answered, sealed
    )["value"]
    # (for the assignment it received: the conversation and sub-task of its own report)
    [(conv_id, sub_id)] = [
        (r["body"]["conversation"], r["body"]["message"]["result"]["sub_id"])
        for r in reports
        if mine.output_sha256 in json.dumps(r["body"]["message"]["result"])
    ]
    forged = seal({"not": answer})
    contribution = {**mine.to_json(), "output_sha256": forged.commitment}
    report = Event(
        CONVERSATION_MESSAGE,
        did,
        999,
        format_time(real_clock()),
        conv_id,
        {
            "conversation": conv_id,
            "turn": 1,
            "message": {
                "kind": "report",
                "speaker": did,
                "next_state": "conclusion",
                "next_speaker": did,
                "result": {
                    "sub_id": sub_id,
                    "ok": True,
                    "contributions": [contribution],
                    "error": None,
                },
            },
        },
    )
    text = canonical_json(report.to_json()).decode()
    sign = f"http://127.0.0.1:{port}/sign"
    as_operator = AccordAuth(context.market.ledger.operator, tag=CALL_TAG)  # accord's own calls
    for openings in ({}, {forged.commitment: forged.data.decode()}):
        refused = httpx.post(
            sign, json={"event": text, "openings": openings}, timeout=30, auth=as_operator
        )
        assert refused.status_code == 403, (openings, refused.text)
    honest = seal(answer)
    honest_report = json.loads(text.replace(forged.commitment, honest.commitment))
    signed = httpx.post(
        sign,
        json={
            "event": canonical_json(honest_report).decode(),
            "openings": {honest.commitment: honest.data.decode()},
        },
        timeout=30,
        auth=as_operator,
    )
    assert signed.status_code == 200, signed.text
    assert process.poll() is None, "the remote agent stopped early"


def test_a_remote_agent_on_loopback_is_refused_without_the_setting(
    public_only_world: dict[str, Any],
) -> None:
    world = public_only_world
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        remote_agent_argv(world, find_free_port()),
        capture_output=True,
        text=True,
        env=env,
        cwd=str(world["tmp"]),
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "(422)" in done.stderr, done.stderr
    assert "a loopback address (127.0.0.1)" in done.stderr
    assert "ACCORD_ALLOW_PRIVATE_AGENTS=1" in done.stderr
    assert '"registered"' not in done.stdout
    onboarding = world["context"].onboarding
    assert [a.name for a in onboarding.registry.list()] == ["ada", "req"]


def test_a_remote_agent_trusting_the_operator_answers_only_its_calls_and_hears_it_won(
    world: dict[str, Any], remote: tuple[subprocess.Popen[str], JsonLines, int]
) -> None:
    process, lines, port = remote
    context: MarketContext = world["context"]
    operator = context.market.ledger.operator
    ready = lines.wait_for("ready", 90)
    assert ready["operator"] == operator.did  # what the service names, fetched on start
    run = f"http://127.0.0.1:{port}/run"
    item = REGISTRY["arithmetic"].generate(b"remote-agent-trusts", 1)[0]
    body = json.dumps({"item": item.for_agent()}).encode()

    # Anyone's calls are refused: unsigned, or signed by another key (here a hosted agent's).
    unsigned = httpx.post(run, content=body, timeout=30)
    assert unsigned.status_code == 401 and "not signed" in unsigned.json()["error"]
    by_ada = sign_request(world["ada"], "POST", run, body, content_type=JSON, tag=CALL_TAG)
    refused = httpx.post(run, content=body, headers=by_ada, timeout=30)
    assert refused.status_code == 403 and "leads no task" in refused.json()["error"]
    sign = httpx.post(f"http://127.0.0.1:{port}/sign", json={"event": "{}"}, timeout=30)
    assert sign.status_code == 401
    # accord's own call is answered
    answer = HttpRuntime(run, 30, allow_private=True, operator=operator).answer(item.for_agent())
    assert REGISTRY["arithmetic"].grade(item, answer).full_marks

    # It alone bids; the service awards it by itself, and tells it at once.
    with httpx.Client(base_url=world["url"], timeout=30) as http:
        posted = http.post(
            "/tasks",
            json=invoice_request(bidding="1h", reveal="1h", delivery="10m"),
            auth=AccordAuth(world["req"]),
        )
    assert posted.status_code == 201, posted.text
    task_id = posted.json()["task_id"]
    assert lines.wait_for("committed", 60)["task_id"] == task_id
    world["clock"].advance(3600)  # the bidding window closes
    assert lines.wait_for("revealed", 60)["task_id"] == task_id
    world["clock"].advance(3600)  # and the reveal window
    results = run_due(context)
    assert Done(Due(task_id, "award"), "done", "awarded") in results
    notice = lines.wait_for("notice", 30)
    index = context.market.ledger.store.once_logged("task.awarded", task_id)
    assert notice == {"event": "notice", "kind": "task.awarded", "task_id": task_id, "index": index}
    # a notice nobody signed is refused
    notify = f"http://127.0.0.1:{port}/accord/notify"
    forged = httpx.post(notify, json={"event": "task.awarded", "task_id": task_id}, timeout=30)
    assert forged.status_code == 401
    assert process.poll() is None, "the remote agent stopped early"
