"""`accord.market.notices`: when the service awards a task by itself, a self-custody winner with an
endpoint is told at once, in a call the operator signs; a failing or slow endpoint costs the
lifecycle round nothing. Real servers on 127.0.0.1, a real market (no anvil)."""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from accord.coordinator.agent_service import serve_in_thread, stop
from accord.identity.http_signatures import NonceMemory, verify_accord_call
from accord.identity.presentations import create_presentation
from accord.identity.registration import REGISTERED_KIND, REGISTRATION_CHALLENGE_TTL, SELF
from accord.identity.runtimes import ReferenceRuntime
from accord.ledger.events import make_entry
from accord.ledger.signing import Ed25519Signer
from accord.market.lifecycle import Due, run_due
from accord.market.money import Wei
from accord.market.notices import NOTIFY_PATH, Notice, award_notice, notify_url, send_notice
from accord.market.sealed import commit_bid, reveal_bid
from accord.market.tasks import TASK_AWARDED
from tests.audit.conftest import World, open_world, post_task
from tests.stand_in import Handle, Reply, StandIn, free_port, json_reply, starter

PRIVATE = {"ACCORD_ALLOW_PRIVATE_AGENTS": "1"}
CAPABILITIES = ("arithmetic", "extraction")


@pytest.fixture
def serve(request: pytest.FixtureRequest) -> Callable[[Handle], StandIn]:
    return starter(request)


def self_custody_agent(world: World, name: str, endpoint: str) -> Ed25519Signer:
    """An agent that keeps its own key (none in the service's home): registered with its own
    signed `agent.registered` (custody "self") at `endpoint`, credentialed by exams it
    answered and signed itself."""
    signer = Ed25519Signer.generate()
    onboarding = world.onboarding
    now = world.clock()
    challenge = onboarding.nonces.issue(onboarding.domain, now, REGISTRATION_CHALLENGE_TTL)
    presentation = create_presentation(signer, [], challenge, onboarding.domain, now)
    body = {
        "name": name,
        "domain": onboarding.domain,
        "challenge": challenge,
        "proof": presentation["proof"],
        "custody": SELF,
    }
    entry = make_entry(
        signer,
        kind=REGISTERED_KIND,
        seq=world.ledger.next_seq(signer.did),
        at=now,
        subject=signer.did,
        body=body,
    )
    onboarding.admit_remote(name, endpoint, presentation, challenge, entry)
    for capability in CAPABILITIES:
        session = onboarding.exams.start(signer.did, capability, 3)
        for item in session.items:
            answer = ReferenceRuntime().answer(item)
            onboarding.exams.answer(signer, session.exam_id, str(item["item_id"]), answer)
        assert onboarding.grade_and_issue(session.exam_id).credential_id is not None
    assert not onboarding.registry.key_path(name).exists()
    return signer


