"""The team conversation as a pure state machine (IoA-style), one speaker at a time.

States: `discussion`, `sync_task_assign`, `async_task_assign`, `pause_trigger`, `conclusion`,
and `closed` once the deliverable is out. Every message is one of a few small kinds, names the
next state and the next speaker, and `step(conversation, message)` either returns the next
conversation or raises `IllegalMove` with the rule it broke:

    state              speaker                  message       next states allowed
    discussion         the named speaker        Discuss       discussion, sync/async assign,
                                                              conclusion, pause_trigger
                                                              (while triggers are pending)
    sync_task_assign   the named speaker        AssignSync    sync_task_assign, blocked: the
                                                              assignee speaks next
                       the blocked assignee     Report        any but pause_trigger
                       the leader               Abandon       any but pause_trigger
                       the leader               NoShow        any but pause_trigger
    async_task_assign  the named speaker        AssignAsync   discussion, sync/async assign,
                                                              pause_trigger
    pause_trigger      a member with a trigger  Report        pause_trigger while triggers
                       the leader               Abandon       remain, then any but it
                       the leader               NoShow
    conclusion         the leader               Conclude      closed (no speaker)

Bounds: at most `max_turns` messages (only `Conclude` may use the last turn); sub-task ids are
unique; an assignee must be a member; nothing concludes while an assignment is outstanding; the
deliverable's contributions are exactly the successful results, each tagged with its agent.

Who did what is each producer's own signed claim: a report's contributions name only its
speaker as producer (a sub-team's work comes up only as the conclusion of the conversation the
speaker led for it, `Result.team`, held to it by `check_sub_team`) and only parts of the
sub-task assigned to the speaker; a part is reported once (so the conclusion names, for each
part, the one contribution its producer logged) and an output commitment never twice. A part
is assigned to one member at a time and never again once done. A leader that abandons an
assignment on its own word leaves its parts undone for good: only the member's own signed
failure report frees them for someone else. Across a task's conversations, `check_task_reports`
holds each part to one producer's report.

A member that goes away is declared absent by the leader alone, and only late: a `NoShow` for
an outstanding assignment is a legal move only at least `NO_SHOW_AFTER` after the assignment,
by the logged times (`step(..., at=)`: the replay passes each entry's time, and an assignment
or no-show without a time is never a legal no-show). It frees the assignment's parts for
someone else, as the member's own failure report does, and from then on the member's report
for it is refused: it is no longer outstanding. A member that logged, itself, that it answered
the assignment (`WORK_ANSWERED`, folded in by `answered`) is never declared absent for it: a
leader that holds a member's answer back cannot take the part by calling the member gone.

`conversation_from_events` folds a logged conversation (its verified `conversation.opened` and
`conversation.message` events) back through `step`: the replay the service and the audit share.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from accord.coordinator.errors import CoordinatorError, IllegalMove
from accord.coordinator.work import JSON, SubTask, parts_of, split_batch
from accord.ledger.events import Event, parse_time
from accord.ledger.sealing import is_commitment

CONVERSATION_OPENED = "conversation.opened"
CONVERSATION_MESSAGE = "conversation.message"
WORK_ANSWERED = "work.answered"
"""A member's own word, logged by the member itself before it hands its answer over, that it
answered an assignment (`{"conversation", "sub_id"}`, subject the conversation): from then on
the leader cannot declare it absent, so a leader that holds the answer back cannot take it."""

ConversationState = Literal[
    "discussion",
    "sync_task_assign",
    "async_task_assign",
    "pause_trigger",
    "conclusion",
    "closed",
]
STATES: tuple[ConversationState, ...] = (
    "discussion",
    "sync_task_assign",
    "async_task_assign",
    "pause_trigger",
    "conclusion",
    "closed",
)
DEFAULT_MAX_TURNS = 64
NO_SHOW_AFTER = timedelta(minutes=5)
"""How long after an assignment its member may be declared absent (`NoShow`). Well above a
leader's per-assignment timeout (`RunSettings.timeout_s`, 30 s by default), so a member that is
working is never declared gone: the bound is what stops a leader from declaring a no-show to
take a member's part."""


# -- results and the deliverable -------------------------------------------------------------


@dataclass(frozen=True)
class Contribution:
    """One agent's part of the deliverable: which part of the work it answered, in which
    sub-task, and the commitment to its output (`accord.ledger.sealing`). The output itself never
    enters the conversation: the log is public, the work is the requester's until it is paid."""

    agent: str
    sub_id: str
    capability: str
    part: str
    output_sha256: str

    def to_json(self) -> dict[str, JSON]:
        return {
            "agent": self.agent,
            "sub_id": self.sub_id,
            "capability": self.capability,
            "part": self.part,
            "output_sha256": self.output_sha256,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, JSON]) -> Contribution:
        """Raises TypeError for a commitment that is not 64 lowercase hex digits."""
        commitment = value["output_sha256"]
        if not is_commitment(commitment):
            raise TypeError("output_sha256 is a SHA-256 in lowercase hex")
        assert isinstance(commitment, str)
        return cls(
            str(value["agent"]),
            str(value["sub_id"]),
            str(value["capability"]),
            str(value["part"]),
            commitment,
        )


