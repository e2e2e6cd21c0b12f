"""The team runner over a real SQLite ledger, doing the requester's parts (the invoice of
`tests.specs`): sync and async assignment with triggers, nested team-up for a batch to the depth
limit, a failing, a hanging and a schema-breaking member, file references resolved for the
member only, the leader's plan, replay (and tampering refused), and agents as separate HTTP
processes on 127.0.0.1. No devnet, no mocks."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pytest

from accord.coordinator.adapters import HttpAdapter, InProcessAdapter, reference_adapter, solve_task
from accord.coordinator.conversation import (
    CONVERSATION_MESSAGE,
    NO_SHOW_AFTER,
    Abandon,
    AssignAsync,
    AssignSync,
    Contribution,
    Conversation,
    ConversationRecord,
    ConversationState,
    Message,
    NoShow,
    Report,
    assign_sync,
    check_task_reports,
    step,
)
from accord.coordinator.errors import AgentFailure, IllegalMove
from accord.coordinator.policy import Member, RulePolicy
from accord.coordinator.runner import RunSettings, SealedOutputs, TeamRunner
from accord.coordinator.service import conversation_ids, replay_conversation
from accord.coordinator.work import JSON, AgentAdapter, SubTask
from accord.identity.challenges import REGISTRY, validate_output
from accord.identity.errors import KeyStoreError
from accord.ledger.devnet import find_free_port
from accord.ledger.events import Entry, Event, entry_bytes, sign_event
from accord.ledger.service import Ledger
from accord.ledger.settings import Settings
from accord.ledger.signing import Ed25519Signer, kid_for
from accord.ledger.wiring import open_ledger
from accord.market.precheck import Precheck
from accord.market.work import ExpectCheck, PythonCheck, resolve_files
from tests.clocks import advance_clock_file
from tests.specs import INVOICE, invoice_parts

CAPS = ("arithmetic", "extraction")
TASK = "task-runner-test"

Part = tuple[str, str, dict[str, Any]]

INVOICE_OUTPUTS: dict[str, JSON] = {
    "lines-sum": "2585.50",
    "tax": "542.955",
    "invoice-fields": {"invoice_number": "NW-20931", "total": "3128.46", "currency": "EUR"},
    "invoice-dates": {"issue_date": "2026-10-14", "due_date": "2026-11-13"},
}
"""The right output of each invoice part (`scripts/demo_work/invoice.txt`)."""


@dataclass(frozen=True)
class Work:
    """A requester's parts `(id, capability, input)` and the right output of each."""

    parts: tuple[Part, ...]
    right: Mapping[str, JSON]

    def ids(self, capability: str | None = None) -> list[str]:
        return [p for p, cap, _ in self.parts if capability in (None, cap)]


def invoice_work(per_capability: int = 2, document: Any = INVOICE) -> Work:
    """The invoice's parts (two arithmetic, two extraction) and, for more than two of a
    capability, parts on the capability's example input (arithmetic: one more figure each)."""
    parts: list[Part] = [(p["id"], p["capability"], p["input"]) for p in invoice_parts(document)]
    right = dict(INVOICE_OUTPUTS)
    for capability in CAPS:
        for k in range(1, per_capability - 1):
            example_input, example_output = REGISTRY[capability].example()
            if capability == "arithmetic":
                example_input["figures"].append(f"{k}.00")
                example_output = str(Fraction(str(example_output)) + k)
            part_id = f"{capability}-example-{k}"
            parts.append((part_id, capability, example_input))
            right[part_id] = example_output
    return Work(tuple(parts), right)


def only(work: Work, part_ids: Sequence[str]) -> Work:
    """`work` reduced to some of its parts."""
    return Work(tuple(p for p in work.parts if p[0] in part_ids), work.right)


