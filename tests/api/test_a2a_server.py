"""The A2A endpoint (`POST /a2a`, api/a2a.py) driven by the a2a-sdk client.

The service runs under uvicorn on 127.0.0.1 over an in-process world (a SQLite ledger, real
onboarding, escrow on a `MemoryEscrowChain`, one clock the test moves). The caller is the
a2a-sdk 1.x client on its JSON-RPC transport, given an httpx client whose `auth` is
`AccordAuth(signer)`, so every call is signed by the requester's DID. The market's side of each
step is read back from the REST API and the ledger; malformed calls go through raw httpx.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import httpx
import pytest
from a2a.client import Client, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf import struct_pb2
from google.protobuf.json_format import MessageToDict, ParseDict

from accord.api.a2a import StreamLimits, a2a_router
from accord.coordinator.service import run_awarded_task
from accord.identity.http_auth import AccordAuth
from accord.ledger.signing import Ed25519Signer
from accord.market.money import Wei, parse_amount
from accord.market.sealed import commit_bid, reveal_bid
from accord.market.settlement import settle_task
from accord.market.tasks import TASK_POSTED, TaskSpec
from accord.market.tasks import Part as SpecPart
from tests.api.test_app import PART, SALT, SUM_RIGHT, World, build_world
from tests.serving import serve

SPEC: dict[str, Any] = {
    "title": "Check the figures",
    "budget": "0.5eth",
    "bidding": "30s",
    "reveal": "30s",
    "parts": [PART],
    "checks": [SUM_RIGHT, {"id": "sum-review", "weight": 1, "kind": "review", "part": "sum"}],
}
SHORT = "/brief"
"""A second mount of the endpoint whose streams end after one second."""


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> World:
    return build_world(tmp_path_factory.mktemp("a2a-world") / "home")


@pytest.fixture(scope="module")
def url(world: World) -> Iterator[str]:
    app = world.app()
    app.include_router(a2a_router(StreamLimits(horizon=1.0, poll=0.05)), prefix=SHORT)
    with serve(app, ws="none") as base:
        yield base


def card(base: str, path: str = "/a2a") -> AgentCard:
    return AgentCard(
        name="accord",
        description="the accord market",
        version="0.1.0",
        supported_interfaces=[
            AgentInterface(url=base + path, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["application/json"],
        default_output_modes=["application/json"],
    )


@asynccontextmanager
async def a2a_client(
    base: str, signer: Ed25519Signer, *, streaming: bool = False, path: str = "/a2a"
) -> AsyncIterator[Client]:
    """The SDK's client on its JSON-RPC transport, every request signed by `signer`."""
    async with httpx.AsyncClient(auth=AccordAuth(signer), timeout=30) as http:
        factory = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming))
        client = factory.create(card(base, path))
        yield client
        await client.close()


def spec_request(spec: Any, *, text: str | None = None, task_id: str = "") -> SendMessageRequest:
    parts = [Part(data=ParseDict(spec, struct_pb2.Value()), media_type="application/json")]
    if text is not None:
        parts.insert(0, Part(text=text))
    message = Message(
        message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=parts, task_id=task_id
    )
    return SendMessageRequest(message=message)


async def send(client: Client, request: SendMessageRequest) -> Task:
    events = [event async for event in client.send_message(request)]
    [event] = events
    assert event.HasField("task"), event
    return event.task


def accord(task: Task) -> dict[str, Any]:
    data: dict[str, Any] = MessageToDict(task.metadata)["accord"]
    return data


def deliverable_of(task: Task) -> dict[str, Any]:
    [artifact] = task.artifacts
    assert artifact.artifact_id == "deliverable"
    [part] = artifact.parts
    assert part.HasField("data") and part.media_type == "application/json"
    data: dict[str, Any] = MessageToDict(part.data)
    return data


def accord_state(event: StreamResponse) -> str | None:
    """The accord state a status update reports (None for another event)."""
    if not event.HasField("status_update"):
        return None
    state: str = MessageToDict(event.status_update.metadata)["accord"]["state"]
    return state


