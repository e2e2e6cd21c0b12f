"""Running a team conversation: the I/O around the pure state machine.

The runner asks the policy for the leader's messages, runs assigned sub-tasks through the
members' adapters (in worker threads, each with a deadline), speaks each member's report, lets
the leader reassign work whose member failed or hung (on the member's own signed failure
report, or, for a member that cannot be reached to sign one, on the leader's no-show once
`NO_SHOW_AFTER` has passed since the assignment; else it abandons it), and opens a nested
conversation when a member teams up for a batch it was given. Every message goes through
`conversation.step` first and is then logged as a `conversation.message` event signed by its
speaker, so the whole tree of conversations replays from the ledger.

    conversation.opened   leader    id, task, parent, depth, leader, members, turn limit
    conversation.message  speaker   id, turn, the typed message
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from accord.coordinator.conversation import (
    CONVERSATION_MESSAGE,
    CONVERSATION_OPENED,
    Abandon,
    AssignAsync,
    AssignSync,
    Contribution,
    Conversation,
    ConversationState,
    Message,
    NoShow,
    Report,
    Result,
    message_to_json,
    no_show_due,
    open_conversation,
    step,
)
from accord.coordinator.errors import AgentFailure, CoordinatorError
from accord.coordinator.policy import MAX_ATTEMPTS, Member, Policy, TeamView, base_id
from accord.coordinator.team import form_team, helpers_for, part_task, plan_work
from accord.coordinator.work import AgentAdapter, SubTask, parts_of, split_batch
from accord.identity.challenges import validate_output, work_item
from accord.identity.errors import ExamError
from accord.identity.runtimes import INPUTS_KEY
from accord.ledger.canonical import JSONValue
from accord.ledger.errors import AccordError, LedgerError
from accord.ledger.events import Entry, parse_time
from accord.ledger.sealing import Sealed, seal
from accord.ledger.signing import Signer
from accord.market.errors import MarketError
from accord.market.precheck import Precheck
from accord.market.work import part_refs, resolve_parts

NO_SHOW_POLL_S = 1.0
"""How often (real seconds) a leader waiting to declare a no-show looks at its clock."""


@dataclass(frozen=True)
class RunSettings:
    """Bounds of a run: per-assignment deadline, nesting depth, turns, work size."""

    timeout_s: float = 30.0
    max_depth: int = 1
    max_turns: int = 64
    team_up_min_items: int = 2


class EventLog(Protocol):
    """Where a run logs its events: the service's `Ledger`, or, for a leader that keeps its
    own key, the service it relays them to (`accord.kit.leader.RelayLog`)."""

    def append(
        self,
        signer: Signer,
        kind: str,
        *,
        subject: str = "",
        body: Mapping[str, JSONValue] | None = None,
        once_key: str | None = None,
    ) -> tuple[int, Entry]:
        """Sign the event as `signer` and log it; returns (index, entry)."""
        ...


class Observer(Protocol):
    def __call__(self, conversation: Conversation, message: Message) -> None: ...


@dataclass
class _Assignment:
    task: SubTask
    assignee: str
    future: Future[Result]
    deadline: float


class SealedOutputs:
    """The outputs a team gave, sealed (`accord.ledger.sealing`): each is handed to `store` (the
    service's blob store; nothing by default) as it is given, and kept here by commitment for
    the team's own use. Safe to use from the runner's worker threads."""

    def __init__(self, store: Callable[[Sealed], None] | None = None) -> None:
        self._store = store
        self._by_commitment: dict[str, Sealed] = {}
        self._lock = threading.Lock()

    def keep(self, output: Any) -> Sealed:
        """Seal `output` under a fresh salt and keep it. Raises CanonicalizationError for an
        output JSON cannot carry, and what `store` raises."""
        sealed = seal(output)
        if self._store is not None:
            self._store(sealed)
        with self._lock:
            self._by_commitment[sealed.commitment] = sealed
        return sealed

    def get(self, commitment: str) -> Sealed | None:
        with self._lock:
            return self._by_commitment.get(commitment)


Parts = Sequence[tuple[str, str, Mapping[str, Any]]]
"""The requester's parts as a run takes them: (part id, capability, input as posted)."""


class TeamRunner:
    """Runs conversations for tasks over one ledger.

    `signer_of(did)` signs for a member, `adapter_of(did)` does its work, `directory` lists
    the agents discovery may pick from, `sealed` keeps the outputs (the log gets only their
    commitments), `may_lead(did)` says whether a member may lead a sub-team for a batch it
    was given (it must sign the sub-team's acts: an agent that signs only its own reports at
    its endpoint cannot; by default every member may). With a `clock` (the time the log dates
    entries with), a member that fails and cannot be reached to sign its failure is declared
    absent (`NoShow`) once `NO_SHOW_AFTER` has passed since its assignment (`pause(seconds)`
    waits meanwhile), and its work goes to another member; without one, the leader abandons
    it on its own word and the work stays undone. Raises CoordinatorError (TeamError,
    PolicyError, IllegalMove from a policy's bad message) and what the ledger raises.
    """

    def __init__(
        self,
        ledger: EventLog,
        signer_of: Callable[[str], Signer],
        adapter_of: Callable[[str], AgentAdapter],
        directory: Sequence[Member],
        policy: Policy,
        settings: RunSettings | None = None,
        observer: Observer | None = None,
        resolve_files: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None,
        sealed: SealedOutputs | None = None,
        may_lead: Callable[[str], bool] = lambda did: True,
        precheck: Precheck | None = None,
        clock: Callable[[], datetime] | None = None,
        pause: Callable[[float], None] = time.sleep,
        answered: Callable[[str, str], bool] = lambda conv_id, sub_id: False,
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self.pause = pause
        self.answered = answered
        """Whether the member of a sub-task logged, itself, that it answered it (`conv_id`,
        `sub_id`): such a member is never declared absent (the work is abandoned at once, as
        without a clock). The service refuses that no-show anyway."""
        self.may_lead = may_lead
        self.precheck = precheck
        """The requester's machine checks, run on each output before it counts as done: on a
        first attempt that someone else could make, an output a check reading that part alone
        fails is a failed part (given to someone else, as any failed part), never delivered
        blind."""
        self.sealed = sealed or SealedOutputs()
        """Every output the team gave, sealed (the log holds only their commitments)."""
        self.resolve_files = resolve_files or (lambda payload: payload)
        self.plan: dict[str, str] = {}
        """The leader's plan: each part of the top-level work and the member first given it."""
        self.signer_of = signer_of
        self.adapter_of = adapter_of
        self.directory = tuple(directory)
        self.policy = policy
        self.settings = settings or RunSettings()
        self.observer = observer
        self._busy: set[str] = set()
        self.conversations: list[Conversation] = []
        self._made: dict[str, Sealed] = {}
        """Each part whose output a logged report names, and that output: what the parts made
        of it are given (`{"$part": id}` in their input)."""
        self._made_lock = threading.Lock()

    def run_task(
        self,
        task_id: str,
        leader: Member,
        parts: Sequence[tuple[str, str, Mapping[str, Any]]],
        title: str,
        need: str,
    ) -> Conversation:
        """Form the leader's team for the parts `(id, capability, input)`, plan them, and run
        the conversation to its conclusion. Returns the closed top-level conversation.

        Raises TeamError when nobody holds a capability a part needs."""
        self.plan = {}
        capabilities = list(dict.fromkeys(capability for _, capability, _ in parts))
        team = form_team(leader, capabilities, need or title, self.directory)
        # A part made of other parts' outputs waits until they are reported (`_Run._release`).
        ready = [p for p in parts if not part_refs(p[2])]
        work = plan_work(ready)
        held = [p for p in parts if part_refs(p[2])]
        return self.run_conversation(task_id, leader, team, work, title=title, need=need, held=held)

    def run_conversation(
        self,
        task_id: str,
        leader: Member,
        team: Sequence[Member],
        work: Sequence[SubTask],
        *,
        title: str,
        need: str,
        parent: str | None = None,
        depth: int = 0,
        held: Parts = (),
    ) -> Conversation:
        """Run one conversation of `team` over `work` to its end; `held` are parts made of
        other parts' outputs, given out once those are reported (or never, when one of them
        is never made)."""
        conversation = open_conversation(
            f"conv-{uuid.uuid4().hex[:12]}",
            task_id,
            leader.did,
            tuple(m.did for m in team),
            parent=parent,
            depth=depth,
            max_depth=self.settings.max_depth,
            max_turns=self.settings.max_turns,
        )
        self._busy.update(m.did for m in team)
        self.ledger.append(
            self.signer_of(leader.did),
            CONVERSATION_OPENED,
            subject=conversation.conv_id,
            body={**_opened_body(conversation), "title": title},
        )
        run = _Run(self, conversation, tuple(team), list(work), title, need, list(held))
        try:
            return run.to_the_end()
        finally:
            self.conversations.append(run.conversation)

    # -- doing one assignment ---------------------------------------------------------------

    def perform(self, conversation: Conversation, assignee: str, task: SubTask) -> Result:
        """`assignee` does `task`: alone, item by item, or with a sub-team it forms for a
        batch (a nested conversation one level deeper). Failures become a failed result."""
        items = split_batch(task)
        member = next((m for m in self.directory if m.did == assignee), None)
        if (
            member is not None
            and len(items) >= self.settings.team_up_min_items
            and conversation.depth < self.settings.max_depth
            and self.may_lead(assignee)
        ):
            helpers = helpers_for(task, member, self.directory, self._busy.__contains__)
            if helpers:
                child = self.run_conversation(
                    conversation.task_id,
                    member,
                    (member, *helpers),
                    items,
                    title=task.instruction,
                    need=task.instruction,
                    parent=conversation.conv_id,
                    depth=conversation.depth + 1,
                )
                contributions = child.deliverable.contributions if child.deliverable else ()
                if not contributions:
                    return Result(task.sub_id, False, (), "the sub-team delivered no output")
                # What the sub-team did is its producers' own reports: it comes up as it is
                # (never done again by anyone); the parts it dropped are put back (`_rest`).
                return Result(task.sub_id, True, contributions, team=child.conv_id)
        done: list[Contribution] = []
        adapter = self.adapter_of(assignee)
        for item_task in items:
            item_id = str(item_task.item.get("item_id", item_task.sub_id))
            try:
                work = self._work_task(item_task)
            except (ExamError, MarketError, KeyError, TypeError) as exc:
                return Result(task.sub_id, False, (), f"part {item_id} cannot be given: {exc}")
            try:
                answer = adapter.run(work)
            except AgentFailure as exc:
                return Result(task.sub_id, False, (), f"{assignee}: {exc.reason}")
            try:
                validate_output(item_task.capability, answer)
            except ExamError as exc:
                return Result(
                    task.sub_id, False, (), f"{assignee}: part {item_id}: invalid output: {exc}"
                )
            failing = (
                self.precheck.failing(item_id, answer)
                if self.precheck is not None and self._may_retry(conversation, assignee, task)
                else None
            )
            if failing is not None:
                return Result(
                    task.sub_id,
                    False,
                    (),
                    f"{assignee}: part {item_id}: the requester's check {failing.check_id} "
                    f"fails on this output ({failing.detail})",
                )
            try:
                sealed = self.sealed.keep(answer)
            except (LedgerError, MarketError) as exc:
                return Result(
                    task.sub_id, False, (), f"{assignee}: part {item_id}: not kept: {exc}"
                )
            done.append(
                Contribution(
                    assignee, item_task.sub_id, task.capability, item_id, sealed.commitment
                )
            )
        return Result(task.sub_id, True, tuple(done))

    def _may_retry(self, conversation: Conversation, assignee: str, task: SubTask) -> bool:
        """Whether a failed `task` would go to someone else: its first attempt, by a member
        whose failure this leader can log (`may_lead`: its key is held here; a member that
        keeps its own key signs only its own failures and would not sign one for work it
        answered in full, so the part would be lost), with another member of the conversation
        able to do it. Only then does an output the requester's checks fail count as a failed
        part; otherwise it is delivered, since the checks that pass on it still pay."""
        if task.sub_id != base_id(task.sub_id) or not self.may_lead(assignee):
            return False
        return any(
            m.did in conversation.members
            and m.did != assignee
            and task.capability in m.capabilities
            for m in self.directory
        )

    def _work_task(self, task: SubTask) -> SubTask:
        """What the member is given for a part: the capability's instruction for the input,
        with the input's files resolved to their text and the outputs of the parts it is made
        of in place of their `{"$part": id}` (the exam-item shape every runtime answers); those
        outputs go along sealed (`INPUTS_KEY`), for a member to check them against their
        producers' reports. Raises ExamError for an input the capability refuses, WorkError
        for one made of a part not reported yet."""
        payload = self.resolve_files(task.item.get("payload", {}))
        named = part_refs(payload)
        with self._made_lock:
            made = {p: self._made[p] for p in named if p in self._made}
        payload = resolve_parts(payload, {p: sealed.value for p, sealed in made.items()})
        item = work_item(task.capability, str(task.item["item_id"]), dict(payload))
        given = item.for_agent()
        if named:
            given[INPUTS_KEY] = {p: {"salt": s.salt, "value": s.value} for p, s in made.items()}
        return SubTask(task.sub_id, task.capability, item.prompt, given)

    def reported(self, contributions: Sequence[Contribution]) -> set[str]:
        """Remember the outputs of a report's `contributions` (the first report of a part
        counts); returns every part made so far."""
        with self._made_lock:
            for contribution in contributions:
                sealed = self.sealed.get(contribution.output_sha256)
                if sealed is not None:
                    self._made.setdefault(contribution.part, sealed)
            return set(self._made)

    def say(self, conversation: Conversation, message: Message) -> Conversation:
        """Check the move (at the clock's time, when there is a clock), log it signed by its
        speaker, tell the observer. The conversation returned is stepped at the time the log
        dated the entry with, as a replay steps it."""
        step(conversation, message, at=None if self.clock is None else self.clock())
        _, entry = self.ledger.append(
            self.signer_of(message.speaker),
            CONVERSATION_MESSAGE,
            subject=conversation.conv_id,
            body={
                "conversation": conversation.conv_id,
                "turn": conversation.turn,
                "message": message_to_json(message),
            },
        )
        after = step(conversation, message, at=parse_time(entry.event.at))
        if self.observer is not None:
            self.observer(after, message)
        return after


class _Run:
    """One conversation's loop: whose turn it is decides what happens next."""

    def __init__(
        self,
        runner: TeamRunner,
        conversation: Conversation,
        team: tuple[Member, ...],
        work: list[SubTask],
        title: str,
        need: str,
        held: list[tuple[str, str, Mapping[str, Any]]],
    ) -> None:
        self.runner = runner
        self.conversation = conversation
        self.team = team
        self.unassigned = work
        self.held = held
        """Parts made of other parts' outputs that are not reported yet."""
        self.title = title
        self.need = need
        self.outstanding: dict[str, _Assignment] = {}
        self.failed_by: dict[str, list[str]] = {}
        self.abandon: list[str] = []
        self.pool = ThreadPoolExecutor(max_workers=max(2, len(team)))

    def to_the_end(self) -> Conversation:
        try:
            while self.conversation.state != "closed":
                if self._leader_speaks():
                    self._leader_turn()
                else:
                    self._member_turn()
            return self.conversation
        finally:
            # A hung adapter must not hang the team: stop waiting for it.
            self.pool.shutdown(wait=False, cancel_futures=True)

    def _leader_speaks(self) -> bool:
        c = self.conversation
        if self.abandon:
            return True
        if c.speaker != c.leader:
            return False
        return not (c.state == "sync_task_assign" and c.blocked_on is not None) and not (
            c.state == "pause_trigger"
            and c.leader in {a.assignee for a in self.outstanding.values()}
        )

    def _view(self) -> TeamView:
        return TeamView(
            conversation=self.conversation,
            title=self.title,
            description=self.need,
            team=self.team,
            unassigned=tuple(self.unassigned),
            failed_by={k: tuple(v) for k, v in self.failed_by.items()},
            abandon=tuple(self.abandon),
        )

    def _leader_turn(self) -> None:
        message = self.runner.policy.decide(self._view())
        if message.speaker != self.conversation.leader:
            raise CoordinatorError("a policy may only speak for the leader")
        self.conversation = self.runner.say(self.conversation, message)
        match message:
            case AssignSync(assignee=assignee, task=task):
                self._start(assignee, task)
            case AssignAsync(assignments=assignments):
                for assignee, task in assignments:
                    self._start(assignee, task)
            case Abandon(sub_id=sub_id):
                self.abandon.remove(sub_id)
                del self.outstanding[sub_id]
            case _:
                pass

    def _start(self, assignee: str, task: SubTask) -> None:
        if self.conversation.depth == 0:
            for part_id in parts_of(task):
                self.runner.plan.setdefault(part_id, assignee)
        self.unassigned = [t for t in self.unassigned if t.sub_id != task.sub_id]
        future = self.pool.submit(self.runner.perform, self.conversation, assignee, task)
        deadline = time.monotonic() + self.runner.settings.timeout_s
        self.outstanding[task.sub_id] = _Assignment(task, assignee, future, deadline)

    def _member_turn(self) -> None:
        c = self.conversation
        if c.state == "sync_task_assign" and c.blocked_on is not None:
            sub_id = c.blocked_on[0]
        else:  # pause_trigger: the speaker's pending trigger
            sub_id = next(k for k, who in c.triggers.items() if who == c.speaker)
        assignment = self.outstanding[sub_id]
        try:
            result = assignment.future.result(
                timeout=max(0.0, assignment.deadline - time.monotonic())
            )
        except FutureTimeout:  # the member hangs
            result = Result(sub_id, False, (), f"{assignment.assignee}: no answer in time")
        if not result.ok:
            # The member's own signed failure report frees the work for another. One it will
            # not sign (its key kept at its endpoint, and it says it answered) is abandoned on
            # the leader's word, and then the work stays undone: a leader's word never moves a
            # member's part to someone else, unless the member did not answer for so long
            # (`NO_SHOW_AFTER`) that the leader may declare it absent.
            if not self._report_failure(assignment, result) and not self._no_show(assignment):
                self.abandon.append(sub_id)
            return
        del self.outstanding[sub_id]
        self._rest(assignment, {c.part for c in result.contributions})
        self._release(self.runner.reported(result.contributions))
        state, speaker = self._after(excluding=sub_id)
        self.conversation = self.runner.say(
            self.conversation, Report(assignment.assignee, result, state, speaker)
        )

    def _release(self, made: set[str]) -> None:
        """Give out the held parts whose inputs' parts are all `made`, each a sub-task of its
        own, in the order the requester listed them."""
        ready = [p for p in self.held if set(part_refs(p[2])) <= made]
        if ready:
            self.held = [p for p in self.held if p not in ready]
            self.unassigned.extend(part_task(*p) for p in ready)

    def _rest(self, assignment: _Assignment, done: set[str]) -> None:
        """A batch delivered in part (its sub-team dropped some parts): the parts not done go
        back once more, as a batch of their own, if someone else can do them."""
        task = assignment.task
        batch = task.item.get("batch")
        if not isinstance(batch, list) or set(parts_of(task)) <= done:
            return
        base = base_id(task.sub_id)
        failed = self.failed_by.setdefault(base, [])
        failed.append(assignment.assignee)
        able = [m for m in self.team if task.capability in m.capabilities]
        if len(failed) < MAX_ATTEMPTS and any(m.did not in failed for m in able):
            rest = [
                item for item, part in zip(batch, parts_of(task), strict=True) if part not in done
            ]
            self.unassigned.append(
                SubTask(
                    f"{base}#{len(failed) + 1}",
                    task.capability,
                    f"do the {len(rest)} {task.capability} parts left",
                    {"batch": rest},
                )
            )

    def _report_failure(self, assignment: _Assignment, result: Result) -> bool:
        """Speak `result` as the member's own failure report, signed by the member (one that
        keeps its key refuses it when it did give an answer). Returns whether it was logged;
        when not, nothing changed."""
        sub_id = assignment.task.sub_id
        saved = (list(self.unassigned), {k: list(v) for k, v in self.failed_by.items()})
        self._failed(assignment)
        state, speaker = self._after(excluding=sub_id)
        try:
            self.conversation = self.runner.say(
                self.conversation, Report(assignment.assignee, result, state, speaker)
            )
        except AccordError:
            self.unassigned, self.failed_by = saved
            return False
        del self.outstanding[sub_id]
        return True

    def _no_show(self, assignment: _Assignment) -> bool:
        """Wait until the member of `assignment` may be declared absent, then declare it and
        put the work back once more if someone else can do it. Returns whether the no-show
        was logged (never without a clock, or once the log refuses it: then nothing
        changed)."""
        runner = self.runner
        sub_id = assignment.task.sub_id
        due = no_show_due(self.conversation, sub_id)
        if runner.clock is None or due is None:
            return False
        if runner.answered(self.conversation.conv_id, sub_id):
            return False
        while (left := (due - runner.clock()).total_seconds()) > 0:
            runner.pause(min(left, NO_SHOW_POLL_S))
        if runner.answered(self.conversation.conv_id, sub_id):
            return False
        saved = (list(self.unassigned), {k: list(v) for k, v in self.failed_by.items()})
        self._failed(assignment)
        state, speaker = self._after(excluding=sub_id)
        try:
            self.conversation = runner.say(
                self.conversation, NoShow(self.conversation.leader, sub_id, state, speaker)
            )
        except AccordError:
            self.unassigned, self.failed_by = saved
            return False
        del self.outstanding[sub_id]
        # Gone: nothing more is given to it in this conversation.
        self.team = tuple(m for m in self.team if m.did != assignment.assignee)
        return True

    def _failed(self, assignment: _Assignment) -> None:
        """Remember who failed; put the work back once more if someone else can do it."""
        base = base_id(assignment.task.sub_id)
        failed = self.failed_by.setdefault(base, [])
        failed.append(assignment.assignee)
        able = [m for m in self.team if assignment.task.capability in m.capabilities]
        if len(failed) < MAX_ATTEMPTS and any(m.did not in failed for m in able):
            retry = SubTask(
                f"{base}#{len(failed) + 1}",
                assignment.task.capability,
                assignment.task.instruction,
                assignment.task.item,
            )
            self.unassigned.append(retry)

    def _after(self, excluding: str) -> tuple[ConversationState, str]:
        c = self.conversation
        pending = {k: v for k, v in c.triggers.items() if k != excluding}
        if pending:
            done_first = sorted(pending, key=lambda k: (not self.outstanding[k].future.done(), k))
            return "pause_trigger", pending[done_first[0]]
        if self.unassigned:
            return "async_task_assign", c.leader
        return "conclusion", c.leader


def _opened_body(conversation: Conversation) -> dict[str, Any]:
    return {
        "conversation": conversation.conv_id,
        "task": conversation.task_id,
        "parent": conversation.parent,
        "depth": conversation.depth,
        "leader": conversation.leader,
        "members": list(conversation.members),
        "max_turns": conversation.max_turns,
    }


def describe(members: Mapping[str, Member], did: str) -> str:
    """A member's name for display, else a shortened DID."""
    member = members.get(did)
    return member.name if member is not None else did[:16] + "…"
