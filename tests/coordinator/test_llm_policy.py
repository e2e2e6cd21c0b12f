"""The LLM policy: strict prompt templates (snapshots), and the real openai client against a
local OpenAI-compatible server on 127.0.0.1 that plays a scripted leader (no mocks)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from accord.coordinator.conversation import (
    AssignAsync,
    AssignSync,
    Conclude,
    Contribution,
    Conversation,
    Discuss,
    Report,
    Result,
    open_conversation,
    step,
)
from accord.coordinator.errors import PolicyError, PolicyOutputError
from accord.coordinator.llm_policy import (
    DEFAULT_MAX_ATTEMPTS,
    TEMPLATES,
    LLMPolicy,
    PolicyCallError,
    PromptError,
    leader_policy,
    load_template,
    render,
    render_prompt,
    retry_prompt,
    system_prompt,
    turn_prompt,
)
from accord.coordinator.policy import Member, TeamView
from accord.coordinator.work import SubTask
from accord.identity.chat import OpenAIChat
from accord.ledger.sealing import seal
from tests.stand_in import API_KEY, StandIn, completion, json_reply
from tests.stand_in import Reply as StandInReply

SNAPSHOTS = Path(__file__).with_name("snapshots")
LEAD, BOB, CY = "did:key:zLead", "did:key:zBob", "did:key:zCy"
TEAM = (
    Member(LEAD, "lead", ("planning",)),
    Member(BOB, "bob", ("arithmetic",), "3/4"),
    Member(CY, "cy", ("sorting", "arithmetic")),
)
SUBTASKS = (
    SubTask("s1", "arithmetic", "Compute the expression.", {"expression": "2 + 3"}),
    SubTask("s2", "sorting", "Sort the values.", {"values": [3, 1, 2]}),
    SubTask("s3", "arithmetic", "Compute the expression.", {"expression": "7 * 6"}),
)
TITLE, DESCRIPTION = "Sums and a sort", "Compute two sums and sort a list."


def _open() -> Conversation:
    return open_conversation("conv-1", "task-1", LEAD, tuple(m.did for m in TEAM))


def _view(conversation: Conversation, **extra: Any) -> TeamView:
    unassigned = tuple(t for t in SUBTASKS if t.sub_id not in conversation.assigned)
    return TeamView(conversation, TITLE, DESCRIPTION, TEAM, unassigned, **extra)


OPENED: dict[str, Any] = {}
"""The answers `_report` gave, by the commitment the contributions name."""


def _report(conversation: Conversation, agent: str, sub_id: str, answer: Any) -> Conversation:
    """What the runner would say for a member: its result, and who speaks next."""
    capability = conversation.assigned[sub_id].capability
    sealed = seal(answer)
    OPENED[sealed.commitment] = answer
    contribution = Contribution(agent, sub_id, capability, sub_id, sealed.commitment)
    result = Result(sub_id, True, (contribution,))
    remaining = [who for k, who in conversation.triggers.items() if k != sub_id]
    if remaining:
        return step(conversation, Report(agent, result, "pause_trigger", remaining[0]))
    state = "conclusion" if len(conversation.assigned) == len(SUBTASKS) else "async_task_assign"
    return step(conversation, Report(agent, result, state, LEAD))


def _mid_conversation() -> Conversation:
    """s1 done by bob (sync), s2 assigned async to cy and pending: a view with everything."""
    c = step(_open(), Discuss(LEAD, "plan", "sync_task_assign", LEAD))
    c = step(c, AssignSync(LEAD, BOB, SUBTASKS[0], "sync_task_assign", BOB))
    c = _report(c, BOB, "s1", 5)
    c = step(c, AssignAsync(LEAD, ((CY, SUBTASKS[1]),), "discussion", LEAD))
    return c


# -- templates -----------------------------------------------------------------------------------


def _check_snapshot(name: str, text: str) -> None:
    expected = (SNAPSHOTS / f"{name}.txt").read_text(encoding="utf-8")
    assert text == expected, f"{name} differs from tests/coordinator/snapshots/{name}.txt"


def test_the_system_prompt_matches_its_snapshot() -> None:
    _check_snapshot("leader_system", system_prompt(_view(_open())))


def test_the_turn_prompt_matches_its_snapshot() -> None:
    view = _view(_mid_conversation(), failed_by={"s0": (CY,)})
    text = turn_prompt(view)
    _check_snapshot("leader_turn", text)
    # Payloads and answers are named by id, never restated.
    assert "2 + 3" not in text and "[3, 1, 2]" not in text and "7 * 6" not in text


def test_the_retry_prompt_matches_its_snapshot() -> None:
    error = PolicyOutputError("the reply is not JSON (Expecting value): nope")
    _check_snapshot("leader_retry", retry_prompt(error, _view(_open())))


def test_every_template_renders_strictly() -> None:
    for name in TEMPLATES:
        assert load_template(name).endswith("\n")
    with pytest.raises(PromptError, match="needs a value for kind"):
        render_prompt("leader_retry", {"error": "x"})
    with pytest.raises(PromptError, match="no placeholder for extra"):
        render_prompt("leader_retry", {"error": "x", "kind": "discuss", "extra": "y"})
    with pytest.raises(PromptError, match="no prompt template"):
        render_prompt("nope", {})


@pytest.mark.parametrize(
    ("template", "values", "error"),
    [
        ("hello $name", {}, "needs a value for name"),
        ("hello ${name} and $other", {"name": "a"}, "needs a value for other"),
        ("hello", {"name": "a"}, "no placeholder for name"),
        ("costs 5$", {}, "invalid placeholder"),
    ],
)
def test_render_refuses_a_missing_or_extra_placeholder(
    template: str, values: dict[str, str], error: str
) -> None:
    with pytest.raises(PromptError, match=error) as raised:
        render(template, values)
    assert isinstance(raised.value, PolicyError) and not raised.value.retriable


def test_render_substitutes_exactly() -> None:
    assert render("$a and ${b}, $$5", {"a": "x", "b": "$y"}) == "x and $y, $5"


# -- a local OpenAI-compatible server ------------------------------------------------------------

Reply = tuple[int, bytes]
Answer = Callable[[dict[str, Any]], Reply]


class ChatServer:
    """`POST /v1/chat/completions` on 127.0.0.1 (a `StandIn`), answered by `answer(request)`."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[dict[str, Any]] = []
        self.stand_in = StandIn(self._handle)
        self.url = f"{self.stand_in.url}/v1"

    def _handle(self, path: str, headers: dict[str, str], body: bytes) -> StandInReply:
        if path != "/v1/chat/completions":
            return json_reply(404, {"error": {"message": "no route"}})
        if headers.get("authorization") != f"Bearer {API_KEY}":
            return json_reply(401, {"error": {"message": "bad key"}})
        request = json.loads(body)
        self.requests.append(request)
        status, data = self.answer(request)
        return status, {"Content-Type": "application/json"}, data

    def close(self) -> None:
        self.stand_in.close()

    def policy(self, max_attempts: int = DEFAULT_MAX_ATTEMPTS, **options: Any) -> LLMPolicy:
        """The LLM policy on this server; `options` go to its OpenAIChat."""
        chat = OpenAIChat("local-leader", base_url=self.url, api_key=API_KEY, **options)
        return LLMPolicy(chat, max_attempts=max_attempts)