def rest_task(base: str, task_id: str) -> dict[str, Any]:
    data: dict[str, Any] = httpx.get(f"{base}/tasks/{task_id}").json()
    return data


def bid(world: World, task_id: str) -> None:
    """Sealed bids by ada and bob; then the clock ends the bidding window."""
    for name, price in (("ada", 2 * 10**17), ("bob", 3 * 10**17)):
        world.context.market.commit(commit_bid(world.signers[name], task_id, Wei(price), SALT))
    world.clock.advance(31)


def reveal_and_award(world: World, task_id: str) -> str:
    """The bids revealed, the reveal window over, the auction cleared: the winner."""
    market = world.context.market
    for name, price in (("ada", 2 * 10**17), ("bob", 3 * 10**17)):
        market.reveal(reveal_bid(world.signers[name], task_id, Wei(price), SALT))
    world.clock.advance(31)
    outcome = market.award(task_id)
    assert outcome.winner is not None
    return outcome.winner.bidder


def unfunded(world: World) -> str:
    """A `task.posted` whose deposit never happened (the process died between the two)."""
    task_id = f"task-unfunded-{uuid.uuid4().hex[:8]}"
    spec = TaskSpec(
        title="Unfunded",
        description="",
        parts=(SpecPart("sum", "arithmetic", PART["input"]),),
        budget=parse_amount("0.1eth"),
        bidding=timedelta(seconds=30),
        reveal=timedelta(seconds=30),
        delivery=timedelta(minutes=10),
    )
    world.context.market.ledger.append(
        world.signers["req"],
        TASK_POSTED,
        subject=task_id,
        body={"task_id": task_id, "spec": spec.to_json(), "escrow_from": "0x" + "11" * 20},
    )
    return task_id


# -- send, get, list ------------------------------------------------------------------------


def test_a_message_posts_a_task_its_requester_signed(url: str, world: World) -> None:
    req = world.signers["req"]

    async def run() -> tuple[Task, Task]:
        async with a2a_client(url, req) as client:
            posted = await send(client, spec_request(SPEC, text="Add the three figures."))
            got = await client.get_task(GetTaskRequest(id=posted.id))
            return posted, got

    posted, got = asyncio.run(run())
    assert posted.status.state == TaskState.TASK_STATE_SUBMITTED
    assert posted.context_id == posted.id
    assert accord(posted)["state"] == "bidding"
    assert accord(posted)["requester"] == req.did
    assert "sealed bids" in posted.status.message.parts[0].text
    # the market's side: posted by the signer, escrowed, the text parts as its description
    market = rest_task(url, posted.id)
    assert (market["requester"], market["state"], market["escrowed"]) == (
        req.did,
        "bidding",
        True,
    )
    assert market["spec"]["description"] == "Add the three figures."
    assert world.context.market.escrow.deposit_of(posted.id) is not None
    assert got.id == posted.id and got.status.state == TaskState.TASK_STATE_SUBMITTED
    assert list(got.artifacts) == []


def test_a_resent_message_answers_the_task_it_posted(url: str, world: World) -> None:
    """A client that resends a message (a lost reply, a retry) with its messageId gets the
    task the first send posted: one task, one deposit."""
    request = spec_request(SPEC)

    async def run() -> tuple[Task, Task, Task]:
        async with a2a_client(url, world.signers["req"]) as client:
            first = await send(client, request)
            again = await send(client, request)
            other = await send(client, spec_request(SPEC))
            return first, again, other

    first, again, other = asyncio.run(run())
    assert again.id == first.id and other.id != first.id
    store = world.context.market.ledger.store
    assert len(store.find(kind=TASK_POSTED, subject=first.id)) == 1
    assert len(store.find(kind="escrow.opened", subject=first.id)) == 1


def test_get_an_unknown_task_is_task_not_found(url: str, world: World) -> None:
    async def run() -> None:
        async with a2a_client(url, world.signers["req"]) as client:
            await client.get_task(GetTaskRequest(id="task-nope"))

    with pytest.raises(TaskNotFoundError, match="task-nope"):
        asyncio.run(run())


