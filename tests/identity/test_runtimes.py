"""The runtimes of `accord.identity.runtimes` that speak to other servers (an HTTP agent service, an
OpenAI-compatible model), against real local servers on 127.0.0.1 (no mocks)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from accord.identity.agents import check_agent_spec, runtime_for
from accord.identity.challenges import JSON, ExamItem, reference
from accord.identity.chat import OpenAIChat
from accord.identity.errors import ExamError, RegistryError
from accord.identity.onboarding import Onboarding, open_onboarding
from accord.identity.runtimes import (
    AgentRuntimeError,
    ChatRuntime,
    HttpRuntime,
    openai_runtime,
    parse_model_answer,
)
from accord.ledger.settings import Settings
from tests.stand_in import (
    API_KEY,
    Handle,
    Reply,
    StandIn,
    chat_server,
    completion,
    free_port,
    json_reply,
    starter,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ITEM = {
    "item_id": "x",
    "capability": "arithmetic",
    "prompt": "Compute it.",
    "payload": {"kind": "expression", "expression": "2 + 3"},
}


@pytest.fixture
def serve(request: pytest.FixtureRequest) -> Callable[[Handle], StandIn]:
    return starter(request)


@pytest.fixture
def onboarding(tmp_path: Path) -> Onboarding:
    """Onboarding whose agents may be on loopback (the test servers are)."""
    environ = {"ACCORD_HOME": str(tmp_path / "home"), "ACCORD_ALLOW_PRIVATE_AGENTS": "1"}
    return open_onboarding(Settings.from_env(environ))


def _model_runtime(url: str, key: str = API_KEY, **options: Any) -> ChatRuntime:
    """A ChatRuntime for model "m" at `url`; `validate` goes to the runtime, the rest to
    OpenAIChat."""
    validate = options.pop("validate", None)
    return ChatRuntime(OpenAIChat("m", base_url=url, api_key=key, **options), validate)


def _solve(seen: dict[str, Any]) -> Any:
    return reference.solve(
        ExamItem(
            item_id=str(seen["item_id"]),
            capability=str(seen["capability"]),
            prompt=str(seen["prompt"]),
            payload=seen["payload"],
            private={},
        )
    )


def _agent_service(path: str, headers: dict[str, str], body: bytes) -> Reply:
    return json_reply(200, {"answer": _solve(json.loads(body)["item"])})


def _http(url: str, timeout: float = 30.0) -> HttpRuntime:
    return HttpRuntime(url, timeout, allow_private=True)


# -- http ----------------------------------------------------------------------------------------


def test_an_http_agent_service_passes_and_gets_a_credential(
    onboarding: Onboarding, serve: Callable[[Handle], StandIn]
) -> None:
    server = serve(_agent_service)
    agent = onboarding.registry.new_agent(
        "svc", now=NOW, runtime="http", endpoint=server.url + "/answer"
    )
    assert onboarding.registry.get("svc").endpoint == server.url + "/answer"
    (outcome,) = onboarding.onboard(agent, ["arithmetic"], item_count=3)
    assert outcome.exam.passed and outcome.answer_failures == 0
    assert outcome.credential_id is not None and outcome.credential_path is not None
    onboarding.verify(json.loads(outcome.credential_path.read_text()), holder_did=agent.did)
    assert len(server.requests) == 3
    path, headers, body = server.requests[0]
    assert path == "/answer" and headers["content-type"] == "application/json"
    assert set(json.loads(body)["item"]) == {"item_id", "capability", "prompt", "payload"}


def test_a_failing_http_service_leaves_items_unanswered(
    onboarding: Onboarding, serve: Callable[[Handle], StandIn]
) -> None:
    server = serve(lambda path, headers, body: json_reply(500, {"error": "boom"}))
    agent = onboarding.registry.new_agent("down", now=NOW, runtime="http", endpoint=server.url)
    (outcome,) = onboarding.onboard(agent, ["arithmetic"], item_count=3)
    assert not outcome.exam.passed and outcome.credential_id is None
    assert outcome.answer_failures == 3


@pytest.mark.parametrize(
    ("reply", "reason", "retriable"),
    [
        ((500, {}, b"internal trouble"), "HTTP 500: internal trouble", True),
        ((503, {}, b""), "HTTP 503", True),
        ((404, {}, b"no such path"), "HTTP 404", False),
        ((200, {}, b"<html>not json</html>"), "did not answer with JSON", False),
        ((200, {}, b'{"result": 5}'), 'has no "answer"', False),
        ((200, {}, b"[5]"), 'has no "answer"', False),
        ((307, {"Location": "http://example.com/x"}, b""), "redirects are not followed", False),
        ((200, {}, b"x" * ((1 << 20) + 1)), "more than 1 MiB", False),
    ],
)
def test_http_service_failures_are_exam_errors(
    serve: Callable[[Handle], StandIn], reply: Reply, reason: str, retriable: bool
) -> None:
    server = serve(lambda path, headers, body: reply)
    with pytest.raises(AgentRuntimeError, match=reason) as raised:
        _http(server.url).answer(ITEM)
    assert isinstance(raised.value, ExamError)
    assert raised.value.retriable is retriable
    assert ("(retriable)" in str(raised.value)) is retriable


def test_a_slow_or_absent_http_service_is_a_retriable_exam_error(
    serve: Callable[[Handle], StandIn],
) -> None:
    def slow(path: str, headers: dict[str, str], body: bytes) -> Reply:
        server.release.wait(10)
        return json_reply(200, {"answer": 5})

    server = serve(slow)
    with pytest.raises(AgentRuntimeError, match=r"did not answer within 0\.3 s") as raised:
        _http(server.url, timeout=0.3).answer(ITEM)
    assert raised.value.retriable
    with pytest.raises(AgentRuntimeError, match="cannot reach") as raised:
        _http(f"http://127.0.0.1:{free_port()}/").answer(ITEM)
    assert raised.value.retriable


def test_http_answers_are_returned_as_sent(serve: Callable[[Handle], StandIn]) -> None:
    server = serve(_agent_service)
    runtime = _http(server.url)
    assert runtime.endpoint == server.url + "/run"
    assert runtime.answer(ITEM) == _solve(ITEM) == 5
    path, _, body = server.requests[0]
    assert path == "/run" and json.loads(body) == {"item": ITEM}


# -- spec validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("runtime", "endpoint", "model", "reason"),
    [
        ("http", None, None, "needs --endpoint"),
        ("http", "ftp://host/x", None, "http:// or https://"),
        ("http", "localhost:8000", None, "http:// or https://"),
        ("http", "http:///path", None, "no host"),
        ("http", "http://user:pw@host/", None, "credentials"),
        ("http", "http://host:99999/", None, "not a valid URL"),
        ("http", "http://host/ x", None, "whitespace"),
        ("http", "http://host/", "gpt-4o", "only for the 'openai'"),
        ("reference", "http://host/", None, "only for the 'http' and 'openai'"),
        ("command", None, "gpt-4o", "only for the 'openai'"),
        ("openai", None, None, "needs --model"),
        ("openai", None, "bad model name", "not a valid model name"),
        ("openai", "file:///etc/passwd", "gpt-4o", "http:// or https://"),
    ],
)
def test_bad_http_and_openai_specs_are_refused(
    onboarding: Onboarding, runtime: str, endpoint: str | None, model: str | None, reason: str
) -> None:
    with pytest.raises(RegistryError, match=reason):
        check_agent_spec("bob", runtime, None, endpoint, model)
    with pytest.raises(RegistryError, match=reason):
        onboarding.registry.new_agent(
            "bob", now=NOW, runtime=runtime, endpoint=endpoint, model=model
        )
    assert onboarding.registry.list() == []
    assert not onboarding.registry.key_path("bob").exists()


def test_good_specs_are_accepted_and_kept(onboarding: Onboarding) -> None:
    assert check_agent_spec("a", "http", None, "https://agents.example.org:8443/v1/answer") is None
    assert check_agent_spec("a", "openai", None, None, "gpt-4o-mini") is None
    assert check_agent_spec("a", "openai", None, "http://127.0.0.1:8000/v1", "org/model:7b") is None
    record = onboarding.registry.new_agent("llm", now=NOW, runtime="openai", model="gpt-4o-mini")
    assert onboarding.registry.get("llm") == record
    assert record.to_json()["model"] == "gpt-4o-mini" and record.to_json()["endpoint"] is None


# -- openai --------------------------------------------------------------------------------------


def _reference_model(seen: dict[str, Any], request: dict[str, Any]) -> str:
    return json.dumps({"answer": _solve(seen)})


ENVIRON = {"OPENAI_API_KEY": API_KEY}


def test_an_openai_compatible_model_passes_arithmetic(
    onboarding: Onboarding,
    serve: Callable[[Handle], StandIn],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = serve(chat_server(_reference_model))
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
    agent = onboarding.registry.new_agent("llm", now=NOW, runtime="openai", model="local-model")
    (outcome,) = onboarding.onboard(agent, ["arithmetic"], item_count=3)
    assert outcome.exam.passed and outcome.answer_failures == 0
    assert outcome.credential_id is not None
    assert len(server.requests) == 3
    request = json.loads(server.requests[0][2])
    assert request["model"] == "local-model"
    assert request["response_format"] == {"type": "json_object"}
    assert "Payload (JSON):" in request["messages"][-1]["content"]


def test_the_endpoint_overrides_openai_base_url(
    onboarding: Onboarding,
    serve: Callable[[Handle], StandIn],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = serve(chat_server(_reference_model))
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{free_port()}/v1")
    agent = onboarding.registry.new_agent(
        "llm", now=NOW, runtime="openai", model="m", endpoint=server.url + "/v1"
    )
    assert runtime_for(agent).answer(ITEM) == _solve(ITEM)


def test_a_keyless_local_server_needs_no_key(
    serve: Callable[[Handle], StandIn], monkeypatch: pytest.MonkeyPatch
) -> None:
    server = serve(chat_server(_reference_model, api_key=None))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
    runtime = openai_runtime("local-model")
    assert isinstance(runtime.chat, OpenAIChat)
    assert runtime.chat.api_key is None and runtime.chat.base_url == server.url + "/v1"
    assert runtime.answer(ITEM) == _solve(ITEM)
    # The client insists on a key: a placeholder is sent, never a real one.
    assert server.requests[0][1]["authorization"] == "Bearer no-key"


@pytest.mark.parametrize(
    "content",
    ["not json {", '{"answer": 5, "why": "because"}', "[5]", '{"answer": NaN}', ""],
)
def test_a_model_reply_that_is_not_an_answer_object_is_an_exam_error(
    serve: Callable[[Handle], StandIn], content: str
) -> None:
    server = serve(chat_server(lambda seen, request: content))
    runtime = openai_runtime("m", environ={**ENVIRON, "OPENAI_BASE_URL": server.url + "/v1"})
    with pytest.raises(AgentRuntimeError, match="model") as raised:
        runtime.answer(ITEM)
    assert not raised.value.retriable and len(server.requests) == 1


def test_a_server_without_json_mode_is_asked_in_plain_text(
    serve: Callable[[Handle], StandIn],
) -> None:
    def chatty(seen: dict[str, Any], request: dict[str, Any]) -> str:
        answer = json.dumps({"answer": _solve(seen)})
        return f"Here is the result.\n```json\n{answer}\n```\nAnything else?"

    server = serve(chat_server(chatty, json_mode=False))
    runtime = _model_runtime(server.url + "/v1", retries=0)
    assert runtime.answer(ITEM) == 5
    refused, plain = (json.loads(body) for _, _, body in server.requests)
    assert refused["response_format"] == {"type": "json_object"}
    assert "response_format" not in plain
    # Remembered: the next item is asked in plain text straight away.
    assert runtime.answer(ITEM) == 5 and len(server.requests) == 3
    assert isinstance(runtime.chat, OpenAIChat) and not runtime.chat.json_mode


def test_the_answer_object_is_found_in_text_only_without_json_mode() -> None:
    text = 'I think {"note": 1} and then {"answer": [1, 2]} is it.'
    assert parse_model_answer(text, lenient=True) == [1, 2]
    with pytest.raises(AgentRuntimeError, match="did not reply with JSON"):
        parse_model_answer(text)
    with pytest.raises(AgentRuntimeError, match="did not reply with JSON"):
        parse_model_answer("no object here", lenient=True)


class _Validator:
    """Refuses every answer that is not a positive integer; counts its calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, JSON]] = []

    def __call__(self, capability: str, answer: JSON) -> None:
        self.calls.append((capability, answer))
        if not isinstance(answer, int) or answer <= 0:
            raise ValueError(f"{capability} answers are positive integers, not {answer!r}")


