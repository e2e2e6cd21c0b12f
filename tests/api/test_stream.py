"""The live conversation stream: `GET /conversations/{id}/events` as server-sent events, read
with httpx from a real uvicorn on 127.0.0.1 while a team conversation (nested one level) runs
in a thread over the service's own SQLite ledger."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from accord.coordinator.adapters import reference_adapter
from accord.coordinator.conversation import CONVERSATION_OPENED, Conversation, message_to_json
from accord.coordinator.policy import Member, RulePolicy
from accord.coordinator.runner import RunSettings, TeamRunner
from accord.coordinator.service import conversation_ids, replay_conversation
from accord.coordinator.work import JSON, AgentAdapter, SubTask
from accord.ledger.signing import Ed25519Signer
from tests.api.test_app import World, build_world
from tests.serving import serve
from tests.specs import invoice_parts

CAPS = ("arithmetic", "extraction")
TASK = "task-stream-test"
Part = tuple[str, str, dict[str, Any]]


def part_tuples(parts: list[dict[str, Any]]) -> list[Part]:
    """A spec's parts as `TeamRunner.run_task` takes them: `(id, capability, input)`."""
    return [(p["id"], p["capability"], p["input"]) for p in parts]


class SlowAdapter:
    """The reference agent, a little slow, so the stream is read while the team works; with
    a `gate`, it starts no work before the gate opens (the test opens it once the stream has
    delivered a message), so a loaded machine cannot finish the team before the stream reads."""

    def __init__(self, did: str, delay: float, gate: threading.Event | None = None) -> None:
        self.inner = reference_adapter(did)
        self.delay = delay
        self.gate = gate

    def run(self, task: SubTask) -> JSON:
        if self.gate is not None:
            self.gate.wait(60)
        time.sleep(self.delay)
        return self.inner.run(task)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build_world(tmp_path_factory.mktemp("stream-world") / "home", bidders=())


def team_runner(world: World, delay: float, gate: threading.Event | None = None) -> TeamRunner:
    signers: dict[str, Ed25519Signer] = {}
    adapters: dict[str, AgentAdapter] = {}
    members = []
    for name, caps, rep in (
        ("lead", CAPS, "9/10"),
        ("ann", ("arithmetic",), "8/10"),
        ("eve", ("extraction",), "8/10"),
        ("arith-0", ("arithmetic",), "1/10"),
        ("extr-0", ("extraction",), "1/10"),
    ):
        signer = Ed25519Signer.generate()
        signers[signer.did] = signer
        adapters[signer.did] = SlowAdapter(signer.did, delay, gate)
        members.append(Member(signer.did, name, caps, rep, f"{name}: agent for {caps}"))
    return TeamRunner(
        world.context.market.ledger,
        signers.__getitem__,
        adapters.__getitem__,
        members,
        RulePolicy(),
        RunSettings(timeout_s=90, max_depth=1),
    )


def read_events(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any], str | None]]:
    """(event, data, id) of each server-sent event."""
    event, data, event_id = "message", "", None
    for line in response.iter_lines():
        if not line:
            if data:
                yield event, json.loads(data), event_id
            event, data, event_id = "message", "", None
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                event = value
            elif field == "data":
                data += value
            elif field == "id":
                event_id = value


