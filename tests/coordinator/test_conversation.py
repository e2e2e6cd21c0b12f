"""The conversation's transition table, checked exhaustively against an independent oracle.

`_explore` walks every conversation state reachable by legal moves from `open_conversation`
(breadth first, to a bounded depth, states deduplicated by what the table can see) and, at each
state, tries every message over a finite universe: each kind x each speaker (members and an
outsider) x each next state x each next speaker (members, an outsider, None) x payload variants
(fresh / already-assigned / unknown sub-task ids; assignees inside and outside the team; results
ok/failed, right/wrong sub_id, with/without the reporter's own contribution, inconsistent ok
flags, contributions naming another sub-task; deliverables with exactly / not exactly the
reported contributions). Each message is judged by `_oracle`, written here from the table in
`accord.coordinator.conversation`'s docstring (it never calls `step`): a legal move must be accepted
with the predicted next state, speaker, turn and bookkeeping; an illegal one must raise
`IllegalMove` with a reason.

Coverage (measured when this was written; `test_transition_table_exhaustive` asserts lower
bounds): three members (leader + 2), 64-turn limit, BFS depth 4 (states told apart without the
turn) -> 299 states, 2,016,120 pairs, 5,787 legal; two members, a 4-turn limit, walked to
exhaustion (every reachable state, turn included, so the turn limit bites) -> 189 states,
657,432 pairs, 465 legal. About 2.7 million (state, message) pairs, ~10 s CPU, two thirds of it
in `step` (the universe of a state is built once per distinct one, the oracle dispatches on the
message's type). (Depth 5 with three members is 15.4 million pairs: too slow for the suite.)
"""

from __future__ import annotations

import functools
import json
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accord.coordinator.conversation import (
    NO_SHOW_AFTER,
    STATES,
    Abandon,
    AssignAsync,
    AssignSync,
    Conclude,
    Contribution,
    Conversation,
    Deliverable,
    Discuss,
    Message,
    NoShow,
    Report,
    Result,
    assign_sync,
    message_from_json,
    message_to_json,
    open_conversation,
    step,
)
from accord.coordinator.errors import IllegalMove
from accord.coordinator.policy import Member, RulePolicy, TeamView
from accord.coordinator.work import SubTask
from accord.ledger.sealing import seal

LEADER = "did:L"
OUTSIDER = "did:X"
SUBTEAM = "did:sub"  # an agent of a member's sub-team: never a member of this conversation
UNKNOWN_SUB = "zz"  # a sub-task id never assigned
SALT = "0" * 32  # a fixed salt, so a contribution is the same value each time it is built

AFTER_RESULT = frozenset({"discussion", "sync_task_assign", "async_task_assign", "conclusion"})
AFTER_DISCUSSION = AFTER_RESULT | {"pause_trigger"}  # when a trigger is pending
AFTER_ASYNC = frozenset({"discussion", "sync_task_assign", "async_task_assign", "pause_trigger"})
PAUSE = frozenset({"pause_trigger"})
CLOSED = frozenset({"closed"})


@functools.cache
def _task(sub_id: str) -> SubTask:
    return SubTask(sub_id, "cap", f"do {sub_id}", {"q": sub_id})


@functools.cache
def _contrib(agent: str, sub_id: str) -> Contribution:
    return Contribution(agent, sub_id, "cap", sub_id, seal(f"{agent}/{sub_id}", SALT).commitment)


# -- the oracle --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Model:
    """What the table can see of a conversation."""

    members: tuple[str, ...]
    max_turns: int
    state: str
    speaker: str | None
    turn: int
    blocked: tuple[str, str] | None
    triggers: frozenset[tuple[str, str]]  # (sub_id, assignee)
    assigned: frozenset[str]
    tags: tuple[tuple[str, str], ...]  # sorted (agent, sub_id) of every successful contribution
    n_results: int
    abandoned: frozenset[str] = frozenset()  # sub-tasks the leader gave up on its own word

    @property
    def leader(self) -> str:
        return LEADER

    def key(self, with_turn: bool) -> tuple[object, ...]:
        return (
            self.state,
            self.speaker,
            self.turn if with_turn else None,
            self.blocked,
            self.triggers,
            self.assigned,
            self.tags,
            self.n_results,
            self.abandoned,
        )


def _model_of(c: Conversation) -> Model:
    return Model(
        members=c.members,
        max_turns=c.max_turns,
        state=c.state,
        speaker=c.speaker,
        turn=c.turn,
        blocked=c.blocked_on,
        triggers=frozenset(c.triggers.items()),
        assigned=frozenset(c.assigned),
        tags=tuple(sorted((x.agent, x.sub_id) for r in c.results if r.ok for x in r.contributions)),
        n_results=len(c.results),
        abandoned=frozenset(c.abandoned),
    )


def _result_ok(m: Model, speaker: str, result: Result) -> bool:
    """A result is well-formed: for an assigned sub-task, contributions iff ok, each naming that
    sub-task or a piece of it, the speaker as its producer (unless the result names the sub-team
    conversation it comes from: another rule, across conversations, holds it to that), a part of
    the sub-task (here each sub-task is one part, its own id), each part once and none done."""
    if result.sub_id not in m.assigned:
        return False
    if result.ok != bool(result.contributions):
        return False
    if result.team is not None and not result.ok:
        return False
    done = {sub for _, sub in m.tags}
    seen: set[str] = set()
    for x in result.contributions:
        # A member may bring its sub-team's work: `s1/0` is a piece of `s1`, `s10` is not.
        if not (x.sub_id == result.sub_id or x.sub_id.startswith(result.sub_id + "/")):
            return False
        if result.team is None and x.agent != speaker:
            return False
        if x.part != result.sub_id or x.part in seen or x.part in done:
            return False
        seen.add(x.part)
    return True