def is_right(capability: str, output: JSON, right: JSON) -> bool:
    """An exact number equals the right value (`"542.955"` is `"108591/200"`); any other
    output equals the right one."""
    if capability == "arithmetic":
        return Fraction(str(output)) == Fraction(str(right))
    return bool(output == right)


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
    sealed: SealedOutputs = field(default_factory=SealedOutputs)
    _state: dict[str, ConversationState] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def output(self, contribution: Contribution) -> Any:
        """The output a contribution commits to, as the team's runner kept it."""
        kept = self.sealed.get(contribution.output_sha256)
        assert kept is not None, f"no sealed output for {contribution}"
        return kept.value

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

    def runner(
        self,
        settings: RunSettings,
        resolve: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
    ) -> TeamRunner:
        return TeamRunner(
            self.ledger,
            self.signers.__getitem__,
            self.adapters.__getitem__,
            list(self.members.values()),
            RulePolicy(),
            settings,
            self.observe,
            resolve_files=resolve,
            sealed=self.sealed,
        )

    def run(
        self, leader: str, settings: RunSettings, work: Work | None = None
    ) -> tuple[TeamRunner, Conversation]:
        runner = self.runner(settings)
        parts = (work or invoice_work()).parts
        top = runner.run_task(
            TASK, self.members[leader], parts, "check the invoice", "arithmetic and extraction"
        )
        return runner, top

    def reports(self) -> list[Report]:
        return [m for _, _, _, m in self.seen if isinstance(m, Report)]

    def assigned(self, conv_id: str | None = None) -> list[tuple[str, SubTask]]:
        """(assignee, sub-task) of every assignment said (in one conversation), in order."""
        return assignments(m for cid, _, _, m in self.seen if conv_id in (None, cid))


def assignments(messages: Iterable[Message]) -> list[tuple[str, SubTask]]:
    """(assignee, sub-task) of every assignment among `messages`, in order."""
    found: list[tuple[str, SubTask]] = []
    for message in messages:
        match message:
            case AssignSync(assignee=assignee, task=task):
                found.append((assignee, task))
            case AssignAsync(assignments=given):
                found.extend(given)
    return found


@pytest.fixture
def world(tmp_path: Path) -> World:
    settings = Settings.from_env({"ACCORD_HOME": str(tmp_path / "home")})
    return World(open_ledger(settings), settings.home / "accord.db")


def assert_complete(top: Conversation, work: Work, world: World) -> None:
    """One contribution per part, naming the part, of the part's capability, committing to an
    output the runner kept sealed, valid against its output schema and right."""
    assert top.state == "closed" and top.deliverable is not None
    contributions = top.deliverable.contributions
    capability_of = {part_id: capability for part_id, capability, _ in work.parts}
    assert sorted(c.part for c in contributions) == sorted(capability_of)
    for contribution in contributions:
        part_id = contribution.part
        assert contribution.capability == capability_of[part_id]
        answer = world.output(contribution)
        validate_output(contribution.capability, answer)
        assert is_right(contribution.capability, answer, work.right[part_id]), contribution


def parts_in(task: SubTask) -> list[str]:
    """The part ids a logged sub-task carries: a batch's parts, or the part itself."""
    batch = task.item.get("batch")
    if isinstance(batch, list):
        return [str(t["item"]["item_id"]) for t in batch]
    return [str(task.item["item_id"])]


def assert_plan(world: World, runner: TeamRunner, top: Conversation, work: Work) -> None:
    """`runner.plan` names every part, each with the member the leader first assigned it to
    in the top-level conversation (a team member holding the part's capability)."""
    first: dict[str, str] = {}
    for assignee, task in world.assigned(top.conv_id):
        for part_id in parts_in(task):
            first.setdefault(part_id, assignee)
    assert sorted(runner.plan) == sorted(work.ids())
    assert runner.plan == first
    capability_of = {part_id: capability for part_id, capability, _ in work.parts}
    for part_id, did in runner.plan.items():
        assert did in top.members
        member = next(m for m in world.members.values() if m.did == did)
        assert capability_of[part_id] in member.capabilities


def replay_all(world: World) -> dict[str, ConversationRecord]:
    """Replay every logged conversation of the task, by id, in the order they were opened."""
    store = world.ledger.store
    records = {cid: replay_conversation(store, cid) for cid in conversation_ids(store, TASK)}
    check_task_reports(records.values())  # each part one producer's own report, task-wide
    return records


def test_two_capability_task_sync_then_async_with_triggers(world: World) -> None:
    world.add("lead", CAPS)
    world.add("ann", ["arithmetic"])
    world.add("eve", ["extraction"])
    work = invoice_work()
    runner, top = world.run("lead", RunSettings(timeout_s=10, max_depth=0), work)

    assert_complete(top, work, world)
    assert_plan(world, runner, top, work)
    assert top.depth == 0 and top.parent is None
    dids = {m.did for m in world.members.values()}
    assert {c.agent for c in top.deliverable.contributions} <= dids  # type: ignore[union-attr]
    for contribution in top.deliverable.contributions:  # type: ignore[union-attr]
        capable = next(m for m in world.members.values() if m.did == contribution.agent)
        assert contribution.capability in capable.capabilities
    # two parts of a capability are one batch sub-task, its children named by part
    assert sorted(t.sub_id for _, t in world.assigned()) == ["batch:arithmetic", "batch:extraction"]
    by_sub = {c.sub_id for c in top.deliverable.contributions}  # type: ignore[union-attr]
    assert by_sub == {f"batch:{cap}/{part_id}" for part_id, cap, _ in work.parts}

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