def test_list_tasks_pages_newest_first_and_filters_by_state(url: str, world: World) -> None:
    req = world.signers["req"]

    async def run() -> tuple[list[str], list[Any], Any, Any]:
        async with a2a_client(url, req) as client:
            ids = [(await send(client, spec_request(SPEC))).id for _ in range(3)]
            pages = []
            token = ""
            while True:
                page = await client.list_tasks(ListTasksRequest(page_size=2, page_token=token))
                pages.append(page)
                token = page.next_page_token
                if not token:
                    break
            working = await client.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_WORKING))
            one = await client.list_tasks(ListTasksRequest(context_id=ids[0]))
            none = await client.list_tasks(ListTasksRequest(context_id="task-nope"))
            return ids, pages, working, (one, none)

    ids, pages, working, (one, none) = asyncio.run(run())
    listed = [task.id for page in pages for task in page.tasks]
    assert len(listed) == len(set(listed)) == pages[0].total_size
    assert all(len(page.tasks) <= 2 for page in pages)
    # One cursor form across accord's lists: `<view>.<key>`, here `a2a.<micros>.<task id>`.
    tokens = [page.next_page_token for page in pages[:-1]]
    assert tokens and all(re.fullmatch(r"a2a\.[0-9]{1,18}\.task-\S+", t) for t in tokens)
    assert set(ids) <= set(listed)
    stamps = [task.status.timestamp.ToDatetime() for page in pages for task in page.tasks]
    assert stamps == sorted(stamps, reverse=True)
    assert all(t.status.state == TaskState.TASK_STATE_WORKING for t in working.tasks)
    assert not set(ids) & {t.id for t in working.tasks}
    assert [t.id for t in one.tasks] == [ids[0]] and one.total_size == 1
    assert list(none.tasks) == [] and none.total_size == 0


# -- bad specs post nothing -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        (
            {**SPEC, "parts": [{**PART, "input": {**PART["input"], "figures": ["x"]}}]},
            "$.parts[0].input.figures[0]",
        ),
        ({**SPEC, "title": ""}, "$.title"),
        ({**SPEC, "budget": "lots"}, "$"),
        ({k: v for k, v in SPEC.items() if k != "parts"}, "$.parts"),
        # no judge here: a task only reviews could settle would be paid in full for anything
        (
            {**SPEC, "checks": [{"id": "ok", "weight": 1, "kind": "review", "part": "sum"}]},
            "$.checks",
        ),
        ({k: v for k, v in SPEC.items() if k != "checks"}, "$.checks"),
    ],
    ids=["bad-figure", "empty-title", "bad-budget", "no-parts", "review-only", "no-checks"],
)
def test_an_invalid_spec_is_invalid_params_naming_its_path(
    url: str, world: World, spec: dict[str, Any], path: str
) -> None:
    store = world.context.market.ledger.store
    before = store.size()

    async def run() -> None:
        async with a2a_client(url, world.signers["req"]) as client:
            await send(client, spec_request(spec))

    with pytest.raises(InvalidParamsError) as raised:
        asyncio.run(run())
    assert raised.value.data is not None
    assert raised.value.data["path"] == path, raised.value.data
    assert store.size() == before


def test_a_message_naming_a_posted_task_is_unsupported(url: str, world: World) -> None:
    async def run() -> None:
        async with a2a_client(url, world.signers["req"]) as client:
            posted = await send(client, spec_request(SPEC))
            await send(client, spec_request(SPEC, task_id=posted.id))

    with pytest.raises(UnsupportedOperationError, match="takes no further messages"):
        asyncio.run(run())


# -- cancel ---------------------------------------------------------------------------------


def test_cancel_a_posted_task_whose_escrow_never_opened(url: str, world: World) -> None:
    task_id = unfunded(world)

    async def run() -> tuple[Task, Task]:
        async with a2a_client(url, world.signers["ada"]) as stranger:
            with pytest.raises(Exception, match="only the requester"):
                await stranger.cancel_task(CancelTaskRequest(id=task_id))
        async with a2a_client(url, world.signers["req"]) as client:
            cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
            again = await client.cancel_task(CancelTaskRequest(id=task_id))
            return cancelled, again

    cancelled, again = asyncio.run(run())
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    assert accord(cancelled)["state"] == "cancelled"
    assert again.status.state == TaskState.TASK_STATE_CANCELED
    assert rest_task(url, task_id)["state"] == "cancelled"