def _oracle(m: Model, msg: Message) -> Model | None:
    """The next model if the table allows `msg` in `m`, else None."""
    if m.state == "closed" or msg.speaker not in m.members:
        return None
    last_turn = m.turn == m.max_turns - 1
    if m.turn >= m.max_turns or (last_turn and not isinstance(msg, Conclude)):
        return None
    # One rule per kind of message (dispatched on its type: the ~2.7 million pairs of the walk
    # make a chain of isinstance tests a measurable share of the test).
    rule: Callable[[Model, Any], Model | None] = _RULES[type(msg)]
    return rule(m, msg)


def _discuss(m: Model, msg: Discuss) -> Model | None:
    if m.state != "discussion" or msg.speaker != m.speaker:
        return None
    allowed = AFTER_DISCUSSION if m.triggers else AFTER_RESULT
    return _lead(m, msg, allowed, m.triggers, m.blocked)


def _assign_sync(m: Model, msg: AssignSync) -> Model | None:
    if m.state != "sync_task_assign" or msg.speaker != m.speaker or m.blocked:
        return None
    if msg.assignee not in m.members or msg.task.sub_id in m.assigned:
        return None
    # Blocked: the assignee speaks next, the state stays.
    if msg.next_state != "sync_task_assign" or msg.next_speaker != msg.assignee:
        return None
    return _advance(
        m,
        speaker=msg.assignee,
        blocked=(msg.task.sub_id, msg.assignee),
        assigned=m.assigned | {msg.task.sub_id},
    )


def _assign_async(m: Model, msg: AssignAsync) -> Model | None:
    if m.state != "async_task_assign" or msg.speaker != m.speaker or not msg.assignments:
        return None
    ids = [t.sub_id for _, t in msg.assignments]
    if len(set(ids)) != len(ids) or set(ids) & m.assigned:
        return None
    if any(a not in m.members for a, _ in msg.assignments):
        return None
    triggers = m.triggers | {(t.sub_id, a) for a, t in msg.assignments}
    return _lead(m, msg, AFTER_ASYNC, triggers, m.blocked, assigned=m.assigned | set(ids))


def _report(m: Model, msg: Report) -> Model | None:
    r = msg.result
    triggers, blocked = m.triggers, m.blocked
    if m.state == "sync_task_assign":
        if m.blocked is None or (r.sub_id, msg.speaker) != m.blocked:
            return None
        blocked = None
        allowed = AFTER_RESULT
    elif m.state == "pause_trigger":
        if msg.speaker != m.speaker or (r.sub_id, msg.speaker) not in m.triggers:
            return None
        triggers = m.triggers - {(r.sub_id, msg.speaker)}
        allowed = PAUSE if triggers else AFTER_RESULT
    else:
        return None
    if not _result_ok(m, msg.speaker, r):
        return None
    new_tags = [(x.agent, x.sub_id) for x in r.contributions] if r.ok else []
    tags = tuple(sorted([*m.tags, *new_tags]))
    return _lead(m, msg, allowed, triggers, blocked, tags=tags, n_results=m.n_results + 1)


def _abandon(m: Model, msg: Abandon) -> Model | None:
    if msg.speaker != m.leader:
        return None
    triggers, blocked = m.triggers, m.blocked
    if m.state == "sync_task_assign" and m.blocked and m.blocked[0] == msg.sub_id:
        blocked = None
        allowed = AFTER_RESULT
    elif m.state == "pause_trigger" and msg.sub_id in {s for s, _ in m.triggers}:
        triggers = frozenset(t for t in m.triggers if t[0] != msg.sub_id)
        allowed = PAUSE if triggers else AFTER_RESULT
    else:
        return None
    abandoned = m.abandoned | {msg.sub_id}
    return _lead(m, msg, allowed, triggers, blocked, n_results=m.n_results + 1, abandoned=abandoned)


def _conclude(m: Model, msg: Conclude) -> Model | None:
    if m.state != "conclusion" or msg.speaker != m.leader or msg.speaker != m.speaker:
        return None
    given_tags = tuple(sorted((x.agent, x.sub_id) for x in msg.deliverable.contributions))
    if given_tags != m.tags:
        return None
    return _lead(m, msg, CLOSED, m.triggers, m.blocked)


def _lead(
    m: Model,
    msg: Message,
    allowed: frozenset[str],
    triggers: frozenset[tuple[str, str]],
    blocked: tuple[str, str] | None,
    **changes: Any,
) -> Model | None:
    """Where the message leads: its next state must be `allowed`, its next speaker fit it."""
    state, speaker = msg.next_state, msg.next_speaker
    if state not in allowed:
        return None
    if state == "pause_trigger":
        if speaker not in {a for _, a in triggers}:
            return None
    elif state == "conclusion":
        if triggers or blocked or speaker != m.leader:
            return None
    elif state == "closed":
        if speaker is not None:
            return None
    elif speaker not in m.members:
        return None
    return _advance(m, state=state, speaker=speaker, triggers=triggers, blocked=blocked, **changes)