def test_a_single_part_of_a_capability_is_its_own_sub_task(world: World) -> None:
    world.add("lead", CAPS)
    world.add("ann", ["arithmetic"])
    world.add("eve", ["extraction"])
    work = only(invoice_work(), ["tax", "invoice-fields", "invoice-dates"])
    runner, top = world.run("lead", RunSettings(timeout_s=10, max_depth=0), work)
    assert_complete(top, work, world)
    assert_plan(world, runner, top, work)
    assert sorted(t.sub_id for _, t in world.assigned()) == ["batch:extraction", "tax"]
    [tax] = [c for c in top.deliverable.contributions if c.capability == "arithmetic"]  # type: ignore[union-attr]
    assert tax.sub_id == "tax" and tax.part == "tax"


def _nesting_world(world: World, helpers: int) -> None:
    world.add("lead", CAPS, "9/10")
    world.add("ann", ["arithmetic"], "8/10")
    world.add("eve", ["extraction"], "8/10")
    for k in range(helpers):
        world.add(f"arith-{k}", ["arithmetic"], "1/10")
        world.add(f"extr-{k}", ["extraction"], "1/10")


@pytest.mark.parametrize(
    ("max_depth", "per_capability", "expected_depth"), [(0, 3, 0), (1, 3, 1), (2, 6, 1)]
)
def test_nested_team_up_to_the_depth_limit_and_no_deeper(
    world: World, max_depth: int, per_capability: int, expected_depth: int
) -> None:
    _nesting_world(world, helpers=4)
    work = invoice_work(per_capability)
    runner, top = world.run("lead", RunSettings(timeout_s=10, max_depth=max_depth), work)
    assert_complete(top, work, world)
    assert_plan(world, runner, top, work)

    records = replay_all(world)
    by_id = {cid: r.conversation for cid, r in records.items()}
    assert {c.conv_id for c in runner.conversations} == set(by_id)
    depths = {c.depth for c in by_id.values()}
    # a batch is split one level down at most: a child's sub-tasks are single parts, so even
    # a limit of 2 and spare helpers reach depth 1, never beyond the limit
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
        # a child's work is its batch's parts, one sub-task each: `batch:<capability>/<part>`
        for child in children:
            [(capability, batch)] = {
                (t.capability, t.sub_id.partition("/")[0]) for _, t in world.assigned(child.conv_id)
            }
            assert batch == f"batch:{capability}"
            child_parts = sorted(
                t.sub_id.partition("/")[2] for _, t in world.assigned(child.conv_id)
            )
            assert child_parts == sorted(work.ids(capability))
        # contributions made in a child are tagged with the helper that made them; the plan
        # names the member the leader gave the batch to, never a helper it recruited
        helpers = {did for c in children for did in c.members[1:]}
        assert helpers & {x.agent for x in top.deliverable.contributions}  # type: ignore[union-attr]
        assert not helpers & set(runner.plan.values())


def test_depth_limit_one_with_many_helpers_never_reaches_two(world: World) -> None:
    _nesting_world(world, helpers=8)
    work = invoice_work(4)
    _, top = world.run("lead", RunSettings(timeout_s=10, max_depth=1), work)
    assert_complete(top, work, world)
    depths = [r.conversation.depth for r in replay_all(world).values()]
    assert 1 in depths and 2 not in depths and max(depths) == 1


