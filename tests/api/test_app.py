"""The HTTP service end to end, in process: a real SQLite ledger anchored on a
`MemoryAnchorChain`, real onboarding, a market escrowing on a `MemoryEscrowChain`, one clock
the test moves; requests through `fastapi.testclient.TestClient`, signed with `AccordAuth`."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from accord.api.app import create_app
from accord.api.routes.deps import ApiConfig
from accord.identity.agent_cards import card_did, verify_card
from accord.identity.challenges import REGISTRY
from accord.identity.http_auth import AccordAuth
from accord.identity.http_signatures import sign_request
from accord.identity.onboarding import Onboarding
from accord.identity.presentations import create_presentation
from accord.ledger.chain import DEVNET_OPERATOR_KEY, MemoryAnchorChain
from accord.ledger.settings import Settings
from accord.ledger.signing import Ed25519Signer
from accord.market.escrow import MemoryEscrowChain
from accord.market.money import Wei
from accord.market.sealed import commit_bid, reveal_bid
from accord.market.wiring import MarketContext
from tests.audit.conftest import open_world
from tests.clocks import Clock

SALT = bytes(range(32))


@dataclass
class World:
    settings: Settings
    clock: Clock
    context: MarketContext
    anchors: MemoryAnchorChain
    escrow_chain: MemoryEscrowChain
    operator: Ed25519Signer
    signers: dict[str, Ed25519Signer]

    @property
    def onboarding(self) -> Onboarding:
        return self.context.onboarding

    def app(self, config: ApiConfig | None = None) -> Any:
        return create_app(
            self.settings,
            config=config or ApiConfig(rate=1000.0, burst=10_000.0),
            context=self.context,
            anchors=self.anchors,
            escrow_chain=self.escrow_chain,
        )


def build_world(home: Path, *, bidders: tuple[str, ...] = ("ada", "bob")) -> World:
    """Requester `req` (registered, no credentials), bidders onboarded in arithmetic, `carol`
    created but not registered."""
    opened = open_world(home, Clock())
    clock, onboarding = opened.clock, opened.onboarding
    signers: dict[str, Ed25519Signer] = {}
    registry = onboarding.registry
    requester = registry.new_agent("req", now=clock())
    onboarding.register(requester)
    signers["req"] = registry.signer(requester)
    for name in bidders:
        record = registry.new_agent(name, now=clock())
        [outcome] = onboarding.onboard(record, ["arithmetic"], item_count=5)
        assert outcome.exam.passed
        signers[name] = registry.signer(record)
    signers["carol"] = registry.signer(registry.new_agent("carol", now=clock()))
    operator = opened.ledger.operator
    assert isinstance(operator, Ed25519Signer)
    return World(
        opened.settings,
        clock,
        opened.context,
        opened.anchors,
        opened.escrow_chain,
        operator,
        signers,
    )


FIGURES = {"kind": "figures", "figures": ["120.50", "33.20", "9.99"], "operation": "sum"}
PART = {"id": "sum", "capability": "arithmetic", "input": FIGURES}
SUM_RIGHT = {
    "id": "sum-right",
    "weight": 1,
    "kind": "expect",
    "part": "sum",
    "path": "$",
    "within": "163.69",
    "tolerance": "0.005",
}
"""The requester's correctness check on `PART`: this service has no judge, so a spec needs one
(`accord.market.work.require_machine_verdict`)."""


def post_task(client: TestClient, signer: Ed25519Signer, **fields: Any) -> dict[str, Any]:
    body = {
        "title": "Check the figures",
        "parts": [PART],
        "checks": [SUM_RIGHT],
        "budget": "0.5eth",
        "bidding": "30s",
        "reveal": "30s",
        **fields,
    }
    response = client.post("/tasks", json=body, auth=AccordAuth(signer))
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()
    return data


def commitment_json(signer: Ed25519Signer, task_id: str, price: int) -> dict[str, str]:
    return commit_bid(signer, task_id, Wei(price), SALT).to_json()


def reveal_json(signer: Ed25519Signer, task_id: str, price: int) -> dict[str, str]:
    return reveal_bid(signer, task_id, Wei(price), SALT).to_json()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build_world(tmp_path_factory.mktemp("api-world") / "home")


@pytest.fixture
def client(world: World) -> TestClient:
    return TestClient(world.app())


def assert_problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert body["type"].startswith("urn:accord:problem:")
    assert body["title"] and body["detail"]
    return body


# -- app creation ---------------------------------------------------------------------------


def test_create_app_does_no_io(tmp_path: Path) -> None:
    home = tmp_path / "untouched"
    app = create_app(Settings.from_env({"ACCORD_HOME": str(home)}))
    client = TestClient(app)
    assert client.get("/health").json()["status"] == "ok"
    assert client.get("/openapi.json").status_code == 200
    assert not home.exists()
    # the card is signed by the operator, whose key is read (made) on the first request for it
    assert client.get("/.well-known/agent-card.json").json()["signatures"]


def test_chain_down_is_503(tmp_path: Path) -> None:
    """A chain that does not answer: opening the market fails with 503 problem+json."""
    home = tmp_path / "home"
    env = {
        "ACCORD_HOME": str(home),
        "ACCORD_RPC_URL": "http://127.0.0.1:9",
        "ACCORD_OPERATOR_ETH_KEY": DEVNET_OPERATOR_KEY,
    }
    app = create_app(Settings.from_env(env))
    response = TestClient(app).get("/tasks")
    assert_problem(response, 503)


# -- reads ----------------------------------------------------------------------------------


def test_a_body_nested_past_the_recursion_limit_is_400_and_the_service_lives(
    client: TestClient,
) -> None:
    """100,000 brackets (200 KB, under the body limit), to a route that reads JSON before any
    signature: a clear 400. With py_ecc's recursion limit (accord/_stack.py) this killed the
    process."""
    deep = b"[" * 100_000 + b"]" * 100_000
    response = client.post(
        "/credentials/verify", content=deep, headers={"Content-Type": "application/json"}
    )
    assert_problem(response, 400)
    assert client.get("/health").status_code == 200


def test_service_card(client: TestClient) -> None:
    card = client.get("/.well-known/agent-card.json").json()
    for key in (
        "name",
        "description",
        "version",
        "supportedInterfaces",
        "capabilities",
        "skills",
        "defaultInputModes",
        "defaultOutputModes",
        "signatures",
    ):
        assert key in card
    assert card["supportedInterfaces"][0]["url"] == "http://testserver/a2a"
    assert any(skill["name"] == "arithmetic" for skill in card["skills"])  # its id: the hash


def test_agents_and_cards(client: TestClient, world: World) -> None:
    agents = client.get("/agents").json()
    assert {a["name"] for a in agents} >= {"req", "ada", "bob", "carol"}
    ada = world.signers["ada"].did
    shown = client.get(f"/agents/{ada}").json()
    assert shown["name"] == "ada" and shown["credentials"][0]["capability"] == "arithmetic"
    card = client.get(f"/agents/{ada}/card").json()
    assert card_did(card) == ada == verify_card(card).did
    assert [skill["name"] for skill in card["skills"]] == ["arithmetic"]  # its id: the hash
    assert card["supportedInterfaces"][0]["url"].endswith("/a2a")
    assert card["defaultInputModes"] == ["application/json"]
    assert client.get("/agents/carol/card").json()["skills"] == []
    assert_problem(client.get("/agents/nobody"), 404)
    assert_problem(client.get("/agents/nobody/card"), 404)


def test_capabilities(client: TestClient) -> None:
    names = {row["name"] for row in client.get("/capabilities").json()}
    assert "arithmetic" in names


def test_credentials_show_and_verify(client: TestClient, world: World) -> None:
    ada = world.signers["ada"].did
    [row] = world.onboarding.credentials_of(ada)
    shown = client.get(f"/credentials/{row['id']}").json()
    assert shown["agent"] == ada
    verified = client.post("/credentials/verify", json={"credential": shown["document"]}).json()
    assert verified == {**verified, "valid": True, "subject": ada, "capability": "arithmetic"}
    wrong = client.post(
        "/credentials/verify", json={"credential": shown["document"], "holder": "did:key:zX"}
    ).json()
    assert wrong["valid"] is False and wrong["step"]
    assert_problem(client.get("/credentials/urn:uuid:nothing"), 404)


# -- the market flow -----------------------------------------------------------------------


def test_post_bid_reveal_award_audit(client: TestClient, world: World) -> None:
    req, ada, bob = (world.signers[n] for n in ("req", "ada", "bob"))
    review = {"id": "sum-review", "weight": 1, "kind": "review", "part": "sum"}
    task = post_task(client, req, checks=[SUM_RIGHT, review])
    task_id = task["task_id"]
    assert task["state"] == "bidding" and task["requester"] == req.did
    assert any(t["task_id"] == task_id for t in client.get("/tasks").json())
    assert client.get(f"/tasks/{task_id}").json()["escrowed"] is True

    for signer, price in ((ada, 2 * 10**17), (bob, 3 * 10**17)):
        response = client.post(
            f"/tasks/{task_id}/commitments",
            json=commitment_json(signer, task_id, price),
            auth=AccordAuth(signer),
        )
        assert response.status_code == 201, response.text
    bids = client.get(f"/tasks/{task_id}/bids").json()
    assert {b["bidder"] for b in bids} == {ada.did, bob.did}
    assert all(b["price"] is None for b in bids)

    second = client.post(
        f"/tasks/{task_id}/commitments",
        json=commitment_json(ada, task_id, 10**17),
        auth=AccordAuth(ada),
    )
    assert assert_problem(second, 409)["reason"] == "second-bid"
    early = client.post(f"/tasks/{task_id}/award", auth=AccordAuth(req))
    assert_problem(early, 409)

    world.clock.advance(31)
    for signer, price in ((ada, 2 * 10**17), (bob, 3 * 10**17)):
        response = client.post(
            f"/tasks/{task_id}/reveals",
            json=reveal_json(signer, task_id, price),
            auth=AccordAuth(signer),
        )
        assert response.status_code == 201, response.text
    assert {b["price"] for b in client.get(f"/tasks/{task_id}/bids").json()} == {
        str(2 * 10**17),
        str(3 * 10**17),
    }
    world.clock.advance(31)
    awarded = client.post(f"/tasks/{task_id}/award", auth=AccordAuth(req))
    assert awarded.status_code == 200, awarded.text
    assert awarded.json()["winner"] in (ada.did, bob.did)
    assert client.get(f"/tasks/{task_id}").json()["state"] == "awarded"
    again = client.post(f"/tasks/{task_id}/award", auth=AccordAuth(req))
    assert_problem(again, 409)

    winner = ada if awarded.json()["winner"] == ada.did else bob
    stranger = bob if winner is ada else ada
    assert_problem(client.post(f"/tasks/{task_id}/run", auth=AccordAuth(stranger)), 403)
    ran = client.post(f"/tasks/{task_id}/run", auth=AccordAuth(winner))
    assert ran.status_code == 200, ran.text
    assert ran.json()["deliverable"]["contributions"]
    assert client.get(f"/tasks/{task_id}").json()["state"] == "delivered"
    assert_problem(client.post(f"/tasks/{task_id}/settle", auth=AccordAuth(winner)), 403)
    # the requester's checks: the sum, and its review (the settlement waits for the review)
    waits = client.post(f"/tasks/{task_id}/settle", auth=AccordAuth(req))
    assert assert_problem(waits, 409)["type"].endswith("settlement-waits")
    # the deliverable: for the requester and the team; not for others, not unsigned
    got = client.get(f"/tasks/{task_id}/deliverable", auth=AccordAuth(req))
    assert got.status_code == 200, got.text
    [part] = got.json()["parts"]
    assert (part["part"], part["output"]) == ("sum", "163.69")
    assert got.json()["checks"] is None
    outsider = world.signers["carol"]
    assert_problem(client.get(f"/tasks/{task_id}/deliverable", auth=AccordAuth(outsider)), 403)
    assert_problem(client.get(f"/tasks/{task_id}/deliverable"), 401)
    review = {"check": "sum-review", "verdict": "accept"}
    wrong = client.post(f"/tasks/{task_id}/reviews", json=review, auth=AccordAuth(winner))
    assert_problem(wrong, 403)
    accepted = client.post(f"/tasks/{task_id}/reviews", json=review, auth=AccordAuth(req))
    assert accepted.status_code == 201, accepted.text
    twice = client.post(f"/tasks/{task_id}/reviews", json=review, auth=AccordAuth(req))
    assert_problem(twice, 400)
    settled = client.post(f"/tasks/{task_id}/settle", auth=AccordAuth(req))
    assert settled.status_code == 200, settled.text
    checks = client.get(f"/tasks/{task_id}/deliverable", auth=AccordAuth(req)).json()["checks"]
    assert {c["id"]: c["passed"] for c in checks}["sum-review"] is True
    payouts = settled.json()["payouts"]
    assert sum(int(w) for w in payouts.values()) == int(settled.json()["amount"])
    assert settled.json()["held"] == {}  # every payee bound a payout account
    world.context.market.ledger.anchorer.anchor_latest()  # type: ignore[union-attr]

    report = client.get(f"/tasks/{task_id}/audit").json()
    assert report["task_id"] == task_id
    assert report["verdict"] == "PASS", report
    assert len(report["steps"]) == 7


def test_discovery_and_revocation(client: TestClient, world: World) -> None:
    found = client.get("/agents", params={"capability": "arithmetic", "need": "sum numbers"})
    assert found.status_code == 200
    assert {a["did"] for a in found.json()} >= {world.signers["ada"].did}
    assert all("arithmetic" in a["capabilities"] for a in found.json())
    ada = world.signers["ada"]
    credential = client.get(f"/agents/{ada.did}").json()["credentials"][0]["id"]
    refused = client.post(
        f"/credentials/{credential}/revoke", json={"reason": "test"}, auth=AccordAuth(ada)
    )
    assert_problem(refused, 403)
    unknown = client.post(
        "/credentials/urn:uuid:nosuch/revoke",
        json={"reason": "test"},
        auth=AccordAuth(world.operator),
    )
    assert_problem(unknown, 404)


def test_refused_bids_are_problems(client: TestClient, world: World) -> None:
    req, ada, carol = (world.signers[n] for n in ("req", "ada", "carol"))
    task_id = post_task(client, req)["task_id"]
    other = post_task(client, req)["task_id"]
    # signed for another task
    wrong = client.post(
        f"/tasks/{task_id}/commitments",
        json=commitment_json(ada, other, 10**17),
        auth=AccordAuth(ada),
    )
    assert assert_problem(wrong, 400)["reason"] == "wrong-task"
    # not credentialed
    uneligible = client.post(
        f"/tasks/{task_id}/commitments",
        json=commitment_json(carol, task_id, 10**17),
        auth=AccordAuth(carol),
    )
    assert assert_problem(uneligible, 409)["reason"] == "not-eligible"
    # malformed
    bad = {**commitment_json(ada, task_id, 10**17), "commitment": "AAAA"}
    assert_problem(
        client.post(f"/tasks/{task_id}/commitments", json=bad, auth=AccordAuth(ada)), 400
    )
    # an unknown task
    missing = client.post(
        "/tasks/task-none/commitments",
        json=commitment_json(ada, "task-none", 10**17),
        auth=AccordAuth(ada),
    )
    assert_problem(missing, 404)
    assert_problem(client.get("/tasks/task-none"), 404)
    assert_problem(client.get("/tasks/task-none/audit"), 404)
    # bad input to posting
    response = client.post(
        "/tasks",
        json={"title": "x", "parts": [PART], "budget": "lots"},
        auth=AccordAuth(req),
    )
    assert_problem(response, 400)
    response = client.post("/tasks", json={"title": "x"}, auth=AccordAuth(req))
    assert_problem(response, 422)
    # an invalid spec: 422 naming the JSON path of the problem, nothing logged
    size = world.context.market.ledger.store.size()
    bad_inputs = [
        ({**PART, "capability": "astrology"}, "$.parts[0].capability"),
        ({**PART, "input": {**FIGURES, "figures": ["1", "x"]}}, "$.parts[0].input.figures[1]"),
        ({**PART, "input": {"document": {"$file": "ab" * 32}, "fields": {}}}, "$.parts[0]"),
    ]
    for part, path in bad_inputs:
        body = {"title": "x", "parts": [part], "budget": "1eth"}
        response = client.post("/tasks", json=body, auth=AccordAuth(req))
        assert assert_problem(response, 422)["path"] == path, response.text
    bad_checks = [
        ({"id": "c", "kind": "expect", "part": "nope", "equals": 1}, "$.checks[0].part"),
        (
            {"id": "c", "kind": "python", "reads": ["sum"], "code": "def check(:"},
            "$.checks[0].code",
        ),
        ({"id": "c", "kind": "review", "reads": ["sum"], "weight": 0}, "$.checks[0].weight"),
        ({"id": "c", "kind": "review", "reads": ["sum"], "weight": 1.5}, "$.checks[0].weight"),
        ({"id": "c", "kind": "telepathy", "reads": ["sum"]}, "$.checks[0].kind"),
    ]
    for check, path in bad_checks:
        body = {"title": "x", "parts": [PART], "budget": "1eth", "checks": [check]}
        response = client.post("/tasks", json=body, auth=AccordAuth(req))
        assert assert_problem(response, 422)["path"] == path, response.text
    assert world.context.market.ledger.store.size() == size


@pytest.mark.parametrize(
    "checks",
    [None, [{"id": "looks-right", "weight": 1, "kind": "review", "part": "sum"}]],
    ids=["no-checks", "review-only"],
)
def test_a_task_nobody_could_judge_is_refused_before_anything_is_logged(
    client: TestClient, world: World, monkeypatch: pytest.MonkeyPatch, checks: Any
) -> None:
    """With no judge here, a spec whose checks cannot reject a wrong answer that fits the
    output schema would be paid in full for anything: refused at posting and at prepare, with
    the reason and what to add; with a judge configured, it is posted as before."""
    monkeypatch.delenv("ACCORD_JUDGE_URL", raising=False)
    req = world.signers["req"]
    body: dict[str, Any] = {"title": "Add the figures", "parts": [PART], "budget": "0.1eth"}
    if checks is not None:
        body["checks"] = checks
    size = world.context.market.ledger.store.size()
    refused = assert_problem(client.post("/tasks", json=body, auth=AccordAuth(req)), 422)
    assert refused["path"] == "$.checks"
    for named in ("ACCORD_JUDGE_URL", "`expect`", "`const` or `enum`", "`python`"):
        assert named in refused["detail"], refused["detail"]
    own = Ed25519Signer.generate()  # a requester holding its own key asks what to sign
    prepare = {"spec": body, "escrow_from": "0x" + "11" * 20}
    answer = client.post("/tasks/prepare", json=prepare, auth=AccordAuth(own))
    assert assert_problem(answer, 422)["path"] == "$.checks"
    assert world.context.market.ledger.store.size() == size
    # a judge decides rejections here: the reviews can be judged, the posting goes through
    monkeypatch.setenv("ACCORD_JUDGE_URL", "http://127.0.0.1:9/v1")
    posted = client.post("/tasks", json=body, auth=AccordAuth(req))
    assert posted.status_code == 201, posted.text


def test_a_remote_did_cannot_post(client: TestClient) -> None:
    stranger = Ed25519Signer.generate()
    body = {"title": "x", "parts": [PART], "budget": "1eth"}
    assert_problem(client.post("/tasks", json=body, auth=AccordAuth(stranger)), 403)


# -- registration ---------------------------------------------------------------------------


def test_registration_by_did_auth(client: TestClient, world: World) -> None:
    carol = world.signers["carol"]
    challenge = client.post("/registration/challenge", auth=AccordAuth(carol)).json()
    presentation = create_presentation(
        carol, [], challenge["challenge"], challenge["domain"], world.clock()
    )
    body = {"challenge": challenge["challenge"], "presentation": presentation}
    first = client.post("/registration", json=body, auth=AccordAuth(carol))
    assert first.status_code == 200, first.text
    assert first.json()["already"] is False
    again = client.post("/registration", json=body, auth=AccordAuth(carol))
    assert again.json()["already"] is True
    assert client.get(f"/agents/{carol.did}").json()["registered_index"] == first.json()["index"]


def test_registration_of_an_unknown_did_is_404(client: TestClient, world: World) -> None:
    stranger = Ed25519Signer.generate()
    challenge = client.post("/registration/challenge", auth=AccordAuth(stranger)).json()
    presentation = create_presentation(
        stranger, [], challenge["challenge"], challenge["domain"], world.clock()
    )
    body = {"challenge": challenge["challenge"], "presentation": presentation}
    assert_problem(client.post("/registration", json=body, auth=AccordAuth(stranger)), 404)


# -- the ledger and conversations ----------------------------------------------------------


def test_ledger_routes(client: TestClient, world: World) -> None:
    page = client.get("/ledger/entries", params={"from": 1, "limit": 3}).json()
    assert [e["index"] for e in page["entries"]] == [1, 2, 3]
    assert page["size"] >= 4
    subject = page["entries"][0]["event"]["subject"]
    every = client.get("/ledger/entries", params={"limit": 1000}).json()["entries"]
    about = client.get("/ledger/entries", params={"subject": subject, "limit": 1000}).json()
    assert about["entries"] == [e for e in every if e["event"]["subject"] == subject]
    assert len(about["entries"]) < len(every)
    proof = client.get("/ledger/entries/2/proof").json()
    assert proof["index"] == 2 and proof["tree_size"] == page["size"]
    assert_problem(client.get(f"/ledger/entries/{page['size'] + 5}/proof"), 404)
    world.context.market.ledger.anchorer.anchor_latest()  # type: ignore[union-attr]
    checkpoints = client.get("/ledger/checkpoints").json()["checkpoints"]
    assert checkpoints and checkpoints[-1]["anchor"]["status"] == "confirmed"
    for conversation in client.get("/conversations").json():
        shown = client.get(f"/conversations/{conversation['conv_id']}").json()
        assert shown["conv_id"] == conversation["conv_id"] and shown["state"] == "closed"
    assert_problem(client.get("/conversations/conv-none"), 404)
    assert_problem(client.get("/ledger/entries", params={"limit": 0}), 422)


# -- limits ---------------------------------------------------------------------------------


def test_body_limit_is_413(world: World) -> None:
    client = TestClient(world.app(ApiConfig(max_body=1000, rate=1000, burst=1000)))
    signer = world.signers["req"]
    body = b'{"title": "' + b"x" * 2000 + b'"}'
    headers = sign_request(
        signer, "POST", "http://testserver/tasks", body, content_type="application/json"
    )
    assert_problem(client.post("/tasks", content=body, headers=headers), 413)

    def chunks() -> Any:
        yield body

    streamed = client.post("/tasks", content=chunks(), headers=headers)
    assert_problem(streamed, 413)


def test_rate_limit_is_429_with_retry_after(world: World) -> None:
    client = TestClient(world.app(ApiConfig(rate=0.5, burst=3)))
    signer = world.signers["carol"]
    statuses = [
        client.post("/registration/challenge", auth=AccordAuth(signer)).status_code
        for _ in range(4)
    ]
    assert statuses[:3] == [200, 200, 200]
    response = client.post("/registration/challenge", auth=AccordAuth(signer))
    assert_problem(response, 429)
    assert int(response.headers["Retry-After"]) >= 1
    # another DID has its own bucket
    other = client.post("/registration/challenge", auth=AccordAuth(world.signers["ada"]))
    assert other.status_code == 200
    # unsigned reads are limited per client address
    reads = [client.get("/tasks").status_code for _ in range(5)]
    assert 429 in reads
    assert time.time() > 0


def test_a_task_nobody_can_bid_on_is_posted_with_a_warning(
    client: TestClient, world: World
) -> None:
    body = {
        "title": "Write a function",
        "budget": "0.1eth",
        "parts": [{"id": "f", "capability": "python", "input": REGISTRY["python"].example()[0]}],
        "checks": [
            {
                "id": "defines-it",
                "weight": 1,
                "kind": "python",
                "reads": ["f"],
                "code": "def check(outputs):\n    return 'def ' in outputs['f']\n",
            }
        ],
    }
    posted = client.post("/tasks", json=body, auth=AccordAuth(world.signers["req"]))
    assert posted.status_code == 201, posted.text
    [warning] = posted.json()["warnings"]
    assert "no agent holds a credential for python" in warning
    assert post_task(client, world.signers["req"])["warnings"] == []


def test_a_retried_posting_with_its_idempotency_key_answers_the_first_task(
    client: TestClient, world: World
) -> None:
    req = world.signers["req"]
    key = {"Idempotency-Key": f"order-{uuid.uuid4()}"}
    body = {
        "title": "Check the figures",
        "parts": [PART],
        "checks": [SUM_RIGHT],
        "budget": "0.5eth",
    }
    first = client.post("/tasks", json=body, headers=key, auth=AccordAuth(req))
    assert first.status_code == 201, first.text
    size = world.context.market.ledger.store.size()
    again = client.post("/tasks", json=body, headers=key, auth=AccordAuth(req))
    assert again.status_code == 201, again.text
    assert again.json()["task_id"] == first.json()["task_id"]
    assert world.context.market.ledger.store.size() == size  # nothing posted, nothing paid

    other = client.post(
        "/tasks", json={**body, "budget": "0.6eth"}, headers=key, auth=AccordAuth(req)
    )
    problem = assert_problem(other, 409)
    assert problem["type"].endswith(":idempotency") and first.json()["task_id"] in problem["detail"]
    long_key = {"Idempotency-Key": "k" * 201}
    assert_problem(client.post("/tasks", json=body, headers=long_key, auth=AccordAuth(req)), 422)
    assert world.context.market.ledger.store.size() == size
