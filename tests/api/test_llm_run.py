"""`POST /tasks/{id}/run` led by an LLM policy on any OpenAI-compatible endpoint: a local chat
server on 127.0.0.1 (needing no key, refusing JSON mode) plays a leader that reads each turn
prompt and answers the move it asks for; the team delivers. Bad options are 422."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from accord.coordinator.errors import PolicyError
from accord.coordinator.llm_policy import MODEL_VARIABLE, LLMPolicy, leader_policy
from accord.coordinator.policy import RulePolicy
from accord.identity.chat import OpenAIChat
from accord.identity.http_auth import AccordAuth
from tests.api.test_app import (
    World,
    assert_problem,
    build_world,
    commitment_json,
    post_task,
    reveal_json,
)
from tests.stand_in import Handle, Reply, StandIn, completion, json_reply, starter


@pytest.fixture
def start(request: pytest.FixtureRequest) -> Callable[[Handle], StandIn]:
    return starter(request)


_TEAM_LINE = re.compile(r"^- (did:key:\S+) \S+?(?: \(leader, you\))?: ([^;]*);", re.M)
_TASK_LINE = re.compile(r"^- (\S+) \(([^)]+)\): ", re.M)


def _section(prompt: str, title: str) -> str:
    return prompt.split(f"{title}:\n", 1)[1].split("\n\n", 1)[0]


def leader_model(request: dict[str, Any]) -> dict[str, Any]:
    """A leader that does what each turn prompt asks: plan, assign the first unassigned
    sub-task synchronously to a member holding its capability, and conclude when none is left."""
    leader = request["messages"][0]["content"].split("You are ", 1)[1].split(".", 1)[0]
    turn = request["messages"][-1]["content"]
    if request["messages"][-1] is not request["messages"][1]:
        turn = request["messages"][1]["content"]  # a retry: the turn is the first user message
    kind = turn.split('Now send one "', 1)[1].split('"', 1)[0]
    allowed = turn.split("must be one of: ", 1)[1].split(".", 1)[0].split(", ")
    team = {did: caps.split(", ") for did, caps in _TEAM_LINE.findall(_section(turn, "Team"))}
    tasks = _TASK_LINE.findall(_section(turn, "Sub-tasks not yet assigned"))
    head = {"speaker": leader}
    if kind == "discuss":
        state = "sync_task_assign" if tasks and "sync_task_assign" in allowed else "conclusion"
        return {**head, "kind": kind, "text": "plan", "next_state": state, "next_speaker": leader}
    if kind == "assign_sync":
        sub_id, capability = tasks[0]
        assignee = next(did for did, caps in team.items() if capability in caps)
        return {
            **head,
            "kind": kind,
            "assignee": assignee,
            "task": sub_id,
            "next_state": "sync_task_assign",
            "next_speaker": assignee,
        }
    assert kind == "conclude", turn
    return {
        **head,
        "kind": kind,
        "deliverable": {"summary": "done"},
        "next_state": "closed",
        "next_speaker": None,
    }


def keyless_plain_server(seen: list[dict[str, Any]]) -> Handle:
    """An OpenAI-compatible server that needs no key and refuses `response_format`."""

    def handle(path: str, headers: dict[str, str], body: bytes) -> Reply:
        request = json.loads(body)
        seen.append(request)
        if path != "/v1/chat/completions":
            return json_reply(404, {"error": {"message": path}})
        if "response_format" in request:
            return json_reply(400, {"error": {"message": "response_format is not supported"}})
        content = json.dumps(leader_model(request))
        return json_reply(200, completion(request["model"], content))

    return handle


def _awarded(world: World, client: TestClient) -> tuple[str, Any]:
    req, ada, bob = (world.signers[n] for n in ("req", "ada", "bob"))
    task_id = post_task(client, req)["task_id"]
    for signer, price in ((ada, 2 * 10**17), (bob, 3 * 10**17)):
        client.post(
            f"/tasks/{task_id}/commitments",
            json=commitment_json(signer, task_id, price),
            auth=AccordAuth(signer),
        ).raise_for_status()
    world.clock.advance(31)
    for signer, price in ((ada, 2 * 10**17), (bob, 3 * 10**17)):
        client.post(
            f"/tasks/{task_id}/reveals",
            json=reveal_json(signer, task_id, price),
            auth=AccordAuth(signer),
        ).raise_for_status()
    world.clock.advance(31)
    awarded = client.post(f"/tasks/{task_id}/award", auth=AccordAuth(req))
    assert awarded.status_code == 200, awarded.text
    winner = ada if awarded.json()["winner"] == ada.did else bob
    return task_id, winner


def test_an_llm_led_team_runs_through_the_api_on_a_keyless_local_model(
    tmp_path: Path, start: Callable[[Handle], StandIn], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    world = build_world(tmp_path / "home")
    # a local demo's service: agents and models may be reached on 127.0.0.1
    world.context.settings = replace(world.settings, allow_private_agents=True)
    client = TestClient(world.app())
    task_id, winner = _awarded(world, client)
    seen: list[dict[str, Any]] = []
    model = start(keyless_plain_server(seen))
    endpoint = f"{model.url}/v1"

    # bad options first: nothing runs
    for body in (
        {"policy": "llm"},  # no model, and the service sets no ACCORD_LLM_MODEL
        {"policy": "rule", "model": "m"},
        {"policy": "oracle"},
        {"policy": "llm", "model": "m", "endpoint": "file:///etc/passwd"},
        {"policy": "llm", "model": "m", "endpoint": endpoint, "extra": 1},
    ):
        refused = client.post(f"/tasks/{task_id}/run", json=body, auth=AccordAuth(winner))
        assert_problem(refused, 422)
    assert seen == []

    ran = client.post(
        f"/tasks/{task_id}/run",
        json={"policy": "llm", "model": "local-leader", "endpoint": endpoint},
        auth=AccordAuth(winner),
    )
    assert ran.status_code == 200, ran.text
    assert ran.json()["deliverable"]["summary"] == "done"
    assert ran.json()["deliverable"]["contributions"]
    assert client.get(f"/tasks/{task_id}").json()["state"] == "delivered"
    # the model was asked: no key sent but the placeholder, JSON mode asked once, then not
    assert all(r["model"] == "local-leader" for r in seen)
    assert "response_format" in seen[0] and all("response_format" not in r for r in seen[1:])
    headers = [h for p, h, _ in model.requests]
    assert all(h["authorization"] == "Bearer no-key" for h in headers)
    kinds = [leader_model(r)["kind"] for r in seen[1:]]
    assert kinds[0] == "discuss" and "assign_sync" in kinds and kinds[-1] == "conclude"


def test_an_endpoint_at_a_private_address_is_refused_unless_allowed(tmp_path: Path) -> None:
    world = build_world(tmp_path / "home")
    assert not world.context.settings.allow_private_agents  # as deployed: public endpoints only
    client = TestClient(world.app())
    task_id, winner = _awarded(world, client)
    refused = client.post(
        f"/tasks/{task_id}/run",
        json={"policy": "llm", "model": "m", "endpoint": "http://127.0.0.1:9/v1"},
        auth=AccordAuth(winner),
    )
    assert "ACCORD_ALLOW_PRIVATE_AGENTS" in assert_problem(refused, 422)["detail"]


def test_leader_policy_picks_the_policy_and_needs_no_key_at_an_endpoint() -> None:
    assert isinstance(leader_policy("rule", environ={}), RulePolicy)
    llm = leader_policy("llm", model="m", endpoint="http://127.0.0.1:9/v1", environ={})
    assert isinstance(llm, LLMPolicy) and isinstance(llm.chat, OpenAIChat)
    assert llm.chat.base_url == "http://127.0.0.1:9/v1" and llm.chat.api_key is None
    from_env = leader_policy("llm", environ={MODEL_VARIABLE: "env-model", "OPENAI_API_KEY": "k"})
    assert isinstance(from_env, LLMPolicy) and from_env.chat.model == "env-model"
    with pytest.raises(PolicyError, match="OPENAI_API_KEY"):
        leader_policy("llm", model="m", environ={})  # OpenAI's own API needs a key
    with pytest.raises(PolicyError, match="needs a model"):
        leader_policy("llm", endpoint="http://127.0.0.1:9/v1", environ={})
    with pytest.raises(PolicyError, match="not the rule policy"):
        leader_policy("rule", endpoint="http://127.0.0.1:9/v1", environ={})
    with pytest.raises(PolicyError, match="unknown policy"):
        leader_policy("oracle", environ={})


def test_the_cli_refuses_bad_policy_options_before_opening_anything(tmp_path: Path) -> None:
    from tests.api.test_cli_errors import accord, one_line

    home = tmp_path / "home"
    for args, said in (
        (("--policy", "llm"), "needs a model"),
        (("--policy", "rule", "--model", "m"), "not the rule policy"),
        (("--policy", "oracle"), "unknown policy"),
        (("--policy", "llm", "--model", "m", "--endpoint", "ftp://x"), "http"),
    ):
        result = accord(
            home, "task", "run", "task-1", *args, OPENAI_BASE_URL="", ACCORD_LLM_MODEL=""
        )
        assert said in one_line(result, 2)
    assert not home.exists()