def test_a_member_that_may_not_lead_does_its_batch_alone(world: World) -> None:
    """A member that signs only its own reports (a self-custody agent at its endpoint)
    cannot sign a sub-team's acts: given a batch with helpers free, it does the batch itself."""
    _nesting_world(world, helpers=4)
    work = invoice_work(3)
    runner = world.runner(RunSettings(timeout_s=10, max_depth=1))
    runner.may_lead = lambda did: False  # as if every member signed at its endpoint
    top = runner.run_task(
        TASK, world.members["lead"], work.parts, "check the invoice", "arithmetic and extraction"
    )
    assert_complete(top, work, world)
    assert [r.conversation.depth for r in replay_all(world).values()] == [0]


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
    work = invoice_work()
    runner, top = world.run("lead", RunSettings(timeout_s=10, max_depth=0), work)
    assert_complete(top, work, world)
    bad, good = world.did("bad"), world.did("lead")
    assert bad in top.members

    failed = [m for m in world.reports() if not m.result.ok]
    assert [(m.speaker, m.result.sub_id) for m in failed] == [(bad, "batch:arithmetic")]
    assert "this agent is broken" in (failed[0].result.error or "")
    retried = [
        m for m in world.reports() if m.result.ok and m.result.sub_id == "batch:arithmetic#2"
    ]
    assert len(retried) == 1 and retried[0].speaker != bad
    arithmetic = {c.agent for c in top.deliverable.contributions if c.capability == "arithmetic"}  # type: ignore[union-attr]
    assert arithmetic == {good}
    # the plan keeps the member first given the parts
    assert_plan(world, runner, top, work)
    assert {runner.plan[p] for p in work.ids("arithmetic")} == {bad}
    assert all(r.conversation.state == "closed" for r in replay_all(world).values())


def _hanging(release: threading.Event) -> Callable[[str], InProcessAdapter]:
    def hanging(did: str) -> InProcessAdapter:
        def fn(task: SubTask) -> JSON:
            release.wait(60)
            return solve_task(task)

        return InProcessAdapter(did, fn, timeout=60)

    return hanging


def test_a_hanging_member_reports_its_failure_and_the_run_is_bounded(world: World) -> None:
    """A member that hangs gives its own signed failure report (its key signs it), which frees
    its parts for another member; the leader never abandons on its own word."""
    release = threading.Event()
    world.add("lead", CAPS, "1/10")
    world.add("slow", ["arithmetic"], "9/10", adapter=_hanging(release))
    world.add("eve", ["extraction"], "1/10")
    work = invoice_work()
    try:
        started = time.monotonic()
        runner, top = world.run("lead", RunSettings(timeout_s=0.5, max_depth=0), work)
        elapsed = time.monotonic() - started
    finally:
        release.set()
    assert elapsed < 5, elapsed
    assert_complete(top, work, world)
    assert_plan(world, runner, top, work)
    slow, good = world.did("slow"), world.did("lead")
    assert slow in top.members

    assert not [m for _, _, _, m in world.seen if isinstance(m, Abandon)]
    [failed] = [m for m in world.reports() if m.speaker == slow]
    assert not failed.result.ok and "no answer in time" in (failed.result.error or "")
    reassigned = [who for who, task in world.assigned() if task.sub_id == "batch:arithmetic#2"]
    assert reassigned == [good]
    arithmetic = {c.agent for c in top.deliverable.contributions if c.capability == "arithmetic"}  # type: ignore[union-attr]
    assert arithmetic == {good}
    [record] = replay_all(world).values()
    assert record.conversation.state == "closed"
    assert record.conversation.results == top.results


class _RefusingSigner:
    """A member that keeps its key and will not sign a failure report for work it was given."""

    def __init__(self, did: str) -> None:
        self.did = did
        self.kid = kid_for(did)

    def sign(self, message: bytes) -> bytes:
        raise KeyStoreError(f"{self.did} refuses to sign")


def test_a_leader_that_abandons_on_its_own_word_cannot_give_the_parts_again(
    world: World,
) -> None:
    """When the hung member signs no failure, the leader abandons on its own word, and the
    parts stay undone: a leader's word never moves a member's part to someone else (itself,
    or an identity it controls)."""
    release = threading.Event()
    world.add("lead", CAPS, "1/10")
    world.add("slow", ["arithmetic"], "9/10", adapter=_hanging(release))
    world.add("eve", ["extraction"], "1/10")
    slow = world.did("slow")
    world.signers[slow] = _RefusingSigner(slow)  # type: ignore[assignment]
    work = invoice_work()
    try:
        _, top = world.run("lead", RunSettings(timeout_s=0.5, max_depth=0), work)
    finally:
        release.set()
    abandons = [m for _, _, _, m in world.seen if isinstance(m, Abandon)]
    assert [(a.speaker, a.sub_id) for a in abandons] == [(world.did("lead"), "batch:arithmetic")]
    assert not [task for _, task in world.assigned() if task.sub_id == "batch:arithmetic#2"]
    assert top.deliverable is not None
    done = {c.part for c in top.deliverable.contributions}
    assert done and not done & set(work.ids("arithmetic"))
    [record] = replay_all(world).values()
    assert record.conversation.state == "closed"
    leader = world.did("lead")
    assignment = assign_sync(leader, leader, SubTask("batch:arithmetic#2", "arithmetic", "x", {}))
    redo = replace(assignment.task, item=record.conversation.assigned["batch:arithmetic"].item)
    with pytest.raises(IllegalMove, match="abandoned on the leader's word"):
        step(
            replace(record.conversation, state="sync_task_assign", speaker=leader),
            replace(assignment, task=redo),
        )