def test_a_refused_answer_is_asked_for_once_more_with_the_reason(
    serve: Callable[[Handle], StandIn],
) -> None:
    def learns(seen: dict[str, Any], request: dict[str, Any]) -> str:
        retried = request["messages"][-1]["role"] == "user" and len(request["messages"]) > 2
        return json.dumps({"answer": _solve(seen) if retried else "five"})

    server = serve(chat_server(learns))
    validate = _Validator()
    runtime = _model_runtime(server.url + "/v1", validate=validate)
    assert runtime.answer(ITEM) == 5
    assert validate.calls == [("arithmetic", "five"), ("arithmetic", 5)]
    first, second = (json.loads(body)["messages"] for _, _, body in server.requests)
    assert len(first) == 2 and second[:2] == first
    assert second[2] == {"role": "assistant", "content": '{"answer": "five"}'}
    assert second[3]["role"] == "user"
    assert "arithmetic answers are positive integers, not 'five'" in second[3]["content"]


def test_an_answer_refused_twice_fails_for_good(serve: Callable[[Handle], StandIn]) -> None:
    server = serve(chat_server(lambda seen, request: '{"answer": -1}'))
    validate = _Validator()
    runtime = _model_runtime(server.url + "/v1", validate=validate)
    with pytest.raises(AgentRuntimeError, match=r"refused twice.*not -1") as raised:
        runtime.answer(ITEM)
    assert not raised.value.retriable
    assert len(server.requests) == 2 and len(validate.calls) == 2