@dataclass(frozen=True)
class Result:
    """What came back for a sub-task: the speaker's own contributions, or, when `team` names
    the sub-team conversation the speaker led for it, that conversation's conclusion (each
    contribution its producer's own report there)."""

    sub_id: str
    ok: bool
    contributions: tuple[Contribution, ...] = ()
    error: str | None = None
    team: str | None = None

    def to_json(self) -> dict[str, JSON]:
        value: dict[str, JSON] = {
            "sub_id": self.sub_id,
            "ok": self.ok,
            "contributions": [c.to_json() for c in self.contributions],
            "error": self.error,
        }
        if self.team is not None:
            value["team"] = self.team
        return value

    @classmethod
    def from_json(cls, value: Mapping[str, JSON]) -> Result:
        if not isinstance(value["ok"], bool):
            raise TypeError("ok must be true or false")
        team = value.get("team")
        if team is not None and (not isinstance(team, str) or not team):
            raise TypeError("team names the sub-team's conversation")
        return cls(
            str(value["sub_id"]),
            value["ok"],
            tuple(Contribution.from_json(c) for c in value["contributions"]),
            value.get("error"),
            team,
        )


@dataclass(frozen=True)
class Deliverable:
    summary: str
    contributions: tuple[Contribution, ...]

    def to_json(self) -> dict[str, JSON]:
        return {
            "summary": self.summary,
            "contributions": [c.to_json() for c in self.contributions],
        }

    @classmethod
    def from_json(cls, value: Mapping[str, JSON]) -> Deliverable:
        return cls(
            str(value["summary"]),
            tuple(Contribution.from_json(c) for c in value["contributions"]),
        )


# -- messages ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Discuss:
    speaker: str
    text: str
    next_state: ConversationState
    next_speaker: str | None


@dataclass(frozen=True)
class AssignSync:
    speaker: str
    assignee: str
    task: SubTask
    next_state: ConversationState = "sync_task_assign"
    next_speaker: str | None = None  # always the assignee; filled in by `assign_sync`


@dataclass(frozen=True)
class AssignAsync:
    speaker: str
    assignments: tuple[tuple[str, SubTask], ...]
    next_state: ConversationState
    next_speaker: str | None


@dataclass(frozen=True)
class Report:
    speaker: str
    result: Result
    next_state: ConversationState
    next_speaker: str | None


@dataclass(frozen=True)
class Abandon:
    """The leader gives up on an outstanding assignment (its member failed or timed out)."""

    speaker: str
    sub_id: str
    reason: str
    next_state: ConversationState
    next_speaker: str | None


@dataclass(frozen=True)
class NoShow:
    """The leader declares that the member of an outstanding assignment did not answer within
    `NO_SHOW_AFTER` of it: the assignment's parts are free for another member, and the member's
    report for it is refused from then on."""

    speaker: str
    sub_id: str
    next_state: ConversationState
    next_speaker: str | None


@dataclass(frozen=True)
class Conclude:
    speaker: str
    deliverable: Deliverable
    next_state: ConversationState = "closed"
    next_speaker: str | None = None


Message = Discuss | AssignSync | AssignAsync | Report | Abandon | NoShow | Conclude


def is_part_of(sub_id: str, of: str) -> bool:
    """`arithmetic/1` (done by a sub-team) is part of `arithmetic`; so is `arithmetic` itself."""
    return sub_id == of or sub_id.startswith(of + "/")


def assign_sync(speaker: str, assignee: str, task: SubTask) -> AssignSync:
    """A sync assignment: the conversation blocks until `assignee` reports."""
    return AssignSync(speaker, assignee, task, "sync_task_assign", assignee)


# -- the conversation ------------------------------------------------------------------------


