"""Two self-custody agents (the kit, each with its own keys, none in the service's home) bid
on a hosted requester's task over the HTTP API; the service awards it by itself, the winner
leads its team in its own process, the other member signs its own report at its own /sign,
the service settles by itself, and the audit shows each act signed by its own party."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from accord.audit.checks import audit_task
from accord.client import AccordClient, ApiError
from accord.identity.http_auth import AccordAuth
from accord.identity.runtimes import AgentRuntime, AgentRuntimeError, ReferenceRuntime
from accord.kit.agent import KitAgent, fixed_price, load_eth_key, load_key
from accord.ledger.events import Entry
from accord.market.lifecycle import run_due
from accord.market.money import Wei
from accord.market.tasks import SETTLEMENT_COMPUTED
from accord.market.wiring import MarketContext
from tests.served_world import CAPABILITIES, open_world
from tests.specs import invoice_request

ETH = 10**18


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    monkeypatch.setenv("ACCORD_ALLOW_PRIVATE_AGENTS", "1")
    with open_world(tmp_path, allow_private=True) as opened:
        yield opened


def kit_agent(
    world: dict[str, Any],
    name: str,
    price: int,
    said: list[tuple[str, dict[str, Any]]] | None = None,
    runtime: AgentRuntime | None = None,
) -> KitAgent:
    keys = world["tmp"] / f"kit-{name}"
    keys.mkdir()
    signer = load_key(keys / "key.json")
    client = AccordClient(world["url"], signer=signer)
    return KitAgent(
        client,
        signer,
        load_eth_key(keys / "eth.json"),
        runtime or ReferenceRuntime(),
        name=name,
        capabilities=CAPABILITIES,
        strategy=fixed_price(Wei(price)),
        allow_private=True,
        exam_items=5,
        **({} if said is None else {"say": lambda event, **fields: said.append((event, fields))}),
    )


def post_invoice(world: dict[str, Any]) -> str:
    """The hosted requester posts the invoice task (windows of an hour); its id."""
    with httpx.Client(base_url=world["url"], timeout=30) as http:
        posted = http.post(
            "/tasks",
            json=invoice_request(bidding="1h", reveal="1h", delivery="1h"),
            auth=AccordAuth(world["req"]),
        )
    assert posted.status_code == 201, posted.text
    return str(posted.json()["task_id"])


def kinds_of(context: MarketContext, actor: str) -> list[str]:
    found = context.market.ledger.store.find(actor=actor, limit=1000)
    return [json.loads(s.data)["event"]["kind"] for s in found]


def test_a_self_custody_winner_leads_its_team_and_is_paid(world: dict[str, Any]) -> None:
    context: MarketContext = world["context"]
    said: list[tuple[str, dict[str, Any]]] = []
    kai = kit_agent(world, "kai", 3 * ETH // 10, said)
    kim = kit_agent(world, "kim", 4 * ETH // 10)
    try:
        for agent in (kai, kim):
            agent.join(agent.start())
        task_id = post_invoice(world)
        for agent in (kai, kim):
            agent.step()  # commit
        world["clock"].advance(3600)
        for agent in (kai, kim):
            agent.step()  # reveal
        world["clock"].advance(3600)
        [done] = run_due(context)
        assert (done.due.action, done.outcome) == ("award", "done"), done
        assert context.market.task(task_id).winner == kai.did

        # The winner leads in its own process; nobody at the service runs anything.
        kai.step()
        [leading] = [t for t in kai._threads if t.name == f"lead-{task_id}"]
        leading.join(timeout=120)
        task = context.market.task(task_id)
        assert task.state == "delivered", task.state

        # Each act is signed by its own party: the leader's by kai, kim's reports by kim.
        assert {"task.started", "conversation.opened", "task.delivered"} <= set(
            kinds_of(context, kai.did)
        )
        assert "conversation.message" in kinds_of(context, kim.did)
        registry = context.onboarding.registry
        for agent in (kai, kim):
            assert not registry.key_path(registry.get(agent.did).name).exists()

        world["clock"].advance(3 * 24 * 3600)  # the review window closes
        settled = [d for d in run_due(context) if d.due.action == "settle"]
        assert [d.outcome for d in settled] == ["done"], settled
        store = context.market.ledger.store
        found = store.find(kind=SETTLEMENT_COMPUTED, subject=task_id, limit=1)
        body = Entry.from_bytes(found[0].data).event.body
        payouts = {did: int(wei) for did, wei in body["payouts"].items()}
        assert payouts[kai.did] > 0 and payouts[kim.did] > 0, body
        # The leader knew the verdicts of the requester's machine checks before it delivered,
        # and they are the settlement's.
        [delivered] = [fields for event, fields in said if event == "delivered"]
        logged = {
            c["id"]: "inconclusive"
            if c.get("inconclusive")
            else ("pass" if c["passed"] else "fail")
            for c in body["checks"]
        }
        assert delivered["verdicts"], delivered
        assert delivered["verdicts"] == {k: logged[k] for k in delivered["verdicts"]}
        assert sum(payouts.values()) == int(body["amount"]) > 0

        anchorer = context.market.ledger.anchorer
        assert anchorer is not None
        anchorer.anchor_latest()
        report = audit_task(
            context.market.ledger.store,
            task_id,
            anchors=world["anchors"],
            escrow=world["escrow_chain"],
            outputs=context.market.sealed_bytes,
        )
        assert report.ok, report.to_json()
        custody = report.to_json()["facts"]["custody"]
        assert custody[kai.did] == custody[kim.did] == "self"
    finally:
        for agent in (kai, kim):
            agent.stop()


def test_the_service_refuses_work_entries_from_anyone_but_the_winner(
    world: dict[str, Any],
) -> None:
    kai = kit_agent(world, "kai", 3 * ETH // 10)
    try:
        kai.join(kai.start())
        task_id = post_invoice(world)
        entry = kai.client.entry("task.started", task_id, {"task_id": task_id})
        with pytest.raises(ApiError) as refused:
            kai.client.post(f"/tasks/{task_id}/work", {"entry": entry})
        assert refused.value.status == 403
        assert "only the winner" in str(refused.value)
        with pytest.raises(ApiError) as not_sealed:
            kai.client.post_bytes(f"/tasks/{task_id}/sealed", b"{}")
        assert not_sealed.value.status == 403
    finally:
        kai.stop()


def test_threads_stop(world: dict[str, Any]) -> None:
    kai = kit_agent(world, "kai", ETH // 10)
    kai.start()
    stopping = threading.Event()
    stopping.set()
    kai.run_until(stopping)
    kai.stop()


@pytest.fixture
def won(world: dict[str, Any]) -> Iterator[tuple[dict[str, Any], KitAgent, KitAgent, str]]:
    """kai has won a task (awarded by the service), kim is credentialed too."""
    kai = kit_agent(world, "kai", 3 * ETH // 10)
    kim = kit_agent(world, "kim", 4 * ETH // 10)
    try:
        for agent in (kai, kim):
            agent.join(agent.start())
        task_id = post_invoice(world)
        kai.step()
        world["clock"].advance(3600)
        kai.step()
        world["clock"].advance(3600)
        run_due(world["context"])
        assert world["context"].market.task(task_id).winner == kai.did
        yield world, kai, kim, task_id
    finally:
        for agent in (kai, kim):
            agent.stop()


def relay(agent: KitAgent, task_id: str, entry: dict[str, Any]) -> ApiError:
    with pytest.raises(ApiError) as refused:
        agent.client.post(f"/tasks/{task_id}/work", {"entry": entry})
    return refused.value


def test_illegal_team_entries_are_refused_and_nothing_is_logged(
    won: tuple[dict[str, Any], KitAgent, KitAgent, str],
) -> None:
    world, kai, kim, task_id = won
    context: MarketContext = world["context"]
    store = context.market.ledger.store
    # Nothing but task.started while the task is awarded.
    opened = {
        "conversation": "conv-kai",
        "task": task_id,
        "parent": None,
        "depth": 0,
        "leader": kai.did,
        "members": [kai.did, kim.did],
        "max_turns": 16,
        "title": "t",
    }
    early = relay(kai, task_id, kai.client.entry("conversation.opened", "conv-kai", opened))
    assert early.status == 409 and "start it first" in str(early)
    # A task.started signed by kim, relayed by the winner, is not the winner's.
    not_his = relay(kai, task_id, kim.client.entry("task.started", task_id, {"task_id": task_id}))
    assert not_his.status == 403
    kai.client.post(
        f"/tasks/{task_id}/work",
        {"entry": kai.client.entry("task.started", task_id, {"task_id": task_id})},
    )
    again = relay(kai, task_id, kai.client.entry("task.started", task_id, {"task_id": task_id}))
    assert again.status == 409
    size = store.size()
    # Opened with the requester on the team; opened by someone else than its leader.
    with_requester = {**opened, "members": [kai.did, world["req"].did]}
    refused = relay(
        kai, task_id, kai.client.entry("conversation.opened", "conv-kai", with_requester)
    )
    assert refused.status in (403, 422), refused
    by_kim = relay(kai, task_id, kim.client.entry("conversation.opened", "conv-kai", opened))
    assert by_kim.status == 403
    kai.client.post(
        f"/tasks/{task_id}/work",
        {"entry": kai.client.entry("conversation.opened", "conv-kai", opened)},
    )
    size = store.size()
    # kim reports before anything was assigned to it: not a legal move.
    report = {
        "conversation": "conv-kai",
        "turn": 0,
        "message": {
            "kind": "report",
            "speaker": kim.did,
            "next_state": "conclusion",
            "next_speaker": kai.did,
            "result": {"sub_id": "s1", "ok": True, "contributions": [], "error": None},
        },
    }
    illegal = relay(kai, task_id, kim.client.entry("conversation.message", "conv-kai", report))
    assert illegal.status == 422 and "not a legal move" in str(illegal)
    # The leader concludes at once, with no deliverable worth the name: legal, logged.
    discuss = {
        "conversation": "conv-kai",
        "turn": 0,
        "message": {
            "kind": "discuss",
            "speaker": kai.did,
            "next_state": "conclusion",
            "next_speaker": kai.did,
            "text": "nothing to do",
        },
    }
    kai.client.post(
        f"/tasks/{task_id}/work",
        {"entry": kai.client.entry("conversation.message", "conv-kai", discuss)},
    )
    conclude = {
        "conversation": "conv-kai",
        "turn": 1,
        "message": {
            "kind": "conclude",
            "speaker": kai.did,
            "next_state": "closed",
            "next_speaker": None,
            "deliverable": {"summary": "nothing", "contributions": []},
        },
    }
    kai.client.post(
        f"/tasks/{task_id}/work",
        {"entry": kai.client.entry("conversation.message", "conv-kai", conclude)},
    )
    size = store.size()
    # A delivery that is not what the team concluded, or whose hash is not its document's.
    from accord.ledger.canonical import canonical_json
    from accord.market.blobs import sha256_hex

    document: dict[str, Any] = {
        "task": task_id,
        "title": context.market.task(task_id).spec.title,
        "leader": kai.did,
        "summary": "nothing",
        "plan": {"assignments": {}},
        "parts": [],
    }
    # A plan that gives a part to kim, who was never assigned it: not the logged plan.
    made_up = {**document, "plan": {"assignments": {"tax": kim.did}}}
    made_up_body = {
        "task_id": task_id,
        "conversation": "conv-kai",
        "deliverable": {"summary": "nothing", "contributions": []},
        "document": made_up,
        "sha256": sha256_hex(canonical_json(made_up)),
    }
    planned = relay(kai, task_id, kai.client.entry("task.delivered", task_id, made_up_body))
    assert planned.status == 422 and "not the plan and assembly the log holds" in str(planned)

    body = {
        "task_id": task_id,
        "conversation": "conv-kai",
        "deliverable": {"summary": "everything", "contributions": []},
        "document": document,
        "sha256": sha256_hex(canonical_json(document)),
    }
    other = relay(kai, task_id, kai.client.entry("task.delivered", task_id, body))
    assert other.status == 422 and "not what the team concluded" in str(other)
    body["deliverable"] = {"summary": "nothing", "contributions": []}
    bad_hash = relay(
        kai, task_id, kai.client.entry("task.delivered", task_id, {**body, "sha256": "0" * 64})
    )
    assert bad_hash.status == 422 and "sha256" in str(bad_hash)
    assert store.size() == size  # nothing refused was logged
    # Past the delivery deadline the delivery is too late: the service expires the task.
    world["clock"].advance(2 * 3600)
    late = relay(kai, task_id, kai.client.entry("task.delivered", task_id, body))
    assert late.status == 409 and "too late" in str(late)
    [expired] = run_due(context)
    assert (expired.due.action, expired.outcome) == ("expire", "done")
    assert context.market.task(task_id).state == "refunded"


def test_a_report_names_only_outputs_the_service_holds(
    won: tuple[dict[str, Any], KitAgent, KitAgent, str],
) -> None:
    world, kai, kim, task_id = won
    from accord.ledger.sealing import seal

    kai.client.post(
        f"/tasks/{task_id}/work",
        {"entry": kai.client.entry("task.started", task_id, {"task_id": task_id})},
    )
    not_sealed = None
    with pytest.raises(ApiError) as refused:
        kai.client.post_bytes(f"/tasks/{task_id}/sealed", b'{"value": 1}')
    not_sealed = refused.value
    assert not_sealed.status == 422
    sealed = seal({"total": "1.00"})
    with pytest.raises(ApiError) as by_kim:
        kim.client.post_bytes(f"/tasks/{task_id}/sealed", sealed.data)
    assert by_kim.value.status == 403
    answer = kai.client.post_bytes(f"/tasks/{task_id}/sealed", sealed.data)
    assert answer["output_sha256"] == sealed.commitment
    assert world["context"].market.sealed_bytes(sealed.commitment) == sealed.data


def test_a_winner_holds_unreported_outputs_only_within_a_quota(
    won: tuple[dict[str, Any], KitAgent, KitAgent, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sealed outputs no report names are held under a quota (then expire): a stranger who
    wins a task cannot fill the service's disk."""
    _, kai, _, task_id = won
    from accord.coordinator import contract_work
    from accord.ledger.sealing import seal
    from accord.market.blobs import FileQuota

    monkeypatch.setattr(contract_work, "SEALED_QUOTA", FileQuota(files_per_caller=2))
    kai.client.post(
        f"/tasks/{task_id}/work",
        {"entry": kai.client.entry("task.started", task_id, {"task_id": task_id})},
    )
    for n in range(2):
        kai.client.post_bytes(f"/tasks/{task_id}/sealed", seal({"n": n}).data)
    with pytest.raises(ApiError) as over:
        kai.client.post_bytes(f"/tasks/{task_id}/sealed", seal({"n": 2}).data)
    assert over.value.status in (413, 429), over.value