_RULES: dict[type, Callable[[Model, Any], Model | None]] = {
    Discuss: _discuss,
    AssignSync: _assign_sync,
    AssignAsync: _assign_async,
    Report: _report,
    Abandon: _abandon,
    Conclude: _conclude,
}


def _advance(m: Model, **changes: Any) -> Model:
    fields = {**m.__dict__, **changes, "turn": m.turn + 1}
    return Model(**fields)


# -- the message universe ----------------------------------------------------------------------


def _universe(m: Model) -> tuple[Message, ...]:
    """Every message tried in `m`. It depends only on the members, the assigned sub-tasks and the
    reported contributions, which few states differ in (38 universes serve the 520 states of
    both walks), so each is built once and reused: messages are immutable values."""
    return _universe_of(m.members, m.assigned, m.tags)


@functools.cache
def _universe_of(
    members: tuple[str, ...], assigned: frozenset[str], tags: tuple[tuple[str, str], ...]
) -> tuple[Message, ...]:
    return tuple(_messages(members, assigned, tags))


def _messages(
    members: tuple[str, ...], assigned: frozenset[str], tags: tuple[tuple[str, str], ...]
) -> Iterator[Message]:
    speakers = (*members, OUTSIDER)
    next_speakers: tuple[str | None, ...] = (*members, OUTSIDER, None)
    n = len(assigned)
    fresh, fresh2 = f"s{n}", f"s{n + 1}"
    old = sorted(assigned)
    old1 = old[:1]
    report_ids = [*old, UNKNOWN_SUB]
    others = [a for a in members if a != LEADER]

    def targets() -> Iterator[tuple[Any, str | None]]:
        for state in STATES:
            for who in next_speakers:
                yield state, who

    async_variants: list[tuple[tuple[str, SubTask], ...]] = [()]
    for assignee in speakers:
        for sub in [fresh, *old1]:
            async_variants.append(((assignee, _task(sub)),))
    async_variants.append(((others[0], _task(fresh)), (LEADER, _task(fresh2))))
    async_variants.append(((others[0], _task(fresh)), (LEADER, _task(fresh))))  # id twice
    sync_variants = [(assignee, _task(sub)) for assignee in speakers for sub in [fresh, *old1]]
    deliverables = _deliverables(tags)
    for speaker in speakers:
        other = next(a for a in members if a != speaker)
        results = [
            variant
            for sub in report_ids
            for variant in (
                Result(sub, True, (_contrib(speaker, sub),)),  # own work
                Result(sub, True, (_contrib(speaker, sub), _contrib(SUBTEAM, sub))),  # + team
                Result(sub, True, (_contrib(SUBTEAM, sub),), team="c9"),  # a sub-team's work
                Result(sub, True, (_contrib(other, sub),)),  # without the reporter
                Result(sub, True, ()),  # ok but empty
                Result(sub, False, (), "boom"),  # failed
                Result(sub, False, (_contrib(speaker, sub),), "boom"),  # failed, not empty
                Result(sub, True, (_contrib(speaker, "elsewhere"),)),  # another sub-task
                Result(sub, True, (_contrib(SUBTEAM, f"{sub}/0"),)),  # a part, by a sub-team
                Result(sub, True, (_contrib(speaker, f"{sub}0"),)),  # a prefix, not a part
            )
        ]
        for state, who in targets():
            yield Discuss(speaker, "hello", state, who)
            for assignee, task in sync_variants:
                yield AssignSync(speaker, assignee, task, state, who)
            for assignments in async_variants:
                yield AssignAsync(speaker, assignments, state, who)
            for result in results:
                yield Report(speaker, result, state, who)
            for sub in report_ids:
                yield Abandon(speaker, sub, "timeout", state, who)
            for deliverable in deliverables:
                yield Conclude(speaker, deliverable, state, who)


def _deliverables(tags: tuple[tuple[str, str], ...]) -> list[Deliverable]:
    exact = [_contrib(a, s) for a, s in tags]
    variants = [exact, exact[::-1], [*exact, _contrib(LEADER, "s0")]]
    if exact:
        first = exact[0]
        variants += [
            exact[1:],  # missing one
            [*exact, first],  # one twice
            [_contrib(OUTSIDER, first.sub_id), *exact[1:]],  # wrong agent
        ]
    else:
        variants.append([_contrib(LEADER, UNKNOWN_SUB)])
    return [Deliverable("done", tuple(v)) for v in variants]


# -- the walk ----------------------------------------------------------------------------------


def _explore(
    members: tuple[str, ...], max_turns: int, depth: int
) -> tuple[int, int, int, list[str], set[str]]:
    """BFS over reachable states; returns (states, pairs checked, legal pairs, disagreements,
    the conversation states reached).

    States are told apart by what the table sees; the turn counts only when the turn limit is
    within reach of the walk."""
    with_turn = max_turns <= depth + 1
    start = open_conversation("c1", "t1", LEADER, members, max_turns=max_turns)
    seen = {_model_of(start).key(with_turn)}
    frontier: deque[tuple[Conversation, int]] = deque([(start, 0)])
    states = pairs = legal = 0
    wrong: list[str] = []
    reached: set[str] = set()
    while frontier:
        conv, d = frontier.popleft()
        model = _model_of(conv)
        states += 1
        reached.add(conv.state)
        messages = _universe(model)
        pairs += len(messages)
        for msg in messages:
            expected = _oracle(model, msg)
            try:
                after = step(conv, msg)
            except IllegalMove as exc:
                if expected is not None:
                    wrong.append(f"refused a legal move in {model}: {msg}: {exc.reason}")
                elif not exc.reason:
                    wrong.append(f"refused without a reason in {model}: {msg}")
                continue
            if expected is None:
                wrong.append(f"accepted an illegal move in {model}: {msg}")
                continue
            legal += 1
            reached.add(after.state)
            got = _model_of(after)
            if got != expected:
                wrong.append(f"wrong successor in {model}: {msg}: {got} != {expected}")
            elif d + 1 < depth and got.key(with_turn) not in seen:
                seen.add(got.key(with_turn))
                frontier.append((after, d + 1))
    return states, pairs, legal, wrong, reached


