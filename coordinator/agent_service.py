"""A small HTTP agent service: the reference agent (the exam skills) behind `POST /run`.

    python -m accord.coordinator.agent_service --port P [--host 127.0.0.1] [--did DID]
                                        [--fail-rate 0] [--delay 0] [--seed N]
                                        [--trust OPERATOR_DID [--public-url URL]]
    python -m accord.coordinator.agent_service --stdio      (one item on stdin, answer on stdout)

Protocol (what `accord.identity.runtimes.HttpRuntime` speaks, for exams and team work alike):

    POST /run     {"item": {item_id, capability, prompt, payload}}  ->  200 {"answer": ...,
                  "did": DID}; 400 for a malformed request, 413 for a body over 1 MiB,
                  422 for an item the reference agent cannot solve, 500 for an injected
                  failure (`--fail-rate`)
    GET /health   200 {"status": "ok", "did": DID}

With `--trust OPERATOR_DID` (`make_server(..., trust=...)`) every POST must be a call from
accord: signed by that operator's did:key (RFC 9421, tag "accord-call", checked by
`accord.identity.http_signatures.verify_accord_call` for this method, URL, headers and body, a fresh
nonce within 5 minutes). Anything else gets 401 `{"error": why, "kind": "unauthenticated"}`
with `WWW-Authenticate` and `Accept-Signature`. The URL checked is `--public-url` (the origin
accord calls this agent at, behind a proxy) or `http://` + the request's Host, plus its path.
Without `--trust` POSTs are not checked.

`--stdio` speaks the `command` runtime's protocol: the item as JSON on stdin, the answer as
JSON on stdout (exit 1 with the reason on stderr when there is none).

It binds 127.0.0.1 by default and refuses any non-loopback address unless `--host` names it
explicitly. `--delay` seconds are slept before each answer (to test timeouts). SIGTERM and
SIGINT stop it cleanly (exit 0). It prints `listening on http://HOST:PORT` once it is ready.
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import random
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any

from accord.identity.challenges import JSON
from accord.identity.http_signatures import (
    CALL_TAG,
    AuthError,
    NonceMemory,
    Target,
    challenge_headers,
    verify_accord_call,
)
from accord.identity.runtimes import AgentRuntimeError, ReferenceRuntime

# Not imported from coordinator.adapters / identity.agents: those pull in SQLAlchemy, which
# would triple the start-up time of every agent process (identity.runtimes loads the openai
# client only when a model is asked).

DEFAULT_HOST = "127.0.0.1"
DEFAULT_DID = "did:example:reference-agent"
MAX_REQUEST_BYTES = 1 << 20


class TaskError(Exception):
    """A request the service cannot answer: `status` says which HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def answer_request(request: Any) -> JSON:
    """The reference agent's answer to one request body, `{"item": {...}}`.

    Raises TaskError (400) for a malformed request and (422) for an item it cannot solve.
    """
    if not isinstance(request, dict) or not isinstance(request.get("item"), dict):
        raise TaskError(400, 'the request must be a JSON object {"item": {...}}')
    try:
        return ReferenceRuntime().answer(request["item"])
    except AgentRuntimeError as exc:
        raise TaskError(422, f"cannot solve the item: {exc}") from exc


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class AgentServer(ThreadingHTTPServer):
    """The service: a ThreadingHTTPServer with the agent's settings on it."""

    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        *,
        did: str = DEFAULT_DID,
        fail_rate: float = 0.0,
        delay: float = 0.0,
        seed: int | None = None,
        trust: str | None = None,
        public_url: str | None = None,
    ) -> None:
        if not 0.0 <= fail_rate <= 1.0:
            raise ValueError(f"fail_rate must be between 0 and 1, not {fail_rate}")
        if not delay >= 0.0:
            raise ValueError(f"delay must not be negative, not {delay}")
        if public_url is not None:
            origin = Target.from_url(public_url)  # ValueError for anything but http(s)://host
            public_url = f"{origin.scheme}://{origin.authority}"
        self.did = did
        self.fail_rate = fail_rate
        self.delay = delay
        self.trust = trust
        self.public_url = public_url
        self.nonces = NonceMemory()
        self.rng = random.Random(seed)
        self.rng_lock = threading.Lock()
        self.stopping = threading.Event()
        super().__init__(address, _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else host
        return f"http://{name}:{port}"

    def should_fail(self) -> bool:
        with self.rng_lock:
            return self.fail_rate > 0 and self.rng.random() < self.fail_rate


def reply_json(
    handler: BaseHTTPRequestHandler,
    status: int,
    value: JSON,
    headers: Mapping[str, str] | None = None,
) -> None:
    """Answer `value` as JSON with `status` (and `headers`), then close the connection; a
    caller that hung up first is not an error."""
    data = json.dumps(value).encode()
    try:
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for name, text in (headers or {}).items():
            handler.send_header(name, text)
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    handler.close_connection = True


class _Handler(BaseHTTPRequestHandler):
    server: AgentServer
    protocol_version = "HTTP/1.1"

    def _reply(self, status: int, value: JSON, headers: dict[str, str] | None = None) -> None:
        reply_json(self, status, value, headers)

    def refused_call(self, body: bytes) -> bool:
        """With `trust` set, check that this request is accord's call, signed by the trusted
        operator (`verify_accord_call`); when it is not, reply 401 and return True."""
        operator = self.server.trust
        if operator is None:
            return False
        origin = self.server.public_url
        if origin is None:
            host = self.headers.get("Host")
            if not host:
                self._refuse("the request has no Host header: send the host it is signed for")
                return True
            origin = f"http://{host}"
        try:
            verify_accord_call(
                self.command,
                origin + self.path,
                self.headers.items(),
                body,
                operator,
                self.server.nonces,
            )
        except AuthError as exc:
            self._refuse(f"not a call from accord: {exc}")
            return True
        except ValueError as exc:  # a Host header that makes no URL
            self._refuse(f"the request's host does not make a URL: {exc}")
            return True
        return False

    def _refuse(self, reason: str) -> None:
        self._reply(401, {"error": reason, "kind": "unauthenticated"}, challenge_headers(CALL_TAG))

    def do_GET(self) -> None:
        if self.path != "/health":
            self._reply(404, {"error": f"no route GET {self.path}"})
            return
        self._reply(200, {"status": "ok", "did": self.server.did})

    def do_POST(self) -> None:
        if self.path != "/run":
            self._reply(404, {"error": f"no route POST {self.path}"})
            return
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._reply(411, {"error": "a Content-Length is required"})
            return
        if length < 0 or length > MAX_REQUEST_BYTES:
            self._reply(413, {"error": "the request is larger than 1 MiB"})
            return
        body = self.rfile.read(length)
        if self.refused_call(body):
            return
        if self.server.delay and self.server.stopping.wait(self.server.delay):
            self._reply(503, {"error": "the agent service is stopping"})
            return
        if self.server.should_fail():
            self._reply(500, {"error": "injected failure (--fail-rate)"})
            return
        try:
            answer = answer_request(json.loads(body))
        except json.JSONDecodeError as exc:
            self._reply(400, {"error": f"the request is not JSON: {exc}"})
            return
        except RecursionError:
            self._reply(400, {"error": "the request's JSON is nested too deep"})
            return
        except TaskError as exc:
            self._reply(exc.status, {"error": str(exc)})
            return
        self._reply(200, {"answer": answer, "did": self.server.did})

    def log_message(self, format: str, *args: Any) -> None:
        pass


def make_server(
    port: int,
    *,
    host: str = DEFAULT_HOST,
    allow_remote: bool = False,
    did: str = DEFAULT_DID,
    fail_rate: float = 0.0,
    delay: float = 0.0,
    seed: int | None = None,
    trust: str | None = None,
    public_url: str | None = None,
) -> AgentServer:
    """A bound (not yet serving) agent service. With `trust` (the operator's did:key) every
    POST must be accord's call signed by it (401 otherwise), checked against `public_url`'s
    origin when given, else the request's Host. Raises ValueError for a non-loopback `host`
    without `allow_remote` or a `public_url` that is not http(s), and OSError when the
    address cannot be bound."""
    if not allow_remote and not is_loopback(host):
        raise ValueError(
            f"refusing to listen on the non-loopback address {host!r} (name it with --host)"
        )
    return AgentServer(
        (host, port),
        did=did,
        fail_rate=fail_rate,
        delay=delay,
        seed=seed,
        trust=trust,
        public_url=public_url,
    )


def serve_in_thread(
    port: int = 0,
    *,
    host: str = DEFAULT_HOST,
    did: str = DEFAULT_DID,
    fail_rate: float = 0.0,
    delay: float = 0.0,
    seed: int | None = None,
    trust: str | None = None,
) -> tuple[AgentServer, threading.Thread]:
    """Start the service (loopback only) in a daemon thread; `port` 0 picks a free one;
    `trust` as for `make_server`.

    Stop it with `stop(server, thread)`.
    """
    server = make_server(
        port, host=host, did=did, fail_rate=fail_rate, delay=delay, seed=seed, trust=trust
    )
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    return server, thread


def stop(server: AgentServer, thread: threading.Thread | None = None) -> None:
    """Stop serving, wake delayed requests, close the socket and join the thread."""
    server.stopping.set()
    server.shutdown()
    server.server_close()
    if thread is not None:
        thread.join(timeout=5)


def run_stdio() -> int:
    """Answer one item read as JSON from stdin; print the answer JSON (exit 1 when none)."""
    try:
        answer = answer_request({"item": json.loads(sys.stdin.read())})
    except (json.JSONDecodeError, TaskError) as exc:
        print(f"agent_service: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(answer))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m accord.coordinator.agent_service",
        description="Serve the reference agent over HTTP (POST /run, GET /health).",
    )
    parser.add_argument("--port", type=int, help="the port to listen on")
    parser.add_argument("--host", help=f"the address to bind (default {DEFAULT_HOST})")
    parser.add_argument("--did", default=DEFAULT_DID, help="the agent's DID, reported back")
    parser.add_argument("--fail-rate", type=float, default=0.0, help="fraction answered 500")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds to wait per task")
    parser.add_argument("--seed", type=int, default=None, help="seed for --fail-rate")
    parser.add_argument(
        "--trust",
        metavar="OPERATOR_DID",
        help="answer only calls from accord signed by this operator did:key (401 otherwise)",
    )
    parser.add_argument(
        "--public-url", help="the origin accord calls this agent at (default: the Host header)"
    )
    parser.add_argument("--stdio", action="store_true", help="answer one item on stdin")
    args = parser.parse_args(argv)
    if args.stdio:
        return run_stdio()
    if args.port is None:
        parser.error("--port is required (or --stdio)")
    try:
        server = make_server(
            args.port,
            host=args.host or DEFAULT_HOST,
            allow_remote=args.host is not None,
            did=args.did,
            fail_rate=args.fail_rate,
            delay=args.delay,
            seed=args.seed,
            trust=args.trust,
            public_url=args.public_url,
        )
    except (ValueError, OSError) as exc:
        print(f"agent_service: {exc}", file=sys.stderr)
        return 2

    def on_signal(signum: int, frame: FrameType | None) -> None:
        server.stopping.set()
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(f"listening on {server.url}", flush=True)
    try:
        server.serve_forever(poll_interval=0.05)
    finally:
        server.server_close()
    # Give in-flight answers a moment to be written before the process exits.
    time.sleep(0.05)
    return 0


if __name__ == "__main__":
    sys.exit(main())
