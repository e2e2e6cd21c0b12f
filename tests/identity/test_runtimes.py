"""The `http` and `openai` runtimes, against real local servers on 127.0.0.1 (no mocks)."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from identity.agents import (
    AgentRuntimeError,
    check_agent_spec,
    http_runtime,
    openai_runtime,
    runtime_for,
)
from identity.challenges import ExamItem, reference
from identity.errors import ExamError, RegistryError
from identity.onboarding import Onboarding, open_onboarding
from ledger.settings import Settings

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ITEM = {
    "item_id": "x",
    "capability": "arithmetic",
    "prompt": "Compute it.",
    "payload": {"kind": "expression", "expression": "2 + 3"},
}

Reply = tuple[int, dict[str, str], bytes]
Handle = Callable[[str, dict[str, str], bytes], Reply]


class LocalServer:
    """A ThreadingHTTPServer on 127.0.0.1 whose POSTs are answered by `handle`."""

    def __init__(self, handle: Handle) -> None:
        self.handle = handle
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.release = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {key.lower(): value for key, value in self.headers.items()}
                server.requests.append((self.path, headers, body))
                status, extra, data = server.handle(self.path, headers, body)
                try:
                    self.send_response(status)
                    for key, value in extra.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = False
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


@pytest.fixture
def serve(request: pytest.FixtureRequest) -> Callable[[Handle], LocalServer]:
    def start(handle: Handle) -> LocalServer:
        server = LocalServer(handle)
        request.addfinalizer(server.close)
        return server

    return start


@pytest.fixture
def onboarding(tmp_path: Path) -> Onboarding:
    return open_onboarding(Settings.from_env({"ACCORD_HOME": str(tmp_path / "home")}))


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


def _json(status: int, value: Any) -> Reply:
    return status, {"Content-Type": "application/json"}, json.dumps(value).encode()


def _agent_service(path: str, headers: dict[str, str], body: bytes) -> Reply:
    return _json(200, {"answer": _solve(json.loads(body)["item"])})


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# -- http ----------------------------------------------------------------------------------------


def test_an_http_agent_service_passes_and_gets_a_credential(
    onboarding: Onboarding, serve: Callable[[Handle], LocalServer]
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
    onboarding: Onboarding, serve: Callable[[Handle], LocalServer]
) -> None:
    server = serve(lambda path, headers, body: _json(500, {"error": "boom"}))
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
    serve: Callable[[Handle], LocalServer], reply: Reply, reason: str, retriable: bool
) -> None:
    server = serve(lambda path, headers, body: reply)
    with pytest.raises(AgentRuntimeError, match=reason) as raised:
        http_runtime(server.url)(ITEM)
    assert isinstance(raised.value, ExamError)
    assert raised.value.retriable is retriable
    assert ("(retriable)" in str(raised.value)) is retriable


def test_a_slow_or_absent_http_service_is_a_retriable_exam_error(
    serve: Callable[[Handle], LocalServer],
) -> None:
    def slow(path: str, headers: dict[str, str], body: bytes) -> Reply:
        server.release.wait(10)
        return _json(200, {"answer": 5})

    server = serve(slow)
    with pytest.raises(AgentRuntimeError, match=r"did not answer within 0\.3 s") as raised:
        http_runtime(server.url, timeout=0.3)(ITEM)
    assert raised.value.retriable
    with pytest.raises(AgentRuntimeError, match="cannot reach") as raised:
        http_runtime(f"http://127.0.0.1:{_free_port()}/")(ITEM)
    assert raised.value.retriable


def test_http_answers_are_returned_as_sent(serve: Callable[[Handle], LocalServer]) -> None:
    server = serve(_agent_service)
    assert http_runtime(server.url)(ITEM) == _solve(ITEM) == 5


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


def _completion(model: str, content: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-local",
        "object": "chat.completion",
        "created": 1_770_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _item_from_prompt(text: str) -> dict[str, Any]:
    """What a model would read from the user message: capability, prompt and payload."""
    header, _, rest = text.partition("\n\n")
    capability = header.removeprefix("Capability: ")
    prompt, _, payload_part = rest.partition("\n\nPayload (JSON):\n")
    payload, _ = json.JSONDecoder().raw_decode(payload_part)
    return {"item_id": "?", "capability": capability, "prompt": prompt, "payload": payload}


def _chat_server(content_for: Callable[[dict[str, Any]], str]) -> Handle:
    def handle(path: str, headers: dict[str, str], body: bytes) -> Reply:
        if path != "/v1/chat/completions":
            return _json(404, {"error": {"message": f"no route {path}"}})
        if headers.get("authorization") != "Bearer test-key":
            return _json(401, {"error": {"message": "bad key", "type": "auth"}})
        request = json.loads(body)
        assert request["response_format"] == {"type": "json_object"}
        (user,) = [m["content"] for m in request["messages"] if m["role"] == "user"]
        return _json(200, _completion(request["model"], content_for(_item_from_prompt(user))))

    return handle


def _reference_model(seen: dict[str, Any]) -> str:
    return json.dumps({"answer": _solve(seen)})


def test_an_openai_compatible_model_passes_arithmetic(
    onboarding: Onboarding,
    serve: Callable[[Handle], LocalServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = serve(_chat_server(_reference_model))
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
    agent = onboarding.registry.new_agent("llm", now=NOW, runtime="openai", model="local-model")
    (outcome,) = onboarding.onboard(agent, ["arithmetic"], item_count=3)
    assert outcome.exam.passed and outcome.answer_failures == 0
    assert outcome.credential_id is not None
    assert len(server.requests) == 3
    request = json.loads(server.requests[0][2])
    assert request["model"] == "local-model"
    assert "Payload (JSON):" in request["messages"][-1]["content"]


def test_the_endpoint_overrides_openai_base_url(
    onboarding: Onboarding,
    serve: Callable[[Handle], LocalServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = serve(_chat_server(_reference_model))
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{_free_port()}/v1")
    agent = onboarding.registry.new_agent(
        "llm", now=NOW, runtime="openai", model="m", endpoint=server.url + "/v1"
    )
    assert runtime_for(agent)(ITEM) == _solve(ITEM)


@pytest.mark.parametrize(
    "content",
    ["not json {", '{"answer": 5, "why": "because"}', "[5]", '{"answer": NaN}', ""],
)
def test_a_model_reply_that_is_not_an_answer_object_is_an_exam_error(
    serve: Callable[[Handle], LocalServer], content: str
) -> None:
    server = serve(_chat_server(lambda seen: content))
    environ = {"OPENAI_API_KEY": "test-key", "OPENAI_BASE_URL": server.url + "/v1"}
    with pytest.raises(AgentRuntimeError, match="model") as raised:
        openai_runtime("m", environ=environ)(ITEM)
    assert not raised.value.retriable


def test_model_server_failures_are_typed_exam_errors(
    serve: Callable[[Handle], LocalServer],
) -> None:
    def overloaded(path: str, headers: dict[str, str], body: bytes) -> Reply:
        status, _, data = _json(503, {"error": {"message": "overloaded"}})
        return status, {"Content-Type": "application/json", "retry-after-ms": "1"}, data

    server = serve(overloaded)
    environ = {"OPENAI_API_KEY": "test-key"}
    with pytest.raises(AgentRuntimeError, match=r"HTTP 503.*\(retriable\)") as raised:
        openai_runtime("m", base_url=server.url + "/v1", environ=environ, max_retries=1)(ITEM)
    assert raised.value.retriable and len(server.requests) == 2

    refused = serve(_chat_server(_reference_model))
    with pytest.raises(AgentRuntimeError, match="HTTP 401") as raised:
        openai_runtime("m", base_url=refused.url + "/v1", environ={"OPENAI_API_KEY": "wrong"})(ITEM)
    assert not raised.value.retriable

    dead = f"http://127.0.0.1:{_free_port()}/v1"
    with pytest.raises(AgentRuntimeError, match="cannot reach") as raised:
        openai_runtime("m", base_url=dead, environ=environ, max_retries=0)(ITEM)
    assert raised.value.retriable

    def slow(path: str, headers: dict[str, str], body: bytes) -> Reply:
        hanging.release.wait(10)
        return _json(200, _completion("m", '{"answer": 5}'))

    hanging = serve(slow)
    with pytest.raises(AgentRuntimeError, match=r"within 0\.3 s") as raised:
        openai_runtime(
            "m", base_url=hanging.url + "/v1", environ=environ, timeout=0.3, max_retries=0
        )(ITEM)
    assert raised.value.retriable


def test_the_openai_runtime_needs_a_key_and_a_good_base_url() -> None:
    with pytest.raises(ExamError, match="OPENAI_API_KEY"):
        openai_runtime("m", environ={})
    with pytest.raises(RegistryError, match="http:// or https://"):
        openai_runtime("m", environ={"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "ftp://x/v1"})