def test_transition_table_exhaustive() -> None:
    """Every (state, message) pair of both walks agrees with the oracle, and each walk is rich
    enough to reach every state, closed included (so no state's rows go unchecked)."""
    states, pairs, legal, wrong, reached = _explore((LEADER, "did:A", "did:B"), 64, 4)
    assert not wrong, "\n".join(wrong[:20])
    states2, pairs2, legal2, wrong2, reached2 = _explore((LEADER, "did:A"), 4, 99)
    assert not wrong2, "\n".join(wrong2[:20])
    assert states >= 290 and pairs >= 2_000_000 and legal >= 5_500
    assert states2 >= 180 and pairs2 >= 650_000 and legal2 >= 450
    assert reached == reached2 == set(STATES)


# -- the turn limit and the depth limit --------------------------------------------------------


def _to_conclusion(max_turns: int, turns: int) -> Conversation:
    c = open_conversation("c", "t", LEADER, (LEADER, "did:A"), max_turns=max_turns)
    for _ in range(turns):
        c = step(c, Discuss(LEADER, "x", "discussion", LEADER))
    return step(c, Discuss(LEADER, "x", "conclusion", LEADER))


def test_only_conclude_may_use_the_last_turn() -> None:
    c = _to_conclusion(4, 1)  # turn 2: one before the last
    assert c.turn == 2
    c = step(c, Conclude(LEADER, Deliverable("nothing", ())))
    assert c.state == "closed" and c.turn == 3

    c = open_conversation("c", "t", LEADER, (LEADER, "did:A"), max_turns=3)
    c = step(c, Discuss(LEADER, "x", "discussion", LEADER))
    c = step(c, Discuss(LEADER, "x", "discussion", LEADER))
    assert c.turn == 2  # the last turn
    with pytest.raises(IllegalMove, match="turn limit"):
        step(c, Discuss(LEADER, "x", "conclusion", LEADER))
    # Reaching conclusion on the turn before the last leaves the last one for Conclude.
    c = _to_conclusion(3, 1)
    assert c.turn == 2 and c.state == "conclusion"
    assert step(c, Conclude(LEADER, Deliverable("-", ()))).state == "closed"


def test_closed_refuses_everything() -> None:
    c = step(_to_conclusion(10, 0), Conclude(LEADER, Deliverable("-", ())))
    with pytest.raises(IllegalMove, match="closed"):
        step(c, Discuss(LEADER, "x", "discussion", LEADER))


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_depth_within_the_limit_opens(depth: int) -> None:
    c = open_conversation("c", "t", LEADER, (LEADER,), depth=depth, max_depth=2, parent="p")
    assert c.state == "discussion" and c.speaker == LEADER and c.depth == depth


@pytest.mark.parametrize("depth", [-1, 3, 10])
def test_depth_beyond_the_limit_is_refused(depth: int) -> None:
    with pytest.raises(IllegalMove, match="depth"):
        open_conversation("c", "t", LEADER, (LEADER,), depth=depth, max_depth=2)


def test_open_conversation_checks_the_team() -> None:
    with pytest.raises(IllegalMove, match="leader"):
        open_conversation("c", "t", LEADER, ("did:A",))
    with pytest.raises(IllegalMove, match="twice"):
        open_conversation("c", "t", LEADER, (LEADER, "did:A", "did:A"))
    with pytest.raises(IllegalMove, match="two turns"):
        open_conversation("c", "t", LEADER, (LEADER,), max_turns=1)


# -- the wire form -----------------------------------------------------------------------------

_ids = st.text(st.characters(codec="utf-8"), min_size=1, max_size=8)
_json: st.SearchStrategy[Any] = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _ids,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_ids, inner, max_size=3),
    max_leaves=8,
)
_state = st.sampled_from(STATES)
_who = st.none() | _ids
_subtask = st.builds(SubTask, _ids, _ids, _ids, st.dictionaries(_ids, _json, max_size=3))
_commitment = st.text(alphabet="0123456789abcdef", min_size=64, max_size=64)
_contribution = st.builds(Contribution, _ids, _ids, _ids, _ids, _commitment)
_result = st.builds(
    Result,
    _ids,
    st.booleans(),
    st.tuples() | st.lists(_contribution, max_size=3).map(tuple),
    st.none() | _ids,
    st.none() | _ids,
)
_deliverable = st.builds(Deliverable, _ids, st.lists(_contribution, max_size=3).map(tuple))
_message: st.SearchStrategy[Message] = st.one_of(
    st.builds(Discuss, _ids, _ids, _state, _who),
    st.builds(AssignSync, _ids, _ids, _subtask, _state, _who),
    st.builds(assign_sync, _ids, _ids, _subtask),
    st.builds(
        AssignAsync, _ids, st.lists(st.tuples(_ids, _subtask), max_size=3).map(tuple), _state, _who
    ),
    st.builds(Report, _ids, _result, _state, _who),
    st.builds(Abandon, _ids, _ids, _ids, _state, _who),
    st.builds(NoShow, _ids, _ids, _state, _who),
    st.builds(Conclude, _ids, _deliverable, _state, _who),
)


