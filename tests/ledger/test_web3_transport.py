"""accord's JSON-RPC transport, against a real HTTP server on loopback that stands in for a
node and for a proxy (it records each request line, whose absolute URL shows a proxied
request, and answers every call with what the test sets):

* the transport (ledger/chain/transport.py) reads the environment's proxy settings once, and
  obeys them; it sends credentials from the URL or ~/.netrc, keeps a connection alive and
  opens a new one when the node closed it, and reports an HTTP error as the node unavailable;
* `ViewCalls` encodes a view function's call as the ABI says, decodes its answer, and turns a
  node's error or a malformed answer into a ChainError that names the function.

Its answers from the real contracts on anvil are checked in tests/integration (the escrow's
credits and records against the state machine's model, the registry's sizes and roots)."""

from __future__ import annotations

import gc
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from eth_abi.abi import encode
from eth_utils.crypto import keccak
from web3.types import RPCEndpoint

from accord.ledger.chain.transport import EndpointProvider, route_for
from accord.ledger.chain.web3_chain import ViewCalls, make_web3
from accord.ledger.devnet import find_free_port
from accord.ledger.errors import ChainError, ChainUnavailableError
from tests.rpc_stand_in import StandIn, serving

NOWHERE = f"http://127.0.0.1:{find_free_port()}"
"""A loopback port nothing listens on (found free when the tests were collected)."""


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    with serving() as node:
        yield node


@pytest.fixture(autouse=True)
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("NETRC", "/nonexistent/netrc")  # no login but a test's own


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
    monkeypatch.setenv("HTTP_PROXY", NOWHERE)  # nothing listens: a proxied call would fail
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    assert make_web3(stand_in.url).eth.chain_id == 31337
    assert stand_in.request_lines and set(stand_in.request_lines) == {"POST / HTTP/1.1"}


def test_the_environment_is_read_when_the_web3_is_made_not_on_each_call(
    stand_in: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    w3 = make_web3(stand_in.url)
    monkeypatch.setenv("HTTP_PROXY", NOWHERE)
    assert w3.eth.chain_id == 31337
    assert stand_in.request_lines and set(stand_in.request_lines) == {"POST / HTTP/1.1"}


def test_credentials_in_the_url_or_netrc_are_sent_as_basic_auth(
    stand_in: StandIn, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with_login = stand_in.url.replace("http://", "http://ada:s%40cret@")
    assert make_web3(with_login).eth.chain_id == 31337
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login bob password hunter2\n")
    monkeypatch.setenv("NETRC", str(netrc))
    assert make_web3(stand_in.url).eth.chain_id == 31337
    assert [h.get("Authorization") for h in stand_in.headers] == [
        "Basic YWRhOnNAY3JldA==",  # ada:s@cret
        "Basic Ym9iOmh1bnRlcjI=",  # bob:hunter2
    ]


def test_an_http_error_status_is_the_node_unavailable(stand_in: StandIn) -> None:
    stand_in.status = 502
    views = ViewCalls(make_web3(stand_in.url), stand_in.url, ADDRESS, ABI)
    with pytest.raises(ChainUnavailableError, match="escrows"):
        views.call("escrows", bytes(32))


def _keep_alive_node(
    answers: int,
) -> tuple[str, list[int], threading.Semaphore, threading.Thread]:
    """A node that answers each connection's first call, keeping it alive as HTTP/1.1 says,
    then closes it from its end (as an idle timeout does) and releases the semaphore; the
    ports it was called from."""
    listener = socket.create_server(("127.0.0.1", 0))
    peers: list[int] = []
    closed = threading.Semaphore(0)

    def serve() -> None:
        with listener:
            for _ in range(answers):
                connection, (_, port) = listener.accept()
                with connection:
                    request = b""
                    while b"\r\n\r\n" not in request:
                        request += connection.recv(65536)
                    head, _, body = request.partition(b"\r\n\r\n")
                    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                    while len(body) < length:
                        body += connection.recv(65536)
                    peers.append(port)
                    answer = b'{"jsonrpc": "2.0", "id": 0, "result": "0x10"}'
                    connection.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(answer)}\r\n\r\n".encode()
                        + answer
                    )
                closed.release()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{listener.getsockname()[1]}", peers, closed, thread


def test_a_connection_the_node_closed_is_replaced_not_failed() -> None:
    url, peers, closed, thread = _keep_alive_node(answers=3)
    w3 = make_web3(url)
    for _ in range(3):
        assert w3.eth.block_number == 16
        assert closed.acquire(timeout=60)  # the node closed it before the next call
    thread.join(timeout=60)
    assert len(set(peers)) == 3  # a new connection each time the node had closed the last