@dataclass(frozen=True)
class Conversation:
    """A conversation's whole state. Build the first one with `open_conversation`."""

    conv_id: str
    task_id: str
    parent: str | None
    depth: int
    leader: str
    members: tuple[str, ...]
    state: ConversationState
    speaker: str | None
    turn: int = 0
    max_turns: int = DEFAULT_MAX_TURNS
    blocked_on: tuple[str, str] | None = None  # (sub_id, assignee) of a sync assignment
    triggers: Mapping[str, str] = field(default_factory=dict, hash=False)  # sub_id -> assignee
    assigned: Mapping[str, SubTask] = field(default_factory=dict, hash=False)
    assignees: Mapping[str, str] = field(default_factory=dict, hash=False)  # sub_id -> member
    results: tuple[Result, ...] = ()
    deliverable: Deliverable | None = None
    abandoned: tuple[str, ...] = ()  # sub_ids the leader gave up on by its own word
    assigned_at: Mapping[str, datetime] = field(default_factory=dict, hash=False)
    """When each sub-task was assigned, by the logged time (known when `step` is given it)."""
    no_shows: tuple[str, ...] = ()  # sub_ids whose member the leader declared absent
    answered: Mapping[str, int] = field(default_factory=dict, hash=False)
    """Outstanding sub_ids whose member logged that it answered, with that entry's index."""

    def to_json(self) -> dict[str, Any]:
        return {
            "conv_id": self.conv_id,
            "task_id": self.task_id,
            "parent": self.parent,
            "depth": self.depth,
            "leader": self.leader,
            "members": list(self.members),
            "state": self.state,
            "speaker": self.speaker,
            "turn": self.turn,
            "results": [r.to_json() for r in self.results],
        }


def open_conversation(
    conv_id: str,
    task_id: str,
    leader: str,
    members: tuple[str, ...],
    *,
    parent: str | None = None,
    depth: int = 0,
    max_depth: int = 2,
    max_turns: int = DEFAULT_MAX_TURNS,
) -> Conversation:
    """A new conversation in `discussion` with the leader speaking first.

    Raises IllegalMove when the leader is not a member, members repeat, or depth exceeds
    `max_depth`.
    """
    if leader not in members:
        raise IllegalMove("the leader must be a member of its conversation")
    if len(set(members)) != len(members):
        raise IllegalMove("a member is listed twice")
    if not 0 <= depth <= max_depth:
        raise IllegalMove(f"nested depth {depth} is beyond the limit of {max_depth}")
    if max_turns < 2:
        raise IllegalMove("a conversation needs at least two turns")
    return Conversation(
        conv_id, task_id, parent, depth, leader, members, "discussion", leader, 0, max_turns
    )


def step(conversation: Conversation, message: Message, at: datetime | None = None) -> Conversation:
    """Apply one message, said at `at` (the time its entry is logged with; a replay passes
    each entry's). An assignment remembers its time, and a `NoShow` is legal only with a time
    at least `NO_SHOW_AFTER` after the assignment's. Raises IllegalMove naming the rule it
    breaks."""
    c = conversation
    if c.state == "closed":
        raise IllegalMove("the conversation is closed")
    if message.speaker not in c.members:
        raise IllegalMove(f"{message.speaker} is not a member of {c.conv_id}")
    if c.turn >= c.max_turns or (c.turn == c.max_turns - 1 and not isinstance(message, Conclude)):
        raise IllegalMove(f"the turn limit of {c.max_turns} is reached: conclude")
    match message:
        case Discuss():
            nxt = _discuss(c, message)
        case AssignSync():
            nxt = _assign_sync(c, message)
            nxt = _stamped(nxt, (message.task.sub_id,), at)
        case AssignAsync():
            nxt = _assign_async(c, message)
            nxt = _stamped(nxt, tuple(task.sub_id for _, task in message.assignments), at)
        case Report():
            nxt = _report(c, message)
        case Abandon():
            nxt = _abandon(c, message)
        case NoShow():
            nxt = _no_show(c, message, at)
        case Conclude():
            nxt = _conclude(c, message)
    return replace(nxt, turn=c.turn + 1)


def _stamped(c: Conversation, sub_ids: tuple[str, ...], at: datetime | None) -> Conversation:
    """`c` with the assignment time of `sub_ids` remembered (when it is known)."""
    if at is None:
        return c
    return replace(c, assigned_at={**c.assigned_at, **dict.fromkeys(sub_ids, at)})


def _expect_speaker(c: Conversation, message: Message) -> None:
    if message.speaker != c.speaker:
        raise IllegalMove(f"it is {c.speaker}'s turn, not {message.speaker}'s")


def _expect_state(c: Conversation, kind: str, *states: ConversationState) -> None:
    if c.state not in states:
        raise IllegalMove(f"{kind} is not allowed in {c.state}")


def _next(
    c: Conversation,
    message: Message,
    allowed: tuple[ConversationState, ...],
    **changes: Any,
) -> Conversation:
    """Move to the message's next state and speaker, if allowed and well-formed."""
    after = replace(c, **changes)
    state, speaker = message.next_state, message.next_speaker
    if state not in allowed:
        raise IllegalMove(f"{type(message).__name__} cannot lead from {c.state} to {state}")
    if state == "pause_trigger":
        if not after.triggers:
            raise IllegalMove("pause_trigger needs a pending trigger")
        if speaker not in after.triggers.values():
            raise IllegalMove("in pause_trigger the next speaker must have a pending trigger")
    elif state == "conclusion":
        if after.triggers or after.blocked_on:
            raise IllegalMove("cannot conclude while assignments are outstanding")
        if speaker != c.leader:
            raise IllegalMove("only the leader concludes")
    elif state == "closed":
        if speaker is not None:
            raise IllegalMove("a closed conversation has no next speaker")
    elif speaker not in c.members:
        raise IllegalMove(f"the next speaker {speaker} is not a member")
    return replace(after, state=state, speaker=speaker)