@pytest.fixture
def serve() -> Iterator[Callable[[Answer], ChatServer]]:
    servers: list[ChatServer] = []

    def start(answer: Answer) -> ChatServer:
        servers.append(ChatServer(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def _completion(content: str) -> Reply:
    return 200, json.dumps(completion("local-leader", content)).encode()


def _turn_state(request: dict[str, Any]) -> str:
    """The state the leader is in, as a model reads it from the first turn prompt."""
    assert request["response_format"] == {"type": "json_object"}
    turn = next(m["content"] for m in request["messages"] if m["role"] == "user")
    return str(turn.split("State: ", 1)[1].split(".", 1)[0])


def _scripted_leader(request: dict[str, Any]) -> Reply:
    """Discuss, assign s1 sync to bob, s2 and s3 async to cy and bob, then conclude."""
    head = {"speaker": LEAD}
    answers: dict[str, dict[str, Any]] = {
        "discussion": {
            **head,
            "kind": "discuss",
            "text": "s1 first, then s2 and s3 together",
            "next_state": "sync_task_assign",
            "next_speaker": LEAD,
        },
        "sync_task_assign": {
            **head,
            "kind": "assign_sync",
            "assignee": BOB,
            "task": "s1",
            "next_state": "sync_task_assign",
            "next_speaker": BOB,
        },
        "async_task_assign": {
            **head,
            "kind": "assign_async",
            "assignments": [{"assignee": CY, "task": "s2"}, {"assignee": BOB, "task": "s3"}],
            "next_state": "pause_trigger",
            "next_speaker": CY,
        },
        "conclusion": {
            **head,
            "kind": "conclude",
            "deliverable": {"summary": "2 + 3 = 5, 7 * 6 = 42, sorted"},
            "next_state": "closed",
            "next_speaker": None,
        },
    }
    return _completion(json.dumps(answers[_turn_state(request)]))


def test_a_whole_conversation_driven_by_the_llm_policy_reaches_closed(
    serve: Callable[[Answer], ChatServer],
) -> None:
    server = serve(_scripted_leader)
    policy = server.policy()
    answers = {"s1": 5, "s2": [1, 2, 3], "s3": 42}
    c = _open()
    while c.state != "closed":
        if c.speaker == LEAD:
            message = policy.decide(_view(c))
            assert message.speaker == LEAD
            c = step(c, message)
        else:  # the runner's side: the member whose turn it is reports its result
            assert c.speaker is not None
            pending = [k for k, who in c.triggers.items() if who == c.speaker]
            sub_id = c.blocked_on[0] if c.blocked_on else pending[0]
            c = _report(c, c.speaker, sub_id, answers[sub_id])
    assert len(server.requests) == 4  # one per leader turn: no retries
    assert c.deliverable is not None
    assert c.deliverable.summary == "2 + 3 = 5, 7 * 6 = 42, sorted"
    tagged = {
        (x.sub_id, x.agent, json.dumps(OPENED[x.output_sha256]))
        for x in c.deliverable.contributions
    }
    assert tagged == {("s1", BOB, "5"), ("s2", CY, "[1, 2, 3]"), ("s3", BOB, "42")}
    # The ids were expanded to the real sub-tasks: the model never restated a payload.
    assert c.assigned == {t.sub_id: t for t in SUBTASKS}
    first = server.requests[0]
    assert first["model"] == "local-leader"
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert first["messages"][0]["content"] == system_prompt(_view(_open()))


_DISCUSS = {
    "kind": "discuss",
    "speaker": LEAD,
    "text": "plan",
    "next_state": "sync_task_assign",
    "next_speaker": LEAD,
}


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("I think we should sort first.", "the reply is not JSON"),
        ("", "the reply has no content"),
        ("[1, 2]", "not a JSON object"),
        ('{"answer": 5}', "not a message"),
        (json.dumps({**_DISCUSS, "kind": "gossip"}), "unknown message kind"),
        (json.dumps({**_DISCUSS, "next_state": "closed"}), "move is refused: Discuss cannot lead"),
        (json.dumps({**_DISCUSS, "next_state": "pause_trigger"}), "needs a pending trigger"),
        (json.dumps({**_DISCUSS, "speaker": BOB}), "only as the leader"),
        (json.dumps({**_DISCUSS, "speaker": "did:key:zEve"}), "only as the leader"),
        (
            json.dumps({**_DISCUSS, "kind": "assign_sync", "assignee": BOB, "task": "s1"}),
            "refused: a sync assignment is not allowed in discussion",
        ),
    ],
)
def test_a_malformed_answer_is_retried_then_a_policy_output_error(
    serve: Callable[[Answer], ChatServer], content: str, reason: str
) -> None:
    server = serve(lambda request: _completion(content))
    with pytest.raises(PolicyOutputError, match=reason) as raised:
        server.policy(max_attempts=3).decide(_view(_open()))
    assert raised.value.retriable
    assert len(server.requests) == 3
    # Each retry carries the refused answer and the reason it was refused.
    last = server.requests[-1]["messages"]
    assert [m["role"] for m in last] == ["system", "user"] + ["assistant", "user"] * 2
    assert last[2]["content"] == content
    assert last[3]["content"].startswith("Your answer was refused: ")