def win_alone(world: World, bidder: Ed25519Signer) -> str:
    """Post the invoice task, commit and reveal `bidder`'s bid (the only one) and close the
    reveal window; the award is left to the lifecycle."""
    task_id = post_task(world)
    task = world.market.task(task_id)
    price, salt = Wei(task.spec.budget // 2), secrets.token_bytes(32)
    world.market.commit(commit_bid(bidder, task_id, price, salt))
    world.clock.set(task.bidding_ends)
    world.market.reveal(reveal_bid(bidder, task_id, price, salt))
    world.clock.set(task.reveal_ends)
    return task_id


def checking(operator_did: str, outcomes: list[str], reply: Reply) -> Handle:
    """A winner's server: each call verified as the operator's (`verify_accord_call`, the URL
    its Host and path), then answered `reply`; 401 when it is not."""
    nonces = NonceMemory()

    def handle(path: str, headers: dict[str, str], body: bytes) -> Reply:
        url = f"http://{headers['host']}{path}"
        try:
            outcomes.append(verify_accord_call("POST", url, headers, body, operator_did, nonces))
        except Exception as exc:
            outcomes.append(f"refused: {exc}")
            return json_reply(401, {"error": str(exc)})
        return reply

    return handle


def wait_for(condition: Callable[[], bool], seconds: float = 120.0) -> None:
    """Until `condition` holds; `seconds` only bounds a hang (a slow machine waits longer)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_the_winner_hears_it_won_in_a_signed_call(
    tmp_path: Path, serve: Callable[[Handle], StandIn]
) -> None:
    world = open_world(tmp_path / "home", env=PRIVATE)
    operator = world.ledger.operator.did
    outcomes: list[str] = []
    agent = serve(checking(operator, outcomes, json_reply(200, {"received": True})))
    winner = self_custody_agent(world, "faraway", agent.url + "/run")
    task_id = win_alone(world, winner)

    [done] = run_due(world.context)
    assert (done.due, done.outcome, done.detail) == (Due(task_id, "award"), "done", "awarded")
    # The stand-in records a request before its handler runs (a slow handler's call is seen
    # while it waits), so the handler's verdict is waited for as well, not assumed.
    wait_for(lambda: len(agent.requests) == 1 and len(outcomes) == 1)
    path, _, body = agent.requests[0]
    assert path == NOTIFY_PATH and outcomes == [operator]
    assert json.loads(body) == {
        "event": "task.awarded",
        "task_id": task_id,
        "winner": winner.did,
        "index": world.ledger.store.once_logged(TASK_AWARDED, task_id),
    }


def test_a_slow_or_failing_winner_does_not_hold_the_round(
    tmp_path: Path, serve: Callable[[Handle], StandIn], caplog: pytest.LogCaptureFixture
) -> None:
    """The round returns while the winner's server still holds the notice; its 500 is only
    logged."""
    world = open_world(tmp_path / "home", env=PRIVATE)
    entered, release = threading.Event(), threading.Event()

    def stuck(path: str, headers: dict[str, str], body: bytes) -> Reply:
        entered.set()
        release.wait(10)
        return json_reply(500, {"error": "down"})

    agent = serve(stuck)
    winner = self_custody_agent(world, "faraway", agent.url + "/run")
    task_id = win_alone(world, winner)
    with caplog.at_level(logging.WARNING, logger="accord.notices"):
        [done] = run_due(world.context)
        assert (done.due.action, done.outcome) == ("award", "done")
        assert not release.is_set()  # the round did not wait for the reply
        assert world.market.task(task_id).state == "awarded"
        assert entered.wait(10)  # the notice did go out
        release.set()
        wait_for(lambda: "did not take the notice: HTTP 500" in caplog.text)
    assert run_due(world.context) == []  # nothing left to do, nothing retried


def test_send_notice_reports_failures_without_raising(
    serve: Callable[[Handle], StandIn], caplog: pytest.LogCaptureFixture
) -> None:
    operator = Ed25519Signer.generate()
    body = {"event": "task.awarded", "task_id": "t", "winner": "did:key:zW", "index": 7}
    closed = Notice(notify_url(f"http://127.0.0.1:{free_port()}/run"), body)
    with caplog.at_level(logging.WARNING, logger="accord.notices"):
        assert not send_notice(closed, operator=operator, allow_private=True, timeout=2)
        agent = serve(lambda path, headers, data: json_reply(200, {}))
        private = Notice(notify_url(agent.url + "/run"), body)
        assert not send_notice(private, operator=operator, allow_private=False, timeout=2)
    assert agent.requests == []  # a loopback winner is not called unless private agents are
    assert "refused to connect" in caplog.text
    assert send_notice(private, operator=operator, allow_private=True, timeout=2)


def test_hosted_winners_and_expired_tasks_are_not_told(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    world = open_world(tmp_path / "home", env=PRIVATE)
    server, thread = serve_in_thread(0)
    request.addfinalizer(lambda: stop(server, thread))
    registry = world.onboarding.registry
    record = registry.new_agent("ada", now=world.clock(), runtime="http", endpoint=server.url)
    for outcome in world.onboarding.onboard(record, list(CAPABILITIES), item_count=3):
        assert outcome.credential_id is not None
    task_id = win_alone(world, registry.signer(record))
    world.market.award(task_id)
    assert world.market.task(task_id).winner == record.did
    assert award_notice(world.context, task_id) is None  # its key is here: nobody to tell
    expired = post_task(world)
    world.clock.set(world.market.task(expired).reveal_ends)
    world.market.award(expired)
    assert award_notice(world.context, expired) is None
