"""The first "done when" of open skills, on a real anvil behind a real service: a fresh
did:key declares a skill through the API; an agent is examined in it from a committed seed
(its own signed nonce and answers, over HTTP) and credentialed; discovery finds it; a requester
posts a part of that skill with its budget escrowed on chain; the agent (its own program, a
`command` runtime) wins the sealed auction and does the part; the requester's check and the
skill's graders run; the settlement pays it on chain; the audit passes, re-grading the attempt
in the box. (The agent is a hosted one: the kit sits only the built-in exams yet.)"""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

import httpx
import pytest

from accord.api.app import create_app
from accord.api.routes.deps import ApiConfig
from accord.client import AccordClient
from accord.coordinator.service import run_awarded_task
from accord.identity.skill_attempts import ATTEMPT_ANSWERED, ATTEMPT_NONCE
from accord.ledger.devnet import find_free_port
from accord.ledger.signing import Ed25519Signer
from accord.ledger.wiring import devnet_for
from accord.market.money import parse_amount
from accord.market.sealed import commit_bid, reveal_bid
from accord.market.settlement import logged_settlement, settle_task
from accord.market.tasks import spec_from_request
from tests.api.test_skills_http import declare, register
from tests.audit.conftest import REQUESTER_KEY
from tests.identity.test_skill_manifests import manifest
from tests.integration.anvil_world import anvil_settings, open_anvil_world
from tests.integration.test_declared_skill_work import ADDER
from tests.serving import serve

pytestmark = pytest.mark.devnet


def test_a_skill_a_stranger_declared_is_examined_posted_worked_and_paid_on_chain(
    tmp_path: Path,
) -> None:
    settings = anvil_settings(tmp_path / "home", find_free_port())
    try:
        world = open_anvil_world(settings)
        registry = world.onboarding.registry
        registry.allow_private_agents = True  # the stranger names a loopback endpoint
        app = create_app(
            settings,
            config=ApiConfig(rate=1000.0, burst=10_000.0),
            context=world.context,
            anchors=world.anchors,
            escrow_chain=world.escrow_chain,
        )
        script = tmp_path / "adder.py"
        script.write_text(ADDER)
        worker = registry.new_agent(
            "worker", now=world.clock(), runtime="command", command=f"{sys.executable} {script}"
        )
        world.onboarding.register(worker)
        address = world.onboarding.bind_payout(worker, world.escrow.chain_id())
        with (
            serve(app, ws="none") as url,
            AccordClient(url, signer=Ed25519Signer.generate()) as stranger,
            AccordClient(url, signer=registry.signer(worker)) as candidate,
        ):
            register(stranger, "stranger")
            skill_id = declare(stranger, manifest())["id"]
            assert any(s["id"] == skill_id for s in stranger.get("/skills"))

            attempt_id = candidate.post(f"/skills/{skill_id}/attempts")["attempt_id"]
            nonce = {"attempt_id": attempt_id, "nonce": secrets.token_hex(16)}
            items = candidate.post(
                f"/skills/attempts/{attempt_id}/nonce",
                {"entry": candidate.entry(ATTEMPT_NONCE, attempt_id, nonce)},
            )["items"]
            runtime = registry.runtime(worker)
            answers = {"attempt_id": attempt_id, "answers": [runtime.answer(i) for i in items]}
            graded = candidate.post(
                f"/skills/attempts/{attempt_id}/answers",
                {"entry": candidate.entry(ATTEMPT_ANSWERED, attempt_id, answers)},
            )
            assert graded["passed"] and graded["credential"] is not None
            found = stranger.get("/agents", {"capability": skill_id})
            assert [agent["did"] for agent in found] == [worker.did]

            spec = spec_from_request(
                {
                    "title": "Add two numbers",
                    "budget": "0.5eth",
                    "bidding": "60s",
                    "reveal": "60s",
                    "delivery": "30m",
                    "parts": [{"id": "total", "capability": skill_id, "input": {"a": 40, "b": 2}}],
                    "checks": [
                        {"id": "sum", "weight": 1, "kind": "expect", "part": "total",
                         "path": "$.sum", "equals": 42},
                    ],
                },
                {},
            )  # fmt: skip
            task = world.market.post(world.requester, spec, requester_key=REQUESTER_KEY)
            signer = registry.signer(worker)
            price, salt = parse_amount("0.3eth"), secrets.token_bytes(32)
            world.market.commit(commit_bid(signer, task.task_id, price, salt))
            world.clock.set(task.bidding_ends)
            world.market.reveal(reveal_bid(signer, task.task_id, price, salt))
            world.clock.set(task.reveal_ends)
            world.market.award(task.task_id)
            world.clock.advance(1)
            run_awarded_task(world.context, task.task_id)
            world.clock.advance(1)
            settle_task(world.market, world.onboarding, task.task_id)
            body = logged_settlement(world.market, task.task_id)
            assert body is not None
            assert [(c["id"], c["passed"]) for c in body["checks"] if c["id"] == "sum"] == [
                ("sum", True)
            ]
            assert world.escrow_chain.credit(address) == int(body["payouts"][worker.did]) > 0

            report = httpx.get(f"{url}/tasks/{task.task_id}/audit", timeout=120).json()
            assert report["verdict"] == "PASS", report["steps"]
            assert "1 skill attempt re-grades" in report["steps"][2]["detail"]
    finally:
        devnet_for(settings).down()
