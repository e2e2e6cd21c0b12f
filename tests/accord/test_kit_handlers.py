"""The kit's handlers: each spec names a runtime, a bad one says what to write, and an A2A
agent keeps the DID its own card is signed by."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from accord.api.cli import app as cli_app
from accord.identity.challenges import reference
from accord.identity.runtimes import (
    AgentRuntimeError,
    CommandRuntime,
    HttpRuntime,
    ReferenceRuntime,
    exam_item,
)
from accord.kit.handlers import CallableRuntime, HandlerError, handler_from_spec
from accord.ledger.signing import Ed25519Signer
from tests.identity.test_a2a_runtime import a2a_agent

ITEM = {
    "item_id": "i1",
    "capability": "arithmetic",
    "prompt": "Compute.",
    "payload": {"kind": "expression", "expression": "(2 + 3) * 7"},
}


def double(item: dict[str, object]) -> object:
    return {"value": "70"}


def broken(item: dict[str, object]) -> object:
    raise KeyError("no such field")


def test_specs_name_runtimes() -> None:
    assert isinstance(handler_from_spec("reference"), ReferenceRuntime)
    assert isinstance(handler_from_spec("command:python agent.py --fast"), CommandRuntime)
    assert isinstance(
        handler_from_spec("http:http://127.0.0.1:9/run", allow_private=True), HttpRuntime
    )
    runtime = handler_from_spec(f"python:{__name__}:double")
    assert isinstance(runtime, CallableRuntime) and runtime.answer(ITEM) == {"value": "70"}
    with pytest.raises(AgentRuntimeError, match="KeyError"):
        handler_from_spec(f"python:{__name__}:broken").answer(ITEM)


@pytest.mark.parametrize(
    "spec",
    ["", "nothing", "python:no.such.module:f", "python:json", "command:", "http:ftp://x"],
)
def test_a_bad_spec_says_what_to_write(spec: str) -> None:
    with pytest.raises(HandlerError):
        handler_from_spec(spec)


def test_an_a2a_agent_keeps_the_did_its_card_is_signed_by() -> None:
    card_key = Ed25519Signer.generate()
    with a2a_agent(card_key) as url:
        runtime = handler_from_spec(f"a2a:{url}", allow_private=True, agent_did=card_key.did)
        assert runtime.answer(ITEM) == reference.solve(exam_item(ITEM))
        other = Ed25519Signer.generate().did
        with pytest.raises(HandlerError, match="keeps its card's DID"):
            handler_from_spec(f"a2a:{url}", allow_private=True, agent_did=other)


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--handler", "nothing"], "no handler 'nothing'"),
        (["--price", "lots"], "lots"),
        (["--policy", "llm"], "needs a model"),
        (["--policy", "dice"], "unknown policy"),
    ],
)
def test_agent_run_refuses_bad_input_before_it_starts(
    tmp_path: Path, flags: list[str], said: str
) -> None:
    """Exit 2 with one line saying what to fix; nothing listens and nothing is registered
    (the server named is never reached)."""
    args = ["agent", "run", "--server", "http://127.0.0.1:9", "--key", str(tmp_path / "k.json")]
    result = CliRunner().invoke(cli_app, [*args, "--name", "x", "-c", "arithmetic", *flags])
    assert result.exit_code == 2, result.output
    assert said in result.output