def test_model_server_failures_are_typed_exam_errors(serve: Callable[[Handle], StandIn]) -> None:
    overloaded = serve(
        lambda path, headers, body: json_reply(
            503, {"error": {"message": "overloaded"}}, **{"retry-after-ms": "1"}
        )
    )
    with pytest.raises(AgentRuntimeError, match=r"HTTP 503.*\(retriable\)") as raised:
        _model_runtime(overloaded.url + "/v1").answer(ITEM)
    assert raised.value.retriable and len(overloaded.requests) == 2  # the client retried once

    refused = serve(chat_server(_reference_model))
    with pytest.raises(AgentRuntimeError, match="HTTP 401") as raised:
        _model_runtime(refused.url + "/v1", key="wrong").answer(ITEM)
    assert not raised.value.retriable

    dead = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(AgentRuntimeError, match="cannot reach") as raised:
        _model_runtime(dead, retries=0).answer(ITEM)
    assert raised.value.retriable

    def slow(path: str, headers: dict[str, str], body: bytes) -> Reply:
        hanging.release.wait(10)
        return json_reply(200, completion("m", '{"answer": 5}'))

    hanging = serve(slow)
    runtime = _model_runtime(hanging.url + "/v1", timeout=0.3, retries=0)
    with pytest.raises(AgentRuntimeError, match=r"within 0\.3 s") as raised:
        runtime.answer(ITEM)
    assert raised.value.retriable