class _UnreachableSigner:
    """A member that keeps its key at an endpoint that no longer answers."""

    def __init__(self, did: str) -> None:
        self.did = did
        self.kid = kid_for(did)

    def sign(self, message: bytes) -> bytes:
        raise KeyStoreError(f"cannot reach {self.did}: connection refused")


def test_a_member_that_went_away_is_declared_absent_and_its_part_moves_on(
    tmp_path: Path,
) -> None:
    """A member fails and cannot be reached to sign its failure: the leader waits, on the
    log's own clock, until `NO_SHOW_AFTER` has passed since the assignment, declares a
    no-show, and another member does the part; the log replays."""
    clock_file = tmp_path / "clock"
    settings = Settings.from_env(
        {
            "ACCORD_HOME": str(tmp_path / "home"),
            "ACCORD_TEST_CLOCK": str(clock_file),
            "ACCORD_ALLOW_TEST_CLOCK": "1",
        }
    )
    world = World(open_ledger(settings), settings.home / "accord.db")
    world.add("lead", CAPS, "1/10")
    world.add("gone", CAPS, "9/10", adapter=_failing)  # the best for everything, and gone
    gone = world.did("gone")
    world.signers[gone] = _UnreachableSigner(gone)  # type: ignore[assignment]
    runner = world.runner(RunSettings(timeout_s=10, max_depth=0))
    waited: list[float] = []

    def pause(seconds: float) -> None:  # the log's clock moves on; nobody sleeps
        waited.append(seconds)
        advance_clock_file(clock_file, seconds)

    runner.clock, runner.pause = world.ledger.clock, pause
    work = invoice_work()
    started = time.monotonic()
    top = runner.run_task(TASK, world.members["lead"], work.parts, "t", "arithmetic and extraction")
    took = time.monotonic() - started
    assert_complete(top, work, world)
    # the log's clock is the real time plus the file's offset: what the run took counts on it
    # beside what the leader's pauses moved it (the replay below holds the no-show to it)
    assert sum(waited) + took >= NO_SHOW_AFTER.total_seconds() - 1
    # Its first (sync) assignment: declared absent once, and given nothing more after it.
    [no_show] = [m for _, _, _, m in world.seen if isinstance(m, NoShow)]
    [(first, task), *after] = world.assigned()
    assert first == gone and (no_show.speaker, no_show.sub_id) == (world.did("lead"), task.sub_id)
    assert after and gone not in {who for who, _ in after}
    assert not [m for _, _, _, m in world.seen if isinstance(m, Abandon)]
    assert not [m for m in world.reports() if m.speaker == gone]
    assert {c.agent for c in top.deliverable.contributions} == {world.did("lead")}  # type: ignore[union-attr]
    [record] = replay_all(world).values()
    assert record.conversation.state == "closed"
    assert record.conversation.no_shows == (task.sub_id,)


def test_a_member_that_logged_it_answered_is_not_waited_out(tmp_path: Path) -> None:
    """The member that cannot be reached logged that it answered (the service says so): the
    leader does not wait to declare it absent (that no-show would be refused): it abandons the
    work at once, and the parts stay undone."""
    settings = Settings.from_env({"ACCORD_HOME": str(tmp_path / "home")})
    world = World(open_ledger(settings), settings.home / "accord.db")
    world.add("lead", CAPS, "1/10")
    world.add("gone", ["arithmetic"], "9/10", adapter=_failing)
    world.add("eve", ["extraction"], "1/10")
    gone = world.did("gone")
    world.signers[gone] = _UnreachableSigner(gone)  # type: ignore[assignment]
    runner = world.runner(RunSettings(timeout_s=10, max_depth=0))
    asked: list[tuple[str, str]] = []

    def answered(conv_id: str, sub_id: str) -> bool:
        asked.append((conv_id, sub_id))
        return True

    def pause(seconds: float) -> None:
        raise AssertionError("the leader waited out a member that answered")

    runner.clock, runner.pause, runner.answered = world.ledger.clock, pause, answered
    top = runner.run_task(TASK, world.members["lead"], invoice_work().parts, "t", "a and e")
    assert [sub_id for _, sub_id in asked] == ["batch:arithmetic"]
    assert not [m for _, _, _, m in world.seen if isinstance(m, NoShow)]
    [abandon] = [m for _, _, _, m in world.seen if isinstance(m, Abandon)]
    assert abandon.sub_id == "batch:arithmetic"
    assert {c.capability for c in top.deliverable.contributions} == {"extraction"}  # type: ignore[union-attr]