def test_an_assignment_of_an_unknown_sub_task_is_refused(
    serve: Callable[[Answer], ChatServer],
) -> None:
    c = step(_open(), Discuss(LEAD, "plan", "sync_task_assign", LEAD))
    answer = {**_DISCUSS, "kind": "assign_sync", "assignee": BOB, "task": "s9"}
    answer["next_state"], answer["next_speaker"] = "sync_task_assign", BOB
    server = serve(lambda request: _completion(json.dumps(answer)))
    with pytest.raises(PolicyOutputError, match="'s9' is not an unassigned sub-task"):
        server.policy(max_attempts=1).decide(_view(c))
    assert len(server.requests) == 1


def test_a_server_that_fixes_its_answer_on_the_second_attempt_succeeds(
    serve: Callable[[Answer], ChatServer],
) -> None:
    def answer(request: dict[str, Any]) -> Reply:
        if len(request["messages"]) == 2:
            return _completion("Sure! Here is my plan: assign s1.")
        return _completion(json.dumps(_DISCUSS))

    server = serve(answer)
    message = server.policy().decide(_view(_open()))
    assert message == Discuss(LEAD, "plan", "sync_task_assign", LEAD)
    assert len(server.requests) == 2
    retry = server.requests[1]["messages"]
    assert retry[:2] == server.requests[0]["messages"]
    assert retry[2] == {"role": "assistant", "content": "Sure! Here is my plan: assign s1."}
    assert retry[3]["role"] == "user"
    assert retry[3]["content"].startswith("Your answer was refused: the reply is not JSON")
    assert '"discuss" message' in retry[3]["content"]


