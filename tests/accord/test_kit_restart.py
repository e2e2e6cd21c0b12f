"""Iterating on an agent does not lock its developer out (issue 44, item 5): a kit agent that
holds a valid credential is not examined again when it starts again (`--reexam` to ask); the
`credential` line gives the score, the expiry and the reasons for wrong items; a handler that
cannot answer spends no attempt; `accord skill try` practises an exam locally.

The restarts are real `accord agent run` processes against a real service on loopback
(`tests.served_world`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from eth_account import Account
from typer.testing import CliRunner

from accord.api.cli import app as cli_app
from accord.client import AccordClient
from accord.identity.challenges import JSON, JSONObject
from accord.identity.runtimes import AgentRuntimeError, ReferenceRuntime
from accord.kit.agent import KitAgent
from accord.kit.practice import PreflightError, practise, preflight
from accord.ledger.devnet import find_free_port
from accord.ledger.events import Entry
from accord.ledger.signing import Ed25519Signer, write_keyfile
from tests.processes import JsonLines, stop_process
from tests.served_world import open_world

REPO = Path(__file__).resolve().parents[2]
CAPABILITIES = ("arithmetic", "extraction")


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    with open_world(tmp_path, allow_private=True) as opened:
        yield opened


@contextmanager
def agent_run(world: dict[str, Any], key: Path, *flags: str) -> Iterator[JsonLines]:
    """`accord agent run` as its own process, with its key in `key`, until the block ends."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ACCORD_")}
    environ["PYTHONPATH"] = str(REPO)
    argv = [
        *(sys.executable, "-m", "accord.api.cli", "agent", "run", "--server", world["url"]),
        *("--key", str(key), "--name", "kai", "--items", "5", "--poll", "0.2"),
        *("--allow-private", "--no-panel"),
        *[arg for capability in CAPABILITIES for arg in ("-c", capability)],
        *flags,
    ]
    with (key.parent / "agent.log").open("a") as errors:
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=errors, text=True, env=environ, cwd=REPO
        )
    try:
        yield JsonLines(process, "kai")
    finally:
        stop_process(process, timeout=30)


def start_once(world: dict[str, Any], key: Path, *flags: str) -> dict[str, dict[str, Any]]:
    """Start the agent, wait until it is ready, stop it; its `credential` lines by capability."""
    with agent_run(world, key, *flags) as lines:
        lines.wait_for("ready")
        said = lines.seen
    return {line["capability"]: line for line in said if line.get("event") == "credential"}


def logged(world: dict[str, Any], kind: str, did: str) -> list[dict[str, Any]]:
    """The bodies of the `kind` entries by or about agent `did` (its registration, its exam
    commitments and credentials)."""
    store = world["context"].market.ledger.store
    events = [Entry.from_bytes(e.data).event for e in store.find(kind=kind, limit=1000)]
    return [dict(e.body) for e in events if did in (e.actor, e.body.get("agent"))]


def test_restarting_a_kit_agent_four_times_sits_one_exam_and_issues_no_new_credential(
    world: dict[str, Any], tmp_path: Path
) -> None:
    signer = Ed25519Signer.generate()
    key = tmp_path / "kai" / "key.json"
    key.parent.mkdir()
    write_keyfile(key, signer)

    first = start_once(world, key)
    for capability in CAPABILITIES:
        line = first[capability]
        assert line["examined"] is True and line["passed"] is True, line
        assert line["score"] == {"earned": 5, "possible": 5} and line["wrong"] == []
        assert line["valid_until"] > "2026"  # the credential's expiry, from the service
    issued = {c: first[c]["credential_id"] for c in CAPABILITIES}

    for _ in range(3):  # three more starts within the hour: the fourth used to be refused (429)
        again = start_once(world, key)
        for capability in CAPABILITIES:
            line = again[capability]
            assert line["examined"] is False, line
            assert line["credential_id"] == issued[capability]
            assert line["score"] == {"earned": 5, "possible": 5}
            assert line["valid_until"] == first[capability]["valid_until"]

    assert len(logged(world, "exam.committed", signer.did)) == len(CAPABILITIES)
    assert len(logged(world, "credential.issued", signer.did)) == len(CAPABILITIES)

    # A revoked credential is no credential: that capability is examined again, the other not.
    world["context"].onboarding.revoke(issued["arithmetic"], "key rotated")
    after = start_once(world, key)
    assert after["arithmetic"]["examined"] is True and after["extraction"]["examined"] is False
    # --reexam asks for every exam again: attempts are counted per capability, so the
    # arithmetic exam's second attempt in the hour does not stand in extraction's way.
    asked = start_once(world, key, "--reexam")
    assert all(asked[c]["examined"] is True and asked[c]["passed"] for c in CAPABILITIES)
    assert len(logged(world, "exam.committed", signer.did)) == len(CAPABILITIES) + 3