def test_the_service_runs_no_team_for_a_self_custody_winner(
    won: tuple[dict[str, Any], KitAgent, KitAgent, str],
) -> None:
    world, _, _, task_id = won
    from accord.coordinator.errors import TeamError
    from accord.coordinator.service import run_awarded_task

    with pytest.raises(TeamError, match="keeps its own key"):
        run_awarded_task(world["context"], task_id)
    assert world["context"].market.task(task_id).state == "awarded"


def test_the_kit_answers_only_calls_signed_by_the_operator_or_a_leader(
    won: tuple[dict[str, Any], KitAgent, KitAgent, str],
) -> None:
    world, kai, kim, task_id = won
    from accord.identity.http_auth import AccordAuth as SignedBy
    from accord.identity.http_signatures import CALL_TAG
    from accord.ledger.signing import Ed25519Signer

    assert kim.server is not None
    run = f"{kim.server.url}/run"
    item = {"item": {"item_id": "x", "capability": "arithmetic"}}
    unsigned = httpx.post(run, json=item, timeout=10)
    assert unsigned.status_code == 401 and "Accept-Signature" in unsigned.headers
    as_service = httpx.post(run, json=item, timeout=10, auth=SignedBy(world["req"]))
    assert as_service.status_code == 401  # the "accord" tag is for calls to the service
    stranger = Ed25519Signer.generate()
    by_stranger = httpx.post(run, json=item, timeout=10, auth=SignedBy(stranger, tag=CALL_TAG))
    assert by_stranger.status_code == 403 and "leads no task" in by_stranger.text
    notice = {"event": "task.awarded", "task_id": task_id}
    by_kai = httpx.post(
        f"{kim.server.url}/accord/notify",
        json=notice,
        timeout=10,
        auth=SignedBy(kai.signer, tag=CALL_TAG),
    )
    assert by_kai.status_code == 403
    operator = world["context"].market.ledger.operator
    by_operator = httpx.post(
        f"{kim.server.url}/accord/notify",
        json=notice,
        timeout=10,
        auth=SignedBy(operator, tag=CALL_TAG),
    )
    assert by_operator.status_code == 202, by_operator.text
    too_deep = httpx.post(  # 200 KB of brackets, signed: a clear 400, and the kit lives on
        f"{kim.server.url}/accord/notify",
        content=b"[" * 100_000 + b"]" * 100_000,
        headers={"Content-Type": "application/json"},
        timeout=60,
        auth=SignedBy(operator, tag=CALL_TAG),
    )
    assert too_deep.status_code == 400 and "too deep" in too_deep.text
    # Leading a running task is not enough: kim answers only a part assigned to it there.
    kai.client.post(
        f"/tasks/{task_id}/work",
        {"entry": kai.client.entry("task.started", task_id, {"task_id": task_id})},
    )
    by_leader = httpx.post(run, json=item, timeout=10, auth=SignedBy(kai.signer, tag=CALL_TAG))
    assert by_leader.status_code == 403 and "no part 'x'" in by_leader.text