def test_a_cut_off_reply_is_refused_and_asked_again(
    serve: Callable[[Answer], ChatServer],
) -> None:
    def answer(request: dict[str, Any]) -> Reply:
        if len(request["messages"]) == 2:
            cut = completion("local-leader", '{"kind": "disc')
            cut["choices"][0]["finish_reason"] = "length"
            return 200, json.dumps(cut).encode()
        return _completion(json.dumps(_DISCUSS))

    server = serve(answer)
    assert server.policy().decide(_view(_open())) == Discuss(LEAD, "plan", "sync_task_assign", LEAD)
    assert len(server.requests) == 2
    assert "was cut off" in server.requests[1]["messages"][3]["content"]


def test_the_leader_must_abandon_what_failed_first(serve: Callable[[Answer], ChatServer]) -> None:
    c = step(_open(), Discuss(LEAD, "plan", "async_task_assign", LEAD))
    c = step(c, AssignAsync(LEAD, ((CY, SUBTASKS[1]),), "pause_trigger", CY))
    abandon = {
        "kind": "abandon",
        "speaker": LEAD,
        "sub_id": "s2",
        "reason": "cy timed out",
        "next_state": "sync_task_assign",
        "next_speaker": LEAD,
    }

    def answer(request: dict[str, Any]) -> Reply:
        if len(request["messages"]) == 2:
            return _completion(json.dumps({**_DISCUSS, "next_state": "discussion"}))
        return _completion(json.dumps(abandon))

    server = serve(answer)
    view = _view(c, abandon=("s2",))
    assert 'one "abandon" message' in turn_prompt(view)
    message = server.policy().decide(view)
    assert step(c, message).results[-1] == Result("s2", False, (), "cy timed out")
    assert "abandon sub-task s2 first" in server.requests[1]["messages"][3]["content"]


def test_a_conclusion_may_not_change_the_contributions(
    serve: Callable[[Answer], ChatServer],
) -> None:
    c = step(_open(), Discuss(LEAD, "plan", "sync_task_assign", LEAD))
    c = step(c, AssignSync(LEAD, BOB, SUBTASKS[0], "sync_task_assign", BOB))
    reported = Contribution(BOB, "s1", "arithmetic", "s1", seal(5).commitment)
    c = step(c, Report(BOB, Result("s1", True, (reported,)), "conclusion", LEAD))
    forged = {**reported.to_json(), "agent": CY}
    answer = {
        "kind": "conclude",
        "speaker": LEAD,
        "deliverable": {"summary": "done", "contributions": [forged]},
        "next_state": "closed",
        "next_speaker": None,
    }
    server = serve(lambda request: _completion(json.dumps(answer)))
    with pytest.raises(PolicyOutputError, match="exactly the contributions reported"):
        server.policy(max_attempts=2).decide(_view(c))
    del answer["deliverable"]["contributions"]  # type: ignore[attr-defined]
    message = server.policy().decide(_view(c))
    assert isinstance(message, Conclude)
    assert message.deliverable.contributions == (reported,)