_AFTER_RESULT: tuple[ConversationState, ...] = (
    "discussion",
    "sync_task_assign",
    "async_task_assign",
    "conclusion",
)


def _discuss(c: Conversation, m: Discuss) -> Conversation:
    _expect_state(c, "discuss", "discussion")
    _expect_speaker(c, m)
    return _next(c, m, (*_AFTER_RESULT, "pause_trigger"))


def _parts(task: SubTask) -> list[str]:
    """The parts a sub-task covers. Raises IllegalMove for a batch that does not parse."""
    return list(_capabilities(task))


def _capabilities(task: SubTask) -> dict[str, str]:
    """Each part a sub-task covers, with the capability it is done in. Raises IllegalMove for
    a batch that does not parse."""
    try:
        pieces = split_batch(task)
        return dict(zip(parts_of(task), (piece.capability for piece in pieces), strict=True))
    except (KeyError, TypeError, ValueError) as exc:
        raise IllegalMove(f"sub-task {task.sub_id} holds a malformed batch: {exc!r}") from exc


def _outstanding(c: Conversation) -> list[str]:
    """The sub_ids assigned and not yet answered."""
    return [*c.triggers, *([c.blocked_on[0]] if c.blocked_on else [])]


def logged_plan(c: Conversation) -> dict[str, str]:
    """The leader's plan as the conversation logged it: each part and the member first
    assigned a sub-task covering it."""
    plan: dict[str, str] = {}
    for sub_id, task in c.assigned.items():
        for part in _parts(task):
            plan.setdefault(part, c.assignees[sub_id])
    return plan


def done_parts(c: Conversation) -> dict[str, Contribution]:
    """Each part a successful report of `c` delivered, with the contribution that did."""
    return {x.part: x for result in c.results if result.ok for x in result.contributions}


def _check_assignment(
    c: Conversation, assignee: str, task: SubTask, seen: set[str], seen_parts: set[str]
) -> None:
    """A part is given to one member at a time, and never again once it is done, or once the
    leader gave it up on its own word (only its member's signed failure frees it)."""
    if assignee not in c.members:
        raise IllegalMove(f"{assignee} is not a member and cannot be assigned")
    if task.sub_id in c.assigned or task.sub_id in seen:
        raise IllegalMove(f"sub-task {task.sub_id} is already assigned")
    seen.add(task.sub_id)
    outstanding = {p for sub_id in _outstanding(c) for p in _parts(c.assigned[sub_id])}
    done = done_parts(c)
    abandoned = {p for sub_id in c.abandoned for p in _parts(c.assigned[sub_id])}
    for part in _parts(task):
        if part in outstanding or part in seen_parts:
            raise IllegalMove(f"part {part} is already assigned and not yet reported")
        if part in done:
            raise IllegalMove(f"part {part} is already done by {done[part].agent}")
        if part in abandoned:
            raise IllegalMove(
                f"part {part} was abandoned on the leader's word: it is given again only "
                "after its member's own signed failure report"
            )
        seen_parts.add(part)


def _assign_sync(c: Conversation, m: AssignSync) -> Conversation:
    _expect_state(c, "a sync assignment", "sync_task_assign")
    _expect_speaker(c, m)
    if c.blocked_on is not None:
        raise IllegalMove("a sync assignment is already outstanding")
    _check_assignment(c, m.assignee, m.task, set(), set())
    if m.next_state != "sync_task_assign" or m.next_speaker != m.assignee:
        raise IllegalMove("a sync assignment blocks: the assignee speaks next, in sync_task_assign")
    return replace(
        c,
        speaker=m.assignee,
        blocked_on=(m.task.sub_id, m.assignee),
        assigned={**c.assigned, m.task.sub_id: m.task},
        assignees={**c.assignees, m.task.sub_id: m.assignee},
    )


def _assign_async(c: Conversation, m: AssignAsync) -> Conversation:
    _expect_state(c, "an async assignment", "async_task_assign")
    _expect_speaker(c, m)
    if not m.assignments:
        raise IllegalMove("an async assignment names at least one sub-task")
    seen: set[str] = set()
    seen_parts: set[str] = set()
    for assignee, task in m.assignments:
        _check_assignment(c, assignee, task, seen, seen_parts)
    triggers = {**c.triggers, **{task.sub_id: who for who, task in m.assignments}}
    assigned = {**c.assigned, **{task.sub_id: task for _, task in m.assignments}}
    assignees = {**c.assignees, **{task.sub_id: who for who, task in m.assignments}}
    allowed: tuple[ConversationState, ...] = (
        "discussion",
        "sync_task_assign",
        "async_task_assign",
        "pause_trigger",
    )
    return _next(c, m, allowed, triggers=triggers, assigned=assigned, assignees=assignees)