def test_stream_follows_a_live_nested_conversation(world: World) -> None:
    store = world.context.market.ledger.store
    streaming = threading.Event()  # the members work once the stream has delivered a message
    runner = team_runner(world, delay=0.05, gate=streaming)
    done = threading.Event()
    result: list[Conversation] = []

    def run() -> None:
        try:
            parts = part_tuples(invoice_parts())  # two parts of each capability: two batches
            result.append(runner.run_task(TASK, runner.directory[0], parts, "t", "both"))
        finally:
            done.set()

    with serve(world.app(), ws="none") as base:
        thread = threading.Thread(target=run)
        thread.start()
        deadline = time.monotonic() + 10
        while not (ids := conversation_ids(store, TASK)):
            assert time.monotonic() < deadline, "the conversation was never opened"
            time.sleep(0.01)
        root = ids[0]
        received: list[tuple[str, dict[str, Any], str | None]] = []
        live_before_done = 0
        with (
            httpx.Client(base_url=base, timeout=30) as client,
            client.stream("GET", f"/conversations/{root}/events") as response,
        ):
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            for item in read_events(response):
                if item[0] == "message" and not done.is_set():
                    live_before_done += 1
                    streaming.set()
                received.append(item)
        thread.join(30)

    [top] = result
    assert top.conv_id == root and top.state == "closed"
    kinds = [event for event, _, _ in received]
    assert kinds[-1] == "end" and kinds.count("end") == 1
    assert received[-1][1] == {"conv_id": root, "closed": True}
    messages = [data for event, data, _ in received if event == "message"]
    assert live_before_done > 0, "nothing arrived while the team was still working"

    # every message of the root and its nested children, in log order, none twice
    tree = {root} | {
        cid
        for cid in conversation_ids(store, TASK)
        if replay_conversation(store, cid).conversation.parent == root
    }
    assert len(tree) >= 2, "the run should have nested a sub-team"
    expected = sorted(
        (m.index, cid, m.turn, message_to_json(m.message))
        for cid in tree
        for m in replay_conversation(store, cid).messages
    )
    assert [(m["index"], m["conv_id"], m["turn"], m["message"]) for m in messages] == expected
    assert [int(event_id or -1) for event, _, event_id in received if event == "message"] == [
        m["index"] for m in messages
    ]
    for m in messages:
        assert m["speaker"] == m["message"]["speaker"]
        assert m["kind"] == m["message"]["kind"]
        assert m["state"] == m["message"]["next_state"]
        assert isinstance(m["text"], str) and m["text"]
        assert m["depth"] == (0 if m["conv_id"] == root else 1)
    assert messages[-1]["kind"] == "conclude" and messages[-1]["state"] == "closed"
    assert messages[-1]["conv_id"] == root

    # a finished conversation streams at once and ends; Last-Event-ID resumes after an entry
    with serve(world.app(), ws="none") as base, httpx.Client(base_url=base, timeout=10) as client:
        with client.stream("GET", f"/conversations/{root}/events") as response:
            again = list(read_events(response))
        assert [d for e, d, _ in again if e == "message"] == messages
        middle = messages[len(messages) // 2]["index"]
        with client.stream(
            "GET", f"/conversations/{root}/events", headers={"Last-Event-ID": str(middle)}
        ) as response:
            rest = [d for e, d, _ in read_events(response) if e == "message"]
        assert rest == [m for m in messages if m["index"] > middle]


def test_unknown_conversation_is_404_problem(world: World) -> None:
    with serve(world.app(), ws="none") as base:
        response = httpx.get(f"{base}/conversations/conv-none/events", timeout=10)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "conv-none" in response.json()["detail"]


def test_an_open_conversation_without_follow_ends_at_once(world: World, tmp_path: Path) -> None:
    """`follow=false` sends what is logged and ends, even while the conversation is open."""
    ledger = world.context.market.ledger
    leader = Ed25519Signer.generate()
    ledger.append(
        leader,
        CONVERSATION_OPENED,
        subject="conv-open-test",
        body={
            "id": "conv-open-test",
            "task": "task-open",
            "parent": None,
            "depth": 0,
            "leader": leader.did,
            "members": [leader.did],
            "max_turns": 8,
            "title": "open",
        },
    )
    with serve(world.app(), ws="none") as base:
        response = httpx.get(f"{base}/conversations/conv-open-test/events?follow=false", timeout=5)
    assert response.status_code == 200
    assert "event: end" in response.text and '"closed": false' in response.text
    del tmp_path