def test_an_escrowed_task_is_not_cancelable_and_says_why(url: str, world: World) -> None:
    async def run() -> str:
        async with a2a_client(url, world.signers["req"]) as client:
            posted = await send(client, spec_request(SPEC))
            with pytest.raises(TaskNotCancelableError, match="escrowed") as raised:
                await client.cancel_task(CancelTaskRequest(id=posted.id))
            assert raised.value.data is not None and raised.value.data["state"] == "bidding"
            return posted.id

    task_id = asyncio.run(run())
    assert rest_task(url, task_id)["state"] == "bidding"


# -- the deliverable and the stream ---------------------------------------------------------


def review_and_settle(world: World, task_id: str) -> None:
    """The requester accepts the review check, and the task is settled (what the service's
    lifecycle round would do at the window's end)."""
    market = world.context.market
    market.review(world.signers["req"], task_id, "sum-review", "accept")
    settle_task(market, world.onboarding, task_id)


def test_the_stream_follows_a_task_through_settlement(url: str, world: World) -> None:
    req = world.signers["req"]
    events: list[StreamResponse] = []

    async def run() -> None:
        async with a2a_client(url, req, streaming=True) as client:
            async for event in client.send_message(spec_request(SPEC)):
                events.append(event)
                # the market moves on in this process, one step per event the stream sends
                if event.HasField("task"):
                    await asyncio.to_thread(bid, world, event.task.id)
                elif accord_state(event) == "revealing":
                    await asyncio.to_thread(reveal_and_award, world, event.status_update.task_id)
                elif accord_state(event) == "awarded":
                    await asyncio.to_thread(
                        run_awarded_task, world.context, event.status_update.task_id
                    )
                elif accord_state(event) == "delivered":
                    await asyncio.to_thread(review_and_settle, world, event.status_update.task_id)

    asyncio.run(asyncio.wait_for(run(), timeout=60))
    first, *updates = events
    assert first.HasField("task") and first.task.status.state == TaskState.TASK_STATE_SUBMITTED
    task_id = first.task.id
    states = [(accord_state(e), e.status_update.status.state) for e in updates]
    # a change of the deliverable is sent when a poll sees it: the review and the settlement
    # may land between two polls (one artifact update) or apart (two in a row)
    shown = [s for s in states if s[0] != "running"]
    shown = [s for i, s in enumerate(shown) if i == 0 or s[0] is not None or s != shown[i - 1]]
    assert shown == [
        ("revealing", TaskState.TASK_STATE_SUBMITTED),
        ("awarded", TaskState.TASK_STATE_WORKING),
        (None, TaskState.TASK_STATE_UNSPECIFIED),  # the artifact update
        # the task has a review check: the requester's review is the input it waits for
        ("delivered", TaskState.TASK_STATE_INPUT_REQUIRED),
        (None, TaskState.TASK_STATE_UNSPECIFIED),  # the deliverable again, with its checks
        ("settled", TaskState.TASK_STATE_COMPLETED),
    ]
    assert all(e.status_update.task_id == task_id for e in updates if e.HasField("status_update"))
    last = updates[-1].status_update
    assert last.status.state == TaskState.TASK_STATE_COMPLETED
    settlement = MessageToDict(last.metadata)["accord"]["settlement"]
    rubric = [c.check_id for c in world.context.market.task(task_id).spec.rubric]
    assert [(c["id"], c["passed"]) for c in settlement["checks"]] == [(c, True) for c in rubric]
    assert settlement["paid_share"] == "1/1" and sum(map(int, settlement["payouts"].values())) == (
        int(settlement["amount"])
    )
    delivered_artifact, *_, settled_artifact = [
        MessageToDict(e.artifact_update.artifact.parts[0].data)
        for e in updates
        if e.HasField("artifact_update")
    ]
    # the requester reads what its review check reads during the window, and all once paid
    [part] = delivered_artifact["parts"]
    assert (part["part"], part["output"]) == ("sum", "163.69")
    assert delivered_artifact["checks"] is None
    assert settled_artifact["checks"] and settled_artifact["payouts"]

    # GetTask: the requester gets the deliverable as an artifact; a stranger only the state
    async def read(signer: Ed25519Signer) -> Task:
        async with a2a_client(url, signer) as client:
            return await client.get_task(GetTaskRequest(id=task_id))

    mine = asyncio.run(read(req))
    assert mine.status.state == TaskState.TASK_STATE_COMPLETED
    deliverable = deliverable_of(mine)
    assert deliverable["task_id"] == task_id and deliverable["state"] == "settled"
    assert [(p["part"], p["output"]) for p in deliverable["parts"]] == [("sum", "163.69")]
    assert deliverable["sha256"] == MessageToDict(mine.artifacts[0].metadata)["sha256"]
    theirs = asyncio.run(read(world.signers["carol"]))
    assert theirs.status.state == TaskState.TASK_STATE_COMPLETED
    assert list(theirs.artifacts) == []
    # a completed task has nothing more to follow
    with pytest.raises(UnsupportedOperationError, match="nothing more to follow"):
        asyncio.run(subscribe(url, req, task_id))


