"""The `a2a` runtime against a real A2A agent: one built with the a2a-sdk's server classes,
answering with the reference solver, served by uvicorn on 127.0.0.1, its card signed by the
test's key with the SDK's own signer.

An `a2a` agent registered against it passes an exam, and, in the in-process world of
tests/audit/conftest.py, wins a task, does its parts and is paid. A card whose signature does
not verify, or that has none, is refused when registering, saying why; a reply that is not a
usable JSON-RPC answer is a typed runtime error.
"""

from __future__ import annotations

import copy
import json
import secrets
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from a2a.helpers.proto_helpers import get_data_parts, new_data_part, new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events.event_queue_v2 import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCard, TaskState
from a2a.utils.signing import create_agent_card_signer
from google.protobuf.json_format import ParseDict
from jwt import PyJWK
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from accord.coordinator.service import run_awarded_task
from accord.identity.agent_cards import DID_EXTENSION
from accord.identity.agents import AgentRegistry
from accord.identity.challenges import reference
from accord.identity.errors import AgentCardError, RegistryError
from accord.identity.runtimes import (
    A2ARuntime,
    AgentRuntimeError,
    exam_item,
    read_send_message_reply,
    whole_numbers,
)
from accord.ledger.database import make_engine
from accord.ledger.devnet import find_free_port
from accord.ledger.signing import Ed25519Signer, b64url
from accord.market.sealed import commit_bid, reveal_bid
from accord.market.settlement import settle_task
from tests.audit.conftest import open_world, post_task
from tests.serving import serve

RPC_PATH = "/rpc"