def test_the_kit_does_only_assigned_parts_and_signs_only_what_it_did(
    won: tuple[dict[str, Any], KitAgent, KitAgent, str],
) -> None:
    """kim (its own process's keys, its own /run and /sign) answers kai's /run only for a part
    kai's logged conversation assigned to it, for the requester's input whatever item kai
    sends; it signs a report only for that assignment and its own answer, and a failure only
    for an assignment it did not answer."""
    world, kai, kim, task_id = won
    from accord.coordinator.adapters import solve_task
    from accord.coordinator.team import part_task
    from accord.identity.http_auth import AccordAuth as SignedBy
    from accord.identity.http_signatures import CALL_TAG
    from accord.ledger.canonical import canonical_json
    from accord.ledger.events import make_entry
    from accord.ledger.sealing import seal

    assert kim.server is not None
    parts = {p["id"]: p for p in invoice_request()["parts"]}

    def work(kind: str, subject: str, body: dict[str, Any]) -> None:
        entry = kai.client.entry(kind, subject, body)
        kai.client.post(f"/tasks/{task_id}/work", {"entry": entry})

    work("task.started", task_id, {"task_id": task_id})
    opened = {
        "conversation": "conv-k",
        "task": task_id,
        "parent": None,
        "depth": 0,
        "leader": kai.did,
        "members": [kai.did, kim.did],
        "max_turns": 16,
        "title": "t",
    }
    work("conversation.opened", "conv-k", opened)
    plan = {"kind": "discuss", "speaker": kai.did, "next_state": "async_task_assign"}
    plan |= {"next_speaker": kai.did, "text": "plan"}
    work("conversation.message", "conv-k", {"conversation": "conv-k", "turn": 0, "message": plan})
    tax = part_task("tax", "arithmetic", parts["tax"]["input"])
    assign = {
        "kind": "assign_async",
        "speaker": kai.did,
        "next_state": "pause_trigger",
        "next_speaker": kim.did,
        "assignments": [{"assignee": kim.did, "task": tax.to_json()}],
    }
    work("conversation.message", "conv-k", {"conversation": "conv-k", "turn": 1, "message": assign})

    def run(item: dict[str, Any]) -> httpx.Response:
        return httpx.post(
            f"{kim.server.url}/run",  # type: ignore[union-attr]
            json={"item": item},
            timeout=30,
            auth=SignedBy(kai.signer, tag=CALL_TAG),
        )

    # A part kim was not assigned: refused, whoever leads.
    other = run({"item_id": "lines-sum", "capability": "arithmetic", "prompt": "", "payload": {}})
    assert other.status_code == 403, other.text
    # The assigned part, with an input kai made up: kim answers the requester's input.
    made_up = {"kind": "expression", "expression": "1 + 1"}
    given = run({"item_id": "tax", "capability": "arithmetic", "prompt": "1+1", "payload": made_up})
    assert given.status_code == 200, given.text
    answer = given.json()["answer"]
    assert answer == solve_task(tax)

    def sign(result: dict[str, Any], openings: dict[str, str]) -> httpx.Response:
        message = {
            "kind": "report",
            "speaker": kim.did,
            "next_state": "conclusion",
            "next_speaker": kai.did,
            "result": result,
        }
        body = {"conversation": "conv-k", "turn": 2, "message": message}
        event = make_entry(
            kim.signer,
            kind="conversation.message",
            seq=99,
            at=world["clock"](),
            subject="conv-k",
            body=body,
        ).event
        text = canonical_json(event.to_json()).decode()
        return httpx.post(
            f"{kim.server.url}/sign",  # type: ignore[union-attr]
            json={"event": text, "openings": openings},
            timeout=30,
            auth=SignedBy(kai.signer, tag=CALL_TAG),
        )

    def contribution(value: Any, part: str = "tax") -> tuple[dict[str, Any], dict[str, str]]:
        sealed = seal(value)
        found = {"agent": kim.did, "sub_id": part, "capability": "arithmetic", "part": part}
        return {**found, "output_sha256": sealed.commitment}, {
            sealed.commitment: sealed.data.decode()
        }

    # A failure report for work kim did answer, or never received: not signed.
    failed = {"sub_id": "tax", "ok": False, "contributions": [], "error": "timed out"}
    assert sign(failed, {}).status_code == 403
    assert sign({**failed, "sub_id": "lines-sum"}, {}).status_code == 403
    # An answer kim did not give (the made-up input's): not signed; its own: signed.
    wrong, wrong_openings = contribution(2)
    bad = sign(
        {"sub_id": "tax", "ok": True, "contributions": [wrong], "error": None}, wrong_openings
    )
    assert bad.status_code == 403 and "did not do" in bad.text
    right, openings = contribution(answer)
    good = sign({"sub_id": "tax", "ok": True, "contributions": [right], "error": None}, openings)
    assert good.status_code == 200, good.text


