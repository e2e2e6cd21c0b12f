"""The first "done when" of open skills with the worker a kit agent, on a real anvil behind a
real service: a fresh did:key declares a skill through the API (not the operator); discovery
lists it; `accord agent run -c SKILL_ID` (its own process, its own keys in a folder of its own,
a `python:` handler of this package) fetches the manifest, holds it to its id, sits its exam
from a seed both sides fix (its own signed nonce and answers) and is credentialed; discovery
finds it; a requester posts a part of that skill with no checks of its own, its budget escrowed
on chain; the kit agent bids, reveals, wins, leads and does the part; the skill's graders run as
the part's default checks, in the kit's precheck and in the settlement; the settlement pays the
agent's payout account on chain; the audit passes, re-grading the attempt in the box.

The windows close by the test moving the service's clock (`run_due` then awards and settles),
never by the wall clock."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from accord.api.app import create_app
from accord.api.routes.deps import ApiConfig
from accord.client import AccordClient
from accord.identity.manifests import skill_id
from accord.ledger.devnet import find_free_port
from accord.ledger.signing import Ed25519Signer
from accord.ledger.wiring import devnet_for
from accord.market.lifecycle import run_due
from accord.market.settlement import logged_settlement
from accord.market.tasks import spec_from_request
from tests.api.test_skills_http import declare, register
from tests.audit.conftest import REQUESTER_KEY
from tests.integration.anvil_world import anvil_settings, open_anvil_world
from tests.integration.skill_handlers import shout_manifest
from tests.processes import JsonLines, stop_process
from tests.serving import serve

pytestmark = pytest.mark.devnet

REPO = Path(__file__).resolve().parents[2]
HANDLER = "python:tests.integration.skill_handlers:shout"


def digit_first_manifest() -> dict[str, Any]:
    """The shout skill, its description chosen so that its id starts with a digit, as most
    skill ids do."""
    for n in range(64):
        document = shout_manifest(description=f"Write a text in capital letters ({n}).")
        if skill_id(document)[0].isdigit():
            return document
    raise AssertionError("no description gave an id that starts with a digit")


@contextmanager
def agent_run(url: str, folder: Path, skill: str) -> Iterator[JsonLines]:
    """`accord agent run` in its own process, its keys made in `folder` on first use."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("ACCORD_")}
    environ["PYTHONPATH"] = str(REPO)
    argv = [
        *(sys.executable, "-m", "accord.api.cli", "agent", "run", "--server", url),
        *("--key", str(folder / "key.json"), "--name", "worker", "-c", skill),
        *("--handler", HANDLER, "--price", "0.3eth", "--poll", "0.2"),
        *("--allow-private", "--no-panel"),
    ]
    with (folder / "agent.log").open("w") as errors:
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=errors, text=True, env=environ, cwd=REPO
        )
    try:
        yield JsonLines(process, "the worker")
    finally:
        stop_process(process, timeout=30)


def test_a_kit_agent_sits_a_strangers_skill_and_is_paid_for_a_part_of_it_on_chain(
    tmp_path: Path,
) -> None:
    settings = anvil_settings(tmp_path / "home", find_free_port())
    folder = tmp_path / "worker"
    folder.mkdir(mode=0o700)
    try:
        world = open_anvil_world(settings)
        world.onboarding.registry.allow_private_agents = True  # the worker listens on loopback
        app = create_app(
            settings,
            config=ApiConfig(rate=1000.0, burst=10_000.0),
            context=world.context,
            anchors=world.anchors,
            escrow_chain=world.escrow_chain,
        )
        with (
            serve(app, ws="none") as url,
            AccordClient(url, signer=Ed25519Signer.generate()) as stranger,
        ):
            register(stranger, "stranger")
            declared = declare(stranger, digit_first_manifest())
            skill = str(declared["id"])
            assert skill[0].isdigit() and declared["declarer"] == stranger.signer.did
            assert any(s["id"] == skill for s in stranger.get("/skills"))

            with agent_run(url, folder, skill) as worker:
                credential = worker.wait_for("credential")
                assert credential["capability"] == skill and credential["skill"] == "shout"
                assert credential["examined"] is True and credential["passed"] is True
                assert credential["score"] == {"earned": 5, "possible": 5}
                assert credential["wrong"] == [] and credential["valid_until"]
                assert credential["regrade"] == "agrees"  # its own re-grade in its own box
                address = worker.wait_for("payout")["address"]
                did = worker.wait_for("ready")["did"]
                assert [a["did"] for a in stranger.get("/agents", {"capability": skill})] == [did]

                # The requester writes no checks: the skill's graders are the part's checks.
                spec = spec_from_request(
                    {
                        "title": "Shout",
                        "budget": "0.5eth",
                        "bidding": "60s",
                        "reveal": "60s",
                        "delivery": "30m",
                        "parts": [
                            {"id": "total", "capability": skill, "input": {"text": "hello world"}}
                        ],
                    },
                    {},
                )
                task = world.market.post(world.requester, spec, requester_key=REQUESTER_KEY)
                task_id = task.task_id
                worker.wait_for("committed", task_id=task_id)
                world.clock.set(task.bidding_ends)
                worker.wait_for("revealed", task_id=task_id)
                world.clock.set(task.reveal_ends)
                assert [(d.due.action, d.outcome) for d in run_due(world.context)] == [
                    ("award", "done")
                ]
                assert world.market.task(task_id).winner == did
                worker.wait_for("given", task_id=task_id, part="total")
                worker.wait_for("answered", task_id=task_id, part="total")
                delivered = worker.wait_for("delivered", task_id=task_id)
                assert delivered["verdicts"] == {"total-schema": "pass", "total-grader-1": "pass"}

                world.clock.advance(2 * 3600)  # the review window closes: the service settles
                settled = [d for d in run_due(world.context) if d.due.action == "settle"]
                assert [d.outcome for d in settled] == ["done"], settled

            body = logged_settlement(world.market, task_id)
            assert body is not None
            verdicts = {c["id"]: c["passed"] for c in body["checks"]}
            assert verdicts["total-schema"] is verdicts["total-grader-1"] is True, verdicts
            paid = int(body["payouts"][did])
            assert paid > 0 and world.escrow_chain.credit(address) == paid

            report = httpx.get(f"{url}/tasks/{task_id}/audit", timeout=120).json()
            assert report["verdict"] == "PASS", report["steps"]
            assert "1 skill attempt re-grades" in report["steps"][2]["detail"]
            assert report["facts"]["custody"][did] == "self"
    finally:
        devnet_for(settings).down()
