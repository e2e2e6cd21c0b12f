"""Real local HTTP servers on 127.0.0.1 for tests: an agent service or an OpenAI-compatible
chat server played by a plain function (no mocks: the code under test speaks real HTTP)."""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

Reply = tuple[int, dict[str, str], bytes]
Handle = Callable[[str, dict[str, str], bytes], Reply]
"""`handle(path, headers, body) -> (status, headers, body)`; header names are lower-case."""

API_KEY = "test-key"


class StandIn:
    """A ThreadingHTTPServer on 127.0.0.1 whose POSTs are answered by `handle`.

    `requests` records each (path, headers, body); `release` is set on close, so a handler
    that waits on it to play a slow server lets go.
    """

    def __init__(self, handle: Handle) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.release = threading.Event()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {key.lower(): value for key, value in self.headers.items()}
                stand_in.requests.append((self.path, headers, body))
                status, extra, data = handle(self.path, headers, body)
                try:
                    self.send_response(status)
                    for key, value in extra.items():
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()
        self.port: int = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)


def starter(request: pytest.FixtureRequest) -> Callable[[Handle], StandIn]:
    """A function that starts stand-ins, each closed when the test `request` ends."""

    def start(handle: Handle) -> StandIn:
        server = StandIn(handle)
        request.addfinalizer(server.close)
        return server

    return start


def free_port() -> int:
    """A port on 127.0.0.1 nothing listens on (just now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def json_reply(status: int, value: Any, **headers: str) -> Reply:
    return status, {"Content-Type": "application/json", **headers}, json.dumps(value).encode()


def fixed(reply: Reply) -> Handle:
    """A handler that gives every request the same reply."""

    def handle(path: str, headers: dict[str, str], body: bytes) -> Reply:
        return reply

    return handle


# -- an OpenAI-compatible chat server ------------------------------------------------------------


def completion(model: str, content: str) -> dict[str, Any]:
    """A chat completion whose one choice says `content`."""
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


def item_from_prompt(text: str) -> dict[str, Any]:
    """What a model reads from a runtime's user message: capability, prompt and payload."""
    header, _, rest = text.partition("\n\n")
    capability = header.removeprefix("Capability: ")
    prompt, _, payload_part = rest.partition("\n\nPayload (JSON):\n")
    payload, _ = json.JSONDecoder().raw_decode(payload_part)
    return {"item_id": "?", "capability": capability, "prompt": prompt, "payload": payload}


def chat_server(
    content_for: Callable[[dict[str, Any], dict[str, Any]], str],
    *,
    api_key: str | None = API_KEY,
    json_mode: bool = True,
) -> Handle:
    """`POST /v1/chat/completions`, answered with `content_for(item, request)`, where `item` is
    read back from the first user message and `request` is the whole request body.

    With `api_key` None the server needs no key; otherwise another key gets 401. With
    `json_mode` a request without `response_format` json_object gets 400; without it, a
    request that asks for it gets 400 (a server that does not support JSON mode).
    """

    def handle(path: str, headers: dict[str, str], body: bytes) -> Reply:
        if path != "/v1/chat/completions":
            return json_reply(404, {"error": {"message": f"no route {path}"}})
        if api_key is not None and headers.get("authorization") != f"Bearer {api_key}":
            return json_reply(401, {"error": {"message": "bad key", "type": "auth"}})
        request = json.loads(body)
        asked = request.get("response_format") == {"type": "json_object"}
        if asked is not json_mode:
            message = "json_object expected" if json_mode else "response_format not supported"
            return json_reply(400, {"error": {"message": message}})
        user = next(m["content"] for m in request["messages"] if m["role"] == "user")
        return json_reply(
            200, completion(request["model"], content_for(item_from_prompt(user), request))
        )

    return handle


# -- a judge of summaries ------------------------------------------------------------------------


def summary_judge(invented: str = "resigned") -> Handle:
    """`POST /v1/chat/completions` as a judge of the `summarise` skill's model grader: reads the
    key facts and the summary from its prompt and chooses `{"choice": "A"}` when every figure
    and name of the facts is in the summary, "C" when the summary says `invented` (a claim no
    document makes), else "B". Anything but a JSON-mode request gets 400."""

    def content(prompt: str) -> str:
        facts = prompt.partition("key facts a faithful summary states: ")[2].partition("\n")[0]
        summary = prompt.partition("The summary to grade: ")[2].partition("\nChoose ")[0]
        said = summary.replace(",", "")
        wanted = [f.replace(",", "") for f in re.findall(r"\d[\d,]*\d|\d", facts)]
        wanted += [w for w in re.findall(r"[A-Z][a-z]+", facts) if w not in ("The", "Project")]
        if invented in summary:
            return json.dumps({"choice": "C"})
        return json.dumps({"choice": "A" if all(w in said for w in wanted) else "B"})

    def handle(path: str, headers: dict[str, str], body: bytes) -> Reply:
        if path != "/v1/chat/completions":
            return json_reply(404, {"error": {"message": f"no route {path}"}})
        request = json.loads(body)
        if request.get("response_format") != {"type": "json_object"}:
            return json_reply(400, {"error": {"message": "json_object expected"}})
        user = next(m["content"] for m in request["messages"] if m["role"] == "user")
        return json_reply(200, completion(request["model"], content(user)))

    return handle