def test_a_handler_whose_model_is_down_spends_no_attempt(
    world: dict[str, Any], tmp_path: Path
) -> None:
    """The preflight's practice item cannot reach the model: the agent says why and stops
    (exit 1) before it registers or starts an exam."""
    signer = Ed25519Signer.generate()
    key = tmp_path / "kai.json"
    write_keyfile(key, signer)
    down = f"http://127.0.0.1:{find_free_port()}/v1"  # nothing listens there
    with agent_run(world, key, "--handler", f"openai:some-model@{down}") as lines:
        failed = lines.wait_for("preflight-failed")
        assert lines.process.wait(timeout=60) == 1
    assert failed["capability"] == "arithmetic" and failed["reason"], failed
    assert logged(world, "exam.committed", signer.did) == []
    assert logged(world, "agent.registered", signer.did) == []


class Away:
    """A handler whose model cannot be reached."""

    def __init__(self) -> None:
        self.asked = 0

    def answer(self, item: JSONObject) -> JSON:
        self.asked += 1
        raise AgentRuntimeError("connection refused", retriable=True)


class Picky:
    """A handler that refuses (not retriably) every item but the `answers`-th."""

    def __init__(self, answers: int) -> None:
        self.asked = 0
        self.answers = answers

    def answer(self, item: JSONObject) -> JSON:
        self.asked += 1
        if self.asked != self.answers:
            raise AgentRuntimeError("not a layout I know", retriable=False)
        return ReferenceRuntime().answer(item)


def test_the_preflight_stops_at_an_unreachable_model_and_passes_any_answer() -> None:
    away = Away()
    with pytest.raises(PreflightError, match="connection refused") as refused:
        preflight("arithmetic", away)
    assert away.asked == 1 and "no attempt was spent" in str(refused.value)
    assert refused.value.capability == "arithmetic"
    picky = Picky(answers=3)
    preflight("arithmetic", picky)  # the third practice item is answered: enough
    assert picky.asked == 3
    never = Picky(answers=0)
    with pytest.raises(PreflightError, match="not a layout I know"):
        preflight("arithmetic", never)
    assert never.asked == 3


def test_practice_grades_like_the_exam_and_says_why_items_are_wrong() -> None:
    seed = bytes(32)
    right = practise("arithmetic", ReferenceRuntime(), items=4, seed=seed)
    assert (right.earned, right.possible, right.passed, right.wrong) == (4, 4, True, ())
    half = practise("arithmetic", Picky(answers=2), items=4, seed=seed)
    assert (half.earned, half.possible, half.passed) == (1, 4, False)
    assert [w.reason for w in half.wrong] == ["no answer: not a layout I know"] * 3
    assert [w.item_id for w in half.wrong] == [
        w.item_id
        for i, w in enumerate(practise("arithmetic", Away(), items=4, seed=seed).wrong)
        if i != 1
    ]


def test_skill_try_prints_the_score_and_the_wrong_items() -> None:
    passing = CliRunner().invoke(cli_app, ["skill", "try", "arithmetic", "--items", "3", "--json"])
    assert passing.exit_code == 0, passing.output
    assert json.loads(passing.output) | {"wrong": []} == {
        "capability": "arithmetic",
        "name": "arithmetic",
        "earned": 3,
        "possible": 3,
        "items": 3,
        "passed": True,
        "wrong": [],
    }
    failing = CliRunner().invoke(
        cli_app, ["skill", "try", "extraction", "--handler", "python:json:dumps", "--items", "2"]
    )
    assert failing.exit_code == 1, failing.output
    assert "0/2 over 2 items" in failing.output and "JSON object" in failing.output
    unknown = CliRunner().invoke(cli_app, ["skill", "try", "juggling"])
    assert unknown.exit_code == 2 and "unknown capability" in unknown.output


class Zero:
    """A handler that answers "0" to everything: wrong, but an answer."""

    def answer(self, item: JSONObject) -> JSON:
        return "0"


def test_the_credential_line_gives_the_score_and_why_each_item_was_wrong(
    world: dict[str, Any],
) -> None:
    said: list[tuple[str, dict[str, Any]]] = []
    signer = Ed25519Signer.generate()
    agent = KitAgent(
        AccordClient(world["url"], signer=signer),
        signer,
        Account.create(),
        Zero(),
        name="zed",
        capabilities=["arithmetic"],
        exam_items=4,
        say=lambda event, **fields: said.append((event, fields)),
    )
    try:
        agent.join(agent.start())
    finally:
        agent.stop()
    [line] = [fields for event, fields in said if event == "credential"]
    assert line["examined"] is True and line["passed"] is False
    assert line["credential_id"] is None and line["valid_until"] is None
    assert line["score"] == {"earned": 0, "possible": 4}
    assert len(line["wrong"]) == 4 and all(w["reason"] for w in line["wrong"]), line
    graded = logged(world, "exam.graded", signer.did)[0]["grades"]
    assert [w["reason"] for w in line["wrong"]] == [g["reason"] for g in graded]