def _check_result(c: Conversation, speaker: str, result: Result) -> None:
    """A report carries its speaker's own signed claim: each contribution names the speaker as
    its producer (or, with `team`, comes from the sub-team conversation the speaker led, which
    `check_sub_team` holds it to), a part of the sub-task assigned to it, once, not already
    done, and an output commitment nobody reported before."""
    task = c.assigned.get(result.sub_id)
    if task is None:
        raise IllegalMove(f"no sub-task {result.sub_id} was assigned")
    if result.ok != bool(result.contributions):
        raise IllegalMove("a successful result carries contributions, a failed one none")
    if result.team is not None and not result.ok:
        raise IllegalMove("a failed result names no sub-team")
    allowed = _capabilities(task)
    done = done_parts(c)
    reported = {x.output_sha256 for r in c.results for x in r.contributions}
    seen: set[str] = set()
    for contribution in result.contributions:
        if not is_part_of(contribution.sub_id, result.sub_id):
            raise IllegalMove("a contribution names another sub-task")
        if result.team is None and contribution.agent != speaker:
            raise IllegalMove(
                f"a contribution names {contribution.agent} as its producer: a report carries "
                f"only its speaker's own work ({speaker}'s)"
            )
        part = contribution.part
        if part not in allowed:
            raise IllegalMove(f"part {part} is not in sub-task {result.sub_id}")
        if contribution.capability != allowed[part]:
            raise IllegalMove(f"part {part} is {allowed[part]} work, not {contribution.capability}")
        if part in seen:
            raise IllegalMove(f"part {part} is reported twice")
        if part in done:
            raise IllegalMove(f"part {part} is already done by {done[part].agent}")
        if contribution.output_sha256 in reported:
            raise IllegalMove(f"output {contribution.output_sha256} was reported before")
        seen.add(part)
        reported.add(contribution.output_sha256)


def _report(c: Conversation, m: Report) -> Conversation:
    if c.state == "sync_task_assign":
        if c.blocked_on is None:
            raise IllegalMove("no sync assignment is outstanding")
        sub_id, assignee = c.blocked_on
        if m.speaker != assignee or m.result.sub_id != sub_id:
            raise IllegalMove(f"the conversation waits for {assignee}'s result for {sub_id}")
        _check_result(c, m.speaker, m.result)
        return _next(c, m, _AFTER_RESULT, blocked_on=None, results=(*c.results, m.result))
    if c.state == "pause_trigger":
        _expect_speaker(c, m)
        if c.triggers.get(m.result.sub_id) != m.speaker:
            raise IllegalMove(f"{m.speaker} has no pending trigger for {m.result.sub_id}")
        _check_result(c, m.speaker, m.result)
        remaining = {k: v for k, v in c.triggers.items() if k != m.result.sub_id}
        allowed: tuple[ConversationState, ...] = ("pause_trigger",) if remaining else _AFTER_RESULT
        return _next(c, m, allowed, triggers=remaining, results=(*c.results, m.result))
    raise IllegalMove(f"a report is not expected in {c.state}")


def _abandon(c: Conversation, m: Abandon) -> Conversation:
    if m.speaker != c.leader:
        raise IllegalMove("only the leader abandons an assignment")
    failed = Result(m.sub_id, False, (), m.reason)
    abandoned = (*c.abandoned, m.sub_id)
    if c.state == "sync_task_assign" and c.blocked_on and c.blocked_on[0] == m.sub_id:
        return _next(
            c,
            m,
            _AFTER_RESULT,
            blocked_on=None,
            results=(*c.results, failed),
            abandoned=abandoned,
        )
    if c.state == "pause_trigger" and m.sub_id in c.triggers:
        remaining = {k: v for k, v in c.triggers.items() if k != m.sub_id}
        allowed: tuple[ConversationState, ...] = ("pause_trigger",) if remaining else _AFTER_RESULT
        return _next(
            c, m, allowed, triggers=remaining, results=(*c.results, failed), abandoned=abandoned
        )
    raise IllegalMove(f"nothing outstanding to abandon for {m.sub_id} in {c.state}")


def no_show_due(c: Conversation, sub_id: str) -> datetime | None:
    """The earliest time the leader may declare the member of `sub_id` absent (None when its
    assignment time is not known)."""
    assigned = c.assigned_at.get(sub_id)
    return None if assigned is None else assigned + NO_SHOW_AFTER