@settings(max_examples=300)
@given(_message)
def test_wire_round_trip(message: Message) -> None:
    body = message_to_json(message)
    assert message_from_json(body) == message
    # ...and through real JSON text, as the ledger stores it.
    assert message_from_json(json.loads(json.dumps(body))) == message


def test_round_trip_covers_every_kind() -> None:
    kinds = {
        message_to_json(m)["kind"]
        for m in (
            Discuss("a", "t", "discussion", "a"),
            assign_sync("a", "b", _task("s")),
            AssignAsync("a", (("b", _task("s")),), "pause_trigger", "b"),
            Report("b", Result("s", True, (_contrib("b", "s"),)), "discussion", "a"),
            Abandon("a", "s", "why", "discussion", "a"),
            NoShow("a", "s", "discussion", "a"),
            Conclude("a", Deliverable("d", ())),
        )
    }
    assert kinds == {
        "discuss",
        "assign_sync",
        "assign_async",
        "report",
        "abandon",
        "no_show",
        "conclude",
    }


_GOOD = message_to_json(Discuss("a", "t", "discussion", "a"))


@pytest.mark.parametrize(
    "body",
    [
        {},
        [],
        "discuss",
        None,
        42,
        {**_GOOD, "kind": "shout"},
        {**_GOOD, "kind": None},
        {**_GOOD, "next_state": "limbo"},
        {**_GOOD, "next_state": ["discussion"]},
        {k: v for k, v in _GOOD.items() if k != "next_speaker"},
        {k: v for k, v in _GOOD.items() if k != "speaker"},
        {k: v for k, v in _GOOD.items() if k != "text"},
        {**_GOOD, "kind": "assign_sync", "assignee": "b"},
        {**_GOOD, "kind": "assign_sync", "assignee": "b", "task": {"sub_id": "s"}},
        {**_GOOD, "kind": "assign_sync", "assignee": "b", "task": "s"},
        {**_GOOD, "kind": "assign_async", "assignments": "xy"},
        {**_GOOD, "kind": "assign_async", "assignments": [{"assignee": "b"}]},
        {**_GOOD, "kind": "assign_async", "assignments": 3},
        {**_GOOD, "kind": "report", "result": {"sub_id": "s", "ok": True}},
        {**_GOOD, "kind": "report", "result": {"sub_id": "s", "ok": True, "contributions": 1}},
        {**_GOOD, "kind": "report", "result": {"sub_id": "s", "ok": 1, "contributions": [1]}},
        {**_GOOD, "kind": "report", "result": []},
        {**_GOOD, "kind": "abandon", "sub_id": "s"},
        {**_GOOD, "kind": "conclude", "deliverable": {"summary": "x"}},
        {**_GOOD, "kind": "conclude", "deliverable": {"summary": "x", "contributions": [{}]}},
        {**_GOOD, "kind": "conclude", "deliverable": None},
    ],
)
def test_garbage_bodies_are_refused(body: Any) -> None:
    with pytest.raises(IllegalMove):
        message_from_json(body)


# -- a whole conversation driven by the rule policy --------------------------------------------

TEAM = (
    Member(LEADER, "lead", ("plan",)),
    Member("did:A", "a", ("sum",), "3/4"),
    Member("did:B", "b", ("sum", "sort"), "1/2"),
    Member("did:C", "c", ("sort",), "1/4"),
)
WORK = (
    SubTask("s1", "sum", "add", {"xs": [1, 2]}),
    SubTask("s2", "sort", "sort", {"xs": [3, 1]}),
    SubTask("s3", "sum", "add", {"xs": [5, 5]}),
)


OPENED: dict[str, Any] = {}
"""The answers `_run`'s members gave, by the commitment their reports name."""


def _answer(task: SubTask) -> Any:
    xs = task.item["xs"]
    return sum(xs) if task.capability == "sum" else sorted(xs)