def test_a_leader_cannot_credit_others_nor_take_a_members_reported_part(
    won: tuple[dict[str, Any], KitAgent, KitAgent, str],
) -> None:
    """Each party signs with its own key; the winner relays. A report naming another producer,
    a part assigned again after the leader abandoned it on its own word, and a part a member
    already reported, reported again by the leader in a sub-team of its own: each is refused
    with its reason, and nothing of it is logged. The member's own report is logged."""
    world, kai, kim, task_id = won
    from accord.coordinator.adapters import solve_task
    from accord.coordinator.team import part_task
    from accord.ledger.sealing import seal

    store = world["context"].market.ledger.store
    parts = {p["id"]: p for p in invoice_request()["parts"]}
    turns: dict[str, int] = {}

    def entry(agent: KitAgent, conv: str, value: dict[str, Any]) -> dict[str, Any]:
        body = {"conversation": conv, "turn": turns.get(conv, 0), "message": value}
        return agent.client.entry("conversation.message", conv, body)

    def say(agent: KitAgent, conv: str, value: dict[str, Any]) -> None:
        kai.client.post(f"/tasks/{task_id}/work", {"entry": entry(agent, conv, value)})
        turns[conv] = turns.get(conv, 0) + 1

    def refused(agent: KitAgent, conv: str, value: dict[str, Any]) -> ApiError:
        size = store.size()
        error = relay(kai, task_id, entry(agent, conv, value))
        assert store.size() == size  # nothing refused is logged
        return error

    def open_conv(conv: str, parent: str | None, members: list[str]) -> None:
        body = {
            "conversation": conv,
            "task": task_id,
            "parent": parent,
            "depth": 0 if parent is None else 1,
            "leader": kai.did,
            "members": members,
            "max_turns": 32,
            "title": "t",
        }
        entry = kai.client.entry("conversation.opened", conv, body)
        kai.client.post(f"/tasks/{task_id}/work", {"entry": entry})
        say(kai, conv, discuss("async_task_assign", kai.did))

    def discuss(state: str, who: str) -> dict[str, Any]:
        return {
            "kind": "discuss",
            "speaker": kai.did,
            "next_state": state,
            "next_speaker": who,
            "text": "plan",
        }

    def task_json(part_id: str, sub_id: str | None = None) -> dict[str, Any]:
        part = parts[part_id]
        task = part_task(part_id, part["capability"], part["input"]).to_json()
        return {**task, "sub_id": sub_id or part_id}

    def assign(who: KitAgent, *tasks: dict[str, Any]) -> dict[str, Any]:
        return {
            "kind": "assign_async",
            "speaker": kai.did,
            "next_state": "pause_trigger",
            "next_speaker": who.did,
            "assignments": [{"assignee": who.did, "task": t} for t in tasks],
        }

    def report(speaker: KitAgent, sub_id: str, producer: str, state: str) -> dict[str, Any]:
        part = parts[sub_id]
        sealed = seal(solve_task(part_task(sub_id, part["capability"], part["input"])))
        kai.client.post_bytes(f"/tasks/{task_id}/sealed", sealed.data)
        contribution = {
            "agent": producer,
            "sub_id": sub_id,
            "capability": part["capability"],
            "part": sub_id,
            "output_sha256": sealed.commitment,
        }
        return {
            "kind": "report",
            "speaker": speaker.did,
            "next_state": state,
            "next_speaker": kai.did if state != "pause_trigger" else speaker.did,
            "result": {
                "sub_id": sub_id,
                "ok": True,
                "contributions": [contribution],
                "error": None,
            },
        }

    kai.client.post(
        f"/tasks/{task_id}/work",
        {"entry": kai.client.entry("task.started", task_id, {"task_id": task_id})},
    )
    open_conv("conv-top", None, [kai.did, kim.did])
    say(kai, "conv-top", assign(kim, task_json("tax"), task_json("lines-sum")))
    # kim reports "tax", its own work, signed by its own key: logged.
    say(kim, "conv-top", report(kim, "tax", kim.did, "pause_trigger"))
    # The leader abandons "lines-sum" on its own word (kim answered it, say) ...
    abandon = {
        "kind": "abandon",
        "speaker": kai.did,
        "next_state": "async_task_assign",
        "next_speaker": kai.did,
        "sub_id": "lines-sum",
        "reason": "timed out",
    }
    say(kai, "conv-top", abandon)
    # ... and cannot give it to itself now.
    taken = refused(kai, "conv-top", assign(kai, task_json("lines-sum", "lines-sum#2")))
    assert taken.status == 422 and "abandoned on the leader's word" in str(taken)
    # Its own part, credited to kim (kim signed nothing of it): refused.
    say(kai, "conv-top", assign(kai, task_json("invoice-fields")))
    framed = refused(kai, "conv-top", report(kai, "invoice-fields", kim.did, "conclusion"))
    assert framed.status == 422 and f"names {kim.did} as its producer" in str(framed)
    # kim's reported "tax", done again by the leader in a sub-team of its own: refused.
    open_conv("conv-sub", "conv-top", [kai.did])
    say(kai, "conv-sub", assign(kai, task_json("tax")))
    twice = refused(kai, "conv-sub", report(kai, "tax", kai.did, "conclusion"))
    assert twice.status == 422 and "part tax was already reported" in str(twice)


