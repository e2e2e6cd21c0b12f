"""Accord's calls to agents are signed by the operator (RFC 9421, tag "accord-call") and an
agent checks them with `verify_accord_call`: unsigned calls, calls by another key, replays,
calls signed for another URL or body, and signatures made for the other direction are refused.
The runtimes and the remote signer sign what they send, seen by real servers on 127.0.0.1."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from accord.identity.http_auth import AccordAuth
from accord.identity.http_signatures import (
    CALL_TAG,
    BadDigest,
    BadSignature,
    ExpiredSignature,
    MissingSignature,
    NonceMemory,
    ReplayedNonce,
    Target,
    UntrustedSigner,
    sign_request,
    verify_accord_call,
    verify_request,
)
from accord.identity.remote_signing import EndpointSigner
from accord.identity.runtimes import A2ARuntime, AgentRuntimeError, HttpRuntime
from accord.ledger.signing import Ed25519Signer, b64url
from tests.stand_in import Handle, Reply, StandIn, json_reply, starter

OPERATOR = Ed25519Signer.generate()
URL = "https://agent.example/run"
BODY = b'{"item": {"item_id": "i1"}}'
JSON = "application/json"
ITEM = {"item_id": "i1", "capability": "arithmetic", "prompt": "p", "payload": {}}


def _call(
    url: str = URL, body: bytes = BODY, *, signer: Ed25519Signer = OPERATOR, **options: Any
) -> dict[str, str]:
    """The headers of accord's POST `url` with `body`, signed by `signer`."""
    return sign_request(signer, "POST", url, body, content_type=JSON, tag=CALL_TAG, **options)


def _verify(headers: Any, *, url: str = URL, body: bytes = BODY, **options: Any) -> str:
    options.setdefault("nonces", NonceMemory())
    return verify_accord_call("POST", url, headers, body, OPERATOR.did, **options)


# -- the verifier -------------------------------------------------------------------------------


def test_accords_call_verifies_and_names_the_operator() -> None:
    headers = _call()
    assert _verify(headers) == OPERATOR.did
    pairs = [(name.upper(), value) for name, value in headers.items()]  # names in any case
    assert _verify(pairs) == OPERATOR.did
    assert 'tag="accord-call"' in headers["Signature-Input"]


def test_an_unsigned_call_is_refused() -> None:
    with pytest.raises(MissingSignature, match="not signed"):
        _verify({"Content-Type": JSON})


def test_a_call_signed_by_another_key_is_refused() -> None:
    stranger = Ed25519Signer.generate()
    with pytest.raises(UntrustedSigner, match=r"only .* is trusted") as raised:
        _verify(_call(signer=stranger))
    assert raised.value.signer == stranger.did


def test_a_replayed_call_is_refused() -> None:
    nonces = NonceMemory()
    headers = _call()
    _verify(headers, nonces=nonces)
    with pytest.raises(ReplayedNonce, match="already used"):
        _verify(headers, nonces=nonces)


@pytest.mark.parametrize(
    "elsewhere",
    ["https://agent.example/sign", "https://other.example/run", "http://agent.example/run"],
)
def test_a_call_signed_for_another_url_is_refused(elsewhere: str) -> None:
    with pytest.raises(BadSignature, match="does not verify"):
        _verify(_call(elsewhere))


def test_a_call_with_another_body_is_refused() -> None:
    with pytest.raises(BadDigest, match="does not match"):
        _verify(_call(), body=b'{"item": {"item_id": "i2"}}')


def test_an_old_call_is_refused() -> None:
    with pytest.raises(ExpiredSignature):
        _verify(_call(created=int(time.time()) - 3600, lifetime=60))


def test_a_signature_for_one_direction_is_refused_in_the_other() -> None:
    """The operator's signature on a request to the service (tag "accord") is not a call to an
    agent, and accord's call to an agent is not a request to the service."""
    to_service = sign_request(OPERATOR, "POST", URL, BODY, content_type=JSON)
    with pytest.raises(MissingSignature, match='no signature tagged "accord-call"'):
        _verify(to_service)
    fields = [(name.lower(), value) for name, value in _call().items()]
    with pytest.raises(MissingSignature, match='no signature tagged "accord"'):
        verify_request("POST", Target.from_url(URL), fields, BODY, nonces=NonceMemory())


def test_accord_auth_signs_a_call_as_it_is_sent() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={})

    auth = AccordAuth(OPERATOR, tag=CALL_TAG)
    with httpx.Client(transport=httpx.MockTransport(handler), auth=auth) as client:
        client.post(URL, json=ITEM)
    [request] = seen
    assert _verify(request.headers.items(), body=request.content) == OPERATOR.did


# -- what accord sends, as a real server sees it -------------------------------------------------


@pytest.fixture
def serve(request: pytest.FixtureRequest) -> Callable[[Handle], StandIn]:
    return starter(request)


def _checking(reply: Callable[[dict[str, Any]], Reply]) -> tuple[Handle, list[str]]:
    """A handler that verifies each request as accord's call (the URL its Host and path) and
    answers `reply(request JSON)`, or 401; the outcomes are listed."""
    nonces = NonceMemory()
    outcomes: list[str] = []

    def handle(path: str, headers: dict[str, str], body: bytes) -> Reply:
        try:
            outcomes.append(
                verify_accord_call(
                    "POST", f"http://{headers['host']}{path}", headers, body, OPERATOR.did, nonces
                )
            )
        except Exception as exc:
            outcomes.append(f"refused: {exc}")
            return json_reply(401, {"error": str(exc)})
        return reply(json.loads(body))

    return handle, outcomes


def test_the_http_runtime_signs_each_item(serve: Callable[[Handle], StandIn]) -> None:
    handle, outcomes = _checking(lambda request: json_reply(200, {"answer": 35}))
    server = serve(handle)
    runtime = HttpRuntime(server.url, 5, allow_private=True, operator=OPERATOR)
    assert runtime.answer(ITEM) == 35
    assert runtime.answer(ITEM) == 35  # a fresh nonce each time
    assert outcomes == [OPERATOR.did, OPERATOR.did]
    unsigned = HttpRuntime(server.url, 5, allow_private=True)
    with pytest.raises(AgentRuntimeError, match="HTTP 401"):
        unsigned.answer(ITEM)
    assert outcomes[-1].startswith("refused: the request is not signed")


def test_the_a2a_runtime_signs_each_message(serve: Callable[[Handle], StandIn]) -> None:
    def reply(request: dict[str, Any]) -> Reply:
        message = {"role": "ROLE_AGENT", "parts": [{"data": {"answer": 35}}]}
        result = {"message": message}
        return json_reply(200, {"jsonrpc": "2.0", "id": request["id"], "result": result})

    handle, outcomes = _checking(reply)
    server = serve(handle)
    runtime = A2ARuntime(server.url + "/rpc", timeout=5, allow_private=True, operator=OPERATOR)
    assert runtime.answer(ITEM) == 35
    assert outcomes == [OPERATOR.did]


def test_the_remote_signer_asks_in_a_signed_call(serve: Callable[[Handle], StandIn]) -> None:
    agent = Ed25519Signer.generate()

    def reply(request: dict[str, Any]) -> Reply:
        return json_reply(200, {"sig": b64url(agent.sign(request["event"].encode()))})

    handle, outcomes = _checking(reply)
    server = serve(handle)
    signer = EndpointSigner(agent.did, server.url + "/run", allow_private=True, operator=OPERATOR)
    assert signer.sign(b'{"kind": "x"}')  # the agent's signature, checked by the signer
    assert outcomes == [OPERATOR.did]
    assert server.requests[0][0] == "/sign"
