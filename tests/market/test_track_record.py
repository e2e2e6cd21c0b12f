"""Track records through the real market (tests/audit/conftest.py's world: real onboarding of
reference agents, sealed bids, the team conversation, settlement through the in-memory escrow,
the audit), on SQLite and PostgreSQL:

- a self-dealing ring of three DIDs, each posting work only the next can do, raises its
  reputation by less than one honest settled task from an independent requester does;
- the second task between the same requester and agent counts half the first;
- the auction scores bids by the capability's track record, and discovery ranks by it;
- the view is the fold of the log, and a rebuilt view is the same;
- an agent whose real work keeps failing its checks loses its credential: a logged,
  replayable revocation, once, that the audit recomputes;
- bidders see the requester's record, through the API and the CLI.
"""

from __future__ import annotations

import copy
import json
import secrets
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from typer.testing import CliRunner

import accord.coordinator.service
from accord.api.app import create_app
from accord.api.cli import app as cli_app
from accord.api.routes.deps import ApiConfig
from accord.audit.checks import audit_task
from accord.coordinator.service import discover, run_awarded_task
from accord.coordinator.team import form_team
from accord.identity.agents import AgentRecord
from accord.identity.challenges.registry import REGISTRY
from accord.identity.chat import OpenAIChat
from accord.identity.credential_views import CREDENTIALS
from accord.identity.credentials import REVOCATION_EVENT_KIND
from accord.identity.errors import RegistryError
from accord.identity.issuance import _CREDENTIALS
from accord.ledger.events import Entry, Event
from accord.ledger.signing import Signer
from accord.market.check_io import Judge
from accord.market.errors import BidRejected, ReputationError, SettlementWaits
from accord.market.money import parse_amount
from accord.market.projections import read_views
from accord.market.reputation import REVOCATION_MIN_PARTS, check_revocation, revocation_evidence
from accord.market.sealed import commit_bid, reveal_bid
from accord.market.service import Market
from accord.market.settlement import settle_task
from accord.market.tasks import TASK_AWARDED, TASK_SETTLED, spec_from_request
from tests.audit.conftest import (
    REQUESTER_KEY,
    World,
    build_world,
    open_world,
    rebuild_log,
    with_body,
)
from tests.coordinator.test_llm_policy import ChatServer, _completion
from tests.directory import whole_directory
from tests.ledger.conftest import postgres_schema_url
from tests.market.panelists import jurors, mine, reveal, vote
from tests.view_rows import view_rows

