"""The agent's kit and CLI traps (issue 45, item 5): capabilities the service has no exam for are
refused before anything is registered; the kit says when it was given a part and how it
ended; `accord agent withdraw` is one command, its self-custody and hosted forms told apart by
--server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from eth_account import Account
from typer.testing import CliRunner

from accord.api.cli import app as cli_app
from accord.client import AccordClient, ApiError
from accord.identity.challenges import JSON, JSONObject
from accord.identity.challenges.skills import work_item
from accord.identity.runtimes import AgentRuntimeError, ReferenceRuntime
from accord.kit.agent import KitAgent, _OwnParts, _TellingRuntime
from accord.kit.assignments import Assignment
from accord.ledger.signing import Ed25519Signer
from tests.api.test_app import build_world
from tests.serving import serve


def test_a_capability_without_an_exam_is_refused_before_anything_is_registered(
    tmp_path: Path,
) -> None:
    world = build_world(tmp_path / "home", bidders=())
    signer = Ed25519Signer.generate()
    with serve(world.app()) as url:
        agent = KitAgent(
            AccordClient(url, signer=signer),
            signer,
            Account.create(),
            ReferenceRuntime(),
            name="kai",
            capabilities=["arithmetic", "translation"],
        )
        with pytest.raises(ApiError, match="no exam for 'translation'") as refused:
            agent.join("http://127.0.0.1:9/")
        assert refused.value.status == 422 and "arithmetic" in str(refused.value)
        assert httpx.get(f"{url}/agents/{signer.did}").status_code == 404
        agent.client.close()


def test_a_loopback_registration_names_what_the_kit_registers_and_the_setting(
    tmp_path: Path,
) -> None:
    world = build_world(tmp_path / "home", bidders=())
    signer = Ed25519Signer.generate()
    with serve(world.app()) as url, AccordClient(url, signer=signer) as client:
        agent = KitAgent(
            client, signer, Account.create(), ReferenceRuntime(), name="kai", capabilities=[]
        )
        with pytest.raises(ApiError) as refused:
            agent.join("http://127.0.0.1:9/")
    message = str(refused.value)
    assert "the endpoint it registers" in message and "--endpoint" not in message
    assert "ACCORD_ALLOW_PRIVATE_AGENTS=1" in message


class Failing:
    def answer(self, item: JSONObject) -> JSON:
        raise AgentRuntimeError("the model is away", retriable=False)


def test_the_kit_says_each_part_it_was_given_and_how_it_ended() -> None:
    said: list[tuple[str, dict[str, Any]]] = []

    def say(event: str, **fields: Any) -> None:
        said.append((event, fields))

    figures = {"kind": "figures", "figures": ["1", "2"], "operation": "sum"}
    item = work_item("arithmetic", "sum", figures).for_agent()
    work = Assignment("task-1", "conv-1", "s1", "sum", "arithmetic")
    telling = _TellingRuntime(ReferenceRuntime(), say)
    telling.given(work)
    assert telling.answer(item) == "3"
    assert telling.answer(item) == "3"  # an exam item: no assignment, nothing told
    failing = _TellingRuntime(Failing(), say)
    failing.given(work)
    with pytest.raises(AgentRuntimeError):
        failing.answer(item)
    _OwnParts(telling, "task-2").answer(item)  # a part the leader gives itself
    fields = {"part": "sum", "capability": "arithmetic"}
    assert said == [
        ("given", {"task_id": "task-1", "conv_id": "conv-1", **fields}),
        ("answered", {"task_id": "task-1", "conv_id": "conv-1", **fields}),
        ("given", {"task_id": "task-1", "conv_id": "conv-1", **fields}),
        (
            "failed",
            {"task_id": "task-1", "conv_id": "conv-1", **fields, "reason": "the model is away"},
        ),
        ("given", {"task_id": "task-2", "conv_id": "", **fields}),
        ("answered", {"task_id": "task-2", "conv_id": "", **fields}),
    ]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ([], "--server URL --key KEY"),
        (["ada", "--server", "http://127.0.0.1:9"], "drop 'ada'"),
        (["--server", "http://127.0.0.1:9"], "give --key KEY"),
        (["ada", "--key", "k.json"], "go with --server"),
    ],
)
def test_agent_withdraw_is_one_command_with_both_forms(args: list[str], says: str) -> None:
    result = CliRunner().invoke(cli_app, ["agent", "withdraw", *args])
    assert result.exit_code == 2 and says in result.output, result.output
