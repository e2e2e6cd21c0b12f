"""The team runner over a real SQLite ledger: sync and async assignment with triggers, nested
team-up to the depth limit, a failing and a hanging member, replay (and tampering refused), and
agents as separate HTTP processes on 127.0.0.1. No devnet, no mocks."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from coordinator.adapters import HttpAdapter, InProcessAdapter, reference_adapter, solve_task
from coordinator.conversation import (
    Abandon,
    AssignAsync,
    AssignSync,
    Conversation,
    ConversationState,
    Message,
    Report,
)
from coordinator.errors import IllegalMove
from coordinator.policy import Member, RulePolicy
from coordinator.runner import CONVERSATION_MESSAGE, RunSettings, TeamRunner
from coordinator.service import conversation_ids, replay_conversation
from coordinator.team import work_items
from coordinator.work import JSON, AgentAdapter, SubTask
from identity.challenges import get_capability
from ledger.devnet import find_free_port
from ledger.events import Entry, Event, entry_bytes, sign_event
from ledger.runtime import open_ledger
from ledger.service import Ledger
from ledger.settings import Settings
from ledger.signing import Ed25519Signer

CAPS = ("arithmetic", "extraction")
TASK = "task-runner-test"


@dataclass
class World:
    """A ledger, agents with keys and adapters, and what the observer saw."""

    ledger: Ledger
    db: Path
    members: dict[str, Member] = field(default_factory=dict)  # by name
    signers: dict[str, Ed25519Signer] = field(default_factory=dict)  # by DID
    adapters: dict[str, AgentAdapter] = field(default_factory=dict)  # by DID
    seen: list[tuple[str, ConversationState, ConversationState, Message]] = field(
        default_factory=list
    )  # (conversation, state before, state after, message)
    _state: dict[str, ConversationState] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(
        self,
        name: str,
        capabilities: Sequence[str],
        reputation: str = "1/2",
        adapter: Callable[[str], AgentAdapter] | None = None,
    ) -> Member:
        signer = Ed25519Signer.generate()
        member = Member(
            signer.did, name, tuple(capabilities), reputation, f"{name}: agent for {capabilities}"
        )
        self.members[name] = member
        self.signers[signer.did] = signer
        self.adapters[signer.did] = (adapter or reference_adapter)(signer.did)
        return member

    def did(self, name: str) -> str:
        return self.members[name].did

    def observe(self, conversation: Conversation, message: Message) -> None:
        with self._lock:
            before = self._state.get(conversation.conv_id, "discussion")
            self._state[conversation.conv_id] = conversation.state
            self.seen.append((conversation.conv_id, before, conversation.state, message))

    def runner(self, settings: RunSettings) -> TeamRunner:
        return TeamRunner(
            self.ledger,
            self.signers.__getitem__,
            self.adapters.__getitem__,
            list(self.members.values()),
            RulePolicy(),
            settings,
            self.observe,
        )

    def run(self, leader: str, settings: RunSettings, caps: Sequence[str] = CAPS) -> Conversation:
        return self.runner(settings).run_task(
            TASK, self.members[leader], caps, "answer the items", "arithmetic and extraction"
        )


@pytest.fixture
def world(tmp_path: Path) -> World:
    settings = Settings.from_env({"ACCORD_HOME": str(tmp_path / "home")})
    return World(open_ledger(settings), settings.home / "accord.db")


def assert_complete(top: Conversation, caps: Sequence[str], count: int) -> None:
    """One contribution per work item of each capability, each graded full marks."""
    assert top.state == "closed" and top.deliverable is not None
    contributions = top.deliverable.contributions
    for capability in caps:
        grader = get_capability(capability)
        items = {item.item_id: item for item in work_items(TASK, capability, count)}
        mine = [c for c in contributions if c.capability == capability]
        assert sorted(c.output["item_id"] for c in mine) == sorted(items)
        for contribution in mine:
            grade = grader.grade(
                items[contribution.output["item_id"]], contribution.output["answer"]
            )
            assert grade.full_marks, (contribution, grade)
    assert len(contributions) == len(caps) * count


def replay_all(world: World) -> dict[str, Any]:
    """Replay every logged conversation; each ends in the state the runner left it."""
    store = world.ledger.store
    ids = conversation_ids(store, TASK)
    records = {conv_id: replay_conversation(store, conv_id) for conv_id in ids}
    return records


def test_two_capability_task_sync_then_async_with_triggers(world: World) -> None:
    world.add("lead", CAPS)
    world.add("ann", ["arithmetic"])
    world.add("eve", ["extraction"])
    runner = world.runner(RunSettings(timeout_s=10, max_depth=0, work_items=3))
    top = runner.run_task(TASK, world.members["lead"], CAPS, "t", "arithmetic and extraction")

    assert_complete(top, CAPS, 3)
    assert top.depth == 0 and top.parent is None
    dids = {m.did for m in world.members.values()}
    assert {c.agent for c in top.deliverable.contributions} <= dids  # type: ignore[union-attr]
    for contribution in top.deliverable.contributions:  # type: ignore[union-attr]
        capable = next(m for m in world.members.values() if m.did == contribution.agent)
        assert contribution.capability in capable.capabilities

    kinds = [type(m).__name__ for _, _, _, m in world.seen]
    assert kinds[0] == "Discuss" and kinds[-1] == "Conclude"
    first_sync = kinds.index("AssignSync")
    first_async = kinds.index("AssignAsync")
    assert first_sync < first_async
    # the sync assignment blocks: the assignee's report comes right after it
    sync = world.seen[first_sync][3]
    assert isinstance(sync, AssignSync) and world.seen[first_sync][2] == "sync_task_assign"
    report = world.seen[first_sync + 1][3]
    assert isinstance(report, Report) and report.speaker == sync.assignee
    assert report.result.sub_id == sync.task.sub_id
    # the async assignment sets triggers and pauses; the triggered members report in pause
    assign = world.seen[first_async][3]
    assert isinstance(assign, AssignAsync) and assign.next_state == "pause_trigger"
    triggered = {task.sub_id: who for who, task in assign.assignments}
    paused = [m for _, before, _, m in world.seen[first_async + 1 :] if before == "pause_trigger"]
    assert paused and all(isinstance(m, Report) for m in paused)
    assert {m.result.sub_id: m.speaker for m in paused} == triggered  # type: ignore[union-attr]

    records = replay_all(world)
    assert list(records) == [top.conv_id]
    replayed = records[top.conv_id].conversation
    assert replayed.state == "closed" and replayed.turn == top.turn
    assert replayed.deliverable == top.deliverable
    assert len(records[top.conv_id].messages) == len(world.seen) == top.turn


def _nesting_world(world: World, helpers: int) -> None:
    world.add("lead", CAPS, "9/10")
    world.add("ann", ["arithmetic"], "8/10")
    world.add("eve", ["extraction"], "8/10")
    for k in range(helpers):
        world.add(f"arith-{k}", ["arithmetic"], "1/10")
        world.add(f"extr-{k}", ["extraction"], "1/10")


@pytest.mark.parametrize(
    ("max_depth", "items", "expected_depth"), [(0, 3, 0), (1, 3, 1), (2, 6, 1)]
)
def test_nested_team_up_to_the_depth_limit_and_no_deeper(
    world: World, max_depth: int, items: int, expected_depth: int
) -> None:
    _nesting_world(world, helpers=4)
    settings = RunSettings(timeout_s=10, max_depth=max_depth, work_items=items)
    runner = world.runner(settings)
    top = runner.run_task(TASK, world.members["lead"], CAPS, "t", "arithmetic and extraction")
    assert_complete(top, CAPS, items)

    records = replay_all(world)
    by_id = {cid: r.conversation for cid, r in records.items()}
    assert {c.conv_id for c in runner.conversations} == set(by_id)
    depths = {c.depth for c in by_id.values()}
    # a batch is split one level down at most: a child's work items are single items, so
    # even a limit of 2 and spare helpers reach depth 1, never beyond the limit
    assert max(depths) == expected_depth <= max_depth
    for conversation in by_id.values():
        assert conversation.state == "closed"
        if conversation.depth == 0:
            assert conversation.parent is None and conversation.conv_id == top.conv_id
        else:
            parent = by_id[conversation.parent]  # type: ignore[index]
            assert parent.depth == conversation.depth - 1
            assert conversation.leader in parent.members
            assert not set(conversation.members[1:]) & set(parent.members)
    if max_depth == 0:
        assert len(by_id) == 1
    else:
        children = [c for c in by_id.values() if c.parent == top.conv_id]
        assert children, "a member with a batch and free helpers teams up"
        # contributions made in a child are tagged with the helper that made them
        helpers = {did for c in children for did in c.members[1:]}
        assert helpers & {x.agent for x in top.deliverable.contributions}  # type: ignore[union-attr]


def test_depth_limit_one_with_many_helpers_never_reaches_two(world: World) -> None:
    _nesting_world(world, helpers=8)
    top = world.run("lead", RunSettings(timeout_s=10, max_depth=1, work_items=4))
    assert_complete(top, CAPS, 4)
    depths = [r.conversation.depth for r in replay_all(world).values()]
    assert 1 in depths and 2 not in depths and max(depths) == 1


def _failing(did: str) -> InProcessAdapter:
    def fn(task: SubTask) -> JSON:
        raise RuntimeError("this agent is broken")

    return InProcessAdapter(did, fn, timeout=5)


def test_a_failing_member_is_reassigned(world: World) -> None:
    # the team is the leader plus the best other agent per capability: `bad` (highest
    # reputation) for arithmetic, so the leader is the other member able to take it over
    world.add("lead", CAPS, "1/10")
    world.add("bad", ["arithmetic"], "9/10", adapter=_failing)
    world.add("eve", ["extraction"], "1/10")
    top = world.run("lead", RunSettings(timeout_s=10, max_depth=0, work_items=2))
    assert_complete(top, CAPS, 2)
    bad, good = world.did("bad"), world.did("lead")
    assert bad in top.members

    reports = [m for _, _, _, m in world.seen if isinstance(m, Report)]
    failed = [m for m in reports if not m.result.ok]
    assert [(m.speaker, m.result.sub_id) for m in failed] == [(bad, "arithmetic")]
    assert "this agent is broken" in (failed[0].result.error or "")
    retried = [m for m in reports if m.result.ok and m.result.sub_id == "arithmetic#2"]
    assert len(retried) == 1 and retried[0].speaker != bad
    arithmetic = {c.agent for c in top.deliverable.contributions if c.capability == "arithmetic"}  # type: ignore[union-attr]
    assert arithmetic == {good}
    assert all(r.conversation.state == "closed" for r in replay_all(world).values())


def test_a_hanging_member_is_abandoned_and_the_run_is_bounded(world: World) -> None:
    release = threading.Event()

    def hanging(did: str) -> InProcessAdapter:
        def fn(task: SubTask) -> JSON:
            release.wait(60)
            return solve_task(task)

        return InProcessAdapter(did, fn, timeout=60)

    world.add("lead", CAPS, "1/10")
    world.add("slow", ["arithmetic"], "9/10", adapter=hanging)
    world.add("eve", ["extraction"], "1/10")
    try:
        started = time.monotonic()
        top = world.run("lead", RunSettings(timeout_s=0.5, max_depth=0, work_items=2))
        elapsed = time.monotonic() - started
    finally:
        release.set()
    assert elapsed < 5, elapsed
    assert_complete(top, CAPS, 2)
    slow, good = world.did("slow"), world.did("lead")
    assert slow in top.members

    abandons = [m for _, _, _, m in world.seen if isinstance(m, Abandon)]
    assert [(a.speaker, a.sub_id) for a in abandons] == [(world.did("lead"), "arithmetic")]
    assert not any(isinstance(m, Report) and m.speaker == slow for _, _, _, m in world.seen)
    reassigned = [
        who
        for _, _, _, m in world.seen
        if isinstance(m, AssignAsync)
        for who, task in m.assignments
        if task.sub_id == "arithmetic#2"
    ]
    assert reassigned == [good]
    arithmetic = {c.agent for c in top.deliverable.contributions if c.capability == "arithmetic"}  # type: ignore[union-attr]
    assert arithmetic == {good}
    [record] = replay_all(world).values()
    assert record.conversation.state == "closed"
    assert record.conversation.results == top.results


# -- tampering -----------------------------------------------------------------------------


def _rewrite(db: Path, index: int, data: bytes) -> None:
    with sqlite3.connect(db) as connection:
        changed = connection.execute(
            "UPDATE ledger_entries SET data = ? WHERE idx = ?", (data, index)
        ).rowcount
    assert changed == 1


def _resign(entry: Entry, signer: Ed25519Signer, body: dict[str, Any]) -> bytes:
    e = entry.event
    event = Event(e.kind, signer.did, e.seq, e.at, e.subject, body)
    return sign_event(signer, event).data


def _message_entries(world: World, conv_id: str) -> list[tuple[int, Entry]]:
    stored = world.ledger.store.find(subject=conv_id, kind=CONVERSATION_MESSAGE, limit=1000)
    return [(s.index, Entry.from_bytes(s.data)) for s in stored]


@pytest.fixture
def logged(world: World) -> tuple[World, str]:
    world.add("lead", CAPS)
    world.add("ann", ["arithmetic"])
    world.add("eve", ["extraction"])
    top = world.run("lead", RunSettings(timeout_s=10, max_depth=0, work_items=2))
    return world, top.conv_id


def test_a_message_rewritten_by_the_wrong_key_is_refused(logged: tuple[World, str]) -> None:
    world, conv_id = logged
    index, entry = next(
        (i, e)
        for i, e in _message_entries(world, conv_id)
        if e.event.body["message"]["kind"] == "report"
    )
    body = dict(entry.event.body)
    message = dict(body["message"])
    message["result"] = {**message["result"], "error": None}
    body["message"] = message
    intruder = Ed25519Signer.generate()
    _rewrite(world.db, index, _resign(entry, intruder, body))
    with pytest.raises(IllegalMove, match=rf"entry {index}\b.*signed by {intruder.did}"):
        replay_conversation(world.ledger.store, conv_id)


@pytest.mark.parametrize("forgery", ["intruder_signature", "body_changed_under_old_signature"])
def test_a_forged_entry_in_the_speakers_name_is_refused(
    logged: tuple[World, str], forgery: str
) -> None:
    """The entry names the real speaker as its actor, but the speaker did not sign it."""
    world, conv_id = logged
    index, entry = _message_entries(world, conv_id)[1]
    body = dict(entry.event.body)
    e = entry.event
    if forgery == "intruder_signature":
        intruder = Ed25519Signer.generate()
        event_bytes = Event(e.kind, e.actor, e.seq, e.at, e.subject, body).canonical()
        data = entry_bytes(event_bytes, intruder.kid, intruder.sign(event_bytes))
    else:
        # a field the replay ignores: only the signature check can notice it
        body["note"] = "added after signing"
        event_bytes = Event(e.kind, e.actor, e.seq, e.at, e.subject, body).canonical()
        data = entry_bytes(event_bytes, entry.kid, entry.sig)
    _rewrite(world.db, index, data)
    with pytest.raises(IllegalMove, match=rf"entry {index}\b"):
        replay_conversation(world.ledger.store, conv_id)


def test_swapped_turn_numbers_are_refused(logged: tuple[World, str]) -> None:
    world, conv_id = logged
    entries = _message_entries(world, conv_id)
    (i1, e1), (i2, e2) = entries[1], entries[2]
    t1, t2 = e1.event.body["turn"], e2.event.body["turn"]
    assert (t1, t2) == (1, 2)
    _rewrite(
        world.db, i1, _resign(e1, world.signers[e1.event.actor], {**e1.event.body, "turn": t2})
    )
    _rewrite(
        world.db, i2, _resign(e2, world.signers[e2.event.actor], {**e2.event.body, "turn": t1})
    )
    with pytest.raises(IllegalMove, match=rf"entry {i1}\b.*turn 2 out of order"):
        replay_conversation(world.ledger.store, conv_id)


def test_an_untouched_log_replays(logged: tuple[World, str]) -> None:
    world, conv_id = logged
    record = replay_conversation(world.ledger.store, conv_id)
    assert record.conversation.state == "closed"
    assert [m.turn for m in record.messages] == list(range(record.conversation.turn))


# -- agents as separate HTTP processes -------------------------------------------------------


@pytest.fixture
def services(request: pytest.FixtureRequest) -> Iterator[list[str]]:
    """Three agent services, each its own process on 127.0.0.1; returns their base URLs."""
    processes: list[subprocess.Popen[bytes]] = []
    urls = []

    def stop_all() -> None:
        for process in processes:
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)

    request.addfinalizer(stop_all)
    for _ in range(3):
        port = find_free_port()
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "coordinator.agent_service", "--port", str(port)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        urls.append(f"http://127.0.0.1:{port}")
    deadline = time.monotonic() + 30
    for url, process in zip(urls, processes, strict=True):
        while True:
            assert process.poll() is None, f"the agent service at {url} exited"
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"the agent service at {url} did not start"
            time.sleep(0.1)
    yield urls


def test_agents_as_separate_http_processes_complete_a_task(
    world: World, services: list[str]
) -> None:
    for name, caps, url in zip(
        ("lead", "ann", "eve"), (CAPS, ["arithmetic"], ["extraction"]), services, strict=True
    ):
        world.add(
            name,
            caps,
            adapter=lambda did, url=url: HttpAdapter(did, url, timeout=10, allow_private=True),
        )
    top = world.run("lead", RunSettings(timeout_s=20, max_depth=0, work_items=3))
    assert_complete(top, CAPS, 3)
    agents = {c.agent for c in top.deliverable.contributions}  # type: ignore[union-attr]
    assert len(agents) >= 2
    endpoints = {world.adapters[did].endpoint for did in agents}  # type: ignore[attr-defined]
    assert len(endpoints) >= 2
    assert all(r.conversation.state == "closed" for r in replay_all(world).values())