def _run(fail: frozenset[str] = frozenset()) -> tuple[Conversation, list[Message]]:
    """Drive the conversation: the policy speaks for the leader, members report synthetic work;
    a member in `fail` fails its first sub-task (the leader abandons it and reassigns)."""
    policy = RulePolicy()
    c = open_conversation("c1", "t1", LEADER, tuple(m.did for m in TEAM), max_turns=40)
    unassigned = list(WORK)
    failed_by: dict[str, tuple[str, ...]] = {}
    abandon: list[str] = []
    log: list[Message] = []
    for _ in range(40):
        if c.state == "closed":
            break
        member_turn = (c.blocked_on is not None and c.speaker == c.blocked_on[1]) or (
            c.state == "pause_trigger"
        )
        if member_turn and not abandon:
            if c.blocked_on is not None:
                sub_id, who = c.blocked_on
            else:
                who = c.speaker
                sub_id = next(k for k, v in c.triggers.items() if v == who)
            if who in fail and sub_id not in failed_by.get(sub_id.split("#")[0], ()):
                failed_by[sub_id.split("#")[0]] = (who,)
                abandon.append(sub_id)
                unassigned.append(SubTask(sub_id.split("#")[0] + "#2", *_fields(sub_id)))
                continue
            task = c.assigned[sub_id]
            sealed = seal(_answer(task))
            OPENED[sealed.commitment] = sealed.value
            contribution = Contribution(who, sub_id, task.capability, sub_id, sealed.commitment)
            result = Result(sub_id, True, (contribution,))
            view = TeamView(c, "t", "d", TEAM, tuple(unassigned), failed_by, ())
            state, nxt = RulePolicy()._after_result(view, exclude=sub_id)
            if c.state == "sync_task_assign" and state == "pause_trigger":
                state, nxt = "discussion", LEADER
            msg: Message = Report(who, result, state, nxt)
        else:
            view = TeamView(c, "t", "d", TEAM, tuple(unassigned), failed_by, tuple(abandon))
            msg = policy.decide(view)
            if isinstance(msg, Abandon):
                abandon.remove(msg.sub_id)
            if isinstance(msg, AssignSync):
                unassigned = [t for t in unassigned if t.sub_id != msg.task.sub_id]
            if isinstance(msg, AssignAsync):
                done = {t.sub_id for _, t in msg.assignments}
                unassigned = [t for t in unassigned if t.sub_id not in done]
        c = step(c, msg)
        log.append(msg)
    return c, log


def _fields(sub_id: str) -> tuple[str, str, Any]:
    task = next(t for t in WORK if t.sub_id == sub_id.split("#")[0])
    return task.capability, task.instruction, task.item


def test_rule_policy_conversation_closes_with_the_deliverable() -> None:
    c, log = _run()
    assert c.state == "closed" and c.speaker is None
    assert c.deliverable is not None
    got = {(x.agent, x.sub_id): OPENED[x.output_sha256] for x in c.deliverable.contributions}
    # Every sub-task done once, by a member holding its capability, with the right answer.
    assert {s: out for (_, s), out in got.items()} == {"s1": 3, "s2": [1, 3], "s3": 10}
    able = {m.did: m.capabilities for m in TEAM}
    work = {t.sub_id: t.capability for t in WORK}
    assert all(work[s] in able[agent] for agent, s in got)
    assert ("did:A", "s1") in got  # the sync one goes to the best-reputed summer
    assert c.deliverable.summary == "3 of 3 sub-tasks done"
    kinds = [type(m).__name__ for m in log]
    assert kinds[0] == "Discuss" and kinds[-1] == "Conclude"
    assert "AssignSync" in kinds and "AssignAsync" in kinds


def test_rule_policy_recovers_from_a_failing_member() -> None:
    c, log = _run(fail=frozenset({"did:A"}))
    assert c.state == "closed" and c.deliverable is not None
    tags = sorted((x.agent, x.sub_id) for x in c.deliverable.contributions)
    assert any(isinstance(m, Abandon) for m in log)
    # Every piece of work is done by somebody other than the member that failed it.
    assert {s.split("#")[0] for _, s in tags} == {"s1", "s2", "s3"}
    assert all(agent != "did:A" for agent, s in tags if "#" in s)


# -- defects a review found, each now refused -------------------------------------------------


def test_conclude_refuses_a_tampered_output() -> None:
    c = open_conversation("c", "t", LEADER, (LEADER, "did:A"))
    c = step(c, Discuss(LEADER, "x", "sync_task_assign", LEADER))
    c = step(c, assign_sync(LEADER, "did:A", _task("s0")))
    real = Contribution("did:A", "s0", "cap", "s0", seal(42, SALT).commitment)
    c = step(c, Report("did:A", Result("s0", True, (real,)), "conclusion", LEADER))
    forged = Contribution("did:A", "s0", "cap", "s0", seal(41, SALT).commitment)
    with pytest.raises(IllegalMove):
        step(c, Conclude(LEADER, Deliverable("done", (forged,))))


# -- who did what: each producer's own claim ---------------------------------------------------


def _part(sub_id: str, part: str) -> SubTask:
    """A sub-task `sub_id` covering part `part` (a retry shares its part under a new id)."""
    return SubTask(sub_id, "cap", f"do {part}", {"item_id": part})


def _own(agent: str, sub_id: str, part: str, value: object = 1) -> Contribution:
    return Contribution(agent, sub_id, "cap", part, seal(value, SALT).commitment)


def _assigned(*assignments: tuple[str, SubTask]) -> Conversation:
    c = open_conversation("c", "t", LEADER, (LEADER, "did:A", "did:B"))
    c = step(c, Discuss(LEADER, "x", "async_task_assign", LEADER))
    return step(c, AssignAsync(LEADER, assignments, "pause_trigger", assignments[0][0]))


def test_a_report_carries_only_its_speakers_own_work_on_its_own_parts() -> None:
    c = _assigned(("did:A", _part("s0", "p")))
    for result, why in (
        (Result("s0", True, (_own(LEADER, "s0", "p"),)), "names did:L as its producer"),
        (Result("s0", True, (_own("did:A", "s0", "q"),)), "part q is not in sub-task s0"),
        (
            Result("s0", True, (Contribution("did:A", "s0", "other", "p", "0" * 64),)),
            "part p is cap work, not other",
        ),
        (
            Result("s0", True, (_own("did:A", "s0", "p"), _own("did:A", "s0", "p", 2))),
            "part p is reported twice",
        ),
    ):
        with pytest.raises(IllegalMove, match=why):
            step(c, Report("did:A", result, "conclusion", LEADER))
    done = step(
        c, Report("did:A", Result("s0", True, (_own("did:A", "s0", "p"),)), "conclusion", LEADER)
    )
    assert done.results[-1].ok
    # a sub-team's work (others' contributions) comes up only under its conversation's id
    team = Result("s0", True, (_own("did:sub", "s0", "p"),), team="c-sub")
    assert step(c, Report("did:A", team, "conclusion", LEADER)).results[-1] == team