def test_a_member_without_a_payout_account_is_never_on_a_team(
    won: tuple[dict[str, Any], KitAgent, KitAgent, str],
) -> None:
    """An agent credentialed for the task but with no payout account bound could never be
    paid for a part: the team listing leaves it out, and a conversation naming it is refused
    with the reason, logging nothing."""
    world, kai, kim, task_id = won
    kip = kit_agent(world, "kip", 4 * ETH // 10)
    try:
        kip.register(kip.start())
        for capability in CAPABILITIES:
            kip.sit_exam(capability)
        listed = {m["did"] for m in kai.client.get(f"/tasks/{task_id}/team")}
        assert kim.did in listed and kip.did not in listed
        kai.client.post(
            f"/tasks/{task_id}/work",
            {"entry": kai.client.entry("task.started", task_id, {"task_id": task_id})},
        )
        store = world["context"].market.ledger.store
        size = store.size()
        opened = {
            "conversation": "conv-p",
            "task": task_id,
            "parent": None,
            "depth": 0,
            "leader": kai.did,
            "members": [kai.did, kim.did, kip.did],
            "max_turns": 16,
            "title": "t",
        }
        refused = relay(kai, task_id, kai.client.entry("conversation.opened", "conv-p", opened))
        assert refused.status == 422, refused
        assert f"{kip.did} may not join" in str(refused) and "no payout account" in str(refused)
        assert store.size() == size
        kip.bind_payout()
        listed = {m["did"] for m in kai.client.get(f"/tasks/{task_id}/team")}
        assert kip.did in listed
    finally:
        kip.stop()


# -- a member that goes away -----------------------------------------------------------------


class GoesAway:
    """The reference agent, until it is armed: then its first piece of team work stops its own
    kit server (listening socket closed: every later call is refused) and fails."""

    def __init__(self) -> None:
        self.agent: KitAgent | None = None
        self.stopped = threading.Event()

    def answer(self, item: Any) -> Any:
        if self.agent is not None and not self.stopped.is_set():
            server = self.agent.server
            assert server is not None

            def stop() -> None:
                server.shutdown()
                server.server_close()

            stopping = threading.Thread(target=stop)
            stopping.start()
            stopping.join()
            self.stopped.set()
            raise AgentRuntimeError("going away", retriable=True)
        return ReferenceRuntime().answer(item)


def requester_sees(world: dict[str, Any], task_id: str) -> str:
    """Why the task waits, as `GET /tasks/{id}` says it; the A2A status message says it too."""
    with httpx.Client(base_url=world["url"], timeout=30) as http:
        shown = http.get(f"/tasks/{task_id}").json()
        call = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}
        status = http.post(
            "/a2a", json=call, headers={"A2A-Version": "1.0"}, auth=AccordAuth(world["req"])
        ).json()["result"]["status"]
    [part] = status["message"]["parts"]
    assert shown["waiting"] in part["text"], (shown, part)
    return str(shown["waiting"])