def test_the_openai_runtime_needs_a_key_for_openai_and_a_good_base_url() -> None:
    with pytest.raises(RegistryError, match="OPENAI_API_KEY"):
        openai_runtime("m", environ={})
    on_openai = openai_runtime("m", environ=ENVIRON).chat
    assert isinstance(on_openai, OpenAIChat) and on_openai.base_url is None  # with the key
    with pytest.raises(RegistryError, match="http:// or https://"):
        openai_runtime("m", environ={**ENVIRON, "OPENAI_BASE_URL": "ftp://x/v1"})
    with pytest.raises(RegistryError, match="http:// or https://"):
        openai_runtime("m", endpoint="file:///etc/passwd", environ=ENVIRON)
    with pytest.raises(ValueError, match="timeout"):
        openai_runtime("m", endpoint="http://127.0.0.1:1/v1", timeout=0, environ={})


def test_parse_json_refuses_a_value_nested_too_deep_as_bad_json() -> None:
    """An agent's answer is anyone's: 100,000 brackets are a ValueError, as other bad JSON is,
    not a RecursionError its callers do not catch."""
    from accord.identity.runtimes import parse_json

    with pytest.raises(ValueError, match="too deep"):
        parse_json("[" * 100_000)
    assert parse_json("[[1]]") == [[1]]