# -- outputs the capability's schema refuses ------------------------------------------------


def _inexact(part_ids: Sequence[str]) -> Callable[[str], InProcessAdapter]:
    """A member that answers the parts `part_ids` with a float (never exact: the arithmetic
    output schema refuses it) and the others as the reference agent does."""

    def adapter(did: str) -> InProcessAdapter:
        def fn(task: SubTask) -> JSON:
            answer = solve_task(task)
            if task.item["item_id"] in part_ids:
                return float(Fraction(str(answer)))
            return answer

        return InProcessAdapter(did, fn, timeout=5)

    return adapter


@pytest.mark.parametrize(
    ("part_ids", "sub_id"),
    [
        (["lines-sum", "tax", "invoice-fields", "invoice-dates"], "batch:arithmetic"),
        (["tax", "invoice-fields", "invoice-dates"], "tax"),
    ],
    ids=["batch", "single-part"],
)
def test_an_output_the_schema_refuses_fails_and_is_reassigned_once(
    world: World, part_ids: list[str], sub_id: str
) -> None:
    # `sloppy` does lines-sum right but answers tax with a float: the whole sub-task fails
    world.add("lead", CAPS, "1/10")
    world.add("sloppy", ["arithmetic"], "9/10", adapter=_inexact(["tax"]))
    world.add("eve", ["extraction"], "1/10")
    work = only(invoice_work(), part_ids)
    runner, top = world.run("lead", RunSettings(timeout_s=10, max_depth=0), work)
    assert_complete(top, work, world)
    sloppy, lead = world.did("sloppy"), world.did("lead")

    failed = [m for m in world.reports() if not m.result.ok]
    assert [(m.speaker, m.result.sub_id) for m in failed] == [(sloppy, sub_id)]
    assert failed[0].result.contributions == ()
    error = failed[0].result.error or ""
    assert "part tax: invalid output" in error and "float" in error, error
    assert [(who, t.sub_id) for who, t in world.assigned() if t.capability == "arithmetic"] == [
        (sloppy, sub_id),
        (lead, f"{sub_id}#2"),
    ]
    [retried] = [m for m in world.reports() if m.result.sub_id == f"{sub_id}#2"]
    assert retried.result.ok and retried.speaker == lead
    arithmetic = [c for c in top.deliverable.contributions if c.capability == "arithmetic"]  # type: ignore[union-attr]
    assert {c.agent for c in arithmetic} == {lead}
    assert_plan(world, runner, top, work)
    assert runner.plan["tax"] == sloppy
    [record] = replay_all(world).values()
    assert record.conversation.deliverable == top.deliverable


def _wrong(part_ids: Sequence[str]) -> Callable[[str], InProcessAdapter]:
    """A member that answers the parts `part_ids` with a schema-valid wrong number."""

    def adapter(did: str) -> InProcessAdapter:
        def fn(task: SubTask) -> JSON:
            answer = solve_task(task)
            if task.item["item_id"] in part_ids:
                return str(Fraction(str(answer)) + 1)
            return answer

        return InProcessAdapter(did, fn, timeout=5)

    return adapter


TAX_IS_RIGHT = (
    "from fractions import Fraction\n"
    "def check(outputs):\n"
    "    return Fraction(outputs['tax']) == Fraction('542.955')\n"
)


