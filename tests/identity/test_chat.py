"""The chat-model seam (`accord.identity.chat`): `OpenAIChat` through the real openai client against
local OpenAI-compatible stand-in servers on 127.0.0.1 (no mocks): its retries, JSON mode and
its fallback, timeouts, unusable replies, the placeholder key, and its configuration."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from accord.identity.chat import (
    PLACEHOLDER_API_KEY,
    ChatMessage,
    ChatModel,
    ChatReply,
    OpenAIChat,
    openai_chat,
    retry_after,
)
from accord.identity.errors import ChatError, ChatReplyError, IdentityError, RegistryError
from tests.stand_in import API_KEY, Handle, Reply, StandIn, completion, free_port, json_reply

ASK: list[ChatMessage] = [
    {"role": "system", "content": "Answer in JSON."},
    {"role": "user", "content": "What is 2 + 3?"},
]


@pytest.fixture
def serve(request: pytest.FixtureRequest) -> Callable[[Handle], StandIn]:
    def start(handle: Handle) -> StandIn:
        server = StandIn(handle)
        request.addfinalizer(server.close)
        return server

    return start


def answers(*replies: Reply) -> Handle:
    """A chat server that gives `replies` in turn, then the last one again."""
    given: Iterator[Reply] = iter(replies)
    last: list[Reply] = []

    def handle(path: str, headers: dict[str, str], body: bytes) -> Reply:
        assert path == "/v1/chat/completions"
        reply = next(given, None)
        if reply is None:
            return last[0]
        last[:] = [reply]
        return reply

    return handle


def ok(content: str = '{"answer": 5}', **choice: Any) -> Reply:
    body = completion("m", content)
    body["choices"][0].update(choice)
    return json_reply(200, body)


def error(status: int, message: str = "busy", **headers: str) -> Reply:
    return json_reply(status, {"error": {"message": message}}, **headers)


class Sleeps:
    """A `sleep` that records how long it was asked to wait, and does not wait."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


def chat(server: StandIn, **options: Any) -> OpenAIChat:
    options.setdefault("api_key", API_KEY)
    return OpenAIChat("m", base_url=server.url + "/v1", **options)


def sent(server: StandIn) -> list[dict[str, Any]]:
    return [json.loads(body) for _, _, body in server.requests]


# -- a reply -------------------------------------------------------------------------------------


def test_a_reply_is_the_first_choices_text(serve: Callable[[Handle], StandIn]) -> None:
    server = serve(answers(ok("hello")))
    model = chat(server)
    assert model.complete(ASK) == ChatReply("hello", "m", json_mode=False)
    [request] = sent(server)
    assert request["messages"] == ASK and request["model"] == "m"
    assert "response_format" not in request and "temperature" not in request
    assert server.requests[0][1]["authorization"] == f"Bearer {API_KEY}"
    assert model.calls == 1


def test_temperature_and_another_model_are_sent(serve: Callable[[Handle], StandIn]) -> None:
    server = serve(answers(ok()))
    reply = chat(server).complete(ASK, temperature=0, model="bigger")
    assert reply.model == "bigger"
    [request] = sent(server)
    assert request["temperature"] == 0 and request["model"] == "bigger"


def test_a_keyless_server_is_sent_the_placeholder(serve: Callable[[Handle], StandIn]) -> None:
    server = serve(answers(ok()))
    chat(server, api_key=None).complete(ASK)
    assert server.requests[0][1]["authorization"] == f"Bearer {PLACEHOLDER_API_KEY}"


@pytest.mark.parametrize(
    ("choice", "problem"),
    [
        ({"finish_reason": "length"}, "was cut off"),
        ({"message": {"role": "assistant", "content": None, "refusal": "I won't"}}, "refusal"),
    ],
)
def test_an_unusable_reply_is_a_chat_reply_error_and_not_asked_again(
    serve: Callable[[Handle], StandIn], choice: dict[str, Any], problem: str
) -> None:
    server = serve(answers(ok(**choice)))
    model = chat(server, retries=3, sleep=Sleeps())
    with pytest.raises(ChatReplyError, match=problem) as raised:
        model.complete(ASK)
    assert not raised.value.retriable and isinstance(raised.value, ChatError)
    assert model.calls == len(server.requests) == 1