def messages_of(context: MarketContext, actor: str) -> list[dict[str, Any]]:
    found = context.market.ledger.store.find(actor=actor, kind="conversation.message", limit=1000)
    return [Entry.from_bytes(s.data).event.body["message"] for s in found]


def test_a_kit_leader_whose_member_stops_declares_a_no_show_and_delivers(
    world: dict[str, Any],
) -> None:
    """kim's kit server stops mid-task (its /sign then refuses connections): kai waits until
    the service's clock says `NO_SHOW_AFTER` has passed since the assignment, logs a signed
    no-show, does the part itself and delivers; the audit replays the no-show."""
    from accord.coordinator.conversation import NO_SHOW_AFTER

    context: MarketContext = world["context"]
    goes_away = GoesAway()
    kai = kit_agent(world, "kai", 3 * ETH // 10)
    kim = kit_agent(world, "kim", 4 * ETH // 10, runtime=goes_away)
    try:
        for agent in (kai, kim):
            agent.join(agent.start())
        task_id = post_invoice(world)
        for agent in (kai, kim):
            agent.step()
        world["clock"].advance(3600)
        for agent in (kai, kim):
            agent.step()
        world["clock"].advance(3600)
        run_due(context)
        assert context.market.task(task_id).winner == kai.did
        goes_away.agent = kim  # from now on, kim's first part stops it
        kai.step()
        [leading] = [t for t in kai._threads if t.name == f"lead-{task_id}"]
        assert goes_away.stopped.wait(120), "kim was never given a part"
        assert context.market.task(task_id).state == "running"
        # The requester sees what the task waits for, and until when.
        waiting = requester_sees(world, task_id)
        assert f"waiting for {kim.did}'s answer" in waiting and "declare it absent" in waiting
        world["clock"].advance(NO_SHOW_AFTER.total_seconds() + 1)
        leading.join(timeout=120)
        assert not leading.is_alive()
        assert context.market.task(task_id).state == "delivered"
        kinds = [m["kind"] for m in messages_of(context, kai.did)]
        assert "no_show" in kinds and "abandon" not in kinds, kinds
        assert not [m for m in messages_of(context, kim.did) if m["kind"] == "report"]

        world["clock"].advance(3 * 24 * 3600)  # the review window closes
        settled = [d for d in run_due(context) if d.due.action == "settle"]
        assert [d.outcome for d in settled] == ["done"], settled
        anchorer = context.market.ledger.anchorer
        assert anchorer is not None
        anchorer.anchor_latest()
        report = audit_task(
            context.market.ledger.store,
            task_id,
            anchors=world["anchors"],
            escrow=world["escrow_chain"],
            outputs=context.market.sealed_bytes,
        )
        assert report.ok, report.to_json()
    finally:
        kai.stop()
        if not goes_away.stopped.is_set():
            kim.stop()
        else:
            kim.client.close()


def test_a_no_show_before_its_bound_is_refused_and_fails_the_audit(
    won: tuple[dict[str, Any], KitAgent, KitAgent, str],
) -> None:
    """A leader that declares its member absent before `NO_SHOW_AFTER` (to take its part) is
    refused with the time it may, and so is an assignment it backdates to get there sooner;
    an operator that logs such a no-show anyway makes the audit fail at step 5, naming it."""
    from accord.coordinator.conversation import NO_SHOW_AFTER
    from accord.coordinator.team import part_task
    from accord.ledger.events import make_entry

    world, kai, kim, task_id = won
    context: MarketContext = world["context"]
    store = context.market.ledger.store
    parts = {p["id"]: p for p in invoice_request()["parts"]}

    def work(entry: dict[str, Any]) -> None:
        kai.client.post(f"/tasks/{task_id}/work", {"entry": entry})

    def message(turn: int, value: dict[str, Any]) -> dict[str, Any]:
        return {"conversation": "conv-n", "turn": turn, "message": value}

    work(kai.client.entry("task.started", task_id, {"task_id": task_id}))
    opened = {
        "conversation": "conv-n",
        "task": task_id,
        "parent": None,
        "depth": 0,
        "leader": kai.did,
        "members": [kai.did, kim.did],
        "max_turns": 16,
        "title": "t",
    }
    work(kai.client.entry("conversation.opened", "conv-n", opened))
    plan = {"kind": "discuss", "speaker": kai.did, "next_state": "async_task_assign"}
    plan |= {"next_speaker": kai.did, "text": "plan"}
    work(kai.client.entry("conversation.message", "conv-n", message(0, plan)))
    tax = part_task("tax", "arithmetic", parts["tax"]["input"])
    assign = {
        "kind": "assign_async",
        "speaker": kai.did,
        "next_state": "pause_trigger",
        "next_speaker": kim.did,
        "assignments": [{"assignee": kim.did, "task": tax.to_json()}],
    }
    # Backdated by the bound, so that a no-show would be due at once: refused.
    seq = int(kai.client.get(f"/agents/{kai.did}/next-seq")["seq"])
    backdated = make_entry(
        kai.signer,
        kind="conversation.message",
        seq=seq,
        at=world["clock"]() - NO_SHOW_AFTER + timedelta(seconds=1),
        subject="conv-n",
        body=message(1, assign),
    )
    size = store.size()
    old = relay(kai, task_id, backdated.to_json())
    assert old.status == 422 and "before the service's clock" in str(old)
    work(kai.client.entry("conversation.message", "conv-n", message(1, assign)))
    no_show = {
        "kind": "no_show",
        "speaker": kai.did,
        "next_state": "async_task_assign",
        "next_speaker": kai.did,
        "sub_id": "tax",
    }
    size = store.size()
    early = relay(
        kai, task_id, kai.client.entry("conversation.message", "conv-n", message(2, no_show))
    )
    assert early.status == 409 and "too early for a no-show of tax" in str(early)
    # Dated past the bound (the service's clock has not got there): refused all the same.
    seq = int(kai.client.get(f"/agents/{kai.did}/next-seq")["seq"])
    future = make_entry(
        kai.signer,
        kind="conversation.message",
        seq=seq,
        at=world["clock"]() + timedelta(seconds=290),
        subject="conv-n",
        body=message(2, no_show),
    )
    ahead = relay(kai, task_id, future.to_json())
    assert ahead.status == 409 and "too early" in str(ahead)
    assert store.size() == size
    # An operator that logs the early no-show anyway: the audit names it at step 5.
    [index] = context.market.ledger.append_entries([future])
    anchorer = context.market.ledger.anchorer
    assert anchorer is not None
    anchorer.anchor_latest()
    report = audit_task(store, task_id, anchors=world["anchors"], escrow=world["escrow_chain"])
    failure = report.first_failure
    assert failure is not None and failure.number == 5, report.to_json()
    assert failure.entry == index and "too early" in failure.detail, failure


def test_a_member_that_logged_its_answer_is_never_declared_absent(
    won: tuple[dict[str, Any], KitAgent, KitAgent, str],
) -> None:
    """kim logs, itself, that it answered its assignment before it hands the answer to kai:
    a leader holding the answer back cannot call kim gone to take the part, even past the
    bound; a receipt is kim's own (not relayed) and logged once; an operator that logs the
    no-show anyway fails the audit at step 5."""
    from accord.coordinator.conversation import NO_SHOW_AFTER
    from accord.coordinator.team import part_task
    from accord.identity.http_auth import AccordAuth as SignedBy
    from accord.identity.http_signatures import CALL_TAG
    from accord.ledger.canonical import canonical_json

    world, kai, kim, task_id = won
    context: MarketContext = world["context"]
    store = context.market.ledger.store
    parts = {p["id"]: p for p in invoice_request()["parts"]}

    def work(entry: dict[str, Any]) -> None:
        kai.client.post(f"/tasks/{task_id}/work", {"entry": entry})

    def message(turn: int, value: dict[str, Any]) -> dict[str, Any]:
        return {"conversation": "conv-a", "turn": turn, "message": value}

    work(kai.client.entry("task.started", task_id, {"task_id": task_id}))
    opened = {
        "conversation": "conv-a",
        "task": task_id,
        "parent": None,
        "depth": 0,
        "leader": kai.did,
        "members": [kai.did, kim.did],
        "max_turns": 16,
        "title": "t",
    }
    work(kai.client.entry("conversation.opened", "conv-a", opened))
    plan = {"kind": "discuss", "speaker": kai.did, "next_state": "async_task_assign"}
    plan |= {"next_speaker": kai.did, "text": "plan"}
    work(kai.client.entry("conversation.message", "conv-a", message(0, plan)))
    tax = part_task("tax", "arithmetic", parts["tax"]["input"])
    assign = {
        "kind": "assign_async",
        "speaker": kai.did,
        "next_state": "pause_trigger",
        "next_speaker": kim.did,
        "assignments": [{"assignee": kim.did, "task": tax.to_json()}],
    }
    work(kai.client.entry("conversation.message", "conv-a", message(1, assign)))
    # A receipt in kim's name, relayed by kai: refused (a member logs its own).
    body = {"conversation": "conv-a", "sub_id": "tax"}
    relayed = relay(kai, task_id, kim.client.entry("work.answered", "conv-a", body))
    assert relayed.status == 403
    assert kim.server is not None
    given = httpx.post(
        f"{kim.server.url}/run",
        json={"item": {"item_id": "tax", "capability": "arithmetic", "prompt": "", "payload": {}}},
        timeout=30,
        auth=SignedBy(kai.signer, tag=CALL_TAG),
    )
    assert given.status_code == 200, given.text
    [receipt] = store.find(kind="work.answered", actor=kim.did, limit=10)
    assert kai.client.get("/conversations/conv-a")["answered"] == {"tax": receipt.index}
    again = relay(kim, task_id, kim.client.entry("work.answered", "conv-a", body))
    assert again.status == 409 and "answered tax already" in str(again)
    # kai holds the answer back and, past the bound, calls kim gone: refused.
    world["clock"].advance(NO_SHOW_AFTER.total_seconds() + 1)
    no_show = {
        "kind": "no_show",
        "speaker": kai.did,
        "next_state": "async_task_assign",
        "next_speaker": kai.did,
        "sub_id": "tax",
    }
    entry = kai.client.entry("conversation.message", "conv-a", message(2, no_show))
    refused = relay(kai, task_id, entry)
    assert refused.status == 422, refused
    assert f"logged at entry {receipt.index} that it answered tax" in str(refused)
    [index] = context.market.ledger.append_entries([Entry.from_bytes(canonical_json(entry))])
    anchorer = context.market.ledger.anchorer
    assert anchorer is not None
    anchorer.anchor_latest()
    report = audit_task(store, task_id, anchors=world["anchors"], escrow=world["escrow_chain"])
    failure = report.first_failure
    assert failure is not None and failure.number == 5 and failure.entry == index, failure


def test_a_task_whose_leader_goes_away_expires_early_with_a_refund(
    won: tuple[dict[str, Any], KitAgent, KitAgent, str],
) -> None:
    """kai starts its task and its process stops: once nothing about the task is logged nor
    signed by kai for `LEADER_SILENCE`, well before the delivery deadline, the service ends
    the task (kai forfeits) and refunds the whole deposit."""
    from accord.coordinator.conversation import NO_SHOW_AFTER
    from accord.market.lifecycle import LEADER_SILENCE
    from accord.market.tasks import TASK_EXPIRED

    world, kai, _, task_id = won
    context: MarketContext = world["context"]
    assert LEADER_SILENCE > 2 * NO_SHOW_AFTER  # a leader waiting out a member is not gone
    kai.client.post(
        f"/tasks/{task_id}/work",
        {"entry": kai.client.entry("task.started", task_id, {"task_id": task_id})},
    )
    kai.stop()
    world["clock"].advance(LEADER_SILENCE.total_seconds() - 60)
    assert not run_due(context)  # silent, not yet for long enough
    waiting = requester_sees(world, task_id)
    assert f"waiting for its leader {kai.did}'s next move" in waiting, waiting
    assert "the task ends early and its budget is refunded" in waiting
    world["clock"].advance(61)
    task = context.market.task(task_id)
    assert world["clock"]() < task.delivery_deadline
    [done] = run_due(context)
    assert (done.due.action, done.outcome) == ("silent", "done"), done
    task = context.market.task(task_id)
    assert task.state == "refunded"
    store = context.market.ledger.store
    [expired] = store.find(kind=TASK_EXPIRED, subject=task_id, limit=1)
    body = Entry.from_bytes(expired.data).event.body
    assert body["forfeited"] == [kai.did] and "its leader went away" in body["reason"]
    [refunded] = store.find(kind="escrow.refunded", subject=task_id, limit=1)
    assert int(Entry.from_bytes(refunded.data).event.body["amount"]) == task.spec.budget


def test_a_member_gone_before_the_task_starts_is_never_on_the_team(
    won: tuple[dict[str, Any], KitAgent, KitAgent, str],
) -> None:
    """kim's kit server has stopped before kai leads: the service still lists kim, but kai's
    health probe finds nobody there, so kai's team is formed without kim (no no-show is
    needed) and kai delivers alone."""
    from accord.coordinator.liveness import answering

    world, kai, kim, task_id = won
    context: MarketContext = world["context"]
    assert kim.server is not None
    endpoint = kim.server.url
    assert answering({kim.did: endpoint}, allow_private=True) == {kim.did}
    kim.server.shutdown()
    kim.server.server_close()
    listed = {m["did"] for m in kai.client.get(f"/tasks/{task_id}/team")}
    assert kim.did in listed
    assert answering({kim.did: endpoint}, allow_private=True) == set()
    kai.step()
    [leading] = [t for t in kai._threads if t.name == f"lead-{task_id}"]
    leading.join(timeout=120)
    assert context.market.task(task_id).state == "delivered"
    store = context.market.ledger.store
    [opened] = store.find(kind="conversation.opened", actor=kai.did, limit=1)
    assert Entry.from_bytes(opened.data).event.body["members"] == [kai.did]