def test_the_team_runs_the_requesters_checks_before_it_delivers(world: World) -> None:
    """An output the requester's check on that part fails is a failed part, given to someone
    else, never delivered blind; the team's verdicts are the settlement's own."""
    world.add("lead", CAPS, "1/10")
    world.add("wrong", ["arithmetic"], "9/10", adapter=_wrong(["tax"]))
    world.add("eve", ["extraction"], "1/10")
    work = only(invoice_work(), ["tax", "invoice-fields", "invoice-dates"])
    checks = (
        ExpectCheck("tax-right", 2, ("tax",), "$", "within", "542.955", "0.001"),
        PythonCheck("tax-python", 1, ("tax",), TAX_IS_RIGHT),
    )
    runner = world.runner(RunSettings(timeout_s=10, max_depth=0))
    runner.precheck = Precheck(TASK, datetime(2026, 12, 1, tzinfo=UTC), checks)
    top = runner.run_task(TASK, world.members["lead"], work.parts, "the invoice", "tax")
    assert_complete(top, work, world)
    wrong, lead = world.did("wrong"), world.did("lead")
    [failed] = [m for m in world.reports() if not m.result.ok]
    assert failed.speaker == wrong and "the requester's check tax-right fails" in str(
        failed.result.error
    )
    [tax] = [c for c in top.deliverable.contributions if c.part == "tax"]  # type: ignore[union-attr]
    assert tax.agent == lead
    verdicts = runner.precheck.verdicts({"tax": world.output(tax)})
    assert {k: (r.passed, r.inconclusive) for k, r in verdicts.items()} == {
        "tax-right": (True, False),
        "tax-python": (True, False),
    }


def test_a_part_is_reassigned_once_and_then_given_up(world: World) -> None:
    """Both members able to do the arithmetic answer with floats: the batch fails twice, is not
    given a third time, and the team concludes with the extraction parts alone."""
    world.add("lead", CAPS, "1/10", adapter=_inexact(["tax"]))
    world.add("sloppy", ["arithmetic"], "9/10", adapter=_inexact(["lines-sum", "tax"]))
    world.add("eve", ["extraction"], "1/10")
    work = invoice_work()
    runner, top = world.run("lead", RunSettings(timeout_s=10, max_depth=0), work)
    sloppy, lead = world.did("sloppy"), world.did("lead")

    failed = [(m.speaker, m.result.sub_id) for m in world.reports() if not m.result.ok]
    assert failed == [(sloppy, "batch:arithmetic"), (lead, "batch:arithmetic#2")]
    assert [t.sub_id for _, t in world.assigned() if t.capability == "arithmetic"] == [
        "batch:arithmetic",
        "batch:arithmetic#2",
    ]
    assert top.state == "closed" and top.deliverable is not None
    assert_complete(top, only(work, work.ids("extraction")), world)
    # the plan still names every part: the arithmetic ones were given, and nobody did them
    assert_plan(world, runner, top, work)
    [record] = replay_all(world).values()
    assert record.conversation.state == "closed"


# -- files ------------------------------------------------------------------------------------


def test_a_file_reference_is_resolved_for_the_member_and_logged_as_posted(world: World) -> None:
    sha = hashlib.sha256(INVOICE.encode()).hexdigest()
    reference = {"$file": sha}
    given: list[SubTask] = []
    lock = threading.Lock()

    def recording(did: str) -> InProcessAdapter:
        def fn(task: SubTask) -> JSON:
            with lock:
                given.append(task)
            return solve_task(task)

        return InProcessAdapter(did, fn, timeout=5)

    world.add("lead", CAPS, adapter=recording)
    world.add("ann", ["arithmetic"], adapter=recording)
    world.add("eve", ["extraction"], adapter=recording)
    work = invoice_work(document=reference)
    runner = world.runner(
        RunSettings(timeout_s=10, max_depth=0),
        resolve=lambda payload: resolve_files(payload, {sha: INVOICE}),
    )
    top = runner.run_task(TASK, world.members["lead"], work.parts, "t", "the invoice")
    assert_complete(top, work, world)
    assert_plan(world, runner, top, work)

    # the member is given the exam-item shape, the file's text in place of the reference
    extraction = [t for t in given if t.capability == "extraction"]
    assert sorted(t.item["item_id"] for t in extraction) == sorted(work.ids("extraction"))
    for task in extraction:
        assert set(task.item) == {"item_id", "capability", "prompt", "payload"}
        assert task.item["payload"]["document"] == INVOICE
        assert task.instruction == task.item["prompt"]

    # the logged assignment keeps the reference, and the text is nowhere in the log
    [record] = replay_all(world).values()
    logged = assignments(m.message for m in record.messages)
    [batch] = [t for _, t in logged if t.capability == "extraction"]
    documents = [t["item"]["payload"]["document"] for t in batch.item["batch"]]
    assert documents == [reference, reference]
    headline = INVOICE.splitlines()[0]
    for stored in world.ledger.store.entries(0):
        assert headline not in stored.data.decode()


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
    _, top = world.run("lead", RunSettings(timeout_s=10, max_depth=0))
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
                [sys.executable, "-m", "accord.coordinator.agent_service", "--port", str(port)],
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
    work = invoice_work(3)
    runner, top = world.run("lead", RunSettings(timeout_s=20, max_depth=0), work)
    assert_complete(top, work, world)
    assert_plan(world, runner, top, work)
    agents = {c.agent for c in top.deliverable.contributions}  # type: ignore[union-attr]
    assert len(agents) >= 2
    endpoints = {world.adapters[did].endpoint for did in agents}  # type: ignore[attr-defined]
    assert len(endpoints) >= 2
    assert all(r.conversation.state == "closed" for r in replay_all(world).values())