HALF = Fraction(1, 2)
#: Each ring member holds the one capability the member before it asks for.
RING = (("x", "arithmetic"), ("y", "extraction"), ("z", "retrieval"))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def env(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    if request.param == "sqlite":
        yield {}
        return
    with postgres_schema_url() as url:
        yield {"ACCORD_DB_URL": url}


@pytest.fixture
def world(tmp_path: Path, env: dict[str, str]) -> Iterator[World]:
    world = open_world(tmp_path / "home", env=env)
    yield world
    world.ledger.store.engine.dispose()


def onboard(world: World, name: str, capability: str) -> AgentRecord:
    record = world.onboarding.registry.new_agent(name, now=world.clock(), runtime="reference")
    [outcome] = world.onboarding.onboard(record, [capability], item_count=5)
    assert outcome.credential_id is not None, name
    world.agents[name] = record
    world.clock.advance(1)
    return record


def example_spec(capability: str, parts: int = 1, *, title: str = "") -> Any:
    """`parts` parts of the capability's example input, each checked against its example
    answer."""
    given, answer = REGISTRY[capability].example()
    ids = [f"p{k}" for k in range(parts)]
    return spec_from_request(
        {
            "title": title or f"{parts} {capability} parts",
            "budget": "0.1eth",
            "bidding": "30s",
            "reveal": "30s",
            "parts": [{"id": i, "capability": capability, "input": given} for i in ids],
            "checks": [
                {"id": f"{i}-right", "kind": "expect", "part": i, "path": "$", "equals": answer}
                for i in ids
            ],
        },
        {},
    )


def settled_task(world: World, requester: Signer, worker: str, spec: Any) -> str:
    """Post `spec` for `requester`, `worker` the only bidder, award, run and settle it."""
    market = world.market
    task = market.post(requester, spec, requester_key=REQUESTER_KEY)
    bidder = world.signer(worker)
    price, salt = parse_amount("0.05eth"), secrets.token_bytes(32)
    market.commit(commit_bid(bidder, task.task_id, price, salt))
    world.clock.set(task.bidding_ends)
    market.reveal(reveal_bid(bidder, task.task_id, price, salt))
    world.clock.set(task.reveal_ends)
    market.award(task.task_id)
    world.clock.advance(1)
    run_awarded_task(world.context, task.task_id)
    world.clock.advance(1)
    settle_task(market, world.onboarding, task.task_id)
    world.clock.advance(1)
    assert market.task(task.task_id).state == "settled"
    return task.task_id


def audited(world: World, task_id: str) -> None:
    assert world.ledger.anchorer is not None
    world.ledger.anchorer.anchor_latest()
    report = audit_task(
        world.ledger.store, task_id, anchors=world.anchors, escrow=world.escrow_chain
    )
    assert report.ok, report.to_json()


def assert_view_is_the_log(market: Market, dids: list[str]) -> None:
    """The reputation view answers as the fold of the log, and rebuilds to the same rows."""
    assert market.indexed_track_records(dids) == market.track_records()
    store = market.ledger.store
    with store.engine.connect() as connection:
        before = list(view_rows(connection, read_views(market.ledger.operator.did)))
    store.reindex()
    with store.engine.connect() as connection:
        assert list(view_rows(connection, read_views(market.ledger.operator.did))) == before


def test_a_self_dealing_ring_gains_less_than_one_honest_task(world: World) -> None:
    """x pays y, y pays z, z pays x, three rounds, every part passing: the money comes back,
    so the ring's work counts for nothing and each member ends where it began. A requester
    that paid an independent agent before raises y by one task weighed by its standing; a
    second one by the same requester counts half as much, times its standing then."""
    market = world.market
    members = {name: onboard(world, name, capability) for name, capability in RING}
    rep = {name: capability for name, capability in RING}
    ring_tasks = []
    for round_ in range(3):
        for k, (name, _) in enumerate(RING):
            worker, capability = RING[(k + 1) % len(RING)]
            spec = example_spec(capability, title=f"round {round_}: {name} pays {worker}")
            ring_tasks.append(settled_task(world, world.signer(name), worker, spec))
            if round_ == 0 and k == 0:
                # before the circle closes, x is a fresh requester: its task weighs nothing
                assert market.track_records().reputation(members["y"].did, "extraction") == HALF
    ring = {name: market.track_records().reputation(members[name].did, rep[name]) for name in rep}
    assert ring == dict.fromkeys(rep, HALF)  # the prior: the ring gained nothing
    records = market.track_records()
    assert records.circle(members["x"].did) == frozenset(m.did for m in members.values())
    assert all(records.record(m.did, rep[n]).units == 3 for n, m in members.items())
    assert records.paid_before(members["x"].did, 10**9) == 0  # it paid its circle only

    w = onboard(world, "w", "arithmetic")  # the requester pays an independent agent first
    settled_task(world, world.requester, "w", example_spec("arithmetic"))
    paid = market.track_records().paid_before(world.requester.did, 10**9)
    assert paid == parse_amount("0.1eth")  # a lone bidder is paid the budget: standing 1/2
    honest = settled_task(world, world.requester, "y", example_spec("extraction"))
    after_one = market.track_records().reputation(members["y"].did, "extraction")
    assert after_one == Fraction(3, 5)  # (1 + 1/2) / (2 + 1/2)
    gains_of_the_ring = [value - HALF for value in ring.values()]
    assert all(gain < after_one - ring["y"] for gain in gains_of_the_ring)  # the done-when
    again = settled_task(world, world.requester, "y", example_spec("extraction"))
    after_two = market.track_records().reputation(members["y"].did, "extraction")
    # 0.2 ether paid before it: a standing of 2/3, halved as the pair's second task
    assert after_two == Fraction(11, 17)  # (1 + 1/2 + 1/3) / (2 + 1/2 + 1/3)
    assert after_two - after_one < after_one - ring["y"]

    # discovery ranks by it, and the auction scores by it
    [found] = discover(world.context, "extraction").candidates
    assert found.reputation == after_two and found.member.reputation_in("extraction") == after_two
    market.post(world.requester, example_spec("extraction"), requester_key=REQUESTER_KEY)
    open_task = market.list_tasks(state="bidding").tasks[-1]
    bidder, salt = world.signer("y"), secrets.token_bytes(32)
    market.commit(commit_bid(bidder, open_task.task_id, 1000, salt))
    world.clock.set(open_task.bidding_ends)
    market.reveal(reveal_bid(bidder, open_task.task_id, 1000, salt))
    world.clock.set(open_task.reveal_ends)
    market.award(open_task.task_id)
    [awarded] = market.ledger.store.find(kind=TASK_AWARDED, subject=open_task.task_id, limit=1)
    ranking = Entry.from_bytes(awarded.data).event.body["ranking"]
    assert ranking[0]["reputation"] == "11/17"
    world.clock.advance(1)
    run_awarded_task(world.context, open_task.task_id)
    world.clock.advance(1)
    settle_task(market, world.onboarding, open_task.task_id)  # the audit replays its award

    for task_id in (ring_tasks[0], ring_tasks[-1], honest, again, open_task.task_id):
        audited(world, task_id)
    assert_view_is_the_log(market, [w.did, *(m.did for m in members.values())])


class _AnswersWrong:
    """The agent's adapter, answering every part in the right shape but wrong."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def run(self, task: Any) -> Any:
        answer = self.inner.run(task)
        return {key: "0" for key in answer} if isinstance(answer, dict) else "1"


def test_failing_real_work_costs_the_credential_once_and_the_audit_replays_it(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An arithmetic agent answering every real part wrong: 6 failed parts keep its
    credential (fewer than REVOCATION_MIN_PARTS), 12 cost it, logged by the operator with its
    reason and evidence. It can no longer bid; settling again revokes nothing more; a second
    process racing to revoke it is refused by the log; the audit recomputes it."""
    sloppy = onboard(world, "sloppy", "arithmetic")
    real = accord.coordinator.service.adapter_for
    monkeypatch.setattr(
        accord.coordinator.service,
        "adapter_for",
        lambda record, timeout, **options: _AnswersWrong(real(record, timeout, **options)),
    )
    first = settled_task(world, world.requester, "sloppy", example_spec("arithmetic", 6))
    market = world.market
    assert market.track_records().record(sloppy.did, "arithmetic").parts == 6
    assert market.eligible(sloppy.did, ["arithmetic"])
    assert not world.ledger.store.find(kind=REVOCATION_EVENT_KIND, limit=10)
    second = settled_task(world, world.requester, "sloppy", example_spec("arithmetic", 6))
    monkeypatch.undo()

    [revocation] = world.ledger.store.find(kind=REVOCATION_EVENT_KIND, limit=10)
    event = Entry.from_bytes(revocation.data).event
    [settled] = market.ledger.store.find(kind=TASK_SETTLED, subject=second, limit=1)
    assert event.actor == world.ledger.operator.did and revocation.index == settled.index + 1
    assert event.body["reason"].startswith("track record: 12 independent arithmetic parts")
    evidence = event.body["evidence"]
    assert (evidence["agent"], evidence["task"], evidence["parts"]) == (sloppy.did, second, 12)
    assert evidence["settled_index"] == settled.index and evidence["passed"] == "0/1"
    threshold = REGISTRY["arithmetic"].threshold
    check_revocation(evidence, market.track_records(before=settled.index + 1), threshold)
    with pytest.raises(ReputationError):  # as of the first settlement, it was not due
        check_revocation(
            {**evidence, "parts": 6}, market.track_records(before=settled.index), threshold
        )
    assert 12 >= REVOCATION_MIN_PARTS > 6

    assert not market.eligible(sloppy.did, ["arithmetic"])
    task = market.post(world.requester, example_spec("arithmetic"), requester_key=REQUESTER_KEY)
    bid = commit_bid(world.signer("sloppy"), task.task_id, 1000, secrets.token_bytes(32))
    with pytest.raises(BidRejected) as refused:
        market.commit(bid)
    assert refused.value.reason == "not-eligible"

    assert settle_task(market, world.onboarding, second).already
    assert market.revoke_failing(second) == []
    # another process that read the credential as unrevoked is refused by the log's once-key
    with market.ledger.store.engine.begin() as connection:
        connection.execute(update(_CREDENTIALS).values(revoked_at=None))
    with pytest.raises(RegistryError, match="already revoked"):
        world.onboarding.revoke(event.subject, "again", evidence=evidence)
    assert len(world.ledger.store.find(kind=REVOCATION_EVENT_KIND, limit=10)) == 1
    with market.ledger.store.engine.connect() as connection:
        rows = connection.execute(CREDENTIALS.select()).all()
    assert [row.revoked for row in rows if row.agent == sloppy.did] == [True]

    audited(world, first)
    audited(world, second)


def two_capability_spec(first: str, second: str) -> Any:
    """One part of each capability's example input, each checked against its example answer."""
    parts, checks = [], []
    for capability in (first, second):
        given, answer = REGISTRY[capability].example()
        parts.append({"id": capability, "capability": capability, "input": given})
        checks.append(
            {
                "id": f"{capability}-right",
                "kind": "expect",
                "part": capability,
                "path": "$",
                "equals": answer,
            }
        )
    request = {
        "title": f"{first} and {second}",
        "budget": "0.1eth",
        "bidding": "30s",
        "reveal": "30s",
        "parts": parts,
        "checks": checks,
    }
    return spec_from_request(request, {})


def test_an_agent_that_failed_three_tasks_running_is_passed_over_while_another_is_able(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`bad` answers its extraction part wrong on three tasks running: it keeps its credential
    (3 parts are fewer than REVOCATION_MIN_PARTS) and is still taken while nobody else can do
    extraction, but not while another credentialed agent can: the team the winner of the
    next task needing extraction forms leaves it out, and `bad` makes no part of it."""
    bad = onboard(world, "bad", "extraction")
    real = accord.coordinator.service.adapter_for
    monkeypatch.setattr(
        accord.coordinator.service,
        "adapter_for",
        lambda record, timeout, **options: (
            _AnswersWrong(real(record, timeout, **options))
            if record.did == bad.did
            else real(record, timeout, **options)
        ),
    )
    market = world.market
    for _ in range(3):
        settled_task(world, world.requester, "bad", example_spec("extraction"))
    records = market.track_records()
    assert records.record(bad.did, "extraction").passed == 0
    assert records.failing(bad.did, "extraction") and market.eligible(bad.did, ["extraction"])
    lead = world.onboarding.registry.new_agent("lead", now=world.clock(), runtime="reference")
    outcomes = world.onboarding.onboard(lead, ["arithmetic", "extraction"], item_count=5)
    assert all(outcome.credential_id is not None for outcome in outcomes)
    world.agents["lead"] = lead
    world.clock.advance(1)
    spec = two_capability_spec("arithmetic", "extraction")
    directory = whole_directory(world.context)
    [leader] = [m for m in directory if m.did == lead.did]
    assert next(m for m in directory if m.did == bad.did).failing == ("extraction",)
    # a leader holding extraction is another agent able to do it: bad is not taken
    assert form_team(leader, spec.capabilities, "", directory) == (leader,)
    # one lacking it still takes bad while nobody else holds extraction: the work must be done
    solo = onboard(world, "solo", "arithmetic")
    [solo_member] = [m for m in whole_directory(world.context) if m.did == solo.did]
    others = [m for m in whole_directory(world.context) if m.did != lead.did]
    assert bad.did in {m.did for m in form_team(solo_member, spec.capabilities, "", others)}

    good = onboard(world, "good", "extraction")
    team = form_team(leader, spec.capabilities, "", whole_directory(world.context))
    assert good.did in {m.did for m in team} and bad.did not in {m.did for m in team}
    others = [m for m in whole_directory(world.context) if m.did != lead.did]
    team = form_team(solo_member, spec.capabilities, "", others)
    assert good.did in {m.did for m in team} and bad.did not in {m.did for m in team}
    app = create_app(
        world.settings,
        config=ApiConfig(rate=1000.0, burst=10_000.0),
        context=world.context,
        anchors=world.anchors,
        escrow_chain=world.escrow_chain,
    )
    task_id = settled_task(world, world.requester, "lead", spec)
    listed = TestClient(app).get(f"/tasks/{task_id}/team").json()  # what a kit leader reads
    assert {m["did"]: m["failing"] for m in listed}[bad.did] == ["extraction"]
    assert {m["did"]: m["failing"] for m in listed}[good.did] == []
    [settled] = market.ledger.store.find(kind=TASK_SETTLED, subject=task_id, limit=1)
    parts = Entry.from_bytes(settled.data).event.body["track_record"]["parts"]
    assert bad.did not in {part["producer"] for part in parts}
    assert all(part["score"] == "1/1" for part in parts)
    audited(world, task_id)


def test_the_audit_fails_a_revocation_that_was_not_due(world: World) -> None:
    """The operator revokes an agent's credential after one settled task, naming the track
    record as its evidence: the audit of that task recomputes the record and names the
    revocation's entry."""
    onboard(world, "ada", "arithmetic")
    task_id = settled_task(world, world.requester, "ada", example_spec("arithmetic"))
    [settled] = world.ledger.store.find(kind=TASK_SETTLED, subject=task_id, limit=1)
    [credential] = world.onboarding.credentials_of(world.agents["ada"].did)
    records = world.market.track_records(before=settled.index + 1)
    record = records.record(world.agents["ada"].did, "arithmetic")
    assert record.parts == 1 and record.pass_rate == 1
    evidence = revocation_evidence(
        world.agents["ada"].did, record, Fraction(4, 5), task_id, settled.index
    )
    index = world.onboarding.revoke(credential["id"], "because", evidence=evidence)
    assert world.ledger.anchorer is not None
    world.ledger.anchorer.anchor_latest()
    report = audit_task(
        world.ledger.store, task_id, anchors=world.anchors, escrow=world.escrow_chain
    )
    failure = report.first_failure
    assert failure is not None and failure.number == 6 and failure.entry == index
    assert "not below the threshold" in failure.detail


def test_an_inflated_track_record_fails_the_audit_at_task_settled(tmp_path: Path) -> None:
    """The operator re-signs `task.settled` crediting a part to another DID (and re-anchors):
    payouts, v(S) and the chain still hold; the track record does not."""
    world = build_world(tmp_path / "home")
    [settled] = world.ledger.store.find(kind=TASK_SETTLED, subject=world.task_id, limit=1)
    body = Entry.from_bytes(settled.data).event.body
    assert [p["score"] for p in body["track_record"]["parts"]] == ["1/1"] * 4  # the honest run

    def rewrite(index: int, event: Event) -> Event:
        if index != settled.index:
            return event
        changed = copy.deepcopy(dict(event.body))
        changed["track_record"]["parts"][0]["producer"] = world.requester.did
        return with_body(event, changed)

    store, fresh = rebuild_log(world, tmp_path / "inflated.db", rewrite)
    report = audit_task(store, world.task_id, anchors=fresh, escrow=world.escrow_chain)
    failure = report.first_failure
    assert failure is not None and (failure.number, failure.entry) == (6, settled.index)
    assert "track record" in failure.detail
    assert audit_task(
        world.ledger.store, world.task_id, anchors=world.anchors, escrow=world.escrow_chain
    ).ok


def test_bidders_see_the_requesters_record(
    world: World, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The requester posted two tasks, one settled after it rejected its review check and
    the evaluator (a local stand-in judge) found for it: its record (from the views, rebuilt
    alike) says so in `GET /tasks/{id}` and `accord task show`, nothing overturned; another
    requester's record is its own. (Overturned rejections: tests/market/test_check_io.py.)
    """
    onboard(world, "ada", "arithmetic")
    market = world.market
    given, answer = REGISTRY["arithmetic"].example()
    reviewed = spec_from_request(
        {
            "title": "sum, reviewed",
            "budget": "0.1eth",
            "bidding": "30s",
            "reveal": "30s",
            "rule": "first-score",  # the price is the bid: the escrow holds a dispute's fee
            "parts": [{"id": "p", "capability": "arithmetic", "input": given}],
            "checks": [
                {"id": "right", "kind": "expect", "part": "p", "path": "$", "equals": answer},
                {"id": "looks-fine", "kind": "review", "reads": ["p"]},
            ],
        },
        {},
    )
    task = market.post(world.requester, reviewed, requester_key=REQUESTER_KEY)
    bidder, salt = world.signer("ada"), secrets.token_bytes(32)
    market.commit(commit_bid(bidder, task.task_id, 1000, salt))
    world.clock.set(task.bidding_ends)
    market.reveal(reveal_bid(bidder, task.task_id, 1000, salt))
    world.clock.set(task.reveal_ends)
    market.award(task.task_id)
    world.clock.advance(1)
    run_awarded_task(world.context, task.task_id)
    world.clock.advance(1)
    evaluator = ChatServer(lambda request: _completion('{"score": 2, "reason": "not so"}'))
    monkeypatch.setenv("ACCORD_JUDGE_URL", evaluator.url)  # the judge takes one seat
    panelists = jurors(world, 2)  # and two independent agents the others
    market.review(world.requester, task.task_id, "looks-fine", "reject", "not what I asked")
    ends = market.task(task.task_id).review_ends
    assert ends is not None
    world.clock.set(ends)
    world.clock.advance(1)
    mine(world)
    try:
        judge = Judge(OpenAIChat("evaluator", base_url=evaluator.url, api_key="test-key"))
        with pytest.raises(SettlementWaits, match="is voting"):
            settle_task(market, world.onboarding, task.task_id, judge=judge)
        said = {
            did: vote(world, signer, task.task_id, "requester", "looks-fine")
            for did, signer in panelists.items()
        }
        for did, (verdict, salt) in said.items():
            reveal(world, panelists[did], task.task_id, verdict, salt, "looks-fine")
        settle_task(market, world.onboarding, task.task_id, judge=judge)
    finally:
        evaluator.close()
    market.post(world.requester, example_spec("arithmetic"), requester_key=REQUESTER_KEY)
    other = world.signer("ada")
    market.post(other, example_spec("extraction"), requester_key=REQUESTER_KEY)

    expected = {
        "requester": world.requester.did,
        "tasks_posted": 2,
        "tasks_settled": 1,
        "reviews_rejected": 1,
        "rejections_overturned": 0,
    }
    assert market.requester_record(world.requester.did).to_json() == expected
    assert market.requester_record(other.did).to_json()["tasks_posted"] == 1
    assert market.requester_record(other.did).to_json()["reviews_rejected"] == 0
    market.ledger.store.reindex()
    assert market.requester_record(world.requester.did).to_json() == expected

    app = create_app(
        world.settings,
        config=ApiConfig(rate=1000.0, burst=10_000.0),
        context=world.context,
        anchors=world.anchors,
        escrow_chain=world.escrow_chain,
    )
    shown = TestClient(app).get(f"/tasks/{task.task_id}").json()
    assert shown["requester_record"] == expected
    if env:
        return  # the CLI reads the same views; its own engine is not disposed (SQLite only)
    monkeypatch.setenv("ACCORD_HOME", str(world.settings.home))
    runner = CliRunner()
    as_json = runner.invoke(cli_app, ["task", "show", task.task_id, "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["requester_record"] == expected
    text = runner.invoke(cli_app, ["task", "show", task.task_id])
    assert "2 posted, 1 settled, 1 review rejected (0 overturned)" in text.stdout