def _no_show(c: Conversation, m: NoShow, at: datetime | None) -> Conversation:
    if m.speaker != c.leader:
        raise IllegalMove("only the leader declares a no-show")
    blocked = c.state == "sync_task_assign" and c.blocked_on and c.blocked_on[0] == m.sub_id
    pending = c.state == "pause_trigger" and m.sub_id in c.triggers
    if not (blocked or pending):
        raise IllegalMove(
            f"nothing outstanding for {m.sub_id} in {c.state}: a member that reported is "
            "never declared absent"
        )
    if m.sub_id in c.answered:
        raise IllegalMove(
            f"{c.assignees[m.sub_id]} logged at entry {c.answered[m.sub_id]} that it answered "
            f"{m.sub_id}: it is not absent (its report is asked for, or the part abandoned)"
        )
    due = no_show_due(c, m.sub_id)
    if at is None or due is None:
        raise IllegalMove("a no-show is judged by the logged times of its assignment and itself")
    if at < due:
        waited = int((at - c.assigned_at[m.sub_id]).total_seconds())
        raise IllegalMove(
            f"a no-show for {m.sub_id} {waited} s after its assignment is too early: its member "
            f"has {int(NO_SHOW_AFTER.total_seconds())} s to answer (declare it from "
            f"{due:%Y-%m-%dT%H:%M:%SZ})"
        )
    assignee = c.assignees[m.sub_id]
    failed = Result(m.sub_id, False, (), f"no-show: {assignee} did not answer in time")
    no_shows = (*c.no_shows, m.sub_id)
    if blocked:
        return _next(
            c, m, _AFTER_RESULT, blocked_on=None, results=(*c.results, failed), no_shows=no_shows
        )
    remaining = {k: v for k, v in c.triggers.items() if k != m.sub_id}
    allowed: tuple[ConversationState, ...] = ("pause_trigger",) if remaining else _AFTER_RESULT
    return _next(c, m, allowed, triggers=remaining, results=(*c.results, failed), no_shows=no_shows)


def check_answered(c: Conversation, member: str, body: Mapping[str, Any]) -> None:
    """Pure: whether `member`'s `WORK_ANSWERED` receipt (its `body`) is one the service logs:
    for an assignment outstanding to `member` in `c`, once.

    Raises IllegalMove naming what does not hold."""
    sub_id = body.get("sub_id")
    if set(body) != {"conversation", "sub_id"} or body["conversation"] != c.conv_id:
        raise IllegalMove(f'a {WORK_ANSWERED} body is {{"conversation", "sub_id"}} of its subject')
    if sub_id not in _outstanding(c) or c.assignees.get(str(sub_id)) != member:
        raise IllegalMove(f"{sub_id} is not outstanding to {member} in {c.conv_id}")
    if sub_id in c.answered:
        raise IllegalMove(f"{member} logged that it answered {sub_id} already")


def answered(c: Conversation, index: int, member: str, body: Mapping[str, Any]) -> Conversation:
    """Pure: `c` after `member`'s `WORK_ANSWERED` entry `index` (its `body`): a receipt
    `check_answered` admits is remembered; any other (one that lost a race with the report it
    would have preceded, say) changes nothing."""
    try:
        check_answered(c, member, body)
    except IllegalMove:
        return c
    return replace(c, answered={**c.answered, str(body["sub_id"]): index})


def _signature(contribution: Contribution) -> tuple[str, str, str, str, str]:
    """A contribution compared whole: who, which piece, which capability and part, and the
    commitment to what it answered."""
    c = contribution
    return (c.agent, c.sub_id, c.capability, c.part, c.output_sha256)


def _conclude(c: Conversation, m: Conclude) -> Conversation:
    _expect_state(c, "a conclusion", "conclusion")
    if m.speaker != c.leader:
        raise IllegalMove("only the leader concludes")
    _expect_speaker(c, m)
    expected = sorted(
        _signature(x) for result in c.results if result.ok for x in result.contributions
    )
    given = sorted(_signature(x) for x in m.deliverable.contributions)
    if given != expected:
        raise IllegalMove("the deliverable must hold exactly the contributions reported")
    return _next(c, m, ("closed",), deliverable=m.deliverable)


# -- wire form -------------------------------------------------------------------------------


def message_to_json(message: Message) -> dict[str, JSON]:
    """The JSON body of a `conversation.message` event."""
    head: dict[str, JSON] = {
        "speaker": message.speaker,
        "next_state": message.next_state,
        "next_speaker": message.next_speaker,
    }
    match message:
        case Discuss(text=text):
            return {"kind": "discuss", **head, "text": text}
        case AssignSync(assignee=assignee, task=task):
            return {"kind": "assign_sync", **head, "assignee": assignee, "task": task.to_json()}
        case AssignAsync(assignments=assignments):
            return {
                "kind": "assign_async",
                **head,
                "assignments": [{"assignee": a, "task": t.to_json()} for a, t in assignments],
            }
        case Report(result=result):
            return {"kind": "report", **head, "result": result.to_json()}
        case Abandon(sub_id=sub_id, reason=reason):
            return {"kind": "abandon", **head, "sub_id": sub_id, "reason": reason}
        case NoShow(sub_id=sub_id):
            return {"kind": "no_show", **head, "sub_id": sub_id}
        case Conclude(deliverable=deliverable):
            return {"kind": "conclude", **head, "deliverable": deliverable.to_json()}