def test_a_reply_without_choices_is_a_chat_reply_error(
    serve: Callable[[Handle], StandIn],
) -> None:
    body = {**completion("m", ""), "choices": []}
    server = serve(answers(json_reply(200, body)))
    with pytest.raises(ChatReplyError, match="no choices"):
        chat(server).complete(ASK)


# -- JSON mode -----------------------------------------------------------------------------------


def test_json_mode_asks_for_a_json_object(serve: Callable[[Handle], StandIn]) -> None:
    server = serve(answers(ok()))
    reply = chat(server).complete(ASK, json_mode=True)
    assert reply.json_mode and reply.content == '{"answer": 5}'
    assert sent(server)[0]["response_format"] == {"type": "json_object"}


@pytest.mark.parametrize("status", [400, 422])
def test_a_server_that_refuses_json_mode_is_asked_in_plain_text_from_then_on(
    serve: Callable[[Handle], StandIn], status: int
) -> None:
    def handle(path: str, headers: dict[str, str], body: bytes) -> Reply:
        if "response_format" in json.loads(body):
            return error(status, "response_format is not supported")
        return ok('Sure: {"answer": 5}')

    server = serve(handle)
    model = chat(server)
    first = model.complete(ASK, json_mode=True)
    assert first == ChatReply('Sure: {"answer": 5}', "m", json_mode=False)
    assert not model.json_mode
    second = model.complete(ASK, json_mode=True)
    assert not second.json_mode
    assert ["response_format" in r for r in sent(server)] == [True, False, False]
    assert model.calls == 3


def test_a_request_refused_in_plain_text_too_is_not_retried(
    serve: Callable[[Handle], StandIn],
) -> None:
    server = serve(answers(error(400, "unknown model")))
    model = chat(server, retries=3, sleep=Sleeps())
    with pytest.raises(ChatError, match=r"HTTP 400: .*unknown model") as raised:
        model.complete(ASK, json_mode=True)
    assert not raised.value.retriable
    assert ["response_format" in r for r in sent(server)] == [True, False]
    assert model.json_mode  # nothing says the server refuses JSON mode itself


# -- retries -------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503])
def test_a_retriable_status_is_asked_again(serve: Callable[[Handle], StandIn], status: int) -> None:
    server = serve(answers(error(status), ok()))
    sleeps = Sleeps()
    model = chat(server, retries=1, backoff=0.25, sleep=sleeps)
    assert model.complete(ASK).content == '{"answer": 5}'
    assert model.calls == len(server.requests) == 2
    assert sleeps.waits == [0.25]


def test_retries_back_off_doubling_up_to_the_cap_then_fail_retriably(
    serve: Callable[[Handle], StandIn],
) -> None:
    server = serve(answers(error(503, "overloaded")))
    sleeps = Sleeps()
    model = chat(server, retries=4, backoff=0.5, max_backoff=2, sleep=sleeps)
    with pytest.raises(ChatError, match=r"HTTP 503: .*overloaded \(retriable\)") as raised:
        model.complete(ASK)
    assert raised.value.retriable and raised.value.reason.endswith("overloaded")
    assert model.calls == len(server.requests) == 5
    assert sleeps.waits == [0.5, 1.0, 2.0, 2.0]


def test_the_servers_retry_after_is_honoured(serve: Callable[[Handle], StandIn]) -> None:
    server = serve(
        answers(
            error(429, **{"retry-after": "3"}),
            error(429, **{"retry-after-ms": "20"}),
            error(429, **{"retry-after": "3600"}),  # more than a minute: backoff instead
            ok(),
        )
    )
    sleeps = Sleeps()
    model = chat(server, retries=3, backoff=0.5, sleep=sleeps)
    model.complete(ASK)
    assert sleeps.waits == [3.0, 0.02, 2.0]


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_another_status_is_not_retried(serve: Callable[[Handle], StandIn], status: int) -> None:
    server = serve(answers(error(status, "no")))
    sleeps = Sleeps()
    model = chat(server, retries=3, sleep=sleeps)
    with pytest.raises(ChatError, match=rf"HTTP {status}: .*\bno\b") as raised:
        model.complete(ASK)
    assert not raised.value.retriable and "(retriable)" not in str(raised.value)
    assert model.calls == 1 and sleeps.waits == []


