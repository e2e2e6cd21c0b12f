"""The I/O behind a task's checks (`accord.market.check_io`): `Judge` on an `OpenAIChat` (the
real openai client) against a local OpenAI-compatible server on 127.0.0.1 (no mocks), and settling a
real delivered task (the in-process world of `tests.audit.conftest`) whose checks include judge
and review checks: the model asked once per judge check, the audit holding the logged answers,
and the requester's reviews and their window."""

from __future__ import annotations

import copy
import dataclasses
import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from accord.audit.checks import AuditReport, audit_task
from accord.coordinator.service import run_awarded_task
from accord.identity.chat import OpenAIChat
from accord.identity.errors import RegistryError
from accord.ledger.chain import MemoryAnchorChain
from accord.ledger.events import Entry, Event
from accord.ledger.sealing import open_sealed, seal
from accord.ledger.store import LogStore
from accord.market.check_io import (
    JUDGE_ATTEMPTS,
    Judge,
    LogReviews,
    ServiceCheckEnvironment,
    judge_from_env,
)
from accord.market.checks import (
    DISPUTE_PROMPT_VERSION,
    CheckResult,
    Delivered,
    evaluate,
    judge_prompt,
)
from accord.market.errors import SettlementWaits, TaskError
from accord.market.panel import PANEL_COMMITTED, panel_pay
from accord.market.payouts import amount_paid, dispute_fee
from accord.market.service import rejection_terms
from accord.market.settlement import (
    SETTLEMENT_COMPUTED,
    SettleOutcome,
    logged_settlement,
    settle_task,
)
from accord.market.tasks import REVIEW_GIVEN, TaskEvent, TaskSpec
from accord.market.work import JudgeCheck, Part, PythonCheck, ReviewCheck
from tests.audit.conftest import (
    REQUESTER_KEY,
    World,
    onboard_agents,
    open_world,
    rebuild_log,
    sealed_auction,
    with_body,
)
from tests.coordinator.test_llm_policy import ChatServer, Reply, _completion
from tests.market.panelists import jurors, mine, reveal, vote
from tests.specs import JUDGE_CHECKS, invoice_spec_with
from tests.stand_in import completion

API_KEY = "test-key"  # what ChatServer requires
PART = Part("fields", "extraction", {"document": "Total: 3.00 EUR", "fields": {}})
DELIVERED = Delivered(
    (PART,), {"fields": {"total": "3.00", "currency": "EUR"}}, {"fields": "did:x"}
)
JUDGE = JudgeCheck("plausible", 1, ("fields",), "The total is plausible.", 7)


def openai_judge(
    url: str, model: str, key: str = API_KEY, attempts: int = JUDGE_ATTEMPTS, timeout: float = 60
) -> Judge:
    """A judge on the OpenAI-compatible server at `url`, tried `attempts` times at once."""
    chat = OpenAIChat(
        model, base_url=url, api_key=key, timeout=timeout, retries=attempts - 1, backoff=0
    )
    return Judge(chat)


def calls(judge: Judge) -> int:
    """The requests `judge` sent."""
    assert isinstance(judge.chat, OpenAIChat)
    return judge.chat.calls