def message_from_json(value: Mapping[str, JSON]) -> Message:
    """Parse a message body. Raises IllegalMove for anything that is not a message."""
    try:
        kind = value["kind"]
        speaker = value["speaker"]
        if not isinstance(speaker, str) or not speaker:
            raise IllegalMove("a message names its speaker")
        state = value["next_state"]
        if state not in STATES:
            raise IllegalMove(f"unknown state {state!r}")
        nxt = value["next_speaker"]
        if nxt is not None and not isinstance(nxt, str):
            raise IllegalMove("the next speaker is a DID or null")
        match kind:
            case "discuss":
                return Discuss(speaker, str(value["text"]), state, nxt)
            case "assign_sync":
                return AssignSync(
                    speaker, str(value["assignee"]), SubTask.from_json(value["task"]), state, nxt
                )
            case "assign_async":
                pairs = tuple(
                    (str(a["assignee"]), SubTask.from_json(a["task"])) for a in value["assignments"]
                )
                return AssignAsync(speaker, pairs, state, nxt)
            case "report":
                return Report(speaker, Result.from_json(value["result"]), state, nxt)
            case "abandon":
                return Abandon(speaker, str(value["sub_id"]), str(value["reason"]), state, nxt)
            case "no_show":
                return NoShow(speaker, str(value["sub_id"]), state, nxt)
            case "conclude":
                return Conclude(speaker, Deliverable.from_json(value["deliverable"]), state, nxt)
            case _:
                raise IllegalMove(f"unknown message kind {kind!r}")
    except (KeyError, TypeError, ValueError) as exc:
        raise IllegalMove(f"not a message: {exc!r}") from exc


# -- replaying a logged conversation ---------------------------------------------------------


@dataclass(frozen=True)
class LoggedMessage:
    index: int
    turn: int
    message: Message
    at: str = ""
    """The time the entry is dated with (its signer's, within the service's skew)."""


@dataclass(frozen=True)
class ConversationRecord:
    """A conversation as replayed from the ledger."""

    conversation: Conversation
    messages: tuple[LoggedMessage, ...]
    opened_index: int
    title: str

    def to_json(self) -> dict[str, object]:
        c = self.conversation
        return {
            "conv_id": c.conv_id,
            "task_id": c.task_id,
            "parent": c.parent,
            "depth": c.depth,
            "state": c.state,
            "leader": c.leader,
            "members": list(c.members),
            "turns": c.turn,
            "title": self.title,
        }


def conversation_from_events(
    conv_id: str, events: Iterable[tuple[int, Event]], *, max_depth: int = 8
) -> ConversationRecord:
    """Replay conversation `conv_id` through the state machine from its verified events, each
    with its log index, in log order (events of other subjects and kinds are skipped). Pure:
    the caller reads the entries and checks their signatures; the events are consumed in
    order, so a lazy caller's error for a later entry comes after this one's for an earlier.

    Raises IllegalMove naming the entry when the first event is not the opening, the opening
    is not the leader's, a message breaks the transition table, is not signed by its
    speaker or is out of turn; CoordinatorError when there are no events. A `WORK_ANSWERED`
    receipt is folded in by `answered`.
    """
    kinds = (CONVERSATION_OPENED, CONVERSATION_MESSAGE, WORK_ANSWERED)
    logged = ((i, e) for i, e in events if e.subject == conv_id and e.kind in kinds)
    first = next(logged, None)
    if first is None:
        raise CoordinatorError(f"no conversation {conv_id!r} (see `accord conversation list`)")
    opened_index, opened = first
    if opened.kind != CONVERSATION_OPENED:
        raise IllegalMove(f"entry {opened_index}: {conv_id} does not start with its opening")
    body = opened.body
    conversation = open_conversation(
        conv_id,
        str(body["task"]),
        str(body["leader"]),
        tuple(body["members"]),
        parent=body["parent"],
        depth=int(body["depth"]),
        max_depth=max_depth,
        max_turns=int(body["max_turns"]),
    )
    if opened.actor != conversation.leader:
        raise IllegalMove(f"entry {opened_index}: opened by someone else than its leader")
    record = ConversationRecord(conversation, (), opened_index, str(body.get("title", "")))
    return continue_conversation(record, logged)