def test_a_part_is_given_to_one_member_at_a_time_and_never_once_done() -> None:
    c = _assigned(("did:A", _part("s0", "p")), ("did:B", _part("s1", "q")))
    c = step(c, Report("did:A", Result("s0", False, (), "could not"), "pause_trigger", "did:B"))
    with pytest.raises(IllegalMove, match="part q is already assigned"):
        step(
            replace(c, state="async_task_assign", speaker=LEADER),
            AssignAsync(LEADER, (("did:A", _part("s1#2", "q")),), "pause_trigger", "did:A"),
        )
    c = step(
        c,
        Report(
            "did:B", Result("s1", True, (_own("did:B", "s1", "q"),)), "async_task_assign", LEADER
        ),
    )
    # the member's own failure freed p; q is done
    c2 = step(c, AssignAsync(LEADER, (("did:B", _part("s0#2", "p")),), "pause_trigger", "did:B"))
    assert c2.assignees["s0#2"] == "did:B"
    with pytest.raises(IllegalMove, match="part q is already done by did:B"):
        step(c, AssignAsync(LEADER, (("did:A", _part("s1#2", "q")),), "pause_trigger", "did:A"))


def test_a_part_abandoned_on_the_leaders_word_is_never_given_again() -> None:
    c = _assigned(("did:A", _part("s0", "p")))
    c = step(c, Abandon(LEADER, "s0", "timed out", "async_task_assign", LEADER))
    for who in (LEADER, "did:B"):
        with pytest.raises(IllegalMove, match="abandoned on the leader's word"):
            step(c, AssignAsync(LEADER, ((who, _part("s0#2", "p")),), "pause_trigger", who))


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_no_show_is_declared_only_after_the_bound_and_frees_the_parts() -> None:
    """The leader alone declares a member absent, and only `NO_SHOW_AFTER` after the
    assignment by the logged times; the parts then go to someone else and the absent member's
    late report is refused."""
    c = open_conversation("c", "t", LEADER, (LEADER, "did:A", "did:B"))
    c = step(c, Discuss(LEADER, "x", "async_task_assign", LEADER), at=T0)
    assignments = (("did:A", _part("s0", "p")), ("did:B", _part("s1", "q")))
    c = step(c, AssignAsync(LEADER, assignments, "pause_trigger", "did:A"), at=T0)
    no_show = NoShow(LEADER, "s0", "pause_trigger", "did:B")
    early = T0 + NO_SHOW_AFTER - timedelta(seconds=1)
    with pytest.raises(IllegalMove, match="299 s after its assignment is too early"):
        step(c, no_show, at=early)
    with pytest.raises(IllegalMove, match="judged by the logged times"):
        step(c, no_show)  # no time: never a legal no-show
    with pytest.raises(IllegalMove, match="only the leader declares a no-show"):
        step(c, replace(no_show, speaker="did:B"), at=T0 + NO_SHOW_AFTER)
    with pytest.raises(IllegalMove, match="nothing outstanding for s9"):
        step(c, replace(no_show, sub_id="s9"), at=T0 + NO_SHOW_AFTER)
    gone = step(c, no_show, at=T0 + NO_SHOW_AFTER)
    assert gone.no_shows == ("s0",) and "s0" not in gone.triggers
    assert gone.results[-1] == Result("s0", False, (), "no-show: did:A did not answer in time")
    # the member's report, arriving later, is refused
    late = Report(
        "did:A", Result("s0", True, (_own("did:A", "s0", "p"),)), "pause_trigger", "did:B"
    )
    with pytest.raises(IllegalMove, match="has no pending trigger for s0"):
        step(replace(gone, speaker="did:A"), late)
    # a member that reported is never declared absent
    reported = step(
        gone,
        Report(
            "did:B", Result("s1", True, (_own("did:B", "s1", "q"),)), "async_task_assign", LEADER
        ),
    )
    with pytest.raises(IllegalMove, match="nothing outstanding for s1"):
        step(reported, replace(no_show, sub_id="s1"), at=T0 + 2 * NO_SHOW_AFTER)
    # the parts of the no-show go to someone else
    again = AssignAsync(LEADER, (("did:B", _part("s0#2", "p")),), "pause_trigger", "did:B")
    assert step(reported, again, at=T0 + NO_SHOW_AFTER).assignees["s0#2"] == "did:B"


def test_a_sync_no_show_unblocks_the_conversation() -> None:
    c = open_conversation("c", "t", LEADER, (LEADER, "did:A"))
    c = step(c, Discuss(LEADER, "x", "sync_task_assign", LEADER), at=T0)
    c = step(c, assign_sync(LEADER, "did:A", _part("s0", "p")), at=T0)
    gone = step(c, NoShow(LEADER, "s0", "sync_task_assign", LEADER), at=T0 + NO_SHOW_AFTER)
    assert gone.blocked_on is None and gone.speaker == LEADER
    assert step(gone, assign_sync(LEADER, LEADER, _part("s0#2", "p"))).blocked_on == (
        "s0#2",
        LEADER,
    )