class JudgeOnly(ServiceCheckEnvironment):
    """The settlement's environment, for judge checks alone; it keeps the sealed exchanges."""

    def __init__(self, judge: Judge) -> None:
        self.kept: dict[str, Any] = {}
        super().__init__(None, judge, lambda sealed: self.kept.update({sealed.commitment: sealed}))  # type: ignore[arg-type]

    def run_python(self, check: PythonCheck, outputs: Any) -> CheckResult:
        raise AssertionError("no python check here")

    def review(self, check: ReviewCheck, outputs: Any) -> CheckResult:
        raise AssertionError("no review check here")

    def kept_commitment(self, result: CheckResult) -> str:
        assert result.record is not None and result.record["exchange"] in self.kept
        return str(result.record["exchange"])

    def exchange(self, result: CheckResult) -> dict[str, Any]:
        """The sealed exchange a judge check's record names."""
        assert result.record is not None
        value: dict[str, Any] = self.kept[result.record["exchange"]].value
        return value


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[dict[str, Any]], Reply]], ChatServer]]:
    servers: list[ChatServer] = []

    def start(answer: Callable[[dict[str, Any]], Reply]) -> ChatServer:
        servers.append(ChatServer(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def scored(score: int, reason: str = "as asked") -> Callable[[dict[str, Any]], Reply]:
    return lambda request: _completion(json.dumps({"score": score, "reason": reason}))


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# -- the judge against a local server ---------------------------------------------------------


def test_the_judge_sends_the_prompt_at_temperature_zero_and_passes_by_score(
    serve: Callable[..., ChatServer],
) -> None:
    server = serve(scored(8, "plausible"))
    judge = openai_judge(server.url, "local-judge")
    env = JudgeOnly(judge)
    result = evaluate(JUDGE, DELIVERED, env)
    assert result.passed
    assert result.detail == "score 8/10 (passes at 7)"
    [request] = server.requests
    assert request["temperature"] == 0 and request["response_format"] == {"type": "json_object"}
    assert request["model"] == "local-judge"
    prompt = judge_prompt(JUDGE, {"fields": DELIVERED.outputs["fields"]})
    assert request["messages"] == [{"role": "user", "content": prompt}]
    # the record names the sealed exchange the audit holds the check to, not the outputs
    answer = json.dumps({"score": 8, "reason": "plausible"})
    assert env.exchange(result) == {"prompt": prompt, "answer": answer}
    assert result.record == {"model": "local-judge", "exchange": env.kept_commitment(result)}
    assert calls(judge) == 1


def test_a_low_score_fails_the_check(serve: Callable[..., ChatServer]) -> None:
    server = serve(scored(6, "the total looks off"))
    env = JudgeOnly(openai_judge(server.url, "m"))
    result = evaluate(JUDGE, DELIVERED, env)
    assert not result.passed
    assert "score 6/10" in result.detail
    assert "the total looks off" in env.exchange(result)["answer"]


def test_an_answer_without_a_score_fails_the_check(serve: Callable[..., ChatServer]) -> None:
    server = serve(lambda request: _completion("I think it is fine."))
    env = JudgeOnly(openai_judge(server.url, "m"))
    result = evaluate(JUDGE, DELIVERED, env)
    assert not result.passed
    assert env.exchange(result)["answer"] == "I think it is fine."


def test_the_checks_model_overrides_the_judges(serve: Callable[..., ChatServer]) -> None:
    server = serve(scored(9))
    check = JudgeCheck("j", 1, ("fields",), "ok", 7, "bigger-model")
    result = evaluate(check, DELIVERED, JudgeOnly(openai_judge(server.url, "m")))
    assert server.requests[0]["model"] == "bigger-model"
    assert result.record is not None and result.record["model"] == "bigger-model"


def test_a_refusal_is_an_answer_without_a_verdict(serve: Callable[..., ChatServer]) -> None:
    refusal = completion("m", "")
    refusal["choices"][0]["message"] = {"role": "assistant", "content": None, "refusal": "no"}
    server = serve(lambda request: (200, json.dumps(refusal).encode()))
    env = JudgeOnly(openai_judge(server.url, "m"))
    result = evaluate(JUDGE, DELIVERED, env)
    assert not result.passed and env.exchange(result)["answer"] == ""
    assert len(server.requests) == 1


def test_a_server_without_json_mode_is_asked_in_plain_text(
    serve: Callable[..., ChatServer],
) -> None:
    def plain_only(request: dict[str, Any]) -> Reply:
        if "response_format" in request:
            return 400, b'{"error": {"message": "response_format is not supported"}}'
        return _completion('{"score": 8}')

    server = serve(plain_only)
    assert evaluate(JUDGE, DELIVERED, JudgeOnly(openai_judge(server.url, "m"))).passed
    assert ["response_format" in r for r in server.requests] == [True, False]


@pytest.mark.parametrize("attempts", [1, JUDGE_ATTEMPTS, 5])
def test_a_judge_that_is_down_makes_the_settlement_wait_after_every_attempt(
    attempts: int,
) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    judge = openai_judge(url, "local-judge", attempts=attempts, timeout=2)
    with pytest.raises(SettlementWaits) as caught:
        evaluate(JUDGE, DELIVERED, JudgeOnly(judge))
    assert calls(judge) == attempts
    assert "could not be asked" in str(caught.value)
    assert "cannot reach the model" in str(caught.value)


def test_a_500_then_a_good_answer_passes(serve: Callable[..., ChatServer]) -> None:
    replies = iter([(500, b'{"error": {"message": "overloaded"}}'), _completion('{"score": 9}')])
    server = serve(lambda request: next(replies))
    judge = openai_judge(server.url, "local-judge")
    result = evaluate(JUDGE, DELIVERED, JudgeOnly(judge))
    assert result.passed
    assert calls(judge) == len(server.requests) == 2


def test_a_server_that_always_fails_makes_the_settlement_wait(
    serve: Callable[..., ChatServer],
) -> None:
    server = serve(lambda request: (503, b'{"error": {"message": "busy"}}'))
    judge = openai_judge(server.url, "local-judge", attempts=2)
    with pytest.raises(SettlementWaits, match="HTTP 503"):
        judge.ask("prompt")
    assert calls(judge) == len(server.requests) == 2


def test_without_a_judge_a_judge_check_waits() -> None:
    reviews: Any = None  # not consulted by a judge check
    with pytest.raises(SettlementWaits, match="ACCORD_JUDGE_URL"):
        evaluate(JUDGE, DELIVERED, ServiceCheckEnvironment(reviews, None))


def test_judge_from_env() -> None:
    assert judge_from_env({}) is None
    assert judge_from_env({"ACCORD_JUDGE_MODEL": "m"}) is None
    judge = judge_from_env(
        {"ACCORD_JUDGE_URL": "http://127.0.0.1:9/v1", "ACCORD_JUDGE_MODEL": "qwen"}
    )
    assert judge is not None
    assert isinstance(judge.chat, OpenAIChat)
    assert (judge.chat.base_url, judge.chat.model, judge.chat.retries) == (
        "http://127.0.0.1:9/v1",
        "qwen",
        JUDGE_ATTEMPTS - 1,
    )
    default = judge_from_env({"ACCORD_JUDGE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "k"})
    assert default is not None and isinstance(default.chat, OpenAIChat)
    assert default.chat.model == "judge" and default.chat.api_key == "k"
    with pytest.raises(RegistryError, match="ACCORD_JUDGE_URL"):
        judge_from_env({"ACCORD_JUDGE_URL": "127.0.0.1:8080/v1"})


# -- settling a real delivered task -----------------------------------------------------------

REVIEW = {"id": "looks-right", "weight": 1, "kind": "review", "part": "invoice-fields"}


def delivered_world(home: Path, spec: TaskSpec) -> World:
    """`build_world(until="delivered")` of tests.audit.conftest, posting `spec`.

    `run_awarded_task` binds a payout address for the members who reported a part only; a
    winner that only planned and assembled is owed its plan and assembly shares but has none,
    and the settlement refuses to pay it. Whether the reference team's winner reports a part
    depends on the exam scores, drawn afresh, so the winner's address is bound here.
    """
    world = open_world(home)
    onboard_agents(world)
    task = world.market.post(world.requester, spec, requester_key=REQUESTER_KEY)
    world.task_id = task.task_id
    sealed_auction(world)
    run_awarded_task(world.context, world.task_id)
    winner = world.market.task(world.task_id).winner
    assert winner is not None
    registry = world.onboarding.registry
    world.onboarding.bind_payout(registry.get(winner), world.escrow.chain_id())
    world.clock.advance(1)
    return world


def finish(world: World) -> None:
    """What build_world does after settling: the final anchor."""
    world.clock.advance(1)
    assert world.ledger.anchorer is not None
    world.ledger.anchorer.anchor_latest()


def audit(
    world: World, store: LogStore | None = None, anchors: MemoryAnchorChain | None = None
) -> AuditReport:
    return audit_task(
        store or world.ledger.store,
        world.task_id,
        anchors=anchors or world.anchors,
        escrow=world.escrow_chain,
        outputs=world.market.sealed_bytes,
    )


def opened(world: World, commitment: str) -> Any:
    """What the service keeps sealed under `commitment`."""
    data = world.market.sealed_bytes(commitment)
    assert data is not None, f"nothing sealed under {commitment}"
    return open_sealed(data, commitment).value


def reseal(world: World, record: dict[str, Any], **changes: str) -> None:
    """The operator's forgery of an evaluator's exchange: opened, changed, sealed anew and
    kept where the auditor reads the sealed outputs; `record` names the new one."""
    forged = seal({**opened(world, record["exchange"]), **changes})
    world.market.keep_sealed(forged)
    record["exchange"] = forged.commitment


def grade(request: dict[str, Any]) -> Reply:
    """The stand-in judge: the fields are plausible (9); the dates only so-so (6 < 8)."""
    prompt = request["messages"][0]["content"]
    if "The due date falls after the issue date." in prompt:
        return _completion('{"score": 6, "reason": "the dates are close"}')
    return _completion('{"score": 9, "reason": "a plausible invoice"}')


@dataclass
class Judged:
    world: World
    server: ChatServer
    judge: Judge
    waited: SettlementWaits
    requests_while_waiting: int
    outcome: SettleOutcome


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Judged]:
    """The invoice task with two judge checks and a review check, delivered; settled once while
    the review window is open (it waits), then again after the window ended."""
    server = ChatServer(grade)
    try:
        spec = invoice_spec_with(*JUDGE_CHECKS, REVIEW)
        world = delivered_world(tmp_path_factory.mktemp("judged") / "home", spec)
        judge = openai_judge(server.url, "local-judge")
        with pytest.raises(SettlementWaits) as waited:
            settle_task(world.market, world.onboarding, world.task_id, judge=judge)
        requests_while_waiting = len(server.requests)
        task = world.market.task(world.task_id)
        assert task.review_ends is not None
        world.clock.set(task.review_ends + timedelta(seconds=1))
        outcome = settle_task(world.market, world.onboarding, world.task_id, judge=judge)
        finish(world)
        yield Judged(world, server, judge, waited.value, requests_while_waiting, outcome)
    finally:
        server.close()


def logged_checks(world: World) -> dict[str, dict[str, Any]]:
    body = logged_settlement(world.market, world.task_id)
    assert body is not None
    return {item["id"]: item for item in body["checks"]}


def test_a_settlement_waiting_for_a_review_asks_no_model(judged: Judged) -> None:
    assert "looks-right" in str(judged.waited)
    assert judged.requests_while_waiting == 0


def test_the_model_is_called_exactly_once_per_judge_check(judged: Judged) -> None:
    assert calls(judged.judge) == len(judged.server.requests) == len(JUDGE_CHECKS)
    assert sorted(r["model"] for r in judged.server.requests) == [
        "local-judge",
        "local-judge-large",
    ]
    assert all(r["temperature"] == 0 for r in judged.server.requests)
    assert not judged.outcome.already


def test_the_judges_prompts_and_answers_are_logged_with_the_settlement(judged: Judged) -> None:
    checks = logged_checks(judged.world)
    sent = {r["model"]: r["messages"][0]["content"] for r in judged.server.requests}
    plausible, dates = checks["fields-plausible"], checks["dates-consistent"]
    assert plausible["passed"] is True and dates["passed"] is False
    assert set(plausible["record"]) == {"model", "exchange"}
    assert plausible["record"]["model"] == "local-judge"
    assert opened(judged.world, plausible["record"]["exchange"]) == {
        "prompt": sent["local-judge"],
        "answer": '{"score": 9, "reason": "a plausible invoice"}',
    }
    assert opened(judged.world, dates["record"]["exchange"]) == {
        "prompt": sent["local-judge-large"],
        "answer": '{"score": 6, "reason": "the dates are close"}',
    }
    # the prompts hold the outputs: the log holds neither them nor the judges' reasons
    logged = json.dumps(logged_settlement(judged.world.market, judged.world.task_id))
    assert "a plausible invoice" not in logged and "Criterion" not in logged
    # every other check is as the honest run has it
    assert all(checks[c]["passed"] for c in checks if c != "dates-consistent")


def test_an_unreviewed_check_is_accepted_when_the_window_has_ended(judged: Judged) -> None:
    review = logged_checks(judged.world)["looks-right"]
    assert review["passed"] is True
    assert review["detail"] == "no review by the end of the window: accepted"
    assert review["record"]["entry"] is None


def test_a_settled_task_is_not_judged_again(judged: Judged) -> None:
    before = len(judged.server.requests)
    again = settle_task(
        judged.world.market, judged.world.onboarding, judged.world.task_id, judge=judged.judge
    )
    assert again.already and again.payouts == judged.outcome.payouts
    assert len(judged.server.requests) == before


def test_the_audit_of_a_judged_settlement_passes_without_asking_the_model(
    judged: Judged,
) -> None:
    before = len(judged.server.requests)
    report = audit(judged.world)
    assert report.ok, [s.to_json() for s in report.steps]
    assert len(judged.server.requests) == before


def rewrite_settlement(
    world: World, path: Path, change: Callable[[dict[str, Any]], None]
) -> tuple[AuditReport, int]:
    found = world.ledger.store.find(kind=SETTLEMENT_COMPUTED, subject=world.task_id, limit=1)
    index = found[0].index

    def rewrite(i: int, event: Event) -> Event:
        if i != index:
            return event
        body = copy.deepcopy(dict(event.body))
        change(body)
        return with_body(event, body)

    store, fresh = rebuild_log(world, path, rewrite)
    return audit(world, store, fresh), index


def first_failure(report: AuditReport) -> tuple[int, int | None]:
    found = report.first_failure
    assert found is not None and not report.ok
    return found.number, found.entry


def judge_record(body: dict[str, Any], check_id: str) -> dict[str, Any]:
    record: dict[str, Any] = next(c for c in body["checks"] if c["id"] == check_id)["record"]
    return record


def test_a_changed_judge_answer_fails_the_audit_at_step_6(judged: Judged, tmp_path: Path) -> None:
    """The operator rewrites the model's answer to the fields check (9 → 2) and re-signs: the
    check recomputes to fail, the settlement logged a pass."""

    def change(body: dict[str, Any]) -> None:
        reseal(judged.world, judge_record(body, "fields-plausible"), answer='{"score": 2}')

    report, index = rewrite_settlement(judged.world, tmp_path / "answer.db", change)
    assert first_failure(report) == (6, index)
    assert "check fields-plausible recomputes to fail" in report.steps[5].detail


def test_a_judge_answer_raised_to_a_pass_fails_the_audit_at_step_6(
    judged: Judged, tmp_path: Path
) -> None:
    """The other way round: the failed dates check made to pass (6 → 9), result unchanged."""

    def change(body: dict[str, Any]) -> None:
        reseal(judged.world, judge_record(body, "dates-consistent"), answer='{"score": 9}')

    report, index = rewrite_settlement(judged.world, tmp_path / "raised.db", change)
    assert first_failure(report) == (6, index)
    assert "dates-consistent recomputes to pass" in report.steps[5].detail


def test_a_changed_judge_prompt_fails_the_audit_at_step_6(judged: Judged, tmp_path: Path) -> None:
    def change(body: dict[str, Any]) -> None:
        record = judge_record(body, "fields-plausible")
        prompt = opened(judged.world, record["exchange"])["prompt"]
        reseal(judged.world, record, prompt=prompt.replace("plausible", "excellent"))

    report, index = rewrite_settlement(judged.world, tmp_path / "prompt.db", change)
    assert first_failure(report) == (6, index)
    assert "the logged prompt is not the one the check builds" in report.steps[5].detail


def test_a_dropped_judge_record_fails_the_audit_at_step_6(judged: Judged, tmp_path: Path) -> None:
    def change(body: dict[str, Any]) -> None:
        del next(c for c in body["checks"] if c["id"] == "fields-plausible")["record"]

    report, index = rewrite_settlement(judged.world, tmp_path / "dropped.db", change)
    assert first_failure(report) == (6, index)
    assert "no logged record" in report.steps[5].detail


# -- reviews ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reviewed_world(tmp_path_factory: pytest.TempPathFactory) -> World:
    """The invoice task with a review check, delivered; its review window (1 h) is open."""
    spec = invoice_spec_with(REVIEW)
    return delivered_world(tmp_path_factory.mktemp("reviewed") / "home", spec)


def disputes(score: int) -> Callable[[dict[str, Any]], Reply]:
    """The stand-in evaluator: `score` for a dispute, 9 for anything else."""

    def answer(request: dict[str, Any]) -> Reply:
        prompt = request["messages"][0]["content"]
        if prompt.startswith(f"[{DISPUTE_PROMPT_VERSION}]"):
            return _completion(json.dumps({"score": score, "reason": "as the criterion asks"}))
        return _completion('{"score": 9}')

    return answer


def test_a_rejection_of_correct_work_is_disputed_and_the_requester_loses(
    reviewed_world: World, serve: Callable[..., ChatServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The requester's review, from the window opening to the settlement (one story: each
    step depends on the one before). The work is right, the requester rejects it anyway: a
    panel of two independent agents and the judge model finds for the team, the team is paid
    in full, and the requester's fee pays the panel (the judge's seat to the operator)."""
    world = reviewed_world
    market, task_id = world.market, world.task_id

    # the window is open and nobody reviewed: the settlement waits
    with pytest.raises(SettlementWaits, match="looks-right"):
        settle_task(market, world.onboarding, task_id)
    assert logged_settlement(market, task_id) is None

    # only the requester reviews, only review checks, accept or reject; a rejection says why
    with pytest.raises(TaskError, match="only the requester"):
        market.review(world.signer("ada"), task_id, "looks-right", "reject", "no")
    with pytest.raises(TaskError, match="not a review check"):
        market.review(world.requester, task_id, "sum-right", "reject", "no")
    with pytest.raises(TaskError, match="accept or reject"):
        market.review(world.requester, task_id, "looks-right", "maybe")
    for silent in (None, "", "   "):
        with pytest.raises(TaskError, match="needs a reason"):
            market.review(world.requester, task_id, "looks-right", "reject", silent)
    assert not world.ledger.store.find(kind=REVIEW_GIVEN, subject=task_id, limit=10)

    # a service with no panel to draw refuses a rejection: nothing could decide the dispute
    reason = "the total is not the invoice's"
    monkeypatch.delenv("ACCORD_JUDGE_URL", raising=False)
    with pytest.raises(TaskError, match="no evaluator"):
        market.review(world.requester, task_id, "looks-right", "reject", reason)
    monkeypatch.setenv("ACCORD_JUDGE_URL", "not a url")  # the operator's mistake, said as such
    with pytest.raises(TaskError, match="evaluator is misconfigured"):
        market.review(world.requester, task_id, "looks-right", "reject", reason)
    panelists = jurors(world, 2)  # two agents alone cannot fill a panel of three
    monkeypatch.delenv("ACCORD_JUDGE_URL")
    with pytest.raises(TaskError, match="no evaluator"):
        market.review(world.requester, task_id, "looks-right", "reject", reason)
    assert not world.ledger.store.find(kind=REVIEW_GIVEN, subject=task_id, limit=10)

    server = serve(disputes(9))  # with the judge's seat, they do
    monkeypatch.setenv("ACCORD_JUDGE_URL", server.url)
    index = market.review(world.requester, task_id, "looks-right", "reject", reason)
    with pytest.raises(TaskError, match="already reviewed"):
        market.review(world.requester, task_id, "looks-right", "accept")

    # the panel is drawn with the hash of the block after the rejection's; the judge's seat
    # commits at once, the agents commit, then everyone reveals
    world.clock.advance(3600)
    mine(world)
    judge = openai_judge(server.url, "evaluator")
    with pytest.raises(SettlementWaits, match="is voting"):
        settle_task(market, world.onboarding, task_id, judge=judge)
    assert logged_settlement(market, task_id) is None
    said = {did: vote(world, signer, task_id, "team") for did, signer in panelists.items()}
    for did, (verdict, salt) in said.items():
        reveal(world, panelists[did], task_id, verdict, salt)
    outcome = settle_task(market, world.onboarding, task_id, judge=judge)
    finish(world)
    review = logged_checks(world)["looks-right"]
    assert review["passed"] is True
    assert "the panel found for the team (3 of 3 votes" in review["detail"]
    task = market.task(task_id)
    assert task.price is not None
    fee = dispute_fee(task.price)
    record = review["record"]
    assert (record["entry"], record["verdict"], record["reason"]) == (index, "reject", reason)
    assert record["fee"] == str(fee) and record["dispute"]["winner"] == "team"
    assert record["dispute"]["panel"]["seats"][0] == "judge"
    [request] = [r for r in server.requests if DISPUTE_PROMPT_VERSION in str(r)]
    assert reason in request["messages"][0]["content"]
    body = logged_settlement(market, task_id)
    assert body is not None
    assert body["paid_share"] == "1/1" and outcome.amount == task.price
    shares = panel_pay(
        fee, record["dispute"]["panel"]["seats"], record["dispute"]["panel"]["seats"]
    )
    assert int(body["evaluator_fee"]) == shares["judge"]
    assert body["evaluator"] == market.escrow.operator_address()
    assert outcome.refund == task.spec.budget - task.price - fee
    assert world.escrow_chain.credit(body["evaluator"]) == shares["judge"]
    record_of = market.requester_record(world.requester.did).to_json()
    assert (record_of["reviews_rejected"], record_of["rejections_overturned"]) == (1, 1)
    report = audit(world)
    assert report.ok, [s.to_json() for s in report.steps]

    # the operator rewrites the judge's answer and re-signs: its seat's vote no longer holds
    [committed] = [
        stored
        for stored in world.ledger.store.find(kind=PANEL_COMMITTED, subject=task_id, limit=10)
        if Entry.from_bytes(stored.data).event.body.get("seat") == "judge"
    ]
    exchange = Entry.from_bytes(committed.data).event.body["commitment"]
    forged = seal({**opened(world, exchange), "answer": '{"score": 1, "reason": "no"}'})
    world.market.keep_sealed(forged)

    def rewrite(i: int, event: Event) -> Event:
        if i != committed.index:
            return event
        return with_body(event, {**event.body, "commitment": forged.commitment})

    store, anchors = rebuild_log(world, world.settings.home / "tampered.db", rewrite)
    tampered = audit(world, store, anchors)
    assert first_failure(tampered)[0] == 6
    assert "the judge's answer votes for the requester" in tampered.steps[5].detail


def test_a_rejection_of_wrong_work_is_disputed_and_the_team_loses(
    tmp_path: Path, serve: Callable[..., ChatServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The panel finds for the requester: the check fails, and the team's pay bears the
    coherent seats' shares of the fee; the audit replays it all."""
    world = delivered_world(tmp_path / "home", invoice_spec_with(REVIEW))
    market, task_id = world.market, world.task_id
    server = serve(disputes(2))
    monkeypatch.setenv("ACCORD_JUDGE_URL", server.url)  # the judge takes one seat
    panelists = jurors(world, 2)
    market.review(world.requester, task_id, "looks-right", "reject", "the fields are wrong")
    world.clock.advance(3600)
    mine(world)
    judge = openai_judge(server.url, "evaluator")
    with pytest.raises(SettlementWaits, match="is voting"):
        settle_task(market, world.onboarding, task_id, judge=judge)
    first, second = panelists
    said = {first: vote(world, panelists[first], task_id, "requester")}
    said[second] = vote(world, panelists[second], task_id, "team")
    for did, (verdict, salt) in said.items():
        reveal(world, panelists[did], task_id, verdict, salt)
    outcome = settle_task(market, world.onboarding, task_id, judge=judge)
    finish(world)
    review = logged_checks(world)["looks-right"]
    assert review["passed"] is False and review["record"]["dispute"]["winner"] == "requester"
    panel = review["record"]["dispute"]["panel"]
    assert sorted(panel["coherent"]) == sorted(["judge", first])
    task = market.task(task_id)
    assert task.price is not None
    fee = dispute_fee(task.price)
    body = logged_settlement(market, task_id)
    assert body is not None
    earned = amount_paid(task.price, Fraction(body["paid_share"]))
    assert Fraction(body["paid_share"]) < 1
    owed = sum(panel_pay(fee, panel["seats"], panel["coherent"]).values())
    assert outcome.amount == earned - owed == sum(outcome.payouts.values())
    assert outcome.refund == task.spec.budget - earned
    record_of = market.requester_record(world.requester.did).to_json()
    assert (record_of["reviews_rejected"], record_of["rejections_overturned"]) == (1, 0)
    report = audit(world)
    assert report.ok, [s.to_json() for s in report.steps]


def test_a_dispute_needs_its_fee_held_in_the_escrow_beyond_the_price(
    reviewed_world: World,
) -> None:
    task = reviewed_world.market.task(reviewed_world.task_id)
    assert task.price is not None
    fee = dispute_fee(task.price)
    assert rejection_terms(task, " wrong ", []) == {"reason": "wrong", "fee": str(fee)}
    full = dataclasses.replace(task, price=task.spec.budget)
    with pytest.raises(TaskError, match="a dispute costs"):
        rejection_terms(full, "wrong", [])
    spare = task.spec.budget - task.price
    many = [{"verdict": "reject"}] * (spare // fee)
    with pytest.raises(TaskError, match="dispute"):
        rejection_terms(task, "wrong", many)


def test_a_review_after_the_window_is_refused(
    tmp_path_factory: pytest.TempPathFactory, reviewed_world: World
) -> None:
    """Checked on LogReviews (the market refuses it before it is logged)."""
    task = reviewed_world.market.task(reviewed_world.task_id)
    assert task.review_ends is not None
    ends = task.review_ends
    requester = task.requester
    check = ReviewCheck("looks-right", 1, ("invoice-fields",))

    def given(index: int, actor: str, seconds: float, verdict: str) -> tuple[int, TaskEvent]:
        body = {"task_id": task.task_id, "check": "looks-right", "verdict": verdict}
        return index, TaskEvent(index, REVIEW_GIVEN, actor, ends + timedelta(seconds=seconds), body)

    late = [given(7, requester, 1, "reject")]
    assert LogReviews(task, late, ends + timedelta(seconds=2)).review(check).passed
    with pytest.raises(SettlementWaits):
        LogReviews(task, late, ends - timedelta(seconds=1)).review(check)

    stranger = [given(7, "did:key:zStranger", -5, "reject")]
    assert LogReviews(task, stranger, ends).review(check).passed

    first_counts = [given(7, requester, -9, "accept"), given(8, requester, -5, "reject")]
    result = LogReviews(task, first_counts, ends).review(check)
    assert result.passed and result.record == {"entry": 7, "verdict": "accept"}

    on_the_dot = [given(9, requester, 0, "reject")]
    assert not LogReviews(task, on_the_dot, ends + timedelta(hours=1)).review(check).passed