def continue_conversation(
    record: ConversationRecord, events: Iterable[tuple[int, Event]]
) -> ConversationRecord:
    """`record` with the conversation's verified events after it folded in, each with its log
    index, in log order (events of other subjects and kinds are skipped): so a replay goes on
    from the last state it verified instead of from the opening (`conversation_from_events`
    is the opening, then this). Pure; raises IllegalMove as `conversation_from_events` does
    (a second opening included)."""
    conv_id = record.conversation.conv_id
    kinds = (CONVERSATION_OPENED, CONVERSATION_MESSAGE, WORK_ANSWERED)
    conversation = record.conversation
    messages = list(record.messages)
    for index, event in events:
        if event.subject != conv_id or event.kind not in kinds:
            continue
        if event.kind == WORK_ANSWERED:
            conversation = answered(conversation, index, event.actor, event.body)
            continue
        if event.kind != CONVERSATION_MESSAGE:
            raise IllegalMove(f"entry {index}: {conv_id} is opened twice")
        message = message_from_json(event.body["message"])
        if event.actor != message.speaker:
            raise IllegalMove(f"entry {index}: signed by {event.actor}, not its speaker")
        if int(event.body["turn"]) != conversation.turn:
            raise IllegalMove(f"entry {index}: turn {event.body['turn']} out of order")
        try:
            conversation = step(conversation, message, at=parse_time(event.at))
        except IllegalMove as exc:
            raise IllegalMove(f"entry {index}: {exc.reason}") from exc
        messages.append(LoggedMessage(index, int(event.body["turn"]), message, event.at))
    return replace(record, conversation=conversation, messages=tuple(messages))


def check_sub_team(
    parent: Conversation, speaker: str, result: Result, child: Conversation | None
) -> None:
    """A report that brings up a sub-team's work (`result.team`) brings exactly the conclusion of
    the conversation its speaker led for it, one level below `parent`, for the same task: so
    every contribution is still its producer's own report there.

    Raises IllegalMove naming what does not hold."""
    if result.team is None:
        return
    if child is None:
        raise IllegalMove(f"the report names sub-team {result.team}, which is not logged")
    if child.parent != parent.conv_id or child.task_id != parent.task_id:
        raise IllegalMove(f"{child.conv_id} is not a sub-team of {parent.conv_id}")
    if child.leader != speaker:
        raise IllegalMove(f"{child.conv_id} is led by {child.leader}, not by {speaker}")
    if child.deliverable is None:
        raise IllegalMove(f"sub-team {child.conv_id} has not concluded")
    given = sorted(_signature(x) for x in result.contributions)
    if given != sorted(_signature(x) for x in child.deliverable.contributions):
        raise IllegalMove(f"the report is not what sub-team {child.conv_id} concluded")


def check_report_in_task(
    records: Iterable[ConversationRecord], conversation: Conversation, report: Report
) -> None:
    """Pure: `report`, about to be logged in `conversation`, against the task's conversations as
    replayed so far (`records`): a sub-team's work is exactly that sub-team's conclusion
    (`check_sub_team`), and the speaker's own work names no part anyone reported before in
    any conversation of the task.

    Raises IllegalMove naming what does not hold."""
    records = list(records)
    result = report.result
    if result.team is not None:
        child = next(
            (r.conversation for r in records if r.conversation.conv_id == result.team), None
        )
        check_sub_team(conversation, report.speaker, result, child)
        return
    reported = _leaf_reports(records)
    for contribution in result.contributions:
        if contribution.part in reported:
            raise IllegalMove(
                f"part {contribution.part} was already reported at entry "
                f"{reported[contribution.part]}: an output reported once is never reported again"
            )


def _leaf_reports(records: Iterable[ConversationRecord]) -> dict[str, int]:
    """Each part a producer reported as its own work, with the entry of that report."""
    found: dict[str, int] = {}
    for record in records:
        for logged in record.messages:
            message = logged.message
            if isinstance(message, Report) and message.result.team is None:
                for contribution in message.result.contributions:
                    found.setdefault(contribution.part, logged.index)
    return found


def check_task_reports(records: Iterable[ConversationRecord]) -> None:
    """Pure: the conversations of one task, as replayed, hold each part to one producer's own
    report: every report that names a sub-team brings exactly that sub-team's conclusion
    (`check_sub_team`), and no part is reported as its producer's own work twice, in one
    conversation or two, so an output a member reported is never reported again by anyone.

    Raises IllegalMove naming the entry of the first report that breaks this."""
    records = list(records)
    by_id = {r.conversation.conv_id: r.conversation for r in records}
    reports = sorted(
        (
            (logged.index, record.conversation, logged.message)
            for record in records
            for logged in record.messages
            if isinstance(logged.message, Report)
        ),
        key=lambda found: found[0],
    )
    reported: dict[str, int] = {}
    for index, conversation, message in reports:
        assert isinstance(message, Report)
        result = message.result
        try:
            check_sub_team(conversation, message.speaker, result, by_id.get(result.team or ""))
        except IllegalMove as exc:
            raise IllegalMove(f"entry {index}: {exc.reason}") from exc
        if result.team is not None:
            continue
        for contribution in result.contributions:
            first = reported.setdefault(contribution.part, index)
            if first != index:
                raise IllegalMove(
                    f"entry {index}: part {contribution.part} was already reported at entry {first}"
                )