def test_the_plan_is_the_logged_assignments() -> None:
    from accord.coordinator.conversation import logged_plan

    c = _assigned(("did:A", _part("s0", "p")), ("did:B", _part("s1", "q")))
    c = step(c, Report("did:A", Result("s0", False, (), "no"), "pause_trigger", "did:B"))
    assert logged_plan(c) == {"p": "did:A", "q": "did:B"}  # first given, not last


def test_each_part_is_one_producers_own_report_across_the_task() -> None:
    """`check_task_reports`: a part reported as its producer's own work in two conversations
    fails at the later entry; a sub-team's work must be exactly its conclusion."""
    from accord.coordinator.conversation import (
        ConversationRecord,
        LoggedMessage,
        check_task_reports,
    )

    def record(c: Conversation, *messages: tuple[int, Message]) -> ConversationRecord:
        logged = []
        for index, m in messages:
            logged.append(LoggedMessage(index, c.turn, m))
            c = step(c, m)
        return ConversationRecord(c, tuple(logged), 0, "")

    top = open_conversation("top", "t", LEADER, (LEADER, "did:A"))
    sub = open_conversation("sub", "t", LEADER, (LEADER, "did:B"), parent="top", depth=1)
    mine = _own("did:B", "s0", "p")
    sub_record = record(
        sub,
        (1, Discuss(LEADER, "x", "sync_task_assign", LEADER)),
        (2, assign_sync(LEADER, "did:B", _part("s0", "p"))),
        (3, Report("did:B", Result("s0", True, (mine,)), "conclusion", LEADER)),
        (4, Conclude(LEADER, Deliverable("d", (mine,)))),
    )
    steps = [
        (5, Discuss(LEADER, "x", "sync_task_assign", LEADER)),
        (6, assign_sync(LEADER, LEADER, _part("s0", "p"))),
    ]
    carried = record(
        top,
        *steps,
        (7, Report(LEADER, Result("s0", True, (mine,), team="sub"), "conclusion", LEADER)),
    )
    check_task_reports([sub_record, carried])
    again = record(
        top,
        *steps,
        (
            7,
            Report(LEADER, Result("s0", True, (_own(LEADER, "s0", "p", 2),)), "conclusion", LEADER),
        ),
    )
    with pytest.raises(IllegalMove, match="entry 7: part p was already reported at entry 3"):
        check_task_reports([sub_record, again])
    other = _own("did:B", "s0", "p", 3)
    wrong = record(
        top,
        *steps,
        (7, Report(LEADER, Result("s0", True, (other,), team="sub"), "conclusion", LEADER)),
    )
    with pytest.raises(IllegalMove, match="entry 7: the report is not what sub-team sub concluded"):
        check_task_reports([sub_record, wrong])


# -- replaying a logged conversation from its verified events ----------------------------------


def test_a_logged_conversation_replays_from_its_events_alone() -> None:
    """`conversation_from_events` folds the opening and the messages through `step`, skipping
    other subjects' events, and names the entry of the first move that does not hold."""
    from accord.coordinator.conversation import (
        CONVERSATION_MESSAGE,
        CONVERSATION_OPENED,
        conversation_from_events,
    )
    from accord.coordinator.errors import CoordinatorError
    from accord.ledger.events import Event
    from accord.ledger.signing import Ed25519Signer

    leader, member = (Ed25519Signer(bytes([n]) * 32).did for n in (1, 2))
    at = "2026-03-01T12:00:00.000Z"
    opened = {
        "task": "task-1",
        "leader": leader,
        "members": [leader, member],
        "parent": None,
        "depth": 0,
        "max_turns": 8,
        "title": "the invoice",
    }

    def message(index: int, turn: int, speaker: str, m: Message) -> tuple[int, Event]:
        body = {"turn": turn, "message": message_to_json(m)}
        return index, Event(CONVERSATION_MESSAGE, speaker, index, at, "conv-1", body)

    events = [
        (3, Event(CONVERSATION_OPENED, leader, 0, at, "conv-1", opened)),
        (4, Event(CONVERSATION_OPENED, leader, 1, at, "conv-2", {**opened, "title": "other"})),
        message(5, 0, leader, Discuss(leader, "hello", "discussion", member)),
        message(6, 1, member, Discuss(member, "hi", "conclusion", leader)),
        message(7, 2, leader, Conclude(leader, Deliverable("nothing", ()))),
    ]
    record = conversation_from_events("conv-1", events)
    assert record.opened_index == 3 and record.title == "the invoice"
    assert [(m.index, m.turn) for m in record.messages] == [(5, 0), (6, 1), (7, 2)]
    assert record.conversation.state == "closed" and record.conversation.turn == 3
    reply = Discuss(member, "hi", "conclusion", leader)
    with pytest.raises(IllegalMove, match=r"^entry 6: signed by .*, not its speaker"):
        conversation_from_events("conv-1", [*events[:3], message(6, 1, leader, reply)])
    with pytest.raises(IllegalMove, match=r"^entry 6: turn 0 out of order"):
        conversation_from_events("conv-1", [*events[:3], message(6, 0, member, reply)])
    with pytest.raises(IllegalMove, match=r"^entry 5: conv-1 does not start with its opening"):
        conversation_from_events("conv-1", events[2:])
    with pytest.raises(CoordinatorError, match="no conversation 'conv-3'"):
        conversation_from_events("conv-3", events)
