"""A skill the market did not have, end to end in process: a registered agent declares it, a
second one is examined in it from a committed seed and credentialed, a requester posts a part
naming its id, the credentialed agent (a `command` runtime: its own program) wins the sealed
auction and does the part, the requester's check and the skill's default checks run, the
settlement pays, and the audit passes, re-grading the attempt in the box.

The chain is a `MemoryEscrowChain` (tests/audit/conftest.py's world), not anvil."""

from __future__ import annotations

import secrets
import sys
from pathlib import Path
from typing import Any

import pytest

from accord.api.routes.skills import logged_agreement
from accord.audit.checks import audit_task
from accord.coordinator.service import run_awarded_task
from accord.identity.errors import ExamError, RateLimitedError
from accord.identity.skill_attempts import ATTEMPT_ANSWERED, ATTEMPT_NONCE
from accord.ledger.events import Entry, make_entry
from accord.ledger.signing import Signer
from accord.market.money import parse_amount
from accord.market.sealed import commit_bid, reveal_bid
from accord.market.settlement import settle_task
from accord.market.tasks import spec_from_request
from accord.market.work import ExpectCheck, SchemaCheck, default_checks
from tests.audit.conftest import REQUESTER_KEY, World, open_world
from tests.identity.test_skill_manifests import manifest

ADDER = """
import json, sys
item = json.load(sys.stdin)
payload = item["payload"]
print(json.dumps({"sum": payload["a"] + payload["b"]}))
"""


def own_entry(world: World, signer: Signer, kind: str, subject: str, body: dict[str, Any]) -> Entry:
    """An entry the agent signs itself, with its next seq and the market's time."""
    seq = world.ledger.next_seq(signer.did)
    return make_entry(signer, kind=kind, seq=seq, at=world.clock(), subject=subject, body=body)


def test_a_declared_skill_is_examined_posted_worked_checked_and_paid(tmp_path: Path) -> None:
    world = open_world(tmp_path / "home")
    registry = world.onboarding.registry
    author = registry.new_agent("author", now=world.clock())
    world.onboarding.register(author)
    document = manifest(
        graders=[
            {"kind": "json_match", "paths": ["$.sum"]},
            {"kind": "json_schema", "schema": {"type": "object", "required": ["sum"]}},
        ]
    )
    skill, _ = world.onboarding.skills.declare(registry.signer(author), document)
    skill_id = skill.manifest.skill_id

    script = tmp_path / "adder.py"
    script.write_text(ADDER)
    worker = registry.new_agent(
        "worker", now=world.clock(), runtime="command", command=f"{sys.executable} {script}"
    )
    world.onboarding.register(worker)
    address = world.onboarding.bind_payout(worker, world.escrow_chain.chain_id())
    signer = registry.signer(worker)
    attempts = world.onboarding.skill_attempts
    started = attempts.start(worker.did, skill_id)
    attempt_id = started["attempt_id"]
    nonce = secrets.token_hex(16)
    items = attempts.begin(
        own_entry(
            world, signer, ATTEMPT_NONCE, attempt_id, {"attempt_id": attempt_id, "nonce": nonce}
        )
    )
    runtime = registry.runtime(worker)
    answers = [runtime.answer(item) for item in items]
    outcome = attempts.answer(
        own_entry(
            world,
            signer,
            ATTEMPT_ANSWERED,
            attempt_id,
            {"attempt_id": attempt_id, "answers": answers},
        )
    )
    assert outcome.passed and outcome.credential_id is not None
    assert world.market.eligible(worker.did, (skill_id,))
    assert not world.market.eligible(author.did, (skill_id,))

    # the skill's own graders serve as default checks where the requester writes none
    request = {
        "title": "Add two numbers",
        "description": "A skill the market did not have.",
        "budget": "0.5eth",
        "bidding": "60s",
        "reveal": "60s",
        "delivery": "30m",
        "parts": [{"id": "total", "capability": skill_id, "input": {"a": 40, "b": 2}}],
        "checks": [
            {"id": "sum", "weight": 1, "kind": "expect", "part": "total", "path": "$.sum",
             "equals": 42},
        ],
    }  # fmt: skip
    spec = spec_from_request(request, {})
    defaults = default_checks(spec.parts)
    assert [type(c) for c in defaults[:2]] == [SchemaCheck, SchemaCheck]
    assert defaults[1].check_id == "total-grader-1"
    assert not any(isinstance(c, ExpectCheck) for c in defaults)

    task = world.market.post(world.requester, spec, requester_key=REQUESTER_KEY)
    price = parse_amount("0.3eth")
    salt = secrets.token_bytes(32)
    world.market.commit(commit_bid(signer, task.task_id, price, salt))
    world.clock.set(task.bidding_ends)
    world.market.reveal(reveal_bid(signer, task.task_id, price, salt))
    world.clock.set(task.reveal_ends)
    world.market.award(task.task_id)
    world.clock.advance(1)
    run_awarded_task(world.context, task.task_id)
    world.clock.advance(1)
    settle_task(world.market, world.onboarding, task.task_id)
    world.clock.advance(1)
    settled = world.market.task(task.task_id)
    assert settled.state == "settled"
    assert world.escrow_chain.credit(address) > 0

    assert world.ledger.anchorer is not None
    world.ledger.anchorer.anchor_latest()
    report = audit_task(
        world.ledger.store, task.task_id, anchors=world.anchors, escrow=world.escrow_chain
    )
    assert report.ok, [(s.number, s.status, s.detail) for s in report.steps]
    assert "1 skill attempt re-grades" in report.steps[2].detail

    # the skill's page: its holder's exam score beside its real part's
    agreement = logged_agreement(world.ledger.store, world.onboarding.skills.get(skill_id))
    assert agreement["holders"] == [{"agent": worker.did, "exam": "1", "parts": 1, "field": "1"}]
    assert (agreement["exam_mean"], agreement["field_mean"]) == ("1", "1")


def test_late_answers_are_refused_and_attempts_are_limited(tmp_path: Path) -> None:
    world = open_world(tmp_path / "home")
    registry = world.onboarding.registry
    author = registry.new_agent("author", now=world.clock())
    world.onboarding.register(author)
    skill, _ = world.onboarding.skills.declare(registry.signer(author), manifest())
    late = registry.new_agent("late", now=world.clock())
    world.onboarding.register(late)
    signer = registry.signer(late)
    attempts = world.onboarding.skill_attempts
    attempt_id = attempts.start(late.did, skill.manifest.skill_id)["attempt_id"]
    body = {"attempt_id": attempt_id, "nonce": secrets.token_hex(16)}
    items = attempts.begin(own_entry(world, signer, ATTEMPT_NONCE, attempt_id, body))
    world.clock.advance(60 * len(items) + 1)  # a minute an item, and a second more
    answers = [{"sum": 0}] * len(items)
    answered = {"attempt_id": attempt_id, "answers": answers}
    with pytest.raises(ExamError, match="closed at"):
        attempts.answer(own_entry(world, signer, ATTEMPT_ANSWERED, attempt_id, answered))
    assert not world.ledger.store.find(kind=ATTEMPT_ANSWERED, subject=attempt_id)
    attempts.start(late.did, skill.manifest.skill_id)
    attempts.start(late.did, skill.manifest.skill_id)
    with pytest.raises(RateLimitedError) as limited:
        attempts.start(late.did, skill.manifest.skill_id)  # a fourth within the hour
    assert 0 < limited.value.retry_after <= 3600
    world.clock.advance(limited.value.retry_after + 1)
    assert attempts.start(late.did, skill.manifest.skill_id)["attempt"] == 4