def test_a_provider_collected_in_a_cycle_closes_its_connection_itself() -> None:
    """No socket of the transport is left to the garbage collector (a ResourceWarning): one
    still open when its provider goes, in a reference cycle, is closed."""
    listener = socket.create_server(("127.0.0.1", 0))
    ended = threading.Event()

    def serve() -> None:
        with listener, listener.accept()[0] as connection:
            connection.recv(65536)
            answer = b'{"jsonrpc": "2.0", "id": 0, "result": "0x10"}'
            connection.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(answer)}\r\n\r\n".encode()
                + answer
            )
            while connection.recv(65536):  # kept alive until the client closes it
                pass
            ended.set()

    threading.Thread(target=serve, daemon=True).start()
    unraisable: list[object] = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        provider = EndpointProvider(f"http://127.0.0.1:{listener.getsockname()[1]}", 60.0)
        assert provider.make_request(RPCEndpoint("eth_blockNumber"), [])["result"] == "0x10"
        provider.cycle = provider  # type: ignore[attr-defined]
        del provider
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert ended.wait(timeout=60)
    assert unraisable == []


def test_routes_through_proxies_are_worked_out_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://carol:pw@proxy.invalid:3128")
    route = route_for("https://node.invalid/rpc?key=1")
    assert (route.host, route.port, route.tls) == ("proxy.invalid", 3128, False)
    assert route.tunnel == ("node.invalid", 443)
    assert route.target == "/rpc?key=1"
    assert route.tunnel_headers == {"Proxy-Authorization": "Basic Y2Fyb2w6cHc="}
    monkeypatch.setenv("HTTPS_PROXY", "https://proxy.invalid:3128")
    with pytest.raises(ValueError, match="TLS to the node inside TLS"):
        route_for("https://node.invalid/rpc")
    with pytest.raises(ValueError, match="not an http"):
        make_web3("ws://node.invalid:8546")


ABI: list[dict[str, Any]] = [
    {
        "type": "function",
        "name": "escrows",
        "stateMutability": "view",
        "inputs": [{"name": "taskId", "type": "bytes32"}],
        "outputs": [
            {"name": "requester", "type": "address"},
            {"name": "deposit", "type": "uint256"},
            {"name": "state", "type": "uint8"},
        ],
    },
    {"type": "function", "name": "withdraw", "stateMutability": "nonpayable", "inputs": []},
]
ADDRESS = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
REQUESTER = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8"


def test_a_view_call_is_one_eth_call_encoded_and_decoded_as_the_abi_says(
    stand_in: StandIn,
) -> None:
    answer = encode(["address", "uint256", "uint8"], [REQUESTER, 10**18, 1])
    stand_in.answer = {"result": "0x" + answer.hex()}
    views = ViewCalls(make_web3(stand_in.url), stand_in.url, ADDRESS, ABI)
    task = bytes(range(32))
    assert views.call("escrows", task) == (REQUESTER, 10**18, 1)
    [call] = stand_in.calls
    selector = keccak(text="escrows(bytes32)")[:4]
    assert call["method"] == "eth_call"
    assert call["params"] == [{"to": ADDRESS, "data": "0x" + (selector + task).hex()}, "latest"]


@pytest.mark.parametrize(
    ("answer", "named"),
    [
        ({"error": {"code": 3, "message": "execution reverted"}}, "execution reverted"),
        ({"result": "0x1234"}, "not ABI-encoded (address, uint256, uint8)"),
        ({"result": "nonsense"}, "not ABI-encoded"),
        ({"result": None}, "not ABI-encoded"),
        ({"error": {"code": -32000, "message": "x" * 10_000}}, "x" * 200),
    ],
)
def test_an_error_or_a_malformed_answer_is_a_chain_error_naming_the_function(
    stand_in: StandIn, answer: dict[str, Any], named: str
) -> None:
    stand_in.answer = answer
    views = ViewCalls(make_web3(stand_in.url), stand_in.url, ADDRESS, ABI)
    with pytest.raises(ChainError, match="escrows") as raised:
        views.call("escrows", bytes(32))
    assert named in str(raised.value) and len(str(raised.value)) < 400
    assert type(raised.value) is ChainError  # the node answered: not "unavailable"


def test_a_node_that_does_not_answer_is_unavailable_and_a_non_view_is_unknown() -> None:
    url = NOWHERE
    views = ViewCalls(make_web3(url), url, ADDRESS, ABI)
    with pytest.raises(ChainUnavailableError):
        views.call("escrows", bytes(32))
    with pytest.raises(KeyError):
        views.call("withdraw")  # not a view: it is sent as a transaction, never called


@pytest.mark.parametrize(
    "body",
    [
        b'["not", "an", "object"]',
        b"not json",
        b" ",
        b"\xff\xfe not UTF-8",
        b"[" * 100_000,  # deeper than the recursion limit (accord/_stack.py)
    ],
    ids=["list", "not-json", "blank", "not-utf8", "deep"],
)
def test_an_answer_that_is_no_json_rpc_object_is_a_chain_error(
    stand_in: StandIn, body: bytes
) -> None:
    stand_in.body = body
    views = ViewCalls(make_web3(stand_in.url), stand_in.url, ADDRESS, ABI)
    with pytest.raises(ChainError, match="escrows") as raised:
        views.call("escrows", bytes(32))
    assert type(raised.value) is ChainError  # the node answered: not "unavailable"
