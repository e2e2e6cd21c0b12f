"""Event streams are capped per caller and in all: A2A `SubscribeToTask` and
`SendStreamingMessage` (per signing DID) and `GET /conversations/{id}/events` (per client
address). Over a cap the answer comes before anything opens or is posted: a JSON-RPC error on
`/a2a`, 429 problem+json on the plain route. A stream's slot comes back when it ends, by
itself or because the client went away. Served for real by uvicorn on 127.0.0.1."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import httpx
import pytest

from accord.api.routes.deps import ApiConfig, ApiState
from accord.api.streams import StreamSlots
from accord.coordinator.conversation import CONVERSATION_OPENED
from accord.identity.http_auth import AccordAuth
from accord.ledger.signing import Ed25519Signer, Signer
from accord.market.tasks import TASK_POSTED
from tests.api.test_app import FIGURES, SUM_RIGHT, World, assert_problem, build_world
from tests.serving import serve

CONVERSATION = "conv-caps-test"
SPEC = {
    "title": "Add these",
    "budget": "0.1eth",
    "parts": [{"id": "sum", "capability": "arithmetic", "input": FIGURES}],
    "checks": [SUM_RIGHT],
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    world = build_world(tmp_path_factory.mktemp("caps-world") / "home", bidders=("ada",))
    leader = Ed25519Signer.generate()
    world.context.market.ledger.append(
        leader,
        CONVERSATION_OPENED,
        subject=CONVERSATION,
        body={
            "id": CONVERSATION,
            "task": "task-caps",
            "parent": None,
            "depth": 0,
            "leader": leader.did,
            "members": [leader.did],
            "max_turns": 8,
            "title": "open",
        },
    )
    return world


@pytest.fixture(scope="module")
def task_id(world: World) -> str:
    """A task taking bids: not terminal, so a subscription to it stays open."""
    with serve(world.app()) as url:
        posted = call(url, world.signers["req"], SPEC)
    assert posted.status_code == 201, posted.text
    return str(posted.json()["task_id"])


@contextmanager
def service(world: World, per_caller: int, total: int) -> Iterator[tuple[str, StreamSlots]]:
    config = ApiConfig(
        rate=1000.0, burst=10_000.0, streams_per_caller=per_caller, streams_total=total
    )
    app = world.app(config)
    state: ApiState = app.state.accord
    with serve(app) as url:
        yield url, state.streams


def call(url: str, signer: Signer, spec: dict[str, Any]) -> httpx.Response:
    with httpx.Client(base_url=url, auth=AccordAuth(signer), timeout=30) as client:
        return client.post("/tasks", json=spec)


def posting(message_id: str) -> dict[str, Any]:
    """The params of a message posting `SPEC`."""
    return {
        "message": {
            "messageId": message_id,
            "role": "ROLE_USER",
            "parts": [{"data": SPEC, "mediaType": "application/json"}],
        }
    }


def rpc_body(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def open_a2a(
    stack: ExitStack, url: str, signer: Signer, method: str, params: dict[str, Any]
) -> httpx.Response:
    """A streaming A2A call, entered on `stack` (closed with it)."""
    client = stack.enter_context(httpx.Client(base_url=url, auth=AccordAuth(signer), timeout=30))
    return stack.enter_context(
        client.stream("POST", "/a2a", json=rpc_body(method, params), headers={"A2A-Version": "1.0"})
    )


def subscribe(stack: ExitStack, url: str, signer: Signer, task_id: str) -> httpx.Response:
    return open_a2a(stack, url, signer, "SubscribeToTask", {"id": task_id})


def first_event(stack: ExitStack, response: httpx.Response) -> dict[str, Any]:
    """The first SSE `data:` of an open stream, which stays open until `stack` closes (the
    lines are read from one iterator kept on `stack`: dropping it would close the stream)."""
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    lines = response.iter_lines()
    stack.callback(lines.close)
    for line in lines:
        if line.startswith("data:"):
            data: dict[str, Any] = json.loads(line.removeprefix("data:"))
            return data
    raise AssertionError("the stream ended without an event")


def streaming(response: httpx.Response) -> bool:
    """Whether the response is an open event stream (its slot is taken before its head is
    sent; the conversation has no message yet, so no event comes at once)."""
    return response.status_code == 200 and response.headers["content-type"].startswith(
        "text/event-stream"
    )


def refused_rpc(response: httpx.Response, cap: str) -> dict[str, Any]:
    """A JSON-RPC error (HTTP 200, not a stream) refusing a stream over `cap`."""
    response.read()
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == -32000
    [info] = [d for d in error["data"] if d["@type"].endswith("ErrorInfo")]
    assert info["reason"] == "TOO_MANY_STREAMS"
    assert info["metadata"]["status"] == "429" and info["metadata"]["reason"] == cap
    return error


def events(stack: ExitStack, url: str, follow: bool = True) -> httpx.Response:
    """`GET /conversations/{id}/events`, unsigned (capped per client address)."""
    client = stack.enter_context(httpx.Client(base_url=url, timeout=30))
    path = f"/conversations/{CONVERSATION}/events?follow={str(follow).lower()}"
    return stack.enter_context(client.stream("GET", path))


def wait_until_closed(slots: StreamSlots) -> None:
    """The server notices a client going away at its next poll (a quarter second); the test
    waits for that, as long as it takes, rather than for a set time."""
    deadline = time.monotonic() + 30
    while slots.open() > 0:
        assert time.monotonic() < deadline, f"{slots.open()} streams still open"
        time.sleep(0.05)


def test_streams_over_the_per_caller_cap_are_refused_and_come_back(
    world: World, task_id: str
) -> None:
    req, ada = world.signers["req"], world.signers["ada"]
    store = world.context.market.ledger.store
    with service(world, per_caller=2, total=10) as (url, slots):
        with ExitStack() as stack:
            for _ in range(2):
                assert first_event(stack, subscribe(stack, url, req, task_id))["result"]["task"]
            assert slots.open(f"did {req.did}") == 2
            with ExitStack() as inner:
                error = refused_rpc(subscribe(inner, url, req, task_id), "streams-per-caller")
            assert req.did in error["message"] and "close one" in error["message"]
            # a streaming post over the cap posts nothing
            posted = len(store.find(kind=TASK_POSTED))
            with ExitStack() as inner:
                over = open_a2a(inner, url, req, "SendStreamingMessage", posting("m-over"))
                refused_rpc(over, "streams-per-caller")
            assert len(store.find(kind=TASK_POSTED)) == posted
            # another caller has its own
            assert first_event(stack, subscribe(stack, url, ada, task_id))
            assert slots.open() == 3
        # the clients went away: every slot comes back, and req streams again
        wait_until_closed(slots)
        with ExitStack() as stack:
            for _ in range(2):
                assert first_event(stack, subscribe(stack, url, req, task_id))
            streamed = open_a2a(stack, url, ada, "SendStreamingMessage", posting("m-ada"))
            assert first_event(stack, streamed)["result"]["task"]["status"]["state"]
        wait_until_closed(slots)


def test_streams_over_the_total_cap_are_refused_and_come_back(world: World, task_id: str) -> None:
    req, ada, carol = world.signers["req"], world.signers["ada"], world.signers["carol"]
    with service(world, per_caller=2, total=3) as (url, slots):
        with ExitStack() as stack:
            first_event(stack, subscribe(stack, url, req, task_id))
            first_event(stack, subscribe(stack, url, ada, task_id))
            assert streaming(events(stack, url))
            assert slots.open() == 3
            with ExitStack() as inner:
                refused_rpc(subscribe(inner, url, carol, task_id), "streams-total")
            with ExitStack() as inner:
                refused = events(inner, url)
                refused.read()
                body = assert_problem(refused, 429)
                assert body["reason"] == "streams-total" and "try again" in body["detail"]
        wait_until_closed(slots)
        with ExitStack() as stack:
            first_event(stack, subscribe(stack, url, carol, task_id))
            assert streaming(events(stack, url))
            assert streaming(events(stack, url))
            with ExitStack() as inner:  # the address's own cap
                refused = events(inner, url)
                refused.read()
                assert assert_problem(refused, 429)["reason"] == "streams-per-caller"
        wait_until_closed(slots)


def test_a_stream_that_ends_by_itself_gives_its_slot_back(world: World) -> None:
    with service(world, per_caller=1, total=1) as (url, slots):
        for _ in range(3):  # each ends at once (follow=false), so the next one is admitted
            with ExitStack() as stack:
                response = events(stack, url, follow=False)
                assert response.status_code == 200
                assert "event: end" in response.read().decode()
            wait_until_closed(slots)