async def subscribe(
    url: str, signer: Ed25519Signer, task_id: str, *, path: str = "/a2a"
) -> list[StreamResponse]:
    async with a2a_client(url, signer, streaming=True, path=path) as client:
        return [e async for e in client.subscribe(SubscribeToTaskRequest(id=task_id))]


def test_a_stream_ends_at_its_horizon_and_can_be_resumed(url: str, world: World) -> None:
    req = world.signers["req"]

    async def run() -> tuple[list[StreamResponse], float, list[StreamResponse]]:
        started = time.monotonic()
        async with a2a_client(url, req, streaming=True, path=SHORT + "/a2a") as client:
            events = [e async for e in client.send_message(spec_request(SPEC))]
        took = time.monotonic() - started
        resumed = await subscribe(url, req, events[0].task.id, path=SHORT + "/a2a")
        return events, took, resumed

    events, took, resumed = asyncio.run(run())
    for stream in (events, resumed):
        first, last = stream[0], stream[-1]
        assert first.task.status.state == TaskState.TASK_STATE_SUBMITTED
        assert first.task.id == events[0].task.id
        assert last.HasField("status_update")
        assert last.status_update.status.state == TaskState.TASK_STATE_SUBMITTED
        ending = MessageToDict(last.status_update.metadata)["accord"]["stream"]
        assert "ends after 1 s" in ending
    assert 0.9 <= took < 10


# -- malformed calls: JSON-RPC errors with HTTP 200 -----------------------------------------


