"""The reference agent server trusting the operator (`make_server(..., trust=operator_did)`):
a real server on 127.0.0.1 refuses unsigned calls, calls signed by another key, a replayed
nonce and a call signed for another URL (401, a JSON reason), and answers accord's own calls:
the items of an exam and the parts of team work, each signed by the operator."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from accord.coordinator.agent_service import AgentServer, serve_in_thread, stop
from accord.coordinator.service import run_awarded_task
from accord.identity.challenges import REGISTRY
from accord.identity.http_signatures import CALL_TAG, sign_request
from accord.identity.onboarding import open_onboarding
from accord.identity.runtimes import HttpRuntime
from accord.ledger.settings import Settings
from accord.ledger.signing import Ed25519Signer, Signer
from tests.audit.conftest import AGENTS, COSTS, open_world, post_task, sealed_auction

ARITH = REGISTRY["arithmetic"].generate(b"trusted-agent-seed-16", 1)[0]
BODY = json.dumps({"item": ARITH.for_agent()}).encode()
PRIVATE = {"ACCORD_ALLOW_PRIVATE_AGENTS": "1"}


@pytest.fixture
def start(request: pytest.FixtureRequest) -> Callable[..., AgentServer]:
    def start_server(**options: Any) -> AgentServer:
        server, thread = serve_in_thread(0, **options)
        request.addfinalizer(lambda: stop(server, thread))
        return server

    return start_server


@pytest.fixture
def operator() -> Ed25519Signer:
    return Ed25519Signer.generate()


@pytest.fixture
def trusting(start: Callable[..., AgentServer], operator: Ed25519Signer) -> AgentServer:
    return start(trust=operator.did)


def _post(url: str, headers: dict[str, str], body: bytes = BODY) -> httpx.Response:
    return httpx.post(url, content=body, headers=headers, timeout=10)


def _signed(signer: Signer, url: str, body: bytes = BODY) -> dict[str, str]:
    return sign_request(signer, "POST", url, body, content_type="application/json", tag=CALL_TAG)


def _refused(response: httpx.Response, words: str) -> None:
    assert response.status_code == 401, response.text
    reason = response.json()
    assert reason["kind"] == "unauthenticated" and words in reason["error"], reason
    assert response.headers["WWW-Authenticate"] == 'Signature tag="accord-call", alg="ed25519"'
    assert 'tag="accord-call"' in response.headers["Accept-Signature"]


def test_an_unsigned_call_gets_401_and_health_stays_open(trusting: AgentServer) -> None:
    _refused(_post(trusting.url + "/run", {"Content-Type": "application/json"}), "not signed")
    assert httpx.get(trusting.url + "/health", timeout=10).status_code == 200


def test_a_call_signed_by_another_key_gets_401(trusting: AgentServer) -> None:
    url = trusting.url + "/run"
    _refused(_post(url, _signed(Ed25519Signer.generate(), url)), "is trusted here")


def test_a_replayed_call_gets_401(trusting: AgentServer, operator: Ed25519Signer) -> None:
    url = trusting.url + "/run"
    headers = _signed(operator, url)
    first = _post(url, headers)
    assert first.status_code == 200, first.text
    assert REGISTRY["arithmetic"].grade(ARITH, first.json()["answer"]).full_marks
    _refused(_post(url, headers), "already used")


def test_a_call_signed_for_another_url_gets_401(
    trusting: AgentServer, operator: Ed25519Signer, start: Callable[..., AgentServer]
) -> None:
    url = trusting.url + "/run"
    _refused(_post(url, _signed(operator, trusting.url + "/sign")), "does not verify")
    other = start()  # another agent: what accord signed for it is no call to this one
    _refused(_post(url, _signed(operator, other.url + "/run")), "does not verify")
    _refused(_post(url, _signed(operator, url, b'{"item": {}}')), "Content-Digest")


def test_without_trust_nothing_changes(start: Callable[..., AgentServer]) -> None:
    server = start()
    answered = _post(server.url + "/run", {"Content-Type": "application/json"})
    assert answered.status_code == 200, answered.text


def test_the_runtime_signed_by_the_operator_is_answered(
    trusting: AgentServer, operator: Ed25519Signer
) -> None:
    signed = HttpRuntime(trusting.url, 10, allow_private=True, operator=operator)
    assert REGISTRY["arithmetic"].grade(ARITH, signed.answer(ARITH.for_agent())).full_marks
    assert len(trusting.nonces) == 1


# -- accord's real calls ----------------------------------------------------------------------


def test_an_exam_reaches_a_trusting_agent_signed(
    tmp_path: Path, start: Callable[..., AgentServer]
) -> None:
    settings = Settings.from_env({"ACCORD_HOME": str(tmp_path / "home"), **PRIVATE})
    onboarding = open_onboarding(settings)
    trusting = start(trust=onboarding.operator_did)
    doubting = start(trust=Ed25519Signer.generate().did)  # trusts another operator
    registry = onboarding.registry
    now = onboarding.ledger.clock()
    good = registry.new_agent("good", now=now, runtime="http", endpoint=trusting.url)
    [passed] = onboarding.onboard(good, ["arithmetic"], item_count=4)
    assert passed.exam.passed and passed.answer_failures == 0
    assert len(trusting.nonces) == 4  # every item a signed call it accepted
    wary = registry.new_agent("wary", now=now, runtime="http", endpoint=doubting.url)
    [refused] = onboarding.onboard(wary, ["arithmetic"], item_count=4)
    assert refused.answer_failures == 4 and not refused.exam.passed
    assert len(doubting.nonces) == 0


@pytest.fixture
def team_world(tmp_path: Path, start: Callable[..., AgentServer]) -> Iterator[Any]:
    world = open_world(tmp_path / "home", env=PRIVATE)
    server = start(trust=world.ledger.operator.did)
    for name, capabilities in AGENTS:
        if name not in COSTS:  # the bidders are enough for the invoice task
            continue
        record = world.onboarding.registry.new_agent(
            name, now=world.clock(), runtime="http", endpoint=server.url
        )
        outcomes = world.onboarding.onboard(record, list(capabilities), item_count=3)
        assert all(o.credential_id is not None for o in outcomes), name
        world.agents[name] = record
        world.clock.advance(1)
    yield world, server


def test_team_work_reaches_a_trusting_agent_signed(team_world: Any) -> None:
    world, server = team_world
    examined = len(server.nonces)
    post_task(world)
    sealed_auction(world)
    conversation = run_awarded_task(world.context, world.task_id)
    assert conversation.deliverable is not None
    assert world.market.task(world.task_id).state == "delivered"
    parts = len(world.market.task(world.task_id).spec.parts)
    assert len(server.nonces) - examined >= parts  # each part a signed call it accepted