class ReferenceSolver(AgentExecutor):
    """An A2A agent: the item in the message's data part, the reference solver's answer as a
    data artifact `{"answer": ...}`, the task completed."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None and context.task_id and context.context_id
        item = whole_numbers(get_data_parts(context.message.parts)[0])
        assert isinstance(item, dict)
        await event_queue.enqueue_event(
            new_task(
                context.task_id,
                context.context_id,
                TaskState.TASK_STATE_SUBMITTED,
                history=[context.message],
            )
        )
        updater = TaskUpdater(event_queue, context.task_id, context.context_id)
        answer = reference.solve(exam_item(item))
        await updater.add_artifact([new_data_part({"answer": answer})], name="answer")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        """Items are answered at once, so there is never work to stop: the task is canceled."""
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()


def card_of(base: str, signer: Ed25519Signer, *, signed: bool = True) -> AgentCard:
    """The test agent's v1.0 card, naming `signer`'s DID, signed with the SDK's signer."""
    card = ParseDict(
        {
            "name": "solver",
            "description": "The reference solver over A2A",
            "supportedInterfaces": [
                {"url": base + RPC_PATH, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
            ],
            "version": "1",
            "capabilities": {
                "streaming": False,
                "extensions": [{"uri": DID_EXTENSION, "params": {"did": signer.did}}],
            },
            "defaultInputModes": ["application/json"],
            "defaultOutputModes": ["application/json"],
            "skills": [
                {"id": name, "name": name, "description": name, "tags": [name]}
                for name in ("arithmetic", "extraction")
            ],
        },
        AgentCard(),
    )
    if not signed:
        return card
    jwk = PyJWK(
        {"kty": "OKP", "crv": "Ed25519", "d": b64url(signer.seed), "x": b64url(signer.public_key)}
    )
    sign = create_agent_card_signer(jwk, {"alg": "EdDSA", "kid": signer.kid, "typ": "JOSE"})  # type: ignore[typeddict-item]
    return sign(card)


@contextmanager
def a2a_agent(
    signer: Ed25519Signer, *, alter: Callable[[dict[str, Any]], None] | None = None, **kw: Any
) -> Iterator[str]:
    """The SDK-built agent on 127.0.0.1; yields its base URL. `alter` changes the served
    card's JSON after signing."""
    port = find_free_port()
    base = f"http://127.0.0.1:{port}"
    card = card_of(base, signer, **kw)
    handler = DefaultRequestHandler(ReferenceSolver(), InMemoryTaskStore(), card)
    routes = create_jsonrpc_routes(handler, RPC_PATH)
    if alter is None:
        routes += create_agent_card_routes(card)
    else:
        from google.protobuf.json_format import MessageToDict

        document = MessageToDict(card)
        alter(document)

        async def altered(request: Request) -> JSONResponse:
            return JSONResponse(document)

        routes.append(Route("/.well-known/agent-card.json", altered, methods=["GET"]))
    with serve(Starlette(routes=routes), port) as url:
        yield url


@pytest.fixture
def registry(tmp_path: Path) -> AgentRegistry:
    engine = make_engine(f"sqlite:///{tmp_path / 'agents.db'}")
    return AgentRegistry(engine, tmp_path / "keys", allow_private_agents=True)


@pytest.fixture
def agent_key() -> Ed25519Signer:
    return Ed25519Signer.generate()


# -- registering --------------------------------------------------------------------------


def test_registering_keeps_the_cards_interface(
    registry: AgentRegistry, agent_key: Ed25519Signer
) -> None:
    with a2a_agent(agent_key) as url:
        record = registry.new_agent("solver", now=datetime.now(UTC), runtime="a2a", card=url)
        assert record.endpoint == url + RPC_PATH and record.card == url
        runtime = registry.runtime(registry.get("solver"))
        assert isinstance(runtime, A2ARuntime)
        item = {"item_id": "i1", "capability": "arithmetic", "prompt": "Compute.",
                "payload": {"kind": "expression", "expression": "(2 + 3) * 7"}}  # fmt: skip
        assert runtime.answer(item) == reference.solve(exam_item(item))


def test_a_card_changed_after_signing_is_refused(
    registry: AgentRegistry, agent_key: Ed25519Signer, tmp_path: Path
) -> None:
    def grow(card: dict[str, Any]) -> None:
        card["skills"].append({"id": "python", "name": "python", "description": "x", "tags": ["x"]})

    with (
        a2a_agent(agent_key, alter=grow) as url,
        pytest.raises(AgentCardError, match="changed after signing") as raised,
    ):
        registry.new_agent("solver", now=datetime.now(UTC), runtime="a2a", card=url)
    assert "refused" in str(raised.value)
    assert registry.list() == [] and not (tmp_path / "keys" / "agents" / "solver.json").exists()


def test_a_card_signed_by_another_did_is_refused(registry: AgentRegistry) -> None:
    signer, named = Ed25519Signer.generate(), Ed25519Signer.generate().did

    def rename(card: dict[str, Any]) -> None:
        card["capabilities"]["extensions"][0]["params"]["did"] = named

    with (
        a2a_agent(signer, alter=rename) as url,
        pytest.raises(AgentCardError, match="no signature on the agent card verifies"),
    ):
        registry.new_agent("solver", now=datetime.now(UTC), runtime="a2a", card=url)


def test_an_unsigned_card_only_with_the_flag(
    registry: AgentRegistry, agent_key: Ed25519Signer
) -> None:
    with a2a_agent(agent_key, signed=False) as url:
        with pytest.raises(AgentCardError, match=r"not signed.*--unsigned-card"):
            registry.new_agent("solver", now=datetime.now(UTC), runtime="a2a", card=url)
        record = registry.new_agent(
            "solver", now=datetime.now(UTC), runtime="a2a", card=url, allow_unsigned_card=True
        )
    assert record.endpoint == url + RPC_PATH


def test_bad_specs_are_refused(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'agents.db'}")
    public_only = AgentRegistry(engine, tmp_path / "keys")
    now = datetime.now(UTC)
    with pytest.raises(RegistryError, match="needs --card"):
        public_only.new_agent("a", now=now, runtime="a2a")
    with pytest.raises(RegistryError, match="loopback"):
        public_only.new_agent("a", now=now, runtime="a2a", card="http://127.0.0.1:9/")
    with pytest.raises(RegistryError, match="only for the 'a2a' runtime"):
        public_only.new_agent("a", now=now, runtime="http", endpoint="https://a.example", card="x")
    with pytest.raises(AgentCardError, match="cannot fetch"):
        AgentRegistry(engine, tmp_path / "keys", allow_private_agents=True).new_agent(
            "a", now=now, runtime="a2a", card=f"http://127.0.0.1:{find_free_port()}"
        )


# -- an exam and a paid task --------------------------------------------------------------


def test_an_a2a_agent_passes_an_exam(tmp_path: Path, agent_key: Ed25519Signer) -> None:
    world = open_world(tmp_path / "home")
    world.onboarding.registry.allow_private_agents = True
    with a2a_agent(agent_key) as url:
        record = world.onboarding.registry.new_agent(
            "solver", now=world.clock(), runtime="a2a", card=url
        )
        outcomes = world.onboarding.onboard(record, ["arithmetic"], item_count=5)
    assert outcomes[0].credential_id is not None


def test_an_a2a_agent_wins_works_and_is_paid(
    tmp_path: Path, agent_key: Ed25519Signer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACCORD_ALLOW_PRIVATE_AGENTS", "1")
    world = open_world(tmp_path / "home")
    world.onboarding.registry.allow_private_agents = True
    with a2a_agent(agent_key) as url:
        record = world.onboarding.registry.new_agent(
            "solver", now=world.clock(), runtime="a2a", card=url
        )
        outcomes = world.onboarding.onboard(record, ["arithmetic", "extraction"], item_count=5)
        assert all(o.credential_id is not None for o in outcomes)
        world.agents["solver"] = record
        task_id = post_task(world)
        task = world.market.task(task_id)
        signer = world.signer("solver")
        price, salt = task.spec.budget // 2, secrets.token_bytes(32)
        world.market.commit(commit_bid(signer, task_id, price, salt))
        world.clock.set(task.bidding_ends)
        world.market.reveal(reveal_bid(signer, task_id, price, salt))
        world.clock.set(task.reveal_ends)
        world.market.award(task_id)
        assert world.market.task(task_id).winner == record.did
        run_awarded_task(world.context, task_id)
    world.clock.advance(1)
    outcome = settle_task(world.market, world.onboarding, task_id)
    assert outcome.payouts[record.did] > 0
    assert world.escrow_chain.credit(outcome.payees[record.did]) == outcome.payouts[record.did]


# -- replies that are not answers ---------------------------------------------------------


def _reply(result: Any, request_id: str = "r1") -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def _task(state: str, parts: list[Any] | None = None) -> dict[str, Any]:
    task: dict[str, Any] = {"id": "t", "status": {"state": state}}
    if parts is not None:
        task["artifacts"] = [{"artifactId": "a", "parts": parts}]
    return {"task": task}


def test_answers_are_read_from_an_artifact_or_a_message() -> None:
    done = _task("TASK_STATE_COMPLETED", [{"text": "working"}, {"data": {"answer": 42.0}}])
    assert read_send_message_reply(_reply(done), "r1") == 42
    said = {"message": {"messageId": "m", "role": "ROLE_AGENT",
                        "parts": [{"text": '{"answer": [1, "b"]}'}]}}  # fmt: skip
    assert read_send_message_reply(_reply(said), "r1") == [1, "b"]


@pytest.mark.parametrize(
    ("reply", "retriable", "reason"),
    [
        ("not an object", False, "not JSON-RPC 2.0"),
        ({"jsonrpc": "1.0", "id": "r1", "result": {}}, False, "not JSON-RPC 2.0"),
        (_reply({}, "other"), False, "answered request 'other'"),
        ({"jsonrpc": "2.0", "id": "r1", "error": {"code": -32601}}, False, "-32601"),
        ({"jsonrpc": "2.0", "id": "r1", "error": {"code": -32603}}, True, "-32603"),
        ({"jsonrpc": "2.0", "id": "r1", "error": "flat"}, False, "error None"),
        (_reply([1, 2]), False, "no result object"),
        (_reply({"other": 1}), False, "neither a task nor a message"),
        (_reply({"task": {"status": "bad"}}), True, "not finished"),
        (_reply(_task("TASK_STATE_WORKING")), True, "not finished"),
        (_reply(_task("TASK_STATE_FAILED")), False, "failed"),
        (_reply(_task("TASK_STATE_REJECTED")), False, "rejected"),
        (_reply(_task("TASK_STATE_COMPLETED", [{"data": {"result": 1}}, "x", {"text": "{"}])),
         False, "no part with"),
        (_reply({"task": {"status": {"state": "TASK_STATE_COMPLETED"}, "artifacts": "x"}}),
         False, "no part with"),
        (_reply({"message": {"parts": None}}), False, "message holds no part"),
    ],
)  # fmt: skip
def test_replies_that_are_not_answers(reply: Any, retriable: bool, reason: str) -> None:
    with pytest.raises(AgentRuntimeError, match=reason) as raised:
        read_send_message_reply(reply, "r1")
    assert raised.value.retriable is retriable


class Scripted(BaseHTTPRequestHandler):
    """Answers every POST with the class's `status` and `body`."""

    status = 200
    body = b"{not json"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def scripted(status: int, body: bytes) -> Iterator[str]:
    handler = type("Handler", (Scripted,), {"status": status, "body": body})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/rpc"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.mark.parametrize(
    ("status", "body", "retriable", "reason"),
    [
        (200, b"{not json", False, "did not answer with JSON"),
        (200, json.dumps({"jsonrpc": "2.0", "id": 7, "result": {}}).encode(), False, "request 7"),
        (503, b"busy", True, "HTTP 503"),
        (302, b"", False, "redirect"),
        (200, b"[" * (1 << 20) + b"]", False, "more than 1 MiB"),
    ],
)
def test_a_malformed_json_rpc_answer_is_a_typed_error(
    status: int, body: bytes, retriable: bool, reason: str
) -> None:
    item = {"item_id": "i", "capability": "arithmetic", "prompt": "p", "payload": {}}
    with scripted(status, body) as url:
        runtime = A2ARuntime(url, timeout=5, allow_private=True)
        with pytest.raises(AgentRuntimeError, match=reason) as raised:
            runtime.answer(copy.deepcopy(item))
    assert raised.value.retriable is retriable
