"""A JSON-RPC node stand-in for tests: a real HTTP server on loopback that records each
request line (an absolute URL there shows a proxied request) and each call, and answers every
call with what the test sets (`answer`, or raw `body`, with `status`). It is also a proxy to
itself. Each request's headers are kept too."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class StandIn(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Answer)
        self.request_lines: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.status = 200
        self.calls: list[dict[str, Any]] = []
        self.answer: dict[str, Any] = {"result": "0x7a69"}  # 31337, anvil's chain id
        self.body: bytes | None = None  # when set, answered as it is (no JSON-RPC object)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Answer(BaseHTTPRequestHandler):
    server: StandIn

    def do_POST(self) -> None:
        self.server.request_lines.append(self.requestline)
        self.server.headers.append(dict(self.headers))
        call = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.calls.append(call)
        body = (
            self.server.body
            or json.dumps({"jsonrpc": "2.0", "id": call["id"], **self.server.answer}).encode()
        )
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@contextmanager
def serving() -> Iterator[StandIn]:
    """A StandIn serving in a daemon thread, shut down and closed when the block ends."""
    node = StandIn()
    thread = threading.Thread(target=node.serve_forever, daemon=True)
    thread.start()
    try:
        yield node
    finally:
        node.shutdown()
        node.server_close()