# -- transport failures --------------------------------------------------------------------------


def test_a_503_is_a_retriable_policy_error(serve: Callable[[Answer], ChatServer]) -> None:
    server = serve(lambda request: (503, b'{"error": {"message": "overloaded"}}'))
    with pytest.raises(PolicyCallError, match=r"HTTP 503: .*overloaded") as raised:
        server.policy().decide(_view(_open()))
    assert isinstance(raised.value, PolicyError)
    assert raised.value.retriable
    assert not isinstance(raised.value, PolicyOutputError)
    assert len(server.requests) == 2  # the client tried once more itself


def test_a_4xx_is_not_retriable(serve: Callable[[Answer], ChatServer]) -> None:
    server = serve(_scripted_leader)
    policy = LLMPolicy(OpenAIChat("local-leader", base_url=server.url, api_key="wrong"))
    with pytest.raises(PolicyCallError, match="HTTP 401") as raised:
        policy.decide(_view(_open()))
    assert not raised.value.retriable
    assert server.requests == []


def test_an_unreachable_model_is_retriable(serve: Callable[[Answer], ChatServer]) -> None:
    server = serve(_scripted_leader)
    url = server.url
    server.close()
    policy = LLMPolicy(OpenAIChat("m", base_url=url, api_key="test-key", timeout=2))
    with pytest.raises(PolicyCallError, match="cannot reach the model") as raised:
        policy.decide(_view(_open()))
    assert raised.value.retriable


def test_a_slow_model_is_a_retriable_timeout(serve: Callable[[Answer], ChatServer]) -> None:
    release = threading.Event()

    def slow(request: dict[str, Any]) -> Reply:
        release.wait(5)
        return _scripted_leader(request)

    server = serve(slow)
    try:
        with pytest.raises(PolicyCallError, match=r"did not answer within 0\.2 s") as raised:
            server.policy(timeout=0.2).decide(_view(_open()))
        assert raised.value.retriable
    finally:
        release.set()


def test_configuration_errors() -> None:
    with pytest.raises(PolicyError, match="needs OPENAI_API_KEY"):
        leader_policy("llm", model="m", environ={})
    with pytest.raises(PolicyError, match="http:// or https://"):
        environ = {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "file:///etc"}
        leader_policy("llm", model="m", environ=environ)
    with pytest.raises(PolicyError, match="max_attempts"):
        LLMPolicy(OpenAIChat("m", api_key="k"), max_attempts=0)
    c = step(_open(), Discuss(LEAD, "plan", "async_task_assign", LEAD))
    c = step(c, AssignAsync(LEAD, ((CY, SUBTASKS[1]),), "pause_trigger", CY))
    with pytest.raises(PolicyError, match="does not speak in pause_trigger"):
        LLMPolicy(OpenAIChat("m", api_key="k")).decide(_view(c))


def test_a_server_that_refuses_json_mode_is_asked_without_it_from_then_on(
    serve: Callable[[Answer], ChatServer],
) -> None:
    plan = {
        "speaker": LEAD,
        "kind": "discuss",
        "text": "plan",
        "next_state": "sync_task_assign",
        "next_speaker": LEAD,
    }

    def answer(request: dict[str, Any]) -> Reply:
        if "response_format" in request:
            return 400, b'{"error": {"message": "response_format is not supported"}}'
        return _completion(json.dumps(plan))

    server = serve(answer)
    policy = server.policy()
    assert isinstance(policy.decide(_view(_open())), Discuss)
    assert isinstance(policy.decide(_view(_open())), Discuss)
    asked = ["response_format" in request for request in server.requests]
    assert asked == [True, False, False]  # refused once, then plain text every time


def test_a_server_that_refuses_other_requests_is_not_asked_twice(
    serve: Callable[[Answer], ChatServer],
) -> None:
    server = serve(lambda request: (400, b'{"error": {"message": "unknown model"}}'))
    with pytest.raises(PolicyCallError, match="HTTP 400") as raised:
        server.policy().decide(_view(_open()))
    assert not raised.value.retriable
    assert ["response_format" in r for r in server.requests] == [True, False]
