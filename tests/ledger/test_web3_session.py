"""The JSON-RPC session reads the environment's proxy settings once, and obeys them: a real
HTTP server on loopback stands in for a node and for a proxy (it answers eth_chainId and
records each request line, whose absolute URL shows a proxied request)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from accord.ledger.chain.web3_chain import make_web3


class StandIn(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Answer)
        self.request_lines: list[str] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Answer(BaseHTTPRequestHandler):
    server: StandIn

    def do_POST(self) -> None:
        self.server.request_lines.append(self.requestline)
        call = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        body = json.dumps({"jsonrpc": "2.0", "id": call["id"], "result": "0x7a69"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    server = StandIn()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def test_a_proxy_named_by_the_environment_carries_the_calls(
    stand_in: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", stand_in.url)
    w3 = make_web3("http://node.invalid:8545")
    assert w3.eth.chain_id == 31337
    assert stand_in.request_lines and set(stand_in.request_lines) == {
        "POST http://node.invalid:8545/ HTTP/1.1"
    }


def test_no_proxy_sends_the_calls_straight_to_the_node(
    stand_in: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens: a proxied call fails
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert make_web3(stand_in.url).eth.chain_id == 31337
    assert stand_in.request_lines and set(stand_in.request_lines) == {"POST / HTTP/1.1"}


def test_the_environment_is_read_when_the_web3_is_made_not_on_each_call(
    stand_in: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    w3 = make_web3(stand_in.url)
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    assert w3.eth.chain_id == 31337
    assert stand_in.request_lines and set(stand_in.request_lines) == {"POST / HTTP/1.1"}