def rpc(url: str, signer: Ed25519Signer, content: bytes, version: str = "1.0") -> Any:
    response = httpx.post(
        f"{url}/a2a",
        content=content,
        headers={"Content-Type": "application/json", "A2A-Version": version},
        auth=AccordAuth(signer),
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    return response.json()


def call(method: str, params: Any = None, request_id: Any = 7) -> bytes:
    body: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        body["params"] = params
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("content", "code", "request_id"),
    [
        (b"{not json", -32700, None),
        (b"\xff\xfe", -32700, None),
        (b"[]", -32600, None),
        (json.dumps([json.loads(call("GetTask", {"id": "x"}))]).encode(), -32600, None),
        (b'"SendMessage"', -32600, None),
        (b'{"id": 1, "method": "GetTask"}', -32600, 1),
        (b'{"jsonrpc": "2.0", "id": 2}', -32600, 2),
        (b'{"jsonrpc": "2.0", "id": 3, "method": 5}', -32600, 3),
        (b'{"jsonrpc": "2.0", "id": {"x": 1}, "method": "GetTask"}', -32600, None),
        (b'{"jsonrpc": "2.0", "method": "GetTask", "params": {"id": "x"}}', -32600, None),
        (call("tasks/get", {"id": "x"}), -32601, 7),
        (call("NoSuchMethod"), -32601, 7),
        (call("GetTask", [1, 2]), -32602, 7),
        (call("GetTask", {}), -32602, 7),
        (call("GetTask", {"id": "x", "historyLength": "many"}), -32602, 7),
        (call("ListTasks", {"pageSize": 1000}), -32602, 7),
        (call("ListTasks", {"pageToken": "not-a-token"}), -32602, 7),
        (call("ListTasks", {"pageToken": "tasks.12"}), -32602, 7),
        (call("ListTasks", {"pageToken": "a2a.12"}), -32602, 7),
        (call("ListTasks", {"pageToken": "a2a.x1.task-1"}), -32602, 7),
        (call("ListTasks", {"pageToken": "a2a.999999999999999999.task-1"}), -32602, 7),
        (call("ListTasks", {"status": "TASK_STATE_BORED"}), -32602, 7),
        (call("CancelTask", {"id": 12}), -32602, 7),
        (call("SendMessage", {}), -32602, 7),
        (call("SendMessage", {"message": {"parts": []}}), -32602, 7),
        (call("SendMessage", {"message": {"parts": [{"text": "hi"}]}}), -32602, 7),
        (call("SendMessage", {"message": {"parts": [{"data": [1, 2]}]}}), -32602, 7),
        (
            call("SendMessage", {"message": {"parts": [{"data": SPEC}, {"data": SPEC}]}}),
            -32602,
            7,
        ),
        (call("SendMessage", {"message": {"parts": [{"url": "https://x/y"}]}}), -32005, 7),
        (
            call("SendMessage", {"message": {"parts": [{"data": SPEC, "mediaType": "text/csv"}]}}),
            -32005,
            7,
        ),
        (call("SendStreamingMessage", {"message": {"parts": []}}), -32602, 7),
        (call("SubscribeToTask", {"id": "task-nope"}), -32001, 7),
        (call("GetExtendedAgentCard"), -32004, 7),
        (call("GetTask", {"id": "task-nope"}, "abc"), -32001, "abc"),
    ],
)
def test_a_malformed_call_is_a_json_rpc_error(
    url: str, world: World, content: bytes, code: int, request_id: Any
) -> None:
    store = world.context.market.ledger.store
    before = store.size()
    answer = rpc(url, world.signers["req"], content)
    assert answer["jsonrpc"] == "2.0" and answer["id"] == request_id
    assert "result" not in answer
    error = answer["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    [info, *_] = error["data"]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert store.size() == before


def test_an_invalid_spec_names_its_path_on_the_wire(url: str, world: World) -> None:
    spec = {**SPEC, "parts": [{**PART, "input": {**PART["input"], "figures": ["1", "x"]}}]}
    answer = rpc(
        url, world.signers["req"], call("SendMessage", {"message": {"parts": [{"data": spec}]}})
    )
    error = answer["error"]
    assert error["code"] == -32602
    info, bad = error["data"]
    assert info["reason"] == "INVALID_SPEC"
    assert info["metadata"]["path"] == "$.parts[0].input.figures[1]"
    assert bad["@type"] == "type.googleapis.com/google.rpc.BadRequest"
    assert bad["fieldViolations"][0]["field"] == "$.parts[0].input.figures[1]"


def test_another_a2a_version_is_refused(url: str, world: World) -> None:
    for version in ("0.3", "2.0", ""):
        answer = rpc(url, world.signers["req"], call("ListTasks", {}), version=version)
        assert answer["error"]["code"] == -32009, answer
    assert "result" in rpc(url, world.signers["req"], call("ListTasks", {}), version="1.0")


def test_an_unsigned_call_is_401_problem(url: str) -> None:
    response = httpx.post(f"{url}/a2a", content=call("ListTasks", {}))
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("application/problem+json")

    async def run() -> None:
        async with httpx.AsyncClient(timeout=10) as http:
            client = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(
                card(url)
            )
            await client.list_tasks(ListTasksRequest())

    with pytest.raises(Exception, match="401"):
        asyncio.run(run())