def test_a_slow_server_times_out_retriably_after_each_attempt(
    serve: Callable[[Handle], StandIn],
) -> None:
    def slow(path: str, headers: dict[str, str], body: bytes) -> Reply:
        hanging.release.wait(10)
        return ok()

    hanging = serve(slow)
    model = chat(hanging, timeout=0.3, retries=1, backoff=0)
    with pytest.raises(ChatError, match=r"did not answer within 0\.3 s") as raised:
        model.complete(ASK)
    assert raised.value.retriable
    assert model.calls == 2


def test_a_server_that_is_not_there_cannot_be_reached_retriably() -> None:
    model = OpenAIChat("m", base_url=f"http://127.0.0.1:{free_port()}/v1", retries=2, backoff=0)
    with pytest.raises(ChatError, match=r"cannot reach the model at http://127\.0\.0\.1") as raised:
        model.complete(ASK)
    assert raised.value.retriable and model.calls == 3


def test_a_non_public_address_refused_by_the_guard_is_not_retried(
    serve: Callable[[Handle], StandIn],
) -> None:
    server = serve(answers(ok()))
    model = chat(server, allow_private=False, retries=2, sleep=Sleeps())
    with pytest.raises(ChatError, match="cannot reach") as raised:
        model.complete(ASK)
    assert not raised.value.retriable
    assert model.calls == 1 and server.requests == []
    assert chat(server, allow_private=True).complete(ASK).content == '{"answer": 5}'


def test_retry_after_reads_seconds_or_milliseconds_up_to_a_minute() -> None:
    assert retry_after({"retry-after": "2"}) == 2.0
    assert retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after({"retry-after": "61"}) is None
    assert retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) is None
    assert retry_after({"retry-after": "-1"}) is None
    assert retry_after({}) is None


# -- configuration -------------------------------------------------------------------------------


def test_openai_chat_reads_the_endpoint_or_openai_base_url_and_the_key() -> None:
    environ = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1", "OPENAI_API_KEY": "k"}
    from_env = openai_chat("m", environ=environ, timeout=5, retries=0)
    assert (from_env.base_url, from_env.api_key, from_env.timeout, from_env.retries) == (
        "http://127.0.0.1:9/v1",
        "k",
        5.0,
        0,
    )
    given = openai_chat("m", endpoint="http://127.0.0.1:8/v1", environ=environ)
    assert given.base_url == "http://127.0.0.1:8/v1"
    assert openai_chat("m", environ={"OPENAI_API_KEY": "k"}).where == "OpenAI"
    keyless = openai_chat("m", endpoint="http://127.0.0.1:8/v1", environ={})
    assert keyless.api_key is None


def test_openai_chat_refuses_a_bad_configuration() -> None:
    with pytest.raises(RegistryError, match="the judge on OpenAI's API needs OPENAI_API_KEY"):
        openai_chat("m", environ={}, who="the judge")
    with pytest.raises(RegistryError, match=r"OPENAI_BASE_URL .* http:// or https://"):
        openai_chat("m", environ={"OPENAI_BASE_URL": "ftp://x/v1"})
    with pytest.raises(RegistryError, match=r"--endpoint .* must not carry credentials"):
        openai_chat("m", endpoint="http://u:p@127.0.0.1/v1", environ={})
    with pytest.raises(ValueError, match="model name"):
        OpenAIChat(" ")
    with pytest.raises(ValueError, match="timeout"):
        OpenAIChat("m", timeout=0)
    with pytest.raises(ValueError, match="retries"):
        OpenAIChat("m", retries=-1)


def test_openai_chat_is_a_chat_model_and_its_errors_are_identity_errors() -> None:
    model: ChatModel = OpenAIChat("m", api_key="k")
    assert model.model == "m"
    assert issubclass(ChatReplyError, ChatError) and issubclass(ChatError, IdentityError)