# -- regressions -----------------------------------------------------------------------------


def test_a_file_that_cannot_be_resolved_fails_the_part_not_the_run(world: World) -> None:
    """A part naming a file the service cannot read is a failed part (the conversation still
    concludes), not an exception that leaves the conversation open."""
    world.add("lead", CAPS)
    world.add("ann", CAPS)
    work = invoice_work(2, document={"$file": "0" * 64})

    def resolve(payload: Mapping[str, Any]) -> Mapping[str, Any]:
        resolved: Mapping[str, Any] = resolve_files(payload, {})  # raises WorkError
        return resolved

    runner = world.runner(RunSettings(timeout_s=10, max_depth=0), resolve)
    top = runner.run_task(TASK, world.members["lead"], work.parts, "t", "n")
    assert top.state == "closed" and top.deliverable is not None
    done = {c.part for c in top.deliverable.contributions}  # type: ignore[union-attr]
    assert done == set(work.ids("arithmetic"))
    failures = [r.result.error or "" for r in world.reports() if not r.result.ok]
    assert failures and all("cannot be given" in f for f in failures)


class _Drops:
    """An adapter that fails one part every time, and does the rest."""

    def __init__(self, did: str, part: str) -> None:
        self.did, self.inner, self.part = did, reference_adapter(did), part

    def run(self, task: SubTask) -> JSON:
        if task.item.get("item_id") == self.part:
            raise AgentFailure(self.did, "cannot do this part")
        return self.inner.run(task)


def test_a_part_dropped_inside_a_sub_team_goes_back_alone(world: World) -> None:
    """A sub-team that delivers only some of its batch's parts brings up what it did (its
    producers' own reports, never done again by anyone), and the parts it dropped go back to
    the leader as a batch of their own."""
    world.add("lead", ("extraction",), adapter=lambda did: _Drops(did, "tax"))
    world.add("ann", ("arithmetic",), adapter=lambda did: _Drops(did, "tax"))
    world.add("bob", ("arithmetic",), adapter=lambda did: _Drops(did, "tax"))
    world.add("cy", ("arithmetic",), adapter=lambda did: _Drops(did, "tax"))
    _, top = world.run("lead", RunSettings(timeout_s=10, max_depth=1))
    assert top.deliverable is not None
    done = {c.part for c in top.deliverable.contributions}  # type: ignore[union-attr]
    # nobody can do tax; lines-sum, done by the sub-team, is delivered as its producer made it
    assert "tax" not in done and "lines-sum" in done
    assert {"invoice-fields", "invoice-dates"} <= done
    [carried] = [r for r in world.reports() if r.result.team is not None]
    assert {c.part for c in carried.result.contributions} == {"lines-sum"}
    left = [task for _, task in world.assigned() if task.sub_id.startswith("batch:arithmetic#")]
    assert left and all(parts_in(task) == ["tax"] for task in left)
    replay_all(world)  # each part one producer's own report, task-wide


def test_retries_inside_a_reassigned_batch_keep_their_part() -> None:
    from accord.coordinator.policy import base_id

    assert base_id("batch:arithmetic#2") == "batch:arithmetic"
    assert base_id("batch:arithmetic#2/tax") == "batch:arithmetic#2/tax"
    assert base_id("batch:arithmetic#2/tax#2") == "batch:arithmetic#2/tax"
    assert base_id("tax") == "tax"
